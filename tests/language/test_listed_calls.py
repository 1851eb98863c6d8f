"""JSON calls that a template writes each after an opener of its own, which a model writes once,
followed by its calls as the elements of one JSON array (`<|fn|> [{…}, {…}]`); and calls that a
template writes in its own syntax as the elements of a list its section's markers bracket
(`<|tool_call_start|>[f(a=1)]<|tool_call_end|>`), which a model writes as JSON call objects.

The array is read as the calls, closed as one call is; a stream gives the message a whole read
gives; an array that holds no call stays content, its opener included.
"""

from __future__ import annotations

import json
from typing import Any

import analyses
import pytest
from analyses import WEATHER_TOOLS, streamed_in_random_chunks, without_generated_ids
from test_analyze_fixtures import analyze_fixture

from autoparser.analysis import Analysis, ToolsAnalysis
from autoparser.language.reading import Parser


def opener_only() -> Analysis:
    """Each call written as `<|fn|> {json}`, no closing marker, one per line."""
    return Analysis(
        generation_prompt="<|assistant|>",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="json", call_start="<|fn|> ",
                                           call_separator="\n", parallel=True)),
        stop=["<|end|>"], triggers=["<|fn|>"])


FORMATS = {"opener-only": opener_only, "hermes": analyses.hermes}


def read(parser: Parser, text: str) -> dict[str, Any]:
    message = parser.parse(text)
    for seed in range(5):
        assert without_generated_ids(streamed_in_random_chunks(parser, text, seed)) == \
            without_generated_ids(message), seed
    stream = parser.stream()
    for char in text:
        stream.feed(char)
    stream.finish()
    assert without_generated_ids(stream.message()) == without_generated_ids(message)
    return message


def calls(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]


def listed(family: str, body: str) -> str:
    return f"<|fn|> {body}" if family == "opener-only" else f"<tool_call>\n{body}\n</tool_call>"


TWO = '[{"name": "get_weather", "arguments": {"city": "Oslo"}},\n {"name": "get_time", "arguments": {}}]'


@pytest.mark.parametrize("family", sorted(FORMATS))
@pytest.mark.parametrize("with_tools", [False, True])
def test_calls_listed_after_one_opener_are_read_as_calls(family: str, with_tools: bool) -> None:
    tools = [*WEATHER_TOOLS, {"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
    parser = FORMATS[family]().parser(**({"tools": tools} if with_tools else {}))
    message = read(parser, listed(family, TWO))
    assert calls(message) == [("get_weather", {"city": "Oslo"}), ("get_time", {})]
    assert message["content"] is None


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_one_listed_call_with_text_before_it(family: str) -> None:
    text = "Checking.\n" + listed(family, '[ {"name": "lookup", "arguments": {"q": "a, b"}} ]')
    message = read(FORMATS[family]().parser(), text)
    assert calls(message) == [("lookup", {"q": "a, b"})]
    assert message["content"] == "Checking."


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_a_list_that_holds_no_call_stays_content(family: str) -> None:
    text = listed(family, "[1, 2, 3]")
    message = read(FORMATS[family]().parser(), text)
    assert message["tool_calls"] == []
    assert message["content"] == text.strip()


def test_the_calls_written_one_per_opener_are_still_read() -> None:
    text = '<|fn|> {"name": "a", "arguments": {"x": 1}}\n<|fn|> {"name": "b", "arguments": {}}'
    message = read(opener_only().parser(), text)
    assert calls(message) == [("a", {"x": 1}), ("b", {})]


def test_a_section_of_calls_is_not_read_as_a_list() -> None:
    """Calls inside a section of their own (the list is the template's, or a section marker
    holds them) are read as the template writes them, never as a list after an opener."""
    text = '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}}]'
    message = read(analyses.mistral_array().parser(), text)
    assert calls(message) == [("get_weather", {"city": "Oslo"})]


# -- a list of calls the template writes in its own syntax, written as JSON call objects -------------

def paren_python_calls() -> Analysis:
    """An invented template: Python calls in a list that `((calls))[` opens and `]((/calls))` closes."""
    return analyze_fixture("paren_python_calls.jinja")


LIST_FORMATS = {"lfm2": (analyses.lfm2_python, "<|tool_call_start|>", "<|tool_call_end|>"),
                "paren": (paren_python_calls, "((calls))", "((/calls))")}


def json_listed(family: str, body: str) -> str:
    _, start, end = LIST_FORMATS[family]
    return f"{start}{body}{end}"


@pytest.mark.parametrize("family", sorted(LIST_FORMATS))
@pytest.mark.parametrize("with_tools", [False, True])
def test_a_section_listing_calls_may_list_json_call_objects(family: str, with_tools: bool) -> None:
    tools = [*WEATHER_TOOLS, {"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
    parser = LIST_FORMATS[family][0]().parser(**({"tools": tools} if with_tools else {}))
    message = read(parser, "Let me check. " + json_listed(family, TWO))
    assert calls(message) == [("get_weather", {"city": "Oslo"}), ("get_time", {})]
    assert message["content"] == "Let me check."


@pytest.mark.parametrize("family", sorted(LIST_FORMATS))
def test_json_call_objects_take_their_arguments_under_either_key(family: str) -> None:
    text = json_listed(family, '[{"name": "get_weather", "parameters": {"city": "Madrid"}}]')
    message = read(LIST_FORMATS[family][0]().parser(tools=WEATHER_TOOLS), text)
    assert calls(message) == [("get_weather", {"city": "Madrid"})]


@pytest.mark.parametrize("family", sorted(LIST_FORMATS))
def test_the_calls_in_the_templates_own_syntax_are_still_read(family: str) -> None:
    message = read(LIST_FORMATS[family][0]().parser(), json_listed(family, '[get_weather(city="Oslo")]'))
    assert calls(message) == [("get_weather", {"city": "Oslo"})]


@pytest.mark.parametrize("family", sorted(LIST_FORMATS))
def test_a_listed_object_that_is_no_call_stays_content(family: str) -> None:
    text = json_listed(family, '[{"city": "Oslo"}]')
    message = read(LIST_FORMATS[family][0]().parser(tools=WEATHER_TOOLS), text)
    assert message["tool_calls"] == [] and message["content"] == text


def test_a_bare_bracket_list_is_not_read_as_json_calls() -> None:
    """A list the template opens with a bracket alone (`[name(...)]`) is punctuation text may hold:
    a JSON array there stays content."""
    text = '[{"name": "get_weather", "arguments": {"city": "Oslo"}}]'
    message = read(analyses.llama32_pythonic().parser(), text)
    assert message["tool_calls"] == [] and message["content"] == text
