"""Model outputs for the engine plugin tests, for every tool-capable template of both corpora.

Each template gets the round-trip cases it renders (`autoparser.roundtrip`), and, written from its
analysis (`analyses.render_output`), the outputs a served model writes whatever its template
shows in history: an answer, reasoning then an answer, reasoning then calls, reasoning then an
answer then a call, an answer then a call, one call, and two calls where the format has them.
R1-family templates, which drop reasoning from history so that no round trip applies, get the
latter. Where the template's reasoning may be reopened inside the answer, outputs with a reasoning
block after answer text and after calls too. The tests compare what a plugin composed as its engine composes it returns with
autoparser's own parse of the same output.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from analyses import render_output
from corpora import REPO, all_templates, llamacpp_templates

import autoparser
from autoparser.language.build import Request, reasoning_cut
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
    return found + _in_answer_cases(analysis)


def _in_answer_cases(analysis: Any) -> list[Case]:
    """Where the template's reasoning may be reopened inside the answer (`ReasoningCut.in_answer`):
    a block after answer text, after reasoning and answer text, and after calls."""
    if not reasoning_cut(analysis, Request(thinking=True)).in_answer:
        return []
    r = analysis.reasoning
    block = r.start + "Let me check again." + r.end
    shapes = [("reasoning-answer-reasoning-answer", "The user wants the weather.", "It is usually mild.", [],
               "Mostly sunny.")]
    shapes.append(("reasoning-call-reasoning-answer", "I should call a tool.", "", [WEATHER], "Here it is."))
    found = []
    for name, reasoning, content, calls, after in shapes:
        output = render_output(analysis, reasoning, content, calls, thinking=True, stop=False) + block + after
        prompt = _prompt(analysis, True)
        emptied = render_output(analysis, "", content, calls, thinking=True, stop=False) + block + after
        if calls and not _block_read_alike(analysis, prompt, output, emptied):
            continue
        found.append(Case(f"written-{name}", output, True, prompt, tuple(USER), bool(calls)))
    if not r.forced_open:  # the answer first, no reasoning before it
        output = "It is usually mild." + block + "Mostly sunny."
        found.append(Case("written-answer-reasoning-answer", output, None, _prompt(analysis, None), tuple(USER), False))
    return found


def _block_read_alike(analysis: Any, prompt: str | None, output: str, emptied: str) -> bool:
    """Whether autoparser's parse reads the block after the calls alike whatever the reasoning
    first in the output holds. The engines' tool stage reads the answer after a reasoning it no
    longer sees, so an output read otherwise is left out here: where the written output is not
    read as `analyses.render_output` wrote it (Hy3's reasoning under its first-turn prompt, Solar
    Open's calls)."""
    parser = analysis.parser(tools=TOOLS, thinking=True, prompt=prompt)
    return parser.parse(output)["content"] == parser.parse(emptied)["content"]


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


GEMMA4_CALL = '<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|>'
QWEN3_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
V31_CALL = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Paris\"}"
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
FIXTURE_CALL = '<<act>>{"name": "get_weather", "arguments": {"location": "Paris"}}<</act>>'
# Reasoning blocks written inside the answer, after answer text or reopened after calls:
# (template, output, thinking, the reasoning autoparser reads, the content)
IN_ANSWER = [
    ("google-gemma-4-31B-it.jinja", "Before\n<|channel>thought\nX<channel|>\nRest", True, "X", "Before\n\nRest"),
    ("google-gemma-4-31B-it.jinja", f"Before\n<|channel>thought\nX<channel|>{GEMMA4_CALL}", True, "X", "Before"),
    ("google-gemma-4-31B-it-interleaved.jinja", "Before\n<|channel>thought\nX<channel|>\nRest", True, "X",
     "Before\n\nRest"),
    ("google-gemma-4-31B-it-interleaved.jinja", f"<|channel>thought\nA<channel|>{GEMMA4_CALL}"
     "<|channel>thought\nB<channel|>Done", True, "A\nB", "Done"),
    ("Qwen-Qwen3-0.6B.jinja", "Answer <think>r</think> more", None, "r", "Answer  more"),
    ("Qwen-Qwen3-0.6B.jinja", f"Answer <think>r</think> more\n{QWEN3_CALL}", True, "r", "Answer  more"),
    ("deepseek-ai-DeepSeek-V3.1.jinja", "a</think>Answer<think>r</think> more", True, "ar", "Answer more"),
    ("deepseek-ai-DeepSeek-V3.1.jinja", f"a</think>{V31_CALL}<think>r</think>Done.", True, "ar", "Done."),
    ("reasoning_after_answer.jinja", "Before <<weigh>>r<</weigh>> after", None, "r", "Before  after"),
    ("reasoning_after_answer.jinja", f"<<weigh>>a<</weigh>>Before <<weigh>>r<</weigh>>\n{FIXTURE_CALL}", True, "ar",
     "Before"),
]

# each engine stage trims the reasoning it reads: whitespace between the reasoning the output
# began with and a block inside the answer (Gemma 4's channel opens with a newline) is not served
SERVED_REASONING = {"A\nB": "AB"}


def in_answer_analysis(name: str) -> Any:
    """The analysis of one template of `IN_ANSWER`: a fixture of this repository, or llama.cpp's."""
    fixture = REPO / "fixtures" / "templates" / name
    if fixture.exists():
        path = fixture
    else:
        found = [path for path in llamacpp_templates() if path.name == name]
        if not found:
            pytest.skip(f"{name} is not in the corpus")
        path = found[0]
    return autoparser.analyze(path.read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)
