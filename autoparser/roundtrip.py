"""Round-trip fidelity: render a known assistant message through a template, parse it back.

For a template T and an assistant message M::

    base = T.render(history, add_generation_prompt=True)
    full = T.render(history + [M], add_generation_prompt=False)

When `full` starts with `base`, the model output is `full[len(base):]` minus the end of turn, and
parsing it must give M back: the same tool names, arguments equal as JSON, reasoning and content
equal after stripping surrounding whitespace (each only where T renders it). Otherwise the case is
not applicable. This is how the project measures itself over real templates.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoparser.analysis import Analysis
from autoparser.analyzers.diff import is_marker, segments
from autoparser.analyzers.probes import Prober
from autoparser.analyzers.tools import EMPTY_CONTENTS
from autoparser.language.request import OPEN, start_state
from autoparser.render import TemplateRenderError

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a place.",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "City and country."},
            "days": {"type": "integer", "description": "How many days ahead."}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "search_docs", "description": "Search the documentation.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"]}}},
]

TRICKY_TEXT = 'He said "hi" {not: json} [a, b]\nsecond line — 東京 naïve'
MARKER_TEXT = "literal </think> and <tool_call> and <｜tool▁call▁end｜> inside a string"


def _call(name: str, args: dict[str, Any], index: int) -> dict[str, Any]:
    return {"id": f"call{index}abcd"[:9].ljust(9, "x"), "type": "function",
            "function": {"name": name, "arguments": args}}


def probe_messages() -> dict[str, dict[str, Any]]:
    """The assistant messages every template is checked with."""
    weather = _call("get_weather", {"location": "Paris, France", "days": 3}, 1)
    search = _call("search_docs", {"query": "streaming parsers", "limit": 5}, 2)
    tricky = _call("get_weather", {"location": TRICKY_TEXT, "days": 2}, 1)
    marker = _call("search_docs", {"query": MARKER_TEXT}, 2)
    return {
        "content": {"role": "assistant", "content": "The weather in Paris is sunny."},
        "reasoning_content": {"role": "assistant", "reasoning_content": "The user wants the weather.",
                              "content": "It is sunny in Paris."},
        "one_call": {"role": "assistant", "content": None, "tool_calls": [weather]},
        "two_calls": {"role": "assistant", "content": None, "tool_calls": [weather, search]},
        "reasoning_call": {"role": "assistant", "content": None, "reasoning_content": "I should call a tool.",
                           "tool_calls": [weather]},
        "tricky_arguments": {"role": "assistant", "content": None, "tool_calls": [tricky, marker]},
    }


@dataclass
class CaseResult:
    case: str
    status: str  # "pass", "fail", "not_applicable", "skipped"
    cause: str = ""
    output: str = ""
    expected: dict[str, Any] = field(default_factory=dict)
    got: dict[str, Any] = field(default_factory=dict)
    thinking: bool | None = None  # the request's thinking flag the output was parsed with
    prompt: str = ""  # the rendered prompt the output continues


def run_case(analysis: Analysis, case: str, message: dict[str, Any]) -> CaseResult:
    calls = message.get("tool_calls") or []
    if calls and not analysis.tools.supported:
        return CaseResult(case, "skipped", "template does not support tool calls")
    if calls and len(calls) > 1 and not analysis.tools.parallel:
        return CaseResult(case, "skipped", "template refuses parallel calls")
    if calls and analysis.tools.from_instructions:
        return CaseResult(case, "not_applicable", "the template renders no tool call (their syntax comes from "
                          "its instructions), so there is no rendered call to read back")
    thinking = True if message.get("reasoning_content") else None
    kwargs = analysis.thinking_kwargs(thinking)
    prober = Prober(analysis.source, analysis.bos_token, analysis.eos_token, base_kwargs=kwargs,
                    inputs=dict(analysis.template_inputs))
    prober.choose_shape()
    history = prober.history()
    if analysis.tools.name_in_id:
        message = _ids_holding_names(message)
    tools = TOOLS if calls else None
    try:
        base = analysis.render(history, tools=tools, add_generation_prompt=True, **kwargs)
    except TemplateRenderError as exc:
        return CaseResult(case, "not_applicable", f"template refuses the prompt: {exc}")
    full, refusal = None, ""
    for variant in _variants(prober, message):
        try:
            full = analysis.render(history + [variant], tools=tools, add_generation_prompt=False, **kwargs)
            message = variant
            break
        except TemplateRenderError as exc:
            refusal = refusal or str(exc)
    if full is None:
        return CaseResult(case, "not_applicable", f"template refuses the message: {refusal}")
    if not full.startswith(base):
        return CaseResult(case, "not_applicable", "the conversation does not start with the prompt")
    output = strip_turn_end(full[len(base):], analysis.stop)
    if _answer_without_its_reasoning(analysis, base, thinking, output):
        return CaseResult(case, "not_applicable", "the template renders an answer without the reasoning its "
                          "output opens with (the model reasons first, with or without the start marker)")
    expected = _expected(message, output)
    try:
        got = analysis.parser(tools=TOOLS, thinking=thinking).parse(output)
    except Exception as exc:  # a crash is a failure to report, not to hide
        return CaseResult(case, "fail", f"parser raised {type(exc).__name__}: {exc}", output, expected,
                          thinking=thinking, prompt=base)
    cause = compare(expected, got)
    return CaseResult(case, "fail" if cause else "pass", cause, output, expected, got, thinking, base)


def _answer_without_its_reasoning(analysis: Analysis, prompt: str, thinking: bool | None, output: str) -> bool:
    """Whether `output` is an answer whose reasoning the template dropped, where the model's output
    opens inside reasoning (the prompt opened it, or the template never writes its start marker):
    read as the model's output, its text is reasoning, so it cannot give the message back."""
    end = analysis.reasoning.end.strip()
    return bool(end) and end not in output and start_state(analysis, thinking, prompt)[0] == OPEN


def _variants(prober: Prober, message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The message as clients write it, in the order tried: a call-only message's content as
    each empty form, each with the arguments as objects, then as JSON text (some templates
    concatenate them as strings)."""
    calls_only = message.get("content") is None and bool(message.get("tool_calls"))
    for empty in EMPTY_CONTENTS if calls_only else (None,):
        shaped = _shaped(prober, message, empty)
        yield shaped
        yield _arguments_as_text(shaped)


def _shaped(prober: Prober, message: dict[str, Any], empty_content: Any = None) -> dict[str, Any]:
    message = copy.deepcopy(message)
    if isinstance(message.get("content"), str):
        message["content"] = prober.text(message["content"])
    if message.get("content") is None and message.get("tool_calls"):
        message["content"] = copy.deepcopy(empty_content)
    return message


def _ids_holding_names(message: dict[str, Any]) -> dict[str, Any]:
    """The message with call ids that hold their tool's name, as models write them for a template
    that renders the id where the name would be (the parser takes the name from the id)."""
    message = copy.deepcopy(message)
    for index, call in enumerate(message.get("tool_calls") or []):
        call["id"] = f"call.{call['function']['name']}.{index}"
    return message


def _arguments_as_text(message: dict[str, Any]) -> dict[str, Any]:
    message = copy.deepcopy(message)
    for call in message.get("tool_calls") or []:
        call["function"]["arguments"] = json.dumps(call["function"]["arguments"], ensure_ascii=False)
    return message


def strip_turn_end(output: str, stop: list[str]) -> str:
    """The output without its end of turn, and without a next turn's opening some templates render
    after it (`<|im_end|>\n<|im_start|>assistant`). An end-of-turn marker followed by more of the
    reply (a turn change before a tool call) stays."""
    text = output.rstrip()
    changed = True
    while changed:
        changed = False
        for marker in stop:
            if marker and text.endswith(marker):
                text, changed = text[: -len(marker)].rstrip(), True
            at = text.rfind(marker) if marker else -1
            if at >= 0 and _only_turn_markup(text[at + len(marker):]):
                text, changed = text[:at].rstrip(), True
    return text


def _only_turn_markup(text: str) -> bool:
    words = [s for s in segments(text) if s[:1].isalnum() and not is_marker(s)]
    return len(text) <= 160 and len(words) <= 2


def _expected(message: dict[str, Any], output: str) -> dict[str, Any]:
    expected: dict[str, Any] = {"tool_calls": [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in message.get("tool_calls") or []]}
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content)
    if content and content in output:
        expected["content"] = content.strip()
    elif not content:
        expected["content"] = None
    reasoning = message.get("reasoning_content")
    if reasoning and reasoning in output:
        expected["reasoning_content"] = reasoning.strip()
    return expected


def compare(expected: dict[str, Any], got: dict[str, Any]) -> str:
    """Why `got` differs from `expected`, or "" when it matches."""
    got_calls = []
    for call in got.get("tool_calls") or []:
        try:
            arguments = json.loads(call["function"]["arguments"])
        except (ValueError, KeyError, TypeError):
            arguments = call.get("function", {}).get("arguments")
        got_calls.append({"name": call["function"]["name"], "arguments": arguments})
    if got_calls != expected["tool_calls"]:
        if [c["name"] for c in got_calls] != [c["name"] for c in expected["tool_calls"]]:
            return "tool calls differ (names or count)"
        return "tool call arguments differ"
    if "content" in expected and (got.get("content") or "").strip() != (expected["content"] or ""):
        return "content differs"
    if "reasoning_content" in expected and (got.get("reasoning_content") or "").strip() != expected["reasoning_content"]:
        return "reasoning differs"
    return ""


def run_template(analysis: Analysis) -> list[CaseResult]:
    return [run_case(analysis, case, message) for case, message in probe_messages().items()]


def template_results(paths: Iterable[Path], bos_token: str, eos_token: str) -> Iterator[tuple[Path, Analysis, CaseResult]]:
    """Every round-trip case of every template that analyzes (templates that cannot render a
    basic conversation are left out), with the template's path and analysis."""
    from autoparser.analyzers import analyze

    for path in paths:
        try:
            analysis = analyze(path.read_text(encoding="utf-8"), bos_token=bos_token, eos_token=eos_token)
        except TemplateRenderError:
            continue
        for result in run_template(analysis):
            yield path, analysis, result
