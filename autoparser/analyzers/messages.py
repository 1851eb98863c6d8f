"""Replies written as a sequence of messages, each opened by a header that says what it holds.

Some templates write an assistant reply as several messages: the reasoning in one, the answer in
another, each call in its own, every message re-opened the way the generation prompt opens the
turn. A header before a fixed body marker names the message's channel or recipient::

    HEADER body_start BODY separator HEADER body_start BODY ...

The analysis learns, from a reply rendered with reasoning and an answer, the separator (the text
between the two bodies, up to the re-opened turn), the body marker (what both headers end with)
and the two headers; from a rendered call, the call's header with the name as a hole. Models
vary their headers (channel and recipient in either order, extra words before the body marker),
so the parser classifies a header by its words rather than matching it exactly.
"""

from __future__ import annotations

from typing import Any

from autoparser.analysis import MessagesAnalysis, ReasoningAnalysis
from autoparser.analyzers.diff import common_suffix, is_marker, segments
from autoparser.analyzers.probes import (
    ARGS_A,
    CONTENT_TEXT,
    ID_A,
    NAME_A,
    PROBE_TOOLS,
    REASONING_FIELDS,
    REASONING_TEXT,
    Prober,
)

NAME_HOLE = "{name}"
MAX_HEADER = 96


def analyze_messages(prober: Prober, reasoning: ReasoningAnalysis, generation_prompt: str,
                     kwargs: dict[str, Any]) -> MessagesAnalysis:
    opener = generation_prompt.strip()
    if reasoning.mode == "none" or not opener:
        return MessagesAnalysis()
    for name in REASONING_FIELDS:
        output = prober.output(prober.assistant(CONTENT_TEXT, **{name: REASONING_TEXT}), **kwargs)
        if output and REASONING_TEXT in output and CONTENT_TEXT in output:
            found = _two_messages(output, opener)
            if found is not None:
                found.call_header, found.call_body_named = _call_header(prober, found, kwargs)
                return found
            break
    return MessagesAnalysis()


def _two_messages(output: str, opener: str) -> MessagesAnalysis | None:
    r_at = output.index(REASONING_TEXT)
    c_at = output.find(CONTENT_TEXT, r_at)
    if c_at < 0:
        return None
    between = output[r_at + len(REASONING_TEXT): c_at]
    reopened = between.find(opener)
    if reopened < 0:
        return None
    separator = between[: reopened + len(opener)]
    content_header = between[reopened + len(opener):]
    reasoning_header = output[:r_at]
    body = common_suffix(reasoning_header, content_header)
    body_segs = [s for s in segments(body) if not s.isspace()]
    if not body_segs or not is_marker(body_segs[-1]):
        return None
    body_start = body_segs[-1]
    reasoning_head = reasoning_header[: reasoning_header.rindex(body_start)]
    content_head = content_header[: content_header.rindex(body_start)]
    if (reasoning_head.strip() == content_head.strip() or len(reasoning_head) > MAX_HEADER
            or len(content_head) > MAX_HEADER or not separator.strip()):
        return None
    return MessagesAnalysis(body_start=body_start, separator=separator.strip(), opener=opener,
                            reasoning_header=reasoning_head, content_header=content_head)


def _call_header(prober: Prober, found: MessagesAnalysis, kwargs: dict[str, Any]) -> tuple[str, bool]:
    """The header of a call's message with the name as a hole, and whether the body names the
    call again."""
    from autoparser.analyzers.tools import TOOL_SHAPES

    for tools in (PROBE_TOOLS, *TOOL_SHAPES[1:]):
        for as_text in (False, True):
            message = prober.calls_message([(NAME_A, ARGS_A, ID_A)], as_text)
            output = prober.output(message, tools=tools, **kwargs)
            if not output or NAME_A not in output:
                continue
            body_at = output.find(found.body_start)
            name_at = output.find(NAME_A)
            if body_at < 0 or name_at > body_at or body_at > MAX_HEADER:
                return "", False
            header = output[:body_at]
            return header.replace(NAME_A, NAME_HOLE, 1), NAME_A in output[body_at:]
    return "", False
