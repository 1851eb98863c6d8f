"""Calls written by their id alone, where the name would be (`fixtures/templates/id_for_name.jinja`).

The template never writes a call's name; models write ids that hold it (`call.get_weather.0`).
The analysis finds that from renders alone (the name changes nothing, the id only itself), and
the language reads the name as the request's tool the id holds between identifier boundaries,
the longest where several do; an id that holds none is no call. Where the request gives no
tools, the name is the id's last word that is not all digits; an id with no such word is no call.
The id goes out as the call's.
The round trip, stream == whole for several chunkings and the hold-back bound of this family
are checked with the other fixture families (`test_template_families.py`).
"""

from __future__ import annotations

import json
import random
import re
from functools import cache
from pathlib import Path
from typing import Any

import corpora
import pytest
from analyses import DS_BOS, DS_EOS, without_generated_ids
from gbnf_sampler import Gbnf
from unplaced import losses_at_every_cut, marker_patterns

import autoparser
from autoparser.generators.gbnf import build_grammar
from autoparser.generators.lark import parse_with_lark
from autoparser.llama.grammar_check import validate_gbnf
from autoparser.roundtrip import TOOLS as PROBE_TOOLS
from autoparser.roundtrip import probe_messages, run_case

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "templates" / "id_for_name.jinja"
MARKERS = ("<<calls>>", "<</calls>>", "<<call id=", "<<over>>")


def tool(name: str, **properties: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {key: {"type": kind} for key, kind in properties.items()},
        "required": list(properties)}}}


TOOLS = [tool("get_weather", location="string"), tool("weather", location="string"), tool("search", query="string"),
         tool("search.docs", query="string")]


@cache
def analysis() -> autoparser.Analysis:
    return autoparser.analyze(FIXTURE.read_text(encoding="utf-8"), bos_token="<s>", eos_token="</s>")


def calls(message: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]


def section(*calls_written: tuple[str, str]) -> str:
    return "<<calls>>" + "".join(f"\n<<call id={i}>>{a}" for i, a in calls_written) + "\n<</calls>>"


def test_the_analysis_finds_the_id_written_for_the_name() -> None:
    tools = analysis().tools
    assert tools.supported and tools.name_in_id and tools.format == "tag_json"
    assert (tools.section_start, tools.name_start.strip(), tools.name_end, tools.section_end) == (
        "<<calls>>", "<<call id=", ">>", "<</calls>>")
    assert (tools.id_start, tools.id_end) == ("", "")


ARGS = '{"location": "Oslo"}'
QUERY = '{"query": "x"}'
CASES = {
    "name inside the id": (section(("call.get_weather.0", ARGS)), None, [("call.get_weather.0", "get_weather")]),
    "the id is the name": (section(("weather", ARGS)), None, [("weather", "weather")]),
    "two calls": ("Let me look. " + section(("fn/get_weather:0", ARGS), ("fn/search:1", QUERY)), "Let me look.",
                  [("fn/get_weather:0", "get_weather"), ("fn/search:1", "search")]),
    # `weather` and `search` are in these ids too, between boundaries: the longest name is the call's
    "the longest name": (section(("x.search.docs.2", QUERY), ("weather.get_weather", ARGS)), None,
                         [("x.search.docs.2", "search.docs"), ("weather.get_weather", "get_weather")]),
    # a name inside a longer word is no name: `get_weather_v2` is not `get_weather`
    "no boundary": (section(("call.get_weather_v2.0", ARGS)), section(("call.get_weather_v2.0", ARGS)), []),
    "no tool named": (section(("call.unknown.0", ARGS)), section(("call.unknown.0", ARGS)), []),
    # the call before one that names no tool stays a call; the rest is content
    "a call, then an id naming none": (
        section(("call.get_weather.0", ARGS), ("call.nothing.1", QUERY)),
        "<<call id=call.nothing.1>>" + QUERY + "\n<</calls>>", [("call.get_weather.0", "get_weather")]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_name_is_read_from_the_id(case: str) -> None:
    text, content, expected = CASES[case]
    parser = analysis().parser(tools=TOOLS)
    message = parser.parse(text)
    assert (message["content"], [(i, n) for i, n, _ in calls(message)]) == (content, expected)
    for _, name, arguments in calls(message):
        assert arguments == json.loads(QUERY if "search" in name else ARGS)
    for chunks in chunkings(text, random.Random(case)):
        assert streamed(parser, chunks) == without_generated_ids(message), chunks


# without tools: the name is the id's last word (a run between boundaries) that is not all digits
UNTOOLED = {
    "the word before the number": (section(("functions.get_weather:0", ARGS)), None,
                                   [("functions.get_weather:0", "get_weather")]),
    "the id alone": (section(("search:3", QUERY)), None, [("search:3", "search")]),
    "no number after it": (section(("call.get_weather", ARGS)), None, [("call.get_weather", "get_weather")]),
    "numbers after it": (section(("x.search.2.10", QUERY)), None, [("x.search.2.10", "search")]),
    # the last word that is not all digits, whatever the tools would say (with them: `search.docs`)
    "the last word": (section(("x.search.docs.2", QUERY)), None, [("x.search.docs.2", "docs")]),
    "a word that begins with digits": (section(("call.2fa:0", ARGS)), None, [("call.2fa:0", "2fa")]),
    "a word of digits, letters and dashes": (section(("9-get_weather-2", ARGS)), None,
                                             [("9-get_weather-2", "9-get_weather-2")]),
    "two calls": ("Let me look. " + section(("fn/get_weather:0", ARGS), ("fn/search:1", QUERY)), "Let me look.",
                  [("fn/get_weather:0", "get_weather"), ("fn/search:1", "search")]),
    "digits only": (section(("0", ARGS)), section(("0", ARGS)), []),
    "numbers and boundaries only": (section(("12:3", ARGS)), section(("12:3", ARGS)), []),
    "a call, then an id of digits only": (
        section(("call.get_weather.0", ARGS), ("7", QUERY)), "<<call id=7>>" + QUERY + "\n<</calls>>",
        [("call.get_weather.0", "get_weather")]),
}


@pytest.mark.parametrize("case", sorted(UNTOOLED))
def test_without_tools_the_name_is_the_ids_last_word(case: str) -> None:
    text, content, expected = UNTOOLED[case]
    parser = analysis().parser()
    message = parser.parse(text)
    assert (message["content"], [(i, n) for i, n, _ in calls(message)]) == (content, expected)
    for _, name, arguments in calls(message):
        assert arguments == json.loads(QUERY if "search" in name or name == "docs" else ARGS)
    for chunks in chunkings(text, random.Random(case)):
        assert streamed(parser, chunks) == without_generated_ids(message), chunks


@pytest.mark.parametrize("case", sorted(c for c in UNTOOLED if UNTOOLED[c][1] in (None, "Let me look.")))
def test_without_tools_lark_reads_what_the_parser_reads(case: str) -> None:
    text = UNTOOLED[case][0]
    read = parse_with_lark(analysis(), text)
    assert comparable(read) == comparable(analysis().parser().parse(text)), text


def test_without_tools_the_grammar_has_no_calls() -> None:
    """As for every format: a request without tools lets the model write no call, whatever the
    parser reads back."""
    assert build_grammar(analysis(), None, lazy=False).gbnf == \
        build_grammar(analysis(), None, tool_choice="none", lazy=False).gbnf


def test_with_tools_the_name_is_still_one_of_theirs() -> None:
    """Tools given: an id that holds none of their names is no call, even where its last word
    would name one without tools."""
    text = section(("functions.lookup:0", ARGS))
    message = analysis().parser(tools=TOOLS).parse(text)
    assert (message["content"], message["tool_calls"]) == (text, [])


def chunkings(text: str, rng: random.Random) -> list[list[str]]:
    """Random cuts, and each marker alone in its chunk (as a tokenizer's special token comes)."""
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, len(text) // 4)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    by_marker = [p for p in re.split("(" + "|".join(re.escape(m) for m in MARKERS) + ")", text) if p]
    return [list(text), pieces, by_marker]


def streamed(parser: Any, chunks: list[str]) -> dict[str, Any]:
    stream = parser.stream()
    for chunk in chunks:
        stream.feed(chunk)
    stream.finish()
    return without_generated_ids(stream.message())


@pytest.mark.parametrize("choice", ["required", "auto"])
def test_what_the_grammar_lets_a_model_write_the_parser_reads_back(choice: str) -> None:
    """Sampled from the GBNF: the ids hold one of the tools' names, which the parser returns
    with the id as written; Lark reads the same message."""
    result = build_grammar(analysis(), TOOLS, tool_choice=choice, lazy=False)
    validate_gbnf(result.gbnf)
    grammar, rng = Gbnf(result.gbnf), random.Random(choice)
    parser = analysis().parser(tools=TOOLS, tool_choice=choice)
    names = {t["function"]["name"] for t in TOOLS}
    for _ in range(40):
        text = grammar.sample(rng)
        message = parser.parse(text)
        written = re.findall(r"<<call id=\s*(\S+?)>>", text)
        assert [i for i, _, _ in calls(message)] == written, text
        for call_id, name, _ in calls(message):
            assert name in names and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", call_id, re.ASCII), (text, message)
            longer = [n for n in names if len(n) > len(name) and re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])",
                                                                              call_id, re.ASCII)]
            assert not longer, (text, message)
        assert_lark_agrees(text, message, choice)


@pytest.mark.parametrize("case", sorted(c for c in CASES if CASES[c][1] is None or CASES[c][1] == "Let me look."))
def test_lark_reads_what_the_parser_reads(case: str) -> None:
    """For the outputs in the language (the parser's recovery from a call that names no tool is
    its own)."""
    text = CASES[case][0]
    assert_lark_agrees(text, analysis().parser(tools=TOOLS).parse(text))


def assert_lark_agrees(text: str, message: dict[str, Any], choice: str = "auto") -> None:
    read = parse_with_lark(analysis(), text, TOOLS, tool_choice=choice)
    assert comparable(read) == comparable(message), text


def comparable(message: dict[str, Any]) -> tuple[Any, ...]:
    return ((message["content"] or "").strip() or None,
            [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]])


# corpus templates that write the id for the name, with special tokens for markers
ID_NAMING_TEMPLATES = ("hfjs-e2e__moonshotai-Kimi-K2-Thinking.jinja", "xinference__Kimi-K2.5.jinja")


def _two_calls_written(source: str) -> tuple[autoparser.Analysis, Any, str]:
    """An analysis, a parser of it and an output of two calls that parser reads: the fixture's
    (with tools, and without), or a corpus template's own round trip."""
    if source.startswith("fixture"):
        text = "Let me look. " + section(("call.get_weather.0", ARGS), ("fn/search:1", QUERY))
        return analysis(), analysis().parser(tools=TOOLS if source == "fixture" else None), text
    directory = corpora.shared_corpus_dir()
    if directory is None or not (directory / "templates" / source).is_file():
        pytest.skip(f"{source} not in the shared corpus")
    found = autoparser.analyze((directory / "templates" / source).read_text(encoding="utf-8"),
                               bos_token=DS_BOS, eos_token=DS_EOS)
    assert found.tools.name_in_id
    result = run_case(found, "two_calls", probe_messages()["two_calls"])
    assert result.status == "pass", result
    return found, found.parser(tools=PROBE_TOOLS, thinking=result.thinking), result.output


@pytest.mark.parametrize("source", ["fixture", "fixture without tools", *ID_NAMING_TEMPLATES])
def test_two_calls_cut_anywhere_lose_no_character(source: str) -> None:
    """Cut at every character, the second call cut off in its id (its name not read yet, or read
    and the id going on) is text from where the call began: `call.` and `call.s` were lost where
    a word of the id and the boundary after it had been read whole. Nothing written after the
    calls returned last changed is lost (markers aside; `unplaced`), and random chunks stream as
    whole."""
    written_by, parser, text = _two_calls_written(source)
    patterns = marker_patterns(written_by)
    rng = random.Random(source)

    def parse(written: str) -> dict[str, Any]:
        whole = parser.parse(written)
        cuts = sorted(rng.sample(range(1, len(written)), min(len(written) - 1, 6))) if len(written) > 1 else []
        chunks = [written[a:b] for a, b in zip([0, *cuts], [*cuts, len(written)], strict=True)]
        assert streamed(parser, chunks) == without_generated_ids(whole), chunks
        return whole

    losses = losses_at_every_cut(text, parse, patterns)
    assert not losses, losses[0]


@pytest.mark.parametrize("source", ID_NAMING_TEMPLATES)
@pytest.mark.parametrize("written", ["", "call", "call.", "call.s", "call.search_docs.1"])
def test_a_call_cut_off_in_its_id_is_text_from_where_it_began(source: str, written: str) -> None:
    """After a whole call, the next one cut off in its id: the call is text from its start marker,
    as a call cut in its name is in every tagged format (a word of the id and the boundary after
    it read whole dropped what came before them); streamed as whole."""
    _, parser, text = _two_calls_written(source)
    second = text.index("<|tool_call_begin|>call.search_docs")
    output = text[:second] + "<|tool_call_begin|>" + written
    message = parser.parse(output)
    assert message["content"] == "<|tool_call_begin|>" + written
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    for cut in range(second - 20, len(output)):
        assert streamed(parser, [output[:cut], output[cut:]]) == without_generated_ids(message), cut
