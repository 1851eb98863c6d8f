"""Differential template analysis: one module per concern, assembled here.

    render (probes) -> diff -> prompt / reasoning / content / tools -> Analysis
"""

from __future__ import annotations

from typing import Any

from autoparser.analysis import Analysis
from autoparser.analyzers.content import analyze_content
from autoparser.analyzers.diff import is_marker, segments
from autoparser.analyzers.messages import analyze_messages
from autoparser.analyzers.probes import Prober
from autoparser.analyzers.prompt import generation_prompt, turn_end
from autoparser.analyzers.reasoning import analyze_reasoning, template_facts
from autoparser.analyzers.tools import analyze_tools, tool_markers, tool_triggers
from autoparser.render import TemplateRenderError


def analyze(source: str, bos_token: str = "", eos_token: str = "", **template_kwargs: Any) -> Analysis:
    """Infer the output format of the chat template `source` by rendering it differentially.

    Raises `TemplateRenderError` when the template does not compile or renders nothing at all.
    Anything that could not be determined is reported in `Analysis.warnings`.
    """
    facts = template_facts(source)
    prober = Prober(source, bos_token=bos_token, eos_token=eos_token, base_kwargs=dict(template_kwargs))
    analysis = Analysis(source=source, bos_token=bos_token, eos_token=eos_token,
                        template_vars=dict(template_kwargs))
    warnings = analysis.warnings
    if not prober.choose_shape():
        reason = prober.errors[-1] if prober.errors else "it renders nothing for a user message"
        raise TemplateRenderError(f"the template cannot render a basic conversation: {reason}")

    analysis.generation_prompt = generation_prompt(prober) or ""
    reasoning = analyze_reasoning(prober, facts, warnings)
    analysis.reasoning = reasoning
    quiet = analysis.thinking_kwargs(False) if reasoning.toggle else {}

    turn = turn_end(prober, eos_token, **quiet)
    if turn is None:
        warnings.append("an assistant reply does not render after the prompt, so the end of a turn is unknown")
        stop: list[str] = [eos_token] if eos_token else []
    else:
        stop = turn.stop
        if not stop:
            warnings.append("no end-of-turn marker follows an assistant reply; generation relies on the "
                            "model's end-of-sequence token")
    analysis.stop = stop
    analysis.content = analyze_content(prober, reasoning, stop, quiet)
    if turn is not None:
        _turn_closing_stops(analysis, turn.closing)
    analysis.messages = analyze_messages(prober, reasoning, analysis.generation_prompt,
                                         analysis.thinking_kwargs(True) if reasoning.toggle else {})
    analysis.tools = analyze_tools(prober, reasoning, stop, quiet, warnings, analysis.messages,
                                   analysis.content)
    if analysis.messages.body_start:
        _markers_from_messages(analysis)
    if analysis.tools.opened_by_prompt and turn is not None and analysis.content.mode == "plain":
        # the prompt opened a call header: plain content is introduced by its own recipient text
        opener = turn.before_content
        if opener.strip() and len(opener) <= 32:
            analysis.content.mode, analysis.content.start = "wrapped", opener
    analysis.preserved_tokens = _preserved_tokens(analysis)
    analysis.triggers = tool_triggers(analysis.tools)
    if not analysis.tools.supported:
        warnings.append("the template does not render tool calls; tool calling is off")
    return analysis


def _turn_closing_stops(analysis: Analysis, closing: list[str]) -> None:
    """Markers between the answer's own closing marker and the end of turn close the turn too
    (`<|close|>message<|sep|>` before `<|end_of_msg|>`): a reply that ends there has ended."""
    end = analysis.content.end.strip()
    if not end or end not in closing or not analysis.stop:
        return
    at = 1
    for unit in closing[closing.index(end) + 1:]:
        if unit not in analysis.stop:
            analysis.stop.insert(at, unit)
            at += 1


def _markers_from_messages(analysis: Analysis) -> None:
    """In a message format, reasoning and the answer are messages: their markers are the headers."""
    messages = analysis.messages
    analysis.reasoning.start = (messages.reasoning_header + messages.body_start).strip()
    analysis.reasoning.end = messages.separator
    if analysis.content.mode != "wrapped" or not analysis.content.start:
        analysis.content.mode = "wrapped"
        analysis.content.start = (messages.content_header + messages.body_start).strip()


def _preserved_tokens(analysis: Analysis) -> list[str]:
    out: list[str] = []
    texts = [analysis.reasoning.start, analysis.reasoning.end, analysis.content.start, analysis.content.end]
    for text in texts:
        for seg in segments(text):
            if is_marker(seg) and seg not in out:
                out.append(seg)
    for marker in tool_markers(analysis.tools) + analysis.stop:
        if marker and marker not in out:
            out.append(marker)
    return out
