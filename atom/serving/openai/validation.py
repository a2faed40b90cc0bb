"""Request fields → SamplingParams, with every refusal named: no silent acceptance.

Shared by both endpoints. Field types and ranges are already enforced by the protocol Structs; this
adds the cross-field rules (context length) and refuses recognised-but-unimplemented fields.
"""
from __future__ import annotations

from typing import Any, Optional, Union

from atom.sampling_params import SamplingParams
from atom.serving.errors import OpenAIError, bad_request
from atom.serving.openai.protocol import (DEFAULT_MAX_TOKENS, ChatCompletionRequest,
                                          CompletionRequest)

AnyRequest = Union[ChatCompletionRequest, CompletionRequest]

_MIN_TEMPERATURE = 1e-5


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


def stop_list(stop: Union[str, list[str], None]) -> Optional[list[str]]:
    if stop is None:
        return None
    stops = [stop] if isinstance(stop, str) else list(stop)
    return [s for s in stops if s] or None


def requested_max_tokens(req: AnyRequest) -> Optional[int]:
    if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
        return req.max_completion_tokens
    return req.max_tokens


def fit_max_tokens(req: AnyRequest, num_prompt_tokens: int, max_model_len: int) -> int:
    """The prompt must leave room for at least one token; an explicit max_tokens must fit whole,
    the default is clamped to what is left."""
    if num_prompt_tokens == 0:
        raise bad_request("the prompt is empty after tokenization", "prompt", "empty_prompt")
    if max_model_len and num_prompt_tokens >= max_model_len:
        raise bad_request(f"This model's maximum context length is {max_model_len} tokens. However, "
                          f"your prompt is {num_prompt_tokens} tokens long.", "messages"
                          if isinstance(req, ChatCompletionRequest) else "prompt",
                          "context_length_exceeded")
    explicit = requested_max_tokens(req)
    if explicit is None:
        left = max_model_len - num_prompt_tokens if max_model_len else DEFAULT_MAX_TOKENS
        return max(1, min(DEFAULT_MAX_TOKENS, left))
    if max_model_len and num_prompt_tokens + explicit > max_model_len:
        raise bad_request(f"This model's maximum context length is {max_model_len} tokens. However, "
                          f"you requested {num_prompt_tokens + explicit} tokens ({num_prompt_tokens} in "
                          f"the prompt, {explicit} for the completion).", "max_tokens",
                          "context_length_exceeded")
    return explicit


def sampling_params(req: AnyRequest, max_tokens: int, logprobs: Optional[int],
                    choice_index: int = 0) -> SamplingParams:
    """One choice's params; with `n > 1` and a seed, choice i samples with seed + i so choices
    differ yet stay reproducible."""
    seed = None if req.seed is None else req.seed + choice_index
    top_k = -1 if req.top_k in (None, 0) else req.top_k
    temperature = 1.0 if req.temperature is None else req.temperature
    if temperature < _MIN_TEMPERATURE:  # logits / 1e-30 overflow to inf; that limit is greedy anyway
        temperature = 0.0
    try:
        return SamplingParams(
            temperature=temperature, max_tokens=max_tokens,
            ignore_eos=req.ignore_eos, stop_strings=stop_list(req.stop),
            top_p=1.0 if req.top_p is None else req.top_p, top_k=top_k, seed=seed,
            stop_token_ids=req.stop_token_ids or None,
            presence_penalty=req.presence_penalty or 0.0, frequency_penalty=req.frequency_penalty or 0.0,
            repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
            logprobs=logprobs, include_stop_str_in_output=req.include_stop_str_in_output,
            skip_special_tokens=req.skip_special_tokens)
    except ValueError as exc:
        raise bad_request(str(exc), str(exc).split(" ", 1)[0]) from exc


def check_model(requested: Optional[str], accepted: tuple[str, ...], served: str) -> None:
    """404 for a model this server does not serve; None means "whatever is loaded"."""
    if requested is None or requested in accepted:
        return
    raise OpenAIError(404, f"The model `{requested}` does not exist; this server serves `{served}`.",
                      "model", "model_not_found")
