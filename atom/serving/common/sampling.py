"""Request fields → SamplingParams and the cross-field rules both wires share: the served model's
name, the prompt and max_tokens against the context length. Field types and ranges are already
enforced at decoding (bounds.py); each wire maps its own field names onto these."""
from __future__ import annotations

from typing import Optional, Union

from atom.sampling_params import SamplingParams
from atom.serving.common.errors import OpenAIError, bad_request

DEFAULT_MAX_TOKENS = 256  # the spec's request-table default

_MIN_TEMPERATURE = 1e-5


def check_model(requested: Optional[str], accepted: tuple[str, ...], served: str) -> None:
    """404 for a model this server does not serve; None means "whatever is loaded"."""
    if requested is None or requested in accepted:
        return
    raise OpenAIError(404, f"The model `{requested}` does not exist; this server serves `{served}`.",
                      "model", "model_not_found")


def stop_list(stop: Union[str, list[str], None]) -> Optional[list[str]]:
    if stop is None:
        return None
    stops = [stop] if isinstance(stop, str) else list(stop)
    return [s for s in stops if s] or None


def fit_max_tokens(explicit: Optional[int], num_prompt_tokens: int, max_model_len: int,
                   prompt_param: str) -> int:
    """The prompt must leave room for at least one token; an explicit max_tokens must fit whole,
    the default is clamped to what is left."""
    if num_prompt_tokens == 0:
        raise bad_request("the prompt is empty after tokenization", "prompt", "empty_prompt")
    if max_model_len and num_prompt_tokens >= max_model_len:
        raise bad_request(f"This model's maximum context length is {max_model_len} tokens. However, "
                          f"your prompt is {num_prompt_tokens} tokens long.", prompt_param,
                          "context_length_exceeded")
    if explicit is None:
        left = max_model_len - num_prompt_tokens if max_model_len else DEFAULT_MAX_TOKENS
        return max(1, min(DEFAULT_MAX_TOKENS, left))
    if max_model_len and num_prompt_tokens + explicit > max_model_len:
        raise bad_request(f"This model's maximum context length is {max_model_len} tokens. However, "
                          f"you requested {num_prompt_tokens + explicit} tokens ({num_prompt_tokens} in "
                          f"the prompt, {explicit} for the completion).", "max_tokens",
                          "context_length_exceeded")
    return explicit


def sampling_params(*, max_tokens: int, temperature: Optional[float] = None,
                    top_p: Optional[float] = None, top_k: Optional[int] = None,
                    seed: Optional[int] = None, stop: Union[str, list[str], None] = None,
                    stop_token_ids: Optional[list[int]] = None, ignore_eos: bool = False,
                    presence_penalty: Optional[float] = None,
                    frequency_penalty: Optional[float] = None,
                    repetition_penalty: Optional[float] = None, logprobs: Optional[int] = None,
                    include_stop_str_in_output: bool = False, skip_special_tokens: bool = True,
                    choice_index: int = 0) -> SamplingParams:
    """One choice's params (None: the spec's default); with `n > 1` and a seed, choice i samples
    with seed + i so choices differ yet stay reproducible."""
    temperature = 1.0 if temperature is None else temperature
    if temperature < _MIN_TEMPERATURE:  # logits / 1e-30 overflow to inf; that limit is greedy anyway
        temperature = 0.0
    try:
        return SamplingParams(
            temperature=temperature, max_tokens=max_tokens, ignore_eos=ignore_eos,
            stop_strings=stop_list(stop), top_p=1.0 if top_p is None else top_p,
            top_k=-1 if top_k in (None, 0) else top_k,
            seed=None if seed is None else seed + choice_index,
            stop_token_ids=stop_token_ids or None, presence_penalty=presence_penalty or 0.0,
            frequency_penalty=frequency_penalty or 0.0,
            repetition_penalty=1.0 if repetition_penalty is None else repetition_penalty,
            logprobs=logprobs, include_stop_str_in_output=include_stop_str_in_output,
            skip_special_tokens=skip_special_tokens)
    except ValueError as exc:
        raise bad_request(str(exc), str(exc).split(" ", 1)[0]) from exc
