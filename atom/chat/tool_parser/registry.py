"""Which format a model emits, resolved once at startup from its chat template.

The evidence is what the template itself tells the model (`render_probe_prompt`) and what it
does with a reply that carries a tool call (`chat_template_source`), both in atom/chat/encoders.py.
The `_DETECT_ORDER` cascade runs over that text; nothing is ever guessed from a response, which
would make an answer quoting another format's token read differently streamed and not.
"""
from __future__ import annotations

import logging
import re
from typing import Callable, Optional

from atom.chat.tool_parser.deepseek_v3 import DeepSeekV3Format
from atom.chat.tool_parser.dsml import DsmlFormat
from atom.chat.tool_parser.glm import GlmFormat
from atom.chat.tool_parser.hermes import HermesFormat
from atom.chat.tool_parser.kimi import KimiFormat
from atom.chat.tool_parser.kimi_k3 import KimiK3Format
from atom.chat.tool_parser.llama3_json import Llama3JsonFormat
from atom.chat.tool_parser.minimax import MiniMaxFormat
from atom.chat.tool_parser.qwen import QwenFormat
from atom.chat.tool_parser.region import ToolFormat

logger = logging.getLogger(__name__)

FORMATS: dict[str, type[ToolFormat]] = {f.NAME: f for f in (
    QwenFormat, GlmFormat, KimiFormat, KimiK3Format, MiniMaxFormat, DsmlFormat, HermesFormat,
    Llama3JsonFormat, DeepSeekV3Format)}

_HERMES = re.compile(r'<tool_call>\s*\{\s*"(name|arguments)"')
# The instruction Llama-3.x templates give, or the reply they render; a tool schema's own
# {"name": …, "parameters": {…}} must not count, every template prints those.
_LLAMA3 = re.compile(r'\{"name": function name, "parameters"|'
                     r'\{"name": "get_weather", "parameters": \{"city"')

# Most specific first: several formats share `<tool_call>`, and K3/K2 tokens never appear in
# another family's template.
_DETECT_ORDER: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("kimi_k3", lambda t: "<|open|>call" in t or "<|open|>tools" in t),
    ("kimi", lambda t: "<|tool_calls_section_begin|>" in t),
    ("dsml", lambda t: "｜DSML｜invoke" in t),
    ("deepseek_v3", lambda t: "<｜tool▁call▁begin｜>" in t),
    ("minimax", lambda t: "<minimax:tool_call>" in t),
    ("glm", lambda t: "<arg_key>" in t and "<tool_call>" in t),
    ("qwen", lambda t: "<tool_call>" in t and "<function=" in t),
    ("hermes", lambda t: bool(_HERMES.search(t))),
    ("llama3_json", lambda t: bool(_LLAMA3.search(t))),
)


class UnknownToolFormat(ValueError):
    """Raised at startup, before weights load, for a `--tool-call-parser` name we lack."""


def check_format_name(name: str) -> None:
    if name not in ("auto", "none") and name not in FORMATS:
        raise UnknownToolFormat(
            f"tool_call_parser {name!r} is not one of ATOM's formats: "
            f"auto, none, {', '.join(sorted(FORMATS))}")


def detect_format(template_evidence: str) -> Optional[type[ToolFormat]]:
    for name, test in _DETECT_ORDER:
        if test(template_evidence):
            return FORMATS[name]
    return None


def resolve_tool_format(template_evidence: Optional[str],
                        name: str = "auto") -> Optional[type[ToolFormat]]:
    """The format class to read this model's output with, or None (calls stay plain text).

    `template_evidence` is the chat template rendered with a tools payload and a reply carrying
    a call (encoders.format_evidence); a configured name overrides it.
    """
    check_format_name(name)
    if name == "none":
        logger.info("tool-call parser: none; tool calls are delivered as plain text")
        return None
    if name != "auto":
        logger.info("tool-call parser: %s (configured)", name)
        return FORMATS[name]
    fmt = detect_format(template_evidence or "")
    if fmt is None:
        # A model without tool calls is no fault: INFO, and what to do if it has them.
        logger.info("tool-call parser: none (the chat template names no known format; tool "
                    "calls stay plain text unless --tool-call-parser names one)")
    else:
        logger.info("tool-call parser: %s (from the chat template)", fmt.NAME)
    return fmt
