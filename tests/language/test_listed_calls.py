"""JSON calls that a template writes each after an opener of its own, which a model writes once,
followed by its calls as the elements of one JSON array (`<|fn|> [{…}, {…}]`).

The array is read as the calls, closed as one call is; a stream gives the message a whole read
gives; an array that holds no call stays content, its opener included.
"""

from __future__ import annotations

import json
from typing import Any

import analyses
import pytest
from analyses import WEATHER_TOOLS, streamed_in_random_chunks, without_generated_ids

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
