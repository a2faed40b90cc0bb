"""The reasoning dialects, `resolve_dialect`, which picks one from the chat template, and
`generation_part`, the rendered text that says whether an answer starts inside the channel.

A dialect is decided once at startup from the same evidence as the tool-call format (the chat
template), never per response: trying every dialect on each output made the two delivery modes
disagree about where a chain of thought ends. Whether one answer starts inside the channel is
read from what the template rendered for that request's assistant turn: the text that
`add_generation_prompt` adds (R1 and Qwen3.5 end it with `<think>\n`, a thinking-off request
with `<think></think>`). The end of the prompt is not that text: a user message quoting `<think>`
sits a few characters before it.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional

from atom.chat import kimi_k3_tokens as k3

logger = logging.getLogger(__name__)

# Where a template cannot render without the generation prompt: how much of the prompt's end
# is taken to be it.
_PROMPT_TAIL = 48


@dataclass(frozen=True, slots=True)
class ReasoningDialect:
    """The delimiters of one model family's reasoning channel.

    `implicit_open` says an answer starts inside the channel when its generation prompt is
    silent (configured `deepseek_r1`; `auto` measures it: formats.py).
    """

    name: str
    start: str
    end: str
    implicit_open: bool = False

    @property
    def markers(self) -> tuple[str, ...]:
        return tuple(m for m in (self.start, self.end) if m)

    def prompt_state(self, generation: str) -> Optional[bool]:
        """True if the generation prompt leaves the channel open, False if it closes it, None
        if it is silent."""
        if not self.start:
            return False
        opened = generation.rfind(self.start)
        closed = generation.rfind(self.end)
        if opened < 0 and closed < 0:
            return None
        return opened > closed


def generation_part(prompt: str, without: Optional[str], dialect: ReasoningDialect) -> str:
    """What the template added for the assistant's turn: `prompt` past its common prefix with
    the same conversation rendered without the generation prompt (`without`; None when the
    template refused to render that), and a marker the boundary cuts, whole."""
    if without is None:
        return prompt[-_PROMPT_TAIL:]
    shared = len(without) if prompt.startswith(without) else \
        len(os.path.commonprefix([prompt, without]))
    start = shared
    for marker in dialect.markers:
        p = prompt.find(marker, max(0, shared - len(marker) + 1))
        if 0 <= p < shared:
            start = min(start, p)
    return prompt[start:]


NONE = ReasoningDialect("none", "", "")
THINK = ReasoningDialect("think", "<think>", "</think>")
DEEPSEEK_R1 = ReasoningDialect("deepseek_r1", "<think>", "</think>", implicit_open=True)
KIMI_K3 = ReasoningDialect("kimi_k3", k3.THINK_OPEN, k3.THINK_CLOSE)

DIALECTS: dict[str, ReasoningDialect] = {d.name: d for d in (NONE, THINK, DEEPSEEK_R1, KIMI_K3)}


def resolve_dialect(template_source: Optional[str], name: str = "auto") -> ReasoningDialect:
    """The dialect named by config, or, for `auto`, the one the chat template speaks.

    A template that names no dialect falls back to inline `<think>`: a no-op for a model that
    never writes the tag, and right for one that does.
    """
    if name != "auto":
        if name not in DIALECTS:
            raise ValueError(f"unknown reasoning dialect {name!r}; one of {sorted(DIALECTS)}")
        return DIALECTS[name]
    source = template_source or ""
    dialect = _detect(source)
    if dialect is THINK and "<think>" not in source:  # the fallback: say so only when asked
        logger.debug("reasoning dialect: think (the chat template names none)")
    else:
        logger.info("reasoning dialect: %s (from the chat template)", dialect.name)
    return dialect


def _detect(source: str) -> ReasoningDialect:
    """The markers only; where an answer starts is the rendered prompt's to say."""
    if k3.THINK_OPEN in source or "open_tag('think'" in source or 'open_tag("think"' in source:
        return KIMI_K3
    return THINK
