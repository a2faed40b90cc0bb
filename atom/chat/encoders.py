"""Renders the chat template, and the two startup probes of it.

A model's chat template is either a Jinja string (rendered here in a sandbox, with the helpers
Hugging Face gives templates: `raise_exception`, `strftime_now`, a `tojson` that does not
HTML-escape and takes `indent`/`sort_keys`, loop controls, `{% generation %}`) or a model-side
Python encoder (`<model>/encoding/encoding_*.py`, loaded only with trust_remote_code, called with
only the keyword arguments its signature takes, since an encoder raises on one it does not know
where a Jinja template silently ignores it).

Probes, run once at startup:
  render_probe_prompt  what the prompt tells the model about calling a tool;
  chat_template_source what the template does with a reply that carries a call, plus its text;
  find_thinking_switch which kwarg turns reasoning off, by rendering twice and comparing.
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import inspect
import json
import logging
import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Generator, Iterator, Mapping, Optional, Sequence

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.filters import do_format as format_filter
from jinja2.sandbox import MAX_RANGE, SandboxedEnvironment

logger = logging.getLogger(__name__)

Messages = Sequence[Mapping[str, Any]]


# --- the Jinja environment ---------------------------------------------------------------------

class TemplateRenderError(ValueError):
    """The template refused the conversation (`raise_exception`) or failed to render."""


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
            separators: Optional[tuple[str, str]] = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys, default=_json_default)


def _json_default(value: Any) -> Any:
    """Filters such as `map` yield generators; a template piping one into tojson means a list."""
    if isinstance(value, (Iterator, Generator)):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _from_json(text: Any) -> Any:
    return json.loads(text) if isinstance(text, str) else text


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _GenerationTag(Extension):
    """`{% generation %}…{% endgeneration %}` marks assistant spans for training; render body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


@dataclass(frozen=True, slots=True)
class RenderBudget:
    """What one render may spend: a deadline (time.monotonic) and a size for any string or list
    it builds, its output included. Set per request by the server (`render_budget`); a render
    with none set (startup probes, offline use) is unbounded."""

    deadline: float
    max_chars: int


_BUDGET: contextvars.ContextVar[Optional[RenderBudget]] = contextvars.ContextVar(
    "atom_render_budget", default=None)


@contextlib.contextmanager
def render_budget(seconds: float, max_chars: int) -> Iterator[None]:
    """Renders inside this block (and threads started with its context) obey the budget."""
    token = _BUDGET.set(RenderBudget(time.monotonic() + seconds, max_chars))
    try:
        yield
    finally:
        _BUDGET.reset(token)


class TemplateBudgetExceeded(ValueError):
    """A render ran past its deadline or built something larger than the prompt may be."""


def _check_time(budget: Optional[RenderBudget]) -> None:
    if budget is not None and time.monotonic() > budget.deadline:
        raise TemplateBudgetExceeded("the chat template ran past its time limit")


def _check_size(budget: Optional[RenderBudget], value: Any) -> Any:
    if budget is not None and isinstance(value, (str, list, tuple)) and len(value) > budget.max_chars:
        raise TemplateBudgetExceeded(f"the chat template built a value of {len(value)} items, "
                                     f"more than the {budget.max_chars} a prompt may have")
    return value


def _check_ints(budget: Optional[RenderBudget], args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """A width or repeat count past the size limit (`x.ljust(10**9)`) is refused before the
    allocation it would make."""
    if budget is None:
        return
    for v in (*args, *kwargs.values()):
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > budget.max_chars:
            raise TemplateBudgetExceeded(f"the chat template passed {v}, past the size limit")


_DIGITS = re.compile(r"\d+")


def _check_format(budget: Optional[RenderBudget], fmt: Any) -> None:
    """A format string's widths (`'%0999999999d'`, `'{:>999999999}'`) count like int arguments."""
    if budget is not None and isinstance(fmt, str):
        _check_ints(budget, [int(d) for d in _DIGITS.findall(fmt) if len(d) <= 20], {})
        if any(len(d) > 20 for d in _DIGITS.findall(fmt)):
            raise TemplateBudgetExceeded("the chat template formats with a width past the size limit")


def _check_int_growth(budget: Optional[RenderBudget], operator: str, left: Any, right: Any) -> None:
    """`x * x` and `x ** 64` on ever larger ints (a loop squaring a namespace value) cost time
    without bound inside one C call: their result's size is bounded like a string's."""
    if budget is None or not (isinstance(left, int) and isinstance(right, int)):
        return
    bits = abs(left).bit_length()
    grown = bits * abs(right) if operator == "**" else bits + abs(right).bit_length()
    if grown > 4 * budget.max_chars:
        raise TemplateBudgetExceeded("the chat template computes a number past the size limit")


class _CheckedRange:
    """`range` for templates: every step checks the deadline, so nested loops with empty bodies
    (which call nothing else the sandbox sees) still stop."""

    def __init__(self, *args: int) -> None:
        self._range = range(*args)
        if len(self._range) > MAX_RANGE:
            raise OverflowError(f"range of {len(self._range)} items is too large for a template")

    def __iter__(self) -> Iterator[int]:
        budget = _BUDGET.get()
        for i in self._range:
            _check_time(budget)
            yield i

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, i: Any) -> Any:
        return self._range[i]

    def __contains__(self, x: Any) -> bool:
        return x in self._range


class BoundedSandbox(SandboxedEnvironment):
    """The sandbox, plus the render budget checked at every call, attribute, item, `+`/`*`/`**`
    and filter: the points every loop body that does anything passes through."""

    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        budget = _BUDGET.get()
        _check_time(budget)
        if __obj is not _CheckedRange:
            _check_ints(budget, args, kwargs)
        return _check_size(budget, super().call(__context, __obj, *args, **kwargs))

    def wrap_str_format(self, value: Any) -> Optional[Callable[..., str]]:
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            _check_format(_BUDGET.get(), value.__self__)
        return wrapped

    def getattr(self, obj: Any, attribute: str) -> Any:
        budget = _BUDGET.get()
        _check_time(budget)
        return _check_size(budget, super().getattr(obj, attribute))

    def getitem(self, obj: Any, argument: Any) -> Any:
        budget = _BUDGET.get()
        _check_time(budget)
        return _check_size(budget, super().getitem(obj, argument))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = _BUDGET.get()
        _check_time(budget)
        if budget is not None:
            if operator == "*" and isinstance(left, int) != isinstance(right, int):
                _check_ints(budget, (left, right), {})
                count = left if isinstance(left, int) else right
                seq = right if isinstance(left, int) else left
                if isinstance(seq, (str, list, tuple)) and len(seq) * max(count, 0) > budget.max_chars:
                    raise TemplateBudgetExceeded("the chat template repeats a value past the size limit")
            if operator == "%":
                _check_format(budget, left)
            if operator in ("*", "**"):
                _check_int_growth(budget, operator, left, right)
        return _check_size(budget, super().call_binop(context, operator, left, right))


def _bounded_filter(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Marked pass_context even where `fn` is not: Jinja evaluates context-free filters on
    constants while it compiles, outside any budget (`'x'|center(10**9)` at load time)."""
    own = jinja2.utils._PassArg.from_obj(fn)

    @jinja2.pass_context
    def wrapped(context: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _BUDGET.get()
        _check_time(budget)
        _check_ints(budget, args[1:], kwargs)
        if fn is format_filter:
            _check_format(budget, args[0] if args else None)
        if own is None:
            return _check_size(budget, fn(*args, **kwargs))
        passed = {jinja2.utils._PassArg.context: context,
                  jinja2.utils._PassArg.eval_context: context.eval_ctx,
                  jinja2.utils._PassArg.environment: context.environment}[own]
        return _check_size(budget, fn(passed, *args, **kwargs))

    return wrapped


def make_environment() -> SandboxedEnvironment:
    """Sandboxed (no attribute escapes) and bounded by the render budget; lists the template
    built may be appended to, which Kimi-K2's template needs."""
    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True,
                         extensions=[_GenerationTag, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.filters["from_json"] = _from_json
    env.filters = {name: _bounded_filter(fn) for name, fn in env.filters.items()}
    env.globals["range"] = _CheckedRange
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def render_bounded(template: jinja2.Template, context: Mapping[str, Any]) -> str:
    """The template's output, chunk by chunk, so the budget also caps what it writes."""
    budget = _BUDGET.get()
    out: list[str] = []
    size = 0
    for chunk in template.generate(**context):
        size += len(chunk)
        if budget is not None:
            _check_time(budget)
            if size > budget.max_chars:
                raise TemplateBudgetExceeded(f"the chat template wrote more than the "
                                             f"{budget.max_chars} characters a prompt may have")
        out.append(chunk)
    return "".join(out)


# --- encoders ----------------------------------------------------------------------------------

class ChatEncoder:
    """What the server renders prompts with; `source` is the template text (the evidence)."""

    source: str

    def render(self, messages: Messages, tools: Optional[Sequence[Mapping[str, Any]]] = None,
               add_generation_prompt: bool = True, **kwargs: Any) -> str:
        raise NotImplementedError


class JinjaChatEncoder(ChatEncoder):
    def __init__(self, source: str, special_tokens: Optional[Mapping[str, str]] = None) -> None:
        self.source = source
        self._template = make_environment().from_string(source)
        self._special = dict(special_tokens or {})

    def render(self, messages: Messages, tools: Optional[Sequence[Mapping[str, Any]]] = None,
               add_generation_prompt: bool = True, **kwargs: Any) -> str:
        context = {**self._special, **kwargs, "messages": normalize_messages(messages),
                   "add_generation_prompt": add_generation_prompt}
        if tools:
            context["tools"] = list(tools)
        try:
            return render_bounded(self._template, context)
        except TemplateRenderError:
            raise
        except Exception as exc:  # the template is code: whatever it raises is this request's failure
            raise TemplateRenderError(_render_failure(exc)) from exc


def _render_failure(exc: Exception) -> str:
    if isinstance(exc, (jinja2.exceptions.TemplateError, TemplateBudgetExceeded)):
        return str(exc)
    if isinstance(exc, RecursionError):
        return "RecursionError: the conversation is nested too deeply for the template"
    return f"{type(exc).__name__}: {exc}"


class PythonChatEncoder(ChatEncoder):
    """A model-side encoder function, called with only the kwargs its signature accepts."""

    def __init__(self, fn: Callable[..., Any], source: str) -> None:
        self.source = source
        self._fn = fn
        params = inspect.signature(fn).parameters
        self._takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self._accepts = frozenset(params)

    @property
    def accepted_kwargs(self) -> Optional[frozenset[str]]:
        return None if self._takes_any else self._accepts

    def render(self, messages: Messages, tools: Optional[Sequence[Mapping[str, Any]]] = None,
               add_generation_prompt: bool = True, **kwargs: Any) -> str:
        offered = {**kwargs, "add_generation_prompt": add_generation_prompt}
        if tools:
            offered["tools"] = list(tools)
        passed = {k: v for k, v in offered.items() if self._takes_any or k in self._accepts}
        try:
            out = self._fn(normalize_messages(messages), **passed)
        except Exception as exc:  # noqa: BLE001 - the encoder is code the server did not write
            raise TemplateRenderError(_render_failure(exc)) from exc
        if not isinstance(out, str):
            raise TemplateRenderError("the encoder returned no text")
        return out


_ENCODER_FUNCTIONS = ("encode_messages", "apply_chat_template", "encode")


def load_python_encoder(model_dir: str | Path, trust_remote_code: bool) -> Optional[PythonChatEncoder]:
    """`<model>/encoding/encoding_*.py`, only when remote code is trusted."""
    candidates = sorted(Path(model_dir, "encoding").glob("encoding_*.py"))
    if not candidates:
        return None
    if not trust_remote_code:
        logger.warning("%s ships a Python chat encoder; pass trust_remote_code to use it",
                       candidates[0])
        return None
    path = candidates[0]
    spec = importlib.util.spec_from_file_location(f"atom_chat_encoder_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in _ENCODER_FUNCTIONS:
        fn = getattr(module, name, None)
        if callable(fn):
            return PythonChatEncoder(fn, path.read_text(encoding="utf-8"))
    raise TemplateRenderError(f"{path} defines none of {_ENCODER_FUNCTIONS}")


# For tokenizers that ship no template (dummy-weight and test models): plain ChatML.
FALLBACK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def load_chat_encoder(model_dir: Optional[str | Path], chat_template: Optional[str] = None,
                      trust_remote_code: bool = False,
                      tokenizer: Any = None) -> Optional[ChatEncoder]:
    """The model's encoder, first found of: a configured .jinja file, the loaded tokenizer's
    template (a GGUF carries its own), the model directory's template, its Python encoder."""
    special = {k: v for k in ("bos_token", "eos_token")
               if isinstance(v := getattr(tokenizer, k, None), str)}
    if chat_template is not None:
        return JinjaChatEncoder(Path(chat_template).read_text(encoding="utf-8"), special)
    own = getattr(tokenizer, "chat_template", None)
    if isinstance(own, dict):
        own = own.get("tool_use") or own.get("default")
    if isinstance(own, str) and own:
        return JinjaChatEncoder(own, special)
    if model_dir is None:
        return None
    source, from_dir = _model_template(Path(model_dir))
    if source is not None:
        return JinjaChatEncoder(source, {**from_dir, **special})
    return load_python_encoder(model_dir, trust_remote_code)


def _model_template(model_dir: Path) -> tuple[Optional[str], dict[str, str]]:
    config_path = model_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
    special = {k: _token_text(config.get(k)) for k in ("bos_token", "eos_token", "pad_token",
                                                       "unk_token") if config.get(k) is not None}
    jinja_file = model_dir / "chat_template.jinja"
    if jinja_file.exists():
        return jinja_file.read_text(encoding="utf-8"), special
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("tool_use") or named.get("default")
    return (template if isinstance(template, str) else None), special


def _token_text(token: Any) -> str:
    return token.get("content", "") if isinstance(token, dict) else str(token)


def normalize_messages(messages: Messages) -> list[dict[str, Any]]:
    """Templates iterate tool-call arguments as a mapping, so JSON strings are decoded."""
    out = []
    for message in messages:
        m = dict(message)
        calls = m.get("tool_calls")
        if isinstance(calls, list):
            m["tool_calls"] = [_decoded_call(c) for c in calls]
        out.append(m)
    return out


def _decoded_call(call: Any) -> Any:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        return call
    fn = dict(call["function"])
    if isinstance(fn.get("arguments"), str):
        try:
            fn["arguments"] = json.loads(fn["arguments"])
        except json.JSONDecodeError:
            pass
    return {**call, "function": fn}


def apply_chat_template(encoder: ChatEncoder, messages: Messages,
                        tools: Optional[Sequence[Mapping[str, Any]]] = None,
                        add_generation_prompt: bool = True, **kwargs: Any) -> str:
    """The prompt text for one request; raises TemplateRenderError for a refused conversation."""
    return encoder.render(messages, tools, add_generation_prompt, **kwargs)


# --- startup probes ----------------------------------------------------------------------------

PROBE_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city name."}}, "required": ["city"]}}}]
_PROBE_USER = {"role": "user", "content": "What is the weather in Paris?"}
_PROBE_REPLY = [
    {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call_probe", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call_probe", "name": "get_weather", "content": "Sunny"},
]


def render_probe_prompt(encoder: ChatEncoder) -> str:
    """What the prompt tells the model about calling a tool ('' if the template refuses)."""
    return _try_render(encoder, [_PROBE_USER], PROBE_TOOLS, True)


def chat_template_source(encoder: ChatEncoder) -> str:
    """The template's text and what it writes for a reply carrying a call: the evidence that
    names the reasoning dialect and the tool-call format."""
    reply = _try_render(encoder, [_PROBE_USER, *_PROBE_REPLY], PROBE_TOOLS, False)
    return encoder.source + "\n" + reply


def format_evidence(encoder: ChatEncoder) -> str:
    """Rendered text only (prompt with tools, then a reply with a call) for the format cascade."""
    return render_probe_prompt(encoder) + "\n" + \
        _try_render(encoder, [_PROBE_USER, *_PROBE_REPLY], PROBE_TOOLS, False)


def _try_render(encoder: ChatEncoder, messages: Messages, tools: Any, gen: bool) -> str:
    try:
        return encoder.render(messages, tools, gen)
    except (TemplateRenderError, jinja2.exceptions.TemplateError, TypeError, AttributeError) as exc:
        logger.debug("probe render failed: %s", exc)
        return ""


@dataclass(frozen=True, slots=True)
class ThinkingSwitch:
    """The template kwarg that turns reasoning on and off."""

    kwarg: str
    on: Any
    off: Any

    def kwargs(self, enabled: bool) -> dict[str, Any]:
        return {self.kwarg: self.on if enabled else self.off}


_SWITCH_CANDIDATES = (
    ThinkingSwitch("enable_thinking", True, False),
    ThinkingSwitch("thinking", True, False),
    ThinkingSwitch("thinking_mode", "enabled", "disabled"),
    ThinkingSwitch("thinking_mode", "thinking", "chat"),
)


def find_thinking_switch(encoder: ChatEncoder) -> Optional[ThinkingSwitch]:
    """Render with each candidate on and off; the first that changes the prompt is the switch.

    A template silently ignores a kwarg it does not read, which is why this is measured rather
    than assumed. None means reasoning cannot be turned off in the prompt (logged).
    """
    for switch in _SWITCH_CANDIDATES:
        try:
            on = encoder.render([_PROBE_USER], None, True, **switch.kwargs(True))
            off = encoder.render([_PROBE_USER], None, True, **switch.kwargs(False))
        except (TemplateRenderError, jinja2.exceptions.TemplateError, TypeError):
            continue
        if on != off:
            logger.info("thinking switch: %s=%r turns reasoning off", switch.kwarg, switch.off)
            return switch
    # Worth a line only for a template that reasons at all.
    level = logging.INFO if "think" in encoder.source else logging.DEBUG
    logger.log(level, "the chat template has no thinking switch; reasoning cannot be turned off "
               "in the prompt")
    return None
