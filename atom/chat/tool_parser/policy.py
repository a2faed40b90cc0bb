"""What one request allows the reader to do with the calls it finds.

`tool_choice` is enforced here, at the one place the parser is asked, and nowhere downstream:
`suppress_calls` drops dispatch only, so the region is still read exactly as a permitted call's
would be, the answer around it survives and raw markup never reaches the client.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """Declared tools (name -> JSON schema of its parameters) and what may be dispatched.

    `only` restricts dispatch to one named tool (OpenAI's `tool_choice: {"function": ...}`).
    """

    schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    suppress_calls: bool = False
    only: Optional[str] = None

    @property
    def declared(self) -> frozenset[str]:
        return frozenset(self.schemas)

    def may_announce(self, name: str) -> bool:
        """Only a declared tool is named early: prose can name a real tool, and a guess is loud."""
        return not self.suppress_calls and name in self.schemas and self.may_dispatch(name)

    def may_dispatch(self, name: str) -> bool:
        if self.suppress_calls:
            return False
        return self.only is None or name == self.only

    @classmethod
    def from_request(cls, tools: Optional[Sequence[Mapping[str, Any]]],
                     tool_choice: Any = None) -> "ToolPolicy":
        """Build from OpenAI `tools` / `tool_choice` (Anthropic's spelling is accepted too).

        No tools declared means nothing can be dispatched; the format is still read so that its
        framing never leaks.
        """
        schemas = {name: params for name, params in _declared(tools or ())}
        choice = _choice(tool_choice)
        if choice == "none" or not schemas:
            return cls(schemas, suppress_calls=True)
        if choice in ("auto", "required", None):
            return cls(schemas)
        return cls(schemas, only=choice)


def _declared(tools: Sequence[Mapping[str, Any]]):
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            params = fn.get("parameters", fn.get("input_schema")) or {}
            yield fn["name"], params if isinstance(params, Mapping) else {}


def _choice(tool_choice: Any) -> Optional[str]:
    """'none' | 'auto' | 'required' | a tool name | None, from either API's spelling."""
    if tool_choice is None or isinstance(tool_choice, str):
        return {"any": "required"}.get(tool_choice, tool_choice)
    if isinstance(tool_choice, Mapping):
        kind = tool_choice.get("type")
        if kind in ("none", "auto"):
            return kind
        if kind == "any":
            return "required"
        fn = tool_choice.get("function")
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            return fn["name"]
        if isinstance(tool_choice.get("name"), str):
            return tool_choice["name"]
    return None
