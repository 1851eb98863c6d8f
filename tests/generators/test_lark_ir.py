"""The output language written as Lark (`generators.lark_ir`): Lark builds a parser from the text,
and `parse_with_lark` reads a request's output by the language's capture roles.

The agreement property over both corpora is `test_language_agreement.py`; these are the cases a
user would try first, and the ones the older grammar read differently from the runtime.
"""

from __future__ import annotations

import random

import analyses
import pytest
from gbnf_sampler import Gbnf
from lark import Lark
from lark.exceptions import UnexpectedInput
from lark_cases import TOOLS, analysis_of, comparable

from autoparser.generators.gbnf import write_gbnf
from autoparser.generators.lark import parse_with_lark
from autoparser.generators.lark_ir import read_message, write_lark
from autoparser.language.build import Request, build_language

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"]}}}


@pytest.mark.parametrize("family", sorted(analyses.FAMILIES))
@pytest.mark.parametrize("choice", ["auto", "required", "none"])
def test_the_lark_text_of_a_language_builds_a_parser(family: str, choice: str) -> None:
    analysis = getattr(analyses, family)()
    language = build_language(analysis, Request(tools=(WEATHER,), tool_choice=choice, lazy=False))
    grammar = write_lark(language, tuple(analysis.stop)).grammar
    Lark(grammar, parser="earley", lexer="dynamic_complete")  # raises on a grammar Lark cannot read


def test_a_bare_json_call_after_content_is_a_call_as_the_runtime_reads_it() -> None:
    analysis = analyses.llama31()
    text = 'Let me check. {"name": "get_weather", "parameters": {"city": "Paris"}}'
    runtime = comparable(analysis.parser(tools=[WEATHER]).parse(text))
    lark = comparable(parse_with_lark(analysis, text, tools=[WEATHER]))
    assert lark == runtime
    assert lark["tool_calls"] == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("text", [
    "Braces {x}, {{ and {} in code: if (a) { b(); }",
    '{{ {"a": 1} then {"name": "get_weather", "parameters": {"city": "Paris"}} and { more',
    '{ "name": "get_weather", "parameters": {"city": "Paris"}}{',
])
def test_braces_that_open_no_bare_json_call_are_text_as_the_runtime_reads_them(text: str) -> None:
    analysis = analyses.llama31()
    lark = comparable(parse_with_lark(analysis, text, tools=[WEATHER]))
    assert lark == comparable(analysis.parser(tools=[WEATHER]).parse(text))


# the families whose reading language reads alike in both; in the others, random sentences of
# it (markers and whitespace in hostile places) still differ, mostly in whitespace around markers
READ_ALIKE = ["llama31", "bare_json_array", "hermes", "qwen3_thinking", "deepseek_v31", "deepseek_v3_0324",
              "deepseek_r1", "kimi_k2", "mistral_compact"]


@pytest.mark.parametrize("family", READ_ALIKE)
def test_sentences_of_the_reading_grammar_read_alike_in_lark_and_the_runtime(family: str) -> None:
    """The language the parser reads (wider than the one generation is held to: text between
    calls, separators, a bracket that opens no bare JSON call), written as GBNF: random
    sentences of it read to one message by Lark and by the runtime."""
    analysis = analyses.FAMILIES[family]()
    language = build_language(analysis, Request(tools=(WEATHER,), reading=True, lazy=False))
    grammar = Gbnf(write_gbnf(language).gbnf)
    rng = random.Random(7)
    for _ in range(40):
        text = grammar.sample(rng)
        runtime = comparable(analysis.parser(tools=[WEATHER]).parse(text))
        assert comparable(parse_with_lark(analysis, text, tools=[WEATHER])) == runtime, text


@pytest.mark.parametrize("family", ["deepseek_v31", "qwen3_thinking", "deepseek_r1"])
@pytest.mark.parametrize("thinking", [None, True])
@pytest.mark.parametrize("text", ["<think>Plan.</think>Answer.</think>", "<think></think>Answer.</think>",
                                  "<think>Plan.</think>Use </think> here."])
def test_an_end_marker_written_again_last_reads_alike_in_lark_and_the_runtime(
        family: str, thinking: bool | None, text: str) -> None:
    """Markup last in the output, text before the end (Rule kind MARKUP), in both readers."""
    analysis = analyses.FAMILIES[family]()
    runtime = comparable(analysis.parser(tools=[WEATHER], thinking=thinking).parse(text))
    assert comparable(parse_with_lark(analysis, text, tools=[WEATHER], thinking=thinking)) == runtime


def test_call_syntax_with_raw_values_splits_at_a_comma_before_a_key() -> None:
    analysis = analyses.llama32_pythonic()
    text = "[get_weather(city=Paris, France, days=3)]<|eot_id|>"
    lark = comparable(parse_with_lark(analysis, text, tools=[WEATHER]))
    assert lark == comparable(analysis.parser(tools=[WEATHER]).parse(text))
    assert lark["tool_calls"] == [("get_weather", {"city": "Paris, France", "days": 3})]


def test_reasoning_content_and_parallel_calls_by_capture_role() -> None:
    a = analysis_of("deepseek_v3_1")
    call = '<｜tool▁call▁begin｜>search<｜tool▁sep｜>{"query": "a"}<｜tool▁call▁end｜>'
    text = f"plan</think>Checking.<｜tool▁calls▁begin｜>{call}{call}<｜tool▁calls▁end｜>"
    m = parse_with_lark(a, text, tools=TOOLS, thinking=True)
    assert (m["reasoning_content"], m["content"]) == ("plan", "Checking.")
    assert [c["function"]["name"] for c in m["tool_calls"]] == ["search", "search"]


def test_text_outside_the_language_is_rejected() -> None:
    analysis = analyses.llama31()
    written = write_lark(build_language(analysis, Request(tools=(WEATHER,), tool_choice="required",
                                                          lazy=False)))
    with pytest.raises(UnexpectedInput):
        read_message(written, "No call.")


def test_the_reading_language_holds_what_the_parser_reads_beyond_generation() -> None:
    """`Request(reading=True)`: any tool name when no tools are given, text after the calls, and a
    reasoning block with thinking off; the generation language holds none of them."""
    analysis = analysis_of("deepseek_v3_1")
    call = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>lookup<｜tool▁sep｜>{"q": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    text = f"<think>plan</think>Let me check.{call} Done."
    reading = write_lark(build_language(analysis, Request(thinking=False, lazy=False, reading=True)),
                         tuple(analysis.stop))
    message = read_message(reading, text)
    assert comparable(message) == comparable(analysis.parser(thinking=False).parse(text))
    assert comparable(message) == {"reasoning_content": "plan", "content": "Let me check. Done.",
                                   "tool_calls": [("lookup", {"q": 1})]}
    generation = build_language(analysis, Request(tools=tuple(TOOLS), thinking=False, lazy=False))
    with pytest.raises(UnexpectedInput):
        read_message(write_lark(generation, tuple(analysis.stop)), text)

