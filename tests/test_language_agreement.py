"""Sentences of the grammar read the same with both parsers (issue 8's agreement property).

For every tool-capable template of both corpora, outputs are sampled from the full GBNF
language of a request (``tool_choice`` "required" and "auto", not lazy) with a seeded random
generator, and parsed with the runtime (`analysis.parser`) and with the Lark grammar
(`parse_with_lark`): both must give the same message (reasoning and content stripped, tool
names, arguments as JSON; ids not compared).

The templates in `KNOWN` disagree today; each entry says how. They are expected failures
(not strict), so that the other templates stay guarded and a fix shows up as a pass.
"""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path

import corpora
import pytest
from gbnf_fixtures import SEARCH, WEATHER
from gbnf_sampler import Gbnf
from lark_cases import comparable

import autoparser
from autoparser.generators.gbnf import build_grammar
from autoparser.generators.lark import parse_with_lark

TOOLS = [WEATHER, SEARCH]
SAMPLES = 3  # per tool_choice: the test covers many templates, each briefly

KNOWN = {
    # a reply written as messages (`analysis.messages`) whose call separator is the message separator
    "muse-glimmer": "calls separated by `<|eom|><|start|>assistant`: the grammar (like the GBNF that wrote "
                    "them) reads the calls, the runtime reads the reply as content",
}


@cache
def _analysis(path: Path) -> autoparser.Analysis | None:
    try:
        return autoparser.analyze(path.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - the analyzer's failures are its own tests' business
        return None


def _params() -> list:
    params = []
    for path in corpora.all_templates():
        marks = [pytest.mark.xfail(reason=KNOWN[path.stem], strict=False)] if path.stem in KNOWN else []
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params or [pytest.param(None, id="no-corpus", marks=pytest.mark.skip(reason="no corpus available"))]


@pytest.mark.parametrize("path", _params())
def test_grammar_sentences_parse_alike_with_the_runtime_and_lark(path: Path) -> None:
    analysis = _analysis(path)
    if analysis is None or not analysis.tools.supported:
        pytest.skip("no tool-call format")
    for choice in ("required", "auto"):
        grammar = Gbnf(build_grammar(analysis, TOOLS, tool_choice=choice, lazy=False).gbnf)
        rng = random.Random(f"{path.stem}-{choice}")
        for _ in range(SAMPLES):
            text = grammar.sample(rng)
            runtime = analysis.parser(tools=TOOLS, tool_choice=choice).parse(text)
            lark = parse_with_lark(analysis, text, tools=TOOLS, tool_choice=choice)
            assert comparable(runtime) == comparable(lark), text
