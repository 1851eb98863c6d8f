"""Every tool-capable template in both corpora gets grammars llama.cpp accepts.

The tools have nested objects, arrays, enums and optional fields (`gbnf_fixtures.TOOLS`). Each
template's analysis gives grammars for ``required``, ``auto`` (lazy) and ``none``, with markers
quoted and with the template's preserved tokens as token references; llama.cpp's own parser must
accept all of them, and the lazy trigger patterns must compile in both regex dialects. A second
test renders a real tool-call turn with each template and checks the grammar admits it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import corpora
import pytest
from gbnf_fixtures import TOOLS, WEATHER
from gbnf_sampler import Gbnf

import autoparser
from autoparser.generators.gbnf import build_grammar
from autoparser.llama.grammar_check import validate_gbnf, validate_trigger_patterns

PARAMS = corpora.llamacpp_template_params() + corpora.shared_template_params()
MIN_ADMITTED = 0.85  # real outputs admitted; the rest use formats outside the data model


@cache
def analysis_of(path: Path):  # type: ignore[no-untyped-def]
    try:
        return autoparser.analyze(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 - the analyzer's failures are its own tests' business
        return exc


def tool_analysis(path: Path):  # type: ignore[no-untyped-def]
    analysis = analysis_of(path)
    if isinstance(analysis, Exception):
        pytest.skip(f"analysis failed: {analysis}")
    if not analysis.tools.supported:
        pytest.skip("template has no tool calls")
    return analysis


@pytest.mark.parametrize("path", PARAMS)
def test_llama_cpp_accepts_the_grammars(path: Path) -> None:
    analysis = tool_analysis(path)
    for choice in ("required", "auto", "none"):
        for specials in (None, analysis.preserved_tokens):
            result = build_grammar(analysis, TOOLS, tool_choice=choice, special_tokens=specials)
            validate_gbnf(result.gbnf)
            validate_trigger_patterns(result.trigger_patterns)
            Gbnf(result.gbnf)


def rendered_call(analysis) -> str | None:  # type: ignore[no-untyped-def]
    """The model output for one get_weather call, as the template renders it (None: n/a)."""
    history = [{"role": "user", "content": "Weather in Paris?"}]
    call = {"id": "abc123456", "type": "function",
            "function": {"name": "get_weather", "arguments": {"location": "Paris", "days": 3}}}
    message = {"role": "assistant", "content": "", "tool_calls": [call]}
    try:
        base = analysis.render(history, tools=[WEATHER], add_generation_prompt=True)
        full = analysis.render(history + [message], tools=[WEATHER], add_generation_prompt=False)
    except Exception:  # noqa: BLE001
        return None
    if not full.startswith(base):
        return None
    output = full[len(base):]
    for stop in analysis.stop:
        if stop.strip() and stop.strip() in output:
            output = output[:output.index(stop.strip())]
    return output.rstrip() or None


def test_real_tool_call_outputs_are_admitted() -> None:
    paths = corpora.all_templates()
    if not paths:
        pytest.skip("no template corpus available")
    admitted, rejected = 0, []
    for path in paths:
        analysis = analysis_of(path)
        if isinstance(analysis, Exception) or not analysis.tools.supported:
            continue
        output = rendered_call(analysis)
        if output is None:
            continue
        grammar = Gbnf(build_grammar(analysis, [WEATHER], tool_choice="required").gbnf)
        if grammar.matches(output):
            admitted += 1
        else:
            rejected.append(f"{path.name}: {output[:120]!r}")
    total = admitted + len(rejected)
    assert total, "no template rendered a tool call"
    assert admitted / total >= MIN_ADMITTED, f"{admitted}/{total} admitted; rejected:\n" + "\n".join(rejected)
