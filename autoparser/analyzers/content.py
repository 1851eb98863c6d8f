"""Markers around the visible answer, and whether they depend on reasoning being present."""

from __future__ import annotations

from typing import Any

from autoparser.analysis import ContentAnalysis, ReasoningAnalysis
from autoparser.analyzers.diff import common_prefix, cut_at_stop, is_marker, is_unit_marker, segments, units
from autoparser.analyzers.probes import CONTENT_TEXT, REASONING_FIELDS, REASONING_TEXT, Prober
from autoparser.analyzers.reasoning import empty_pairs, instructed_answer_pair


def analyze_content(prober: Prober, reasoning: ReasoningAnalysis, stop: list[str],
                    kwargs: dict[str, Any]) -> ContentAnalysis:
    plain = _wrapping(prober.output(prober.assistant(CONTENT_TEXT), **kwargs), reasoning, stop)
    if reasoning.toggle and plain[1] and not plain[0]:
        plain = _opened_by_prompt_when_off(prober, reasoning, stop, plain)
    with_reasoning = ("", "")
    if reasoning.mode != "none":
        for name in REASONING_FIELDS:
            output = prober.output(prober.assistant(CONTENT_TEXT, **{name: REASONING_TEXT}), **kwargs)
            if output and REASONING_TEXT in output:
                with_reasoning = _wrapping(output[output.index(REASONING_TEXT) + len(REASONING_TEXT):],
                                           reasoning, stop)
                break
    if plain[0] or plain[1]:
        return ContentAnalysis(mode="wrapped", start=plain[0], end=plain[1])
    if with_reasoning[0] or with_reasoning[1]:
        return ContentAnalysis(mode="wrapped_with_reasoning", start=with_reasoning[0], end=with_reasoning[1])
    instructed = _instructed_wrapper(prober, reasoning) or _instructed_answer(prober, reasoning)
    if instructed is not None:
        return ContentAnalysis(mode="wrapped_with_reasoning", start=instructed[0], end=instructed[1])
    return ContentAnalysis()


def _opened_by_prompt_when_off(prober: Prober, reasoning: ReasoningAnalysis, stop: list[str],
                               plain: tuple[str, str]) -> tuple[str, str]:
    """With thinking off the prompt may open the answer's channel itself (`<|open|>response<|sep|>`);
    with thinking on the model writes that opening after its reasoning: the answer's start marker."""
    on = _wrapping(prober.output(prober.assistant(CONTENT_TEXT), **reasoning.toggle_kwargs(True)), reasoning, stop)
    return (on[0], plain[1]) if on[1] == plain[1] else plain


def _instructed_answer(prober: Prober, reasoning: ReasoningAnalysis) -> tuple[str, str] | None:
    """The pair the instructions show around the answer, where its opening marker ends reasoning."""
    pair = instructed_answer_pair(prober.prompt() or "") if reasoning.mode != "none" else None
    return pair if pair and not reasoning.start and pair[0] == reasoning.end else None


def _instructed_wrapper(prober: Prober, reasoning: ReasoningAnalysis) -> tuple[str, str] | None:
    """The answer's markers where only the instructions the thinking switch adds name them, right
    after the reasoning's ("thoughts between <think></think> and your response between
    <response></response>"); the model writes them with its reasoning."""
    if reasoning.mode == "none" or not reasoning.toggle:
        return None
    on, off = prober.prompt(**reasoning.toggle_kwargs(True)), prober.prompt(**reasoning.toggle_kwargs(False))
    if on is None or off is None:
        return None
    pairs = empty_pairs(on[len(common_prefix(on, off)):])
    if (reasoning.start, reasoning.end) not in pairs:
        return None
    after = pairs[pairs.index((reasoning.start, reasoning.end)) + 1:]
    return after[0] if after else None


def _wrapping(output: str | None, reasoning: ReasoningAnalysis, stop: list[str]) -> tuple[str, str]:
    if not output or CONTENT_TEXT not in output:
        return "", ""
    at = output.index(CONTENT_TEXT)
    before = _drop_reasoning(output[:at], reasoning)
    after = output[at + len(CONTENT_TEXT):]
    start = "".join(before).strip()
    end = cut_at_stop(after, stop).strip()
    if start and not any(is_marker(s) for s in segments(start)):
        start = ""
    if end and not any(is_marker(s) for s in segments(end)):
        end = ""
    closing = [u for u in units(end) if not u.isspace()]
    if len(closing) > 1 and all(is_unit_marker(u) for u in closing):
        end = closing[0]  # the answer's own closing marker; the rest closes the turn
    return start, end


def _drop_reasoning(before: str, reasoning: ReasoningAnalysis) -> list[str]:
    """The segments before the content, minus an (empty) reasoning block."""
    if reasoning.mode != "none" and reasoning.end and reasoning.end in before:
        return segments(before[before.rindex(reasoning.end) + len(reasoning.end):])
    segs = segments(before)
    if reasoning.mode == "none":
        return segs
    return [s for s in segs if s != reasoning.start]
