"""Structures that vLLM's and SGLang's tool-parser tests write and a template's analysis states,
each on a fixture template of its own (`fixtures/templates/`): the builder states the structure in
the reading language, and every reader reads it alike.

Each output is read whole, then streamed one character at a time and cut in two at every place
(the stream gives the whole parse's message); text that is no call is kept, and prose after the
calls is held back no longer than the bound.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from analyses import whole_checked_by_streams
from test_analyze_fixtures import analyze_fixture

from autoparser.language.reading import Parser

HOLD_BOUND = 64  # characters of prose a stream may hold back (CONTRACT section 5)


def most_held(parser: Parser, text: str, start: int) -> int:
    """The most characters of `text[start:]` fed and not yet emitted as content, fed a character
    at a time (what comes before `start` is the calls)."""
    stream = parser.stream()
    emitted = most = 0
    for at, char in enumerate(text):
        for delta in stream.feed(char):
            if at >= start:
                emitted += len(delta.get("content") or "")
        if at >= start:
            most = max(most, at + 1 - start - emitted)
    stream.finish()
    return most


def calls(message: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]


PROSE = " and then the answer goes on for a while, longer than the bound the stream may hold."

# -- the section's tag, whitespace, then its list's bracket -------------------------------------------

TAG_LIST = "tag_list_calls.jinja"  # <%calls%>[name(key="text"), ...]<%/calls%>


@pytest.mark.parametrize("space", ["", " ", "\n", "  \n"])
def test_whitespace_between_the_sections_tag_and_its_lists_bracket(space: str) -> None:
    """The section's opener is a tag and the bracket of its list (`<%calls%>[`): whitespace a model
    writes between them is the list's, as its syntax allows (vLLM's LFM2 test)."""
    parser = analyze_fixture(TAG_LIST).parser()
    text = f'Checking. <%calls%>{space}[get_weather(city="Oslo"), get_time()]<%/calls%>'
    message = whole_checked_by_streams(parser, text)
    assert calls(message) == [("get_weather", {"city": "Oslo"}), ("get_time", {})]
    assert message["content"] == "Checking."
    json_listed = f'<%calls%>{space}[{{"name": "get_time", "arguments": {{}}}}]<%/calls%>'
    assert calls(whole_checked_by_streams(parser, json_listed)) == [("get_time", {})]
    numbers = f"Checking. <%calls%>{space}[get_weather(days=3), get_time()]<%/calls%>"
    assert most_held(parser, numbers + PROSE, len(numbers)) <= HOLD_BOUND


@pytest.mark.parametrize("text", ["Use <%calls%> then a list.", "Use <%calls%>", "Use <%calls%>  \n",
                                  "<%calls%> x [get_time()]<%/calls%>"])
def test_the_sections_tag_before_no_bracket_stays_content(text: str) -> None:
    message = whole_checked_by_streams(analyze_fixture(TAG_LIST).parser(), text)
    assert message["tool_calls"] == [] and message["content"] == text.strip()
