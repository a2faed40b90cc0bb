"""The `format` group: how raw model text becomes content, reasoning and tool calls."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class FormatConfig:
    # auto | dsml | glm | kimi | kimi_k3 | minimax | qwen | hermes | llama3_json | deepseek_v3 | none
    tool_call_parser: str = "auto"
    reasoning_dialect: str = "auto"  # auto | think | deepseek_r1 | kimi_k3 | none
    chat_template: Optional[str] = None  # a .jinja file overriding the model's own template

# The names `--tool-call-parser` accepts. The tool_parser registry asserts it implements exactly these.
TOOL_CALL_PARSERS = ("auto", "none", "dsml", "glm", "kimi", "kimi_k3", "minimax", "qwen", "hermes",
                     "llama3_json", "deepseek_v3")
REASONING_DIALECTS = ("auto", "none", "think", "deepseek_r1", "kimi_k3")
