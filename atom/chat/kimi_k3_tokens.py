"""Kimi-K3's channel tokens, split by owner.

K3 frames every answer in channel tags. Only the thinking pair belongs to the reasoning stage;
everything else is the tool parser's, and of that only the call openers hand the stream over to a
tool-call region. The rest is framing the parser drops. Keeping the split in one place is what
stops the reasoning stage from eating a tag the tool parser needs, and vice versa.
"""
from __future__ import annotations

OPEN = "<|open|>"
CLOSE = "<|close|>"
SEP = "<|sep|>"
END_OF_MSG = "<|end_of_msg|>"


def open_tag(tag: str) -> str:
    return f"{OPEN}{tag}{SEP}"


def close_tag(tag: str) -> str:
    return f"{CLOSE}{tag}{SEP}"


# What the reasoning stage strips: the thinking channel's delimiters.
THINK_OPEN = open_tag("think")
THINK_CLOSE = close_tag("think")

# What only the tool parser may touch.
TOOLS_OPEN = open_tag("tools")
TOOLS_CLOSE = close_tag("tools")
CALL_OPEN = f"{OPEN}call"  # carries attributes: <|open|>call tool="name" index="1"<|sep|>
CALL_CLOSE = close_tag("call")
ARGUMENT_OPEN = f"{OPEN}argument"
ARGUMENT_CLOSE = close_tag("argument")
JSON_OPEN = f"{OPEN}json"
JSON_CLOSE = close_tag("json")

# Framing the tool parser drops wherever it appears outside a region.
FRAMING = (
    open_tag("response"),
    close_tag("response"),
    TOOLS_CLOSE,
    close_tag("message"),
    END_OF_MSG,
)

# The two markers that mean a tool call.
REGION_OPENERS = (TOOLS_OPEN, CALL_OPEN)
