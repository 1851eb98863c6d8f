"""The markup around and between calls, from where the calls sit in one- and two-call renders.

With the span of each call known, the text before call A in the one-call output, the text after
it, and the text between the two calls of the two-call output share their markup:
``between = call_end + separator + call_start``, ``before = section_start + call_start``,
``after = call_end + section_end + end of turn``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from autoparser.analysis import ContentAnalysis, ReasoningAnalysis
from autoparser.analyzers.diff import common_prefix, common_suffix, cut_at_stop
from autoparser.analyzers.probes import ID_A, ID_B
from autoparser.tool_calls import CallId, CallMarkers

# Ids differ between the calls; a same-length hole keeps the spans valid and lets them align.
ID_HOLE_IN_RENDER = "\x01" * len(ID_A)


@dataclass
class Span:
    start: int
    end: int


def call_markers(one: str, two: str | None, spans: list[Span], array: bool, reasoning: ReasoningAnalysis,
                 stop: list[str], content: ContentAnalysis) -> tuple[CallMarkers, CallId | None]:
    """The markers, and the call id when the template writes it before the name (`call_start` ID)."""
    one = one.replace(ID_A, ID_HOLE_IN_RENDER)
    two = two.replace(ID_A, ID_HOLE_IN_RENDER).replace(ID_B, ID_HOLE_IN_RENDER) if two is not None else None
    first = spans[0]
    before = _drop_empty_content(_drop_leading_reasoning(one[: first.start], reasoning), content)
    after = one[first.end:]
    separator = ""
    if two is not None and len(spans) == 3:
        between = two[spans[1].end: spans[2].start]
        call_end = common_prefix(between, after)
        rest = between[len(call_end):]
        call_start = common_suffix(rest, before)
        separator = rest[: len(rest) - len(call_start)]
    else:
        call_start, call_end = "", _until_stop(after, stop)
    section_start = before[: len(before) - len(call_start)]
    section_end = _until_stop(after[len(call_end):], stop)
    if array:
        section_start, section_end = section_start.rstrip().removesuffix("["), section_end.lstrip().removeprefix("]")
    section_start, section_end = section_start.lstrip(), section_end.strip()
    if not call_start.strip():
        call_start, separator = "", separator + call_start
    if not call_end.strip():
        call_end, separator = "", call_end + separator
    call_id = None
    if ID_HOLE_IN_RENDER in call_start:
        call_start, _, id_end = call_start.partition(ID_HOLE_IN_RENDER)
        call_id = CallId(end=id_end, before_name=True)
    markers = CallMarkers(section_start=section_start.replace(ID_HOLE_IN_RENDER, "") if section_start.strip() else "",
                          section_end=section_end if section_end.strip() else "",
                          call_start=call_start, call_end=call_end,
                          call_separator=separator.replace(ID_HOLE_IN_RENDER, ""))
    return markers, call_id


def reopened_by_prompt(markers: CallMarkers, prompt: str) -> CallMarkers | None:
    """When the prompt already wrote the first call's opener (later calls repeat it as a
    separator): the markers with that opener as `call_start`."""
    opener = markers.call_separator.strip()
    if markers.call_start or markers.section_start or not opener or not prompt.rstrip().endswith(opener):
        return None
    return dataclasses.replace(markers, call_start=opener,
                               call_separator=markers.call_separator.replace(opener, "", 1))


def _drop_leading_reasoning(text: str, reasoning: ReasoningAnalysis) -> str:
    if reasoning.mode == "none" or not reasoning.end:
        return text
    at = text.find(reasoning.end)
    if at >= 0 and not text[:at].replace(reasoning.start, "").strip():
        return text[at + len(reasoning.end):].lstrip()
    return text


def _drop_empty_content(text: str, content: ContentAnalysis) -> str:
    """Calls rendered after an empty answer block (`<|open|>response<|sep|><|close|>response<|sep|>`):
    the block is the answer's markup, not the calls'."""
    start, end = content.start.strip(), content.end.strip()
    lead = text.lstrip()
    if content.mode == "wrapped" and start and end and lead.startswith(start):
        rest = lead[len(start):].lstrip()
        if rest.startswith(end):
            return rest[len(end):].lstrip()
    return text


def _until_stop(text: str, stop: list[str]) -> str:
    return cut_at_stop(text, stop).rstrip()
