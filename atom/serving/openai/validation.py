"""OpenAI request fields → SamplingParams, with every refusal named: no silent acceptance.

Field types and ranges are already enforced by the protocol Structs; this refuses
recognised-but-unimplemented fields, checks tools and template kwargs, and maps the fields onto
sampling.py's rules (shared with /v1/messages).
"""
from __future__ import annotations

from typing import Any, Optional, Union

from atom.sampling_params import SamplingParams
from atom.serving.common import sampling
from atom.serving.common.errors import bad_request
from atom.serving.openai.protocol import ChatCompletionRequest, CompletionRequest

AnyRequest = Union[ChatCompletionRequest, CompletionRequest]

def _set(value: Any) -> bool:
    return value is not None and value != [] and value != {}


def refuse_unimplemented(req: AnyRequest) -> None:
    """A field that would change the output but is not implemented is a 400 naming it."""
    refused: list[tuple[str, bool]] = [
        ("logit_bias", _set(req.logit_bias)),
        ("min_p", req.min_p not in (None, 0, 0.0)),
        ("min_tokens", req.min_tokens not in (None, 0)),
        ("best_of", req.best_of is not None and req.best_of != req.n),
        ("response_format", _set(req.response_format) and (req.response_format or {}).get("type") != "text"),
        ("guided_json", req.guided_json is not None),
        ("guided_regex", req.guided_regex is not None),
        ("guided_choice", req.guided_choice is not None),
        ("guided_grammar", req.guided_grammar is not None),
    ]
    if isinstance(req, ChatCompletionRequest):
        refused += [("modalities", req.modalities not in (None, ["text"])),
                    ("audio", req.audio is not None), ("prediction", req.prediction is not None)]
    else:
        refused += [("suffix", req.suffix not in (None, ""))]
    for name, hit in refused:
        if hit:
            raise bad_request(f"`{name}` is not supported by this server; remove it from the request",
                              name, "unsupported_parameter")
    if req.stream_options is not None and not req.stream:
        raise bad_request("`stream_options` is only allowed when `stream` is true", "stream_options")


# Arguments the renderers pass themselves (and Hugging Face's apply_chat_template takes): a
# `chat_template_kwargs` that repeats one would collide with it.
RESERVED_TEMPLATE_KWARGS = frozenset({
    "messages", "conversation", "tools", "documents", "add_generation_prompt", "tokenize",
    "chat_template", "continue_final_message", "return_dict", "return_tensors", "padding",
    "truncation", "max_length", "tokenizer_kwargs", "return_assistant_tokens_mask"})


def check_chat_fields(req: ChatCompletionRequest) -> None:
    """Tools, tool_choice and template kwargs: shapes the template and the tool reader rely on."""
    for key in req.chat_template_kwargs or {}:
        if key in RESERVED_TEMPLATE_KWARGS:
            raise bad_request(f"`chat_template_kwargs` may not set `{key}`: the server passes it "
                              "from the request itself", f"chat_template_kwargs.{key}",
                              "invalid_value")
    names = [_tool_name(i, t) for i, t in enumerate(req.tools or [])]
    choice = req.tool_choice
    if choice is None:
        return
    if isinstance(choice, str):
        if choice == "required" and not names:
            raise bad_request("`tool_choice: required` needs `tools`", "tool_choice", "invalid_value")
        return
    fn = choice.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    if choice.get("type") != "function" or not isinstance(name, str):
        raise bad_request('`tool_choice` as an object must be {"type": "function", "function": '
                          '{"name": ...}}', "tool_choice", "invalid_value")
    if name not in names:
        raise bad_request(f"`tool_choice` names `{name}`, which is not among the declared tools",
                          "tool_choice.function.name", "invalid_value")


def _tool_name(i: int, tool: dict[str, Any]) -> str:
    where = f"tools[{i}]"
    if tool.get("type", "function") != "function":
        raise bad_request(f"only function tools are supported, not {tool.get('type')!r}",
                          f"{where}.type", "invalid_value")
    fn = tool.get("function")
    if not isinstance(fn, dict):
        raise bad_request("a tool needs a `function` object", f"{where}.function", "invalid_type")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise bad_request("a tool's function needs a non-empty string `name`",
                          f"{where}.function.name", "invalid_type")
    params = fn.get("parameters")
    if params is not None and not (isinstance(params, dict) and params.get("type", "object") == "object"):
        raise bad_request("`parameters` must be a JSON Schema object (`{\"type\": \"object\", ...}`)",
                          f"{where}.function.parameters", "invalid_value")
    return name


def requested_max_tokens(req: AnyRequest) -> Optional[int]:
    if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
        return req.max_completion_tokens
    return req.max_tokens


def fit_max_tokens(req: AnyRequest, num_prompt_tokens: int, max_model_len: int) -> int:
    return sampling.fit_max_tokens(requested_max_tokens(req), num_prompt_tokens, max_model_len,
                                   "messages" if isinstance(req, ChatCompletionRequest) else "prompt")


def sampling_params(req: AnyRequest, max_tokens: int, logprobs: Optional[int],
                    choice_index: int = 0) -> SamplingParams:
    return sampling.sampling_params(
        max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p, top_k=req.top_k,
        seed=req.seed, stop=req.stop, stop_token_ids=req.stop_token_ids,
        ignore_eos=req.ignore_eos, presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty, repetition_penalty=req.repetition_penalty,
        logprobs=logprobs, include_stop_str_in_output=req.include_stop_str_in_output,
        skip_special_tokens=req.skip_special_tokens, choice_index=choice_index)
