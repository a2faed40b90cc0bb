"""The reasoning dialects, and `resolve_dialect`, which picks one from the chat template.

A dialect is decided once at startup from the same evidence as the tool-call format (the chat
template), never per response: trying every dialect on each output made the two delivery modes
disagree about where a chain of thought ends.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

from atom.entrypoints.openai import kimi_k3_tokens as k3

logger = logging.getLogger(__name__)

# How far from the end of a prompt an opening marker still counts as "the prompt opened it".
_PROMPT_TAIL = 48


@dataclass(frozen=True, slots=True)
class ReasoningDialect:
    """The delimiters of one model family's reasoning channel.

    `implicit_open` is for templates that close a block they never open (DeepSeek-R1): the model
    starts inside the channel unless the prompt says otherwise or the request switched it off.
    """

    name: str
    start: str
    end: str
    implicit_open: bool = False

    @property
    def markers(self) -> tuple[str, ...]:
        return tuple(m for m in (self.start, self.end) if m)

    def prompt_state(self, prompt: str) -> Optional[bool]:
        """True if the prompt's tail opens the channel, False if it closes it, None if silent."""
        if not self.start:
            return False
        tail = prompt[-_PROMPT_TAIL:]
        opened = tail.rfind(self.start)
        closed = tail.rfind(self.end)
        if opened < 0 and closed < 0:
            return None
        return opened > closed


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
    if k3.THINK_OPEN in source or "open_tag('think'" in source or 'open_tag("think"' in source:
        return KIMI_K3
    if "<｜Assistant｜><think>\\n" in source or "<｜Assistant｜><think>\n" in source:
        return DEEPSEEK_R1
    return THINK
