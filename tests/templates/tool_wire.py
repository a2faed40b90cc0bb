"""What each format's model writes, for building test answers, mirroring the chat templates.

`answer(fmt, pieces)` builds a response from text and call blocks and returns what a correct
reader must deliver: the content (text pieces plus whatever the format leaves between separately
wrapped calls) and the calls.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Union

from atom.chat import kimi_k3_tokens as k3

Call = tuple[str, dict[str, Any]]
Piece = Union[str, list[Call]]

# Formats whose calls sit in one wrapper (the whitespace inside it is markup).
WRAPPED = {"minimax", "dsml", "kimi", "kimi_k3", "deepseek_v3"}
# Longest literal each format declares (held-bytes bound).
SEPARATOR = "\n"


def _text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def one_call(fmt: str, name: str, args: dict[str, Any], i: int = 0) -> str:
    if fmt == "qwen":
        params = "".join(f"<parameter={k}>\n{_text(v)}\n</parameter>\n" for k, v in args.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    if fmt == "hermes":
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
    if fmt == "glm":
        kv = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_text(v)}</arg_value>\n"
                     for k, v in args.items())
        return f"<tool_call>{name}\n{kv}</tool_call>"
    if fmt == "llama3_json":
        return json.dumps({"name": name, "parameters": args})
    if fmt == "minimax":
        params = "".join(f'<parameter name="{k}">{_text(v)}</parameter>\n' for k, v in args.items())
        return f'<invoke name="{name}">\n{params}</invoke>\n'
    if fmt == "dsml":
        t = "｜DSML｜"
        params = "".join(
            f'<{t}parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">'
            f'{_text(v)}</{t}parameter>\n' for k, v in args.items())
        return f'<{t}invoke name="{name}">\n{params}</{t}invoke>\n'
    if fmt == "kimi":
        return (f"<|tool_call_begin|>functions.{name}:{i}<|tool_call_argument_begin|>"
                f"{json.dumps(args)}<|tool_call_end|>")
    if fmt == "deepseek_v3":
        return (f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n"
                f"{json.dumps(args)}\n```<｜tool▁call▁end｜>")
    if fmt == "kimi_k3":
        kinds = {str: "string", int: "number", float: "number", bool: "boolean"}
        params = "".join(
            f'{k3.ARGUMENT_OPEN} key="{k}" type="{kinds.get(type(v), "object")}"{k3.SEP}'
            f"{_text(v)}{k3.ARGUMENT_CLOSE}" for k, v in args.items())
        return f'{k3.CALL_OPEN} tool="{name}" index="{i + 1}"{k3.SEP}{params}{k3.CALL_CLOSE}'
    raise KeyError(fmt)


def call_block(fmt: str, calls: list[Call]) -> tuple[str, str]:
    """(wire text, the content a reader leaves of it) for consecutive calls."""
    bodies = [one_call(fmt, n, a, i) for i, (n, a) in enumerate(calls)]
    if fmt == "minimax":
        return "<minimax:tool_call>\n" + "".join(bodies) + "</minimax:tool_call>", ""
    if fmt == "dsml":
        return "<｜DSML｜tool_calls>\n" + "".join(bodies) + "</｜DSML｜tool_calls>", ""
    if fmt == "kimi":
        return "<|tool_calls_section_begin|>" + "".join(bodies) + "<|tool_calls_section_end|>", ""
    if fmt == "deepseek_v3":
        return "<｜tool▁calls▁begin｜>" + "\n".join(bodies) + "<｜tool▁calls▁end｜>", ""
    if fmt == "kimi_k3":
        return k3.TOOLS_OPEN + "".join(bodies) + k3.TOOLS_CLOSE, ""
    return SEPARATOR.join(bodies), SEPARATOR * (len(bodies) - 1)


@dataclass(frozen=True)
class Answer:
    wire: str
    content: str
    calls: list[Call]


def answer(fmt: str, pieces: list[Piece]) -> Answer:
    """K3 frames its text in the response channel; the framing is not content."""
    wire, content, calls = [], [], []
    for piece in pieces:
        if isinstance(piece, str):
            wire.append(_framed(fmt, piece))
            content.append(piece)
        else:
            w, c = call_block(fmt, piece)
            wire.append(w)
            content.append(c)
            calls.extend(piece)
    return Answer("".join(wire), "".join(content), calls)


def _framed(fmt: str, text: str) -> str:
    if fmt == "kimi_k3" and text:
        return k3.open_tag("response") + text + k3.close_tag("response")
    return text


def start_markers(fmt: str) -> tuple[str, ...]:
    from atom.chat.tool_parser.registry import FORMATS
    return FORMATS[fmt].START_MARKERS
