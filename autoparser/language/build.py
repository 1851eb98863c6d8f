"""One builder from an analysis and a request to the output language (`ir.Language`).

This is the one place that knows formats: where reasoning and content go, what a tool call
looks like in each format, which markers end free text, what `tool_choice` makes of the calls.
The shape it builds:

* ``"none"``: reasoning, then content that never contains a call marker;
* ``"required"`` / a named tool: reasoning, then at least one call (exactly one when parallel
  calls are off), no content;
* a prompt that already opened a call (`tools.opened_by_prompt`): the rest of a call, or the
  recipient that introduces content;
* ``"auto"``: lazy (`ir.Lazy`): free output until a trigger starts the call section, triggers
  not counting inside reasoning; with `lazy` off, reasoning, then content or content and calls;
* `Request.reading`: the wider language the parser reads (`_Reading`), which Lark parses with.

Free text stops at the first marker the parser would react to (`ir.Text`). Tagged values are
typed by the tool's schema; where keys have no marker before them (`name(key=value)`), a comma
ends a raw value only before the next `key=` (`ir.Weak`).

The analysis is read as `AnalysisData` (an `Analysis`, or its dict form read back with
`from_dict`). Standard library only. The builder's parts:
`build_tools.py` (tools, `tool_choice`, schemas), `build_generation.py` (the language generation
writes) and `build_reading.py` (the wider one the parser reads); `request.py` holds the request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from autoparser.analysis_data import AnalysisData
from autoparser.language.build_generation import _Builder
from autoparser.language.build_reading import _Reading
from autoparser.language.build_tools import (
    chosen_tools,
    is_plain_string,
    object_shape,
    resolve_ref,
)
from autoparser.language.ir import EMPTY, Language
from autoparser.language.request import (
    CLOSED,
    FREE,
    OPEN,
    Request,
    after_last,
    assistant_header,
    core,
)

# a tag around one word (`<think>`, `[THINK]`, `<|reasoning|>`): its closer has `/` before the word
_WORD_TAG = re.compile(r"(<\|?|\[)([A-Za-z][\w-]*)(\|?>|\])")
_THINKING_WORDS = ("think", "thought", "reason")


def build_language(analysis: AnalysisData, request: Request) -> Language:
    """The output language of `request` for the format `analysis` describes.

    Raises ValueError for a `tool_choice` naming a tool not in `tools`."""
    analysis = with_prefilled_reasoning(analysis, request)
    return (_Reading if request.reading else _Builder)(analysis, request).build()


def with_prefilled_reasoning(analysis: AnalysisData, request: Request) -> AnalysisData:
    """A template that writes no reasoning, continued from a prompt whose assistant turn begins
    with a thinking tag it leaves open (`<think>I'm`, as a caller prefills reasoning the template
    cannot show): the output goes on inside that block, which the tag's closer (`</think>`) ends.
    The analysis with that block as its reasoning; the analysis as it is otherwise."""
    prompt, header = request.prompt, assistant_header(analysis)
    if analysis.reasoning.mode != "none" or not prompt or not header:
        return analysis
    turn = after_last(prompt, [core(s) for s in analysis.stop])
    at = prompt.rfind(header)
    if at < turn or at < 0:
        return analysis
    tail = prompt[at + len(header):]
    tag = _WORD_TAG.match(tail.lstrip())
    if not tag or not any(word in tag.group(2).lower() for word in _THINKING_WORDS):
        return analysis
    start, end = tag.group(0), tag.group(1) + "/" + tag.group(2) + tag.group(3)
    if end in tail:
        return analysis
    return replace(analysis, reasoning=replace(analysis.reasoning, mode="tagged", start=start, end=end,
                                               forced_open=False, start_inferred=False))


@dataclass(frozen=True)
class ReasoningCut:
    """Where the parser's reading separates reasoning from the answer (marker cores), for a
    stage that cuts reasoning off before another parser reads the rest with no reasoning at all
    (a serving engine's reasoning parser).

    `start_state`: where the output starts (`request.OPEN`, `FREE`, `IMPLIED`; `CLOSED`: no
    reasoning is read). `interrupts`: what ends reasoning that no end marker closed; they begin
    the answer. `implied`: text the output did not open as reasoning is reasoning when an end
    marker follows it, unless one of `answer_openers` comes first. `start_alone`: the start
    marker's tag, which opens reasoning by itself too (the marker's word left out; "": none).
    `start_bounded`: the start marker, where it ends in a word character, is not that marker
    where a word character follows it (the tag alone and reasoning that begins with a longer word).
    `in_answer`: a reasoning block may come inside the answer too (`reasoning_in_answer`), which
    the stage reading the rest must read."""

    start_state: str
    start: str = ""
    end: str = ""
    interrupts: tuple[str, ...] = ()
    implied: bool = False
    answer_openers: tuple[str, ...] = ()
    start_alone: str = ""
    start_bounded: bool = False
    in_answer: bool = False


def reasoning_cut(analysis: AnalysisData, request: Request) -> ReasoningCut:
    """How the parser reading `request`'s output separates its reasoning from the answer."""
    analysis = with_prefilled_reasoning(analysis, request)
    reading = _Reading(analysis, replace(request, reading=True))
    start, end = reading.r.start.strip(), reading.r.end.strip()
    if reading.opened or reading.r.mode == "none" or not end:
        return ReasoningCut(CLOSED)
    if reading.in_messages() and reading.header_leads():
        # a reply written as messages: its reasoning is a message of its own, however the
        # prompt ended (cut here where it comes first)
        return ReasoningCut(OPEN if reading.forced else FREE, start, end)
    if not reading.reads_reasoning():
        return ReasoningCut(CLOSED)
    implied = reading.implies_reasoning()
    openers = tuple(reading.call_openers()) if implied else ()
    in_answer = reading.reasoning_in_answer(calls=True)[0] != EMPTY
    return ReasoningCut(reading.start, start, end, reading.interrupts(), implied, openers, reading.bare_opener,
                        start_bounded=bool(reading.bare_opener), in_answer=in_answer)


__all__ = ["ReasoningCut", "Request", "build_language", "chosen_tools", "is_plain_string", "object_shape",
           "reasoning_cut", "resolve_ref"]
