"""Sentences of the grammar read the same with every reader (issue 8's agreement property).

For every tool-capable template of both corpora, outputs are sampled from the full GBNF
language of a request (``tool_choice`` "required" and "auto", not lazy) with a seeded random
generator, and parsed with the parser (`analysis.parser`), with the Lark grammar
(`parse_with_lark`) and with the streaming reader of the request's full language
(`language.interpret`): all must give the same message (reasoning and content stripped, tool
names, arguments as JSON; ids not compared). The reader must also give the same message
streamed, whatever the chunks (special tokens one per chunk included), as read whole, and its
deltas must add up to that message.

The templates in `KNOWN` disagree today; each entry says how. They are expected failures
(not strict), so that the other templates stay guarded and a fix shows up as a pass.
`READER_KNOWN_LARK` lists, the same way, where the reader and Lark differ.
"""

from __future__ import annotations

import json
import random
import re
from functools import cache
from pathlib import Path

import corpora
import pytest
from gbnf_fixtures import SEARCH, WEATHER
from gbnf_sampler import Gbnf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lark_cases import comparable

import autoparser
from autoparser.generators.gbnf import build_grammar
from autoparser.generators.lark import parse_with_lark
from autoparser.language.build import Request, build_language
from autoparser.language.interpret import LanguageReader

TOOLS = [WEATHER, SEARCH]
SAMPLES = 3  # per tool_choice: the test covers many templates, each briefly

KNOWN: dict[str, str] = {}


# where the streaming reader of the language reads otherwise than Lark (template -> how)
READER_KNOWN_LARK: dict[str, str] = {}


@cache
def _analysis(path: Path) -> autoparser.Analysis | None:
    try:
        return autoparser.analyze(path.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - the analyzer's failures are its own tests' business
        return None


def _params(known: dict[str, str] = KNOWN) -> list:
    params = []
    for path in corpora.all_templates():
        marks = [pytest.mark.xfail(reason=known[path.stem], strict=False)] if path.stem in known else []
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params or [pytest.param(None, id="no-corpus", marks=pytest.mark.skip(reason="no corpus available"))]


@pytest.mark.parametrize("path", _params())
def test_grammar_sentences_parse_alike_with_the_parser_and_lark(path: Path) -> None:
    analysis = _analysis(path)
    if analysis is None or not analysis.tools.supported:
        pytest.skip("no tool-call format")
    for choice in ("required", "auto"):
        grammar = Gbnf(build_grammar(analysis, TOOLS, tool_choice=choice, lazy=False).gbnf)
        rng = random.Random(f"{path.stem}-{choice}")
        for _ in range(SAMPLES):
            text = grammar.sample(rng)
            parsed = analysis.parser(tools=TOOLS, tool_choice=choice).parse(text)
            lark = parse_with_lark(analysis, text, tools=TOOLS, tool_choice=choice)
            assert comparable(parsed) == comparable(lark), text


@cache
def _reader(path: Path, choice: str) -> LanguageReader:
    """The streaming reader of the request's full language, as Lark reads it (`parse_with_lark`)."""
    analysis = _analysis(path)
    request = Request(tools=tuple(TOOLS), tool_choice=choice, lazy=False, reading=True,
                      end_tokens=(analysis.eos_token,) if analysis.eos_token else ())
    return LanguageReader(build_language(analysis, request), end_of_turn=tuple(analysis.stop))


@cache
def _sentences(path: Path) -> tuple[tuple[str, str], ...]:
    """(tool_choice, sentence) pairs sampled from the template's grammars (the seeds above)."""
    analysis = _analysis(path)
    found = []
    for choice in ("required", "auto"):
        grammar = Gbnf(build_grammar(analysis, TOOLS, tool_choice=choice, lazy=False).gbnf)
        rng = random.Random(f"{path.stem}-{choice}")
        found += [(choice, grammar.sample(rng)) for _ in range(SAMPLES)]
    return tuple(found)


def _tool_capable(path: Path) -> None:
    analysis = _analysis(path)
    if analysis is None or not analysis.tools.supported:
        pytest.skip("no tool-call format")


@pytest.mark.parametrize("path", _params(READER_KNOWN_LARK))
def test_grammar_sentences_read_alike_with_the_language_reader_and_lark(path: Path) -> None:
    _tool_capable(path)
    analysis = _analysis(path)
    for choice, text in _sentences(path):
        read = comparable(_reader(path, choice).parse(text))
        assert read == comparable(parse_with_lark(analysis, text, tools=TOOLS, tool_choice=choice)), text


# special tokens as a server sends them: one per chunk (`<|tool_call_begin|>`, `<｜tool▁sep｜>`, `[TOOL_CALLS]`)
_SPECIAL = re.compile(r"<[|｜][^<>\s]*?[|｜]>|\[[A-Z_]+\]")


def _chunks(text: str, sizes: list[int], specials_alone: bool) -> list[str]:
    """`text` cut into pieces of the given sizes (cycled); special tokens alone if asked."""
    pieces = [p for p in re.split(f"({_SPECIAL.pattern})", text) if p] if specials_alone else [text]
    chunks, turn = [], 0
    for piece in pieces:
        if specials_alone and _SPECIAL.fullmatch(piece):
            chunks.append(piece)
            continue
        at = 0
        while at < len(piece):
            size = sizes[turn % len(sizes)]
            chunks.append(piece[at:at + size])
            at, turn = at + size, turn + 1
    return chunks


def _streamed(reader: LanguageReader, chunks: list[str]) -> tuple[dict, list[dict]]:
    stream = reader.stream()
    deltas = [d for chunk in chunks for d in stream.feed(chunk)]
    deltas += stream.finish()
    return stream.message(), deltas


def _from_deltas(deltas: list[dict]) -> dict:
    """The message the deltas add up to (a client joining them)."""
    texts = {"reasoning_content": "", "content": ""}
    calls: dict[int, dict] = {}
    for delta in deltas:
        for key in texts:
            texts[key] += delta.get(key, "")
        for part in delta.get("tool_calls", []):
            call = calls.setdefault(part["index"], {"name": "", "arguments": ""})
            call["name"] += part["function"].get("name", "")
            call["arguments"] += part["function"]["arguments"]
    return {**{k: v or None for k, v in texts.items()},
            "tool_calls": [(c["name"], c["arguments"]) for _, c in sorted(calls.items())]}


def _exact(message: dict) -> dict:
    """A message as streamed deltas give it: texts and argument strings exactly, ids left out."""
    return {"reasoning_content": message["reasoning_content"], "content": message["content"],
            "tool_calls": [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]}


@pytest.mark.parametrize("path", _params({}))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6), specials_alone=st.booleans())
def test_language_reader_streams_what_it_reads_whole(path: Path, sizes: list[int], specials_alone: bool) -> None:
    _tool_capable(path)
    for choice, text in _sentences(path):
        reader = _reader(path, choice)
        whole = _exact(reader.parse(text))
        message, deltas = _streamed(reader, _chunks(text, sizes, specials_alone))
        assert _exact(message) == whole, (text, sizes)
        assert _from_deltas(deltas) == whole, (text, sizes)
        for call in message["tool_calls"]:
            json.loads(call["function"]["arguments"])
        assert all(call["id"] for call in message["tool_calls"])
