"""Model outputs for the engine plugin tests, for every tool-capable template of both corpora.

Each template gets the round-trip cases it renders (`autoparser.roundtrip`), and, written from its
analysis (`analyses.render_output`), the outputs a served model writes whatever its template
shows in history: an answer, reasoning then an answer, reasoning then calls, reasoning then an
answer then a call, an answer then a call, one call, and two calls where the format has them.
R1-family templates, which drop reasoning from history so that no round trip applies, get the
latter. The tests compare what a plugin composed as its engine composes it returns with
autoparser's own parse of the same output.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from analyses import render_output
from corpora import all_templates

import autoparser
from autoparser.render import TemplateRenderError
from autoparser.roundtrip import TOOLS, probe_messages, run_case

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = ("get_weather", {"location": "Paris, France", "days": 3})
SEARCH = ("search_docs", {"query": "streaming parsers", "limit": 5})
CHUNK_SIZES = (1, 3, 7)


@dataclass(frozen=True)
class Case:
    name: str
    output: str
    thinking: bool | None  # the request's thinking switch (True where the case reasons)
    prompt: str | None  # the rendered prompt the output continues, where it renders
    history: tuple[dict[str, Any], ...]  # the request's messages
    has_calls: bool


@cache
def _analysis(path: Path) -> Any:
    try:
        return autoparser.analyze(path.read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)
    except TemplateRenderError:
        return None


def tool_template_params() -> list[Any]:
    """Every template of both corpora whose analysis finds tool calls, as pytest parameters.
    Templates that cannot render a basic conversation have no analysis and are left out."""
    found = [pytest.param(path, id=path.stem) for path in all_templates()
             if (analysis := _analysis(path)) is not None and analysis.tools.supported]
    return found or [pytest.param(None, id="corpus-unavailable", marks=pytest.mark.skip(reason="no corpus"))]


def analysis_of(path: Path) -> Any:
    return _analysis(path)


def _prompt(analysis: Any, thinking: bool | None) -> str | None:
    try:
        return analysis.render(USER, tools=TOOLS, add_generation_prompt=True, **analysis.thinking_kwargs(thinking))
    except TemplateRenderError:
        return None


def _round_trip_cases(analysis: Any) -> list[Case]:
    found = []
    for name, message in probe_messages().items():
        result = run_case(analysis, name, message)
        if result.status in ("pass", "fail"):
            found.append(Case(f"roundtrip-{name}", result.output, result.thinking, result.prompt or None,
                              tuple(USER), bool(message.get("tool_calls"))))
    return found


def _written_cases(analysis: Any) -> list[Case]:
    reasons = analysis.reasoning.mode != "none" and bool(analysis.reasoning.end)
    shapes: list[tuple[str, str | None, str, list[tuple[str, dict[str, Any]]]]] = [
        ("answer", None, "It is usually mild.", []),
        ("call", None, "", [WEATHER]),
        ("answer-call", None, "Let me check.", [WEATHER]),
    ]
    if analysis.tools.parallel:
        shapes.append(("two-calls", None, "", [WEATHER, SEARCH]))
    if reasons:
        shapes += [
            ("reasoning-answer", "The user wants the weather.", "It is usually mild.", []),
            ("reasoning-call", "I should call a tool.", "", [WEATHER]),
            ("reasoning-answer-call", "I should call a tool.", "Let me check.", [WEATHER]),
        ]
    found = []
    for name, reasoning, content, calls in shapes:
        thinking = True if reasoning is not None else None
        output = render_output(analysis, reasoning, content, calls, thinking=thinking, stop=False)
        found.append(Case(f"written-{name}", output, thinking, _prompt(analysis, thinking), tuple(USER), bool(calls)))
    return found


def cases_of(analysis: Any) -> list[Case]:
    return _round_trip_cases(analysis) + _written_cases(analysis)


def markers_of(analysis: Any) -> list[str]:
    """The analysis' marker texts, longest first (those of a served model are special tokens)."""
    tools = analysis.tools.to_dict()
    found = {analysis.reasoning.start, analysis.reasoning.end, analysis.content.start, analysis.content.end,
             *analysis.stop, *analysis.preserved_tokens,
             *(tools.get(key) for key in ("section_start", "section_end", "call_start", "call_end",
                                          "name_start", "name_end", "args_start", "args_end"))}
    return sorted({m.strip() for m in found if isinstance(m, str) and m.strip() and "{" not in m},
                  key=len, reverse=True)


def chunkings(text: str, markers: list[str]) -> dict[str, list[str]]:
    """`text` cut as engines stream it: every 1, 3 and 7 characters, and each marker alone in a
    chunk of its own (a special token is one token) with the text between in 5-character pieces."""
    found = {f"{size}-chars": [text[i:i + size] for i in range(0, len(text), size)] for size in CHUNK_SIZES}
    tokens: list[str] = []
    plain, at = "", 0
    while at < len(text):
        marker = next((m for m in markers if text.startswith(m, at)), None)
        if marker is None:
            plain += text[at]
            at += 1
            continue
        tokens += [plain[i:i + 5] for i in range(0, len(plain), 5)] + [marker]
        plain, at = "", at + len(marker)
    tokens += [plain[i:i + 5] for i in range(0, len(plain), 5)]
    found["markers-alone"] = tokens
    return found
