"""Differential template analysis: one module per concern, assembled here.

    render (probes) -> diff -> prompt / reasoning / content / tools -> Analysis
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autoparser.analysis import (
    Analysis,
    ContentAnalysis,
    MessagesAnalysis,
    ReasoningAnalysis,
    ToolsAnalysis,
)
from autoparser.analyzers.content import analyze_content
from autoparser.analyzers.diff import is_marker, segments
from autoparser.analyzers.inputs import documents_for_calls, required_inputs
from autoparser.analyzers.messages import analyze_messages
from autoparser.analyzers.probes import Prober
from autoparser.analyzers.prompt import TurnEnd, generation_prompt, turn_end
from autoparser.analyzers.reasoning import analyze_reasoning, template_facts
from autoparser.analyzers.tools import analyze_tools, renders_a_call, tool_markers, tool_triggers
from autoparser.render import TemplateRenderError

NOT_DETERMINISTIC = ("the template renders differently each time (it uses randomness such as lipsum() or "
                     "random, or the current time through strftime_now): the analysis compares renders, "
                     "so its markers may be wrong, and prompts will differ from run to run")

DOCUMENTS_FOR_CALLS = ("the template writes tool calls only when it is given documents (the turns it keeps for "
                       "retrieval): the analysis and every render pass a placeholder document unless the request "
                       "passes its own in the template variable 'documents'")


def analyze(source: str, bos_token: str = "", eos_token: str = "", **template_kwargs: Any) -> Analysis:
    """Infer the output format of the chat template `source` by rendering it differentially.

    Raises `TemplateRenderError` when the template does not compile or renders nothing at all.
    Anything that could not be determined is reported in `Analysis.warnings`.
    """
    facts = template_facts(source)
    prober = Prober(source, bos_token=bos_token, eos_token=eos_token, base_kwargs=dict(template_kwargs))
    warnings: list[str] = []
    if not prober.choose_shape() and not (required_inputs(prober) and prober.choose_shape()):
        reason = prober.errors[-1] if prober.errors else "it renders nothing for a user message"
        raise TemplateRenderError(f"the template cannot render a basic conversation: {reason}")
    if documents_for_calls(prober, renders_a_call):
        prober.choose_shape()
        warnings.append(DOCUMENTS_FOR_CALLS)

    if not prober.renders_the_same():
        warnings.append(NOT_DETERMINISTIC)
    prompt = generation_prompt(prober) or ""
    reasoning = analyze_reasoning(prober, facts, warnings)
    quiet = reasoning.toggle_kwargs(False)
    turn = turn_end(prober, eos_token, **quiet)
    stop = _stops(turn, eos_token, warnings)
    content = analyze_content(prober, reasoning, stop, quiet)
    if turn is not None:
        stop = _with_turn_closing_stops(stop, content, turn.closing)
    messages = analyze_messages(prober, reasoning, prompt, reasoning.toggle_kwargs(True))
    tools = analyze_tools(prober, reasoning, stop, _tools_kwargs(prober, reasoning, content, quiet), warnings,
                          messages, content)
    if messages.body_start:
        reasoning, content = _markers_from_messages(reasoning, content, messages)
    if tools.opened_by_prompt and turn is not None:
        content = _content_after_opened_call(content, turn.before_content)
    if not tools.supported:
        warnings.append("the template does not render tool calls; tool calling is off")
    return Analysis(generation_prompt=prompt, reasoning=reasoning, content=content, tools=tools,
                    messages=messages, stop=stop, preserved_tokens=_preserved_tokens(reasoning, content, tools, stop),
                    triggers=tool_triggers(tools), warnings=warnings, template_vars=dict(template_kwargs),
                    template_inputs=dict(prober.inputs), source=source, bos_token=bos_token, eos_token=eos_token)


def _tools_kwargs(prober: Prober, reasoning: ReasoningAnalysis, content: ContentAnalysis,
                  quiet: dict[str, Any]) -> dict[str, Any]:
    """The switch's state calls are read in: off, unless off opens the answer's channel in the
    prompt (a call would first close it); then on, where the model closes its reasoning instead."""
    off = generation_prompt(prober, **quiet) if quiet and content.start.strip() else None
    if off is not None and off.rstrip().endswith(content.start.strip()):
        return reasoning.toggle_kwargs(True)
    return quiet


def _stops(turn: TurnEnd | None, eos_token: str, warnings: list[str]) -> list[str]:
    if turn is None:
        warnings.append("an assistant reply does not render after the prompt, so the end of a turn is unknown")
        return [eos_token] if eos_token else []
    if not turn.stop:
        warnings.append("no end-of-turn marker follows an assistant reply; generation relies on the "
                        "model's end-of-sequence token")
    return turn.stop


def _with_turn_closing_stops(stop: list[str], content: ContentAnalysis, closing: list[str]) -> list[str]:
    """Markers between the answer's own closing marker and the end of turn close the turn too
    (`<|close|>message<|sep|>` before `<|end_of_msg|>`): a reply that ends there has ended."""
    end = content.end.strip()
    if not end or end not in closing or not stop:
        return stop
    added = [unit for unit in dict.fromkeys(closing[closing.index(end) + 1:]) if unit not in stop]
    return stop[:1] + added + stop[1:]


def _markers_from_messages(reasoning: ReasoningAnalysis, content: ContentAnalysis,
                           messages: MessagesAnalysis) -> tuple[ReasoningAnalysis, ContentAnalysis]:
    """In a message format, reasoning and the answer are messages: their markers are the headers."""
    reasoning = dataclasses.replace(reasoning, start=(messages.reasoning_header + messages.body_start).strip(),
                                    end=messages.separator)
    if content.mode != "wrapped" or not content.start:
        content = dataclasses.replace(content, mode="wrapped",
                                      start=(messages.content_header + messages.body_start).strip())
    return reasoning, content


def _content_after_opened_call(content: ContentAnalysis, opener: str) -> ContentAnalysis:
    """The prompt opened a call header: plain content is introduced by its own recipient text."""
    if content.mode == "plain" and opener.strip() and len(opener) <= 32:
        return dataclasses.replace(content, mode="wrapped", start=opener)
    return content


def _preserved_tokens(reasoning: ReasoningAnalysis, content: ContentAnalysis, tools: ToolsAnalysis,
                      stop: list[str]) -> list[str]:
    out: list[str] = []
    for text in (reasoning.start, reasoning.end, content.start, content.end):
        for seg in segments(text):
            if is_marker(seg) and seg not in out:
                out.append(seg)
    for marker in tool_markers(tools) + stop:
        if marker and marker not in out:
            out.append(marker)
    return out
