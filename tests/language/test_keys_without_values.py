"""A key written with no value after it, where a key is an element of its own and the value's
element follows it (`<arg_key>city</arg_key>` then `</tool_call>` or the next key, GLM-style): the
key adds nothing to the arguments and the call goes on, as SGLang's Poolside tests expect
(`test_arg_key_without_value_emits_empty_call`, `test_orphan_key_followed_by_new_key_uses_new_key`).
Generation still writes every key with its value."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import analyses
import corpora
import pytest
from analyses import WEATHER_TOOLS, streamed_in_two, whole_checked_by_streams
from unplaced import losses_at_every_cut, marker_patterns

import autoparser
from autoparser.generators.lark import parse_with_lark
from autoparser.language import policy
from autoparser.language.build import build_language
from autoparser.language.request import Request

PROSE = " and then the answer goes on for a while, longer than the bound the stream may hold."


def _analysis(name: str) -> Any:
    if name in analyses.FAMILIES:
        return analyses.FAMILIES[name]()
    path = next((p for p in corpora.llamacpp_templates() if p.name == name), None)
    if path is None:
        pytest.skip(f"{name} is not in the corpora")
    return autoparser.load(str(path))


FORMATS = ["glm45", "glm4_tool_only", "poolside-Laguna-XS.2.jinja"]


def _call(analysis: Any, body: str) -> str:
    """A get_weather call whose arguments are `body` (`{key}` / `{value}` parts in the format's
    own markers), opened as the format opens it where the prompt did not."""
    t = analysis.tools
    opener = "" if t.opened_by_prompt else t.call_start
    return opener + "get_weather" + t.name_end + body + t.call_end


def _key(analysis: Any, key: str) -> str:
    t = analysis.tools
    return t.arg_start + key + t.arg_key_end.split(">")[0] + ">"


def _member(analysis: Any, key: str, value: str) -> str:
    t = analysis.tools
    return t.arg_start + key + t.arg_key_end + value + t.arg_end


def _calls(message: dict[str, Any]) -> list[tuple[str, Any, bool]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]), bool(c.get("incomplete")))
            for c in message["tool_calls"]]


def _outputs(analysis: Any) -> list[tuple[str, dict[str, Any]]]:
    """Outputs with keys that have no value, and the arguments each call is read with."""
    alone, city, days = _key(analysis, "city"), _member(analysis, "city", "Oslo"), _member(analysis, "days", "3")
    return [
        (_call(analysis, alone), {}),
        (_call(analysis, alone + days), {"days": 3}),
        (_call(analysis, alone.strip() + days.strip()), {"days": 3}),
        (_call(analysis, city + _key(analysis, "days")), {"city": "Oslo"}),
        (_call(analysis, _key(analysis, "unit") + city + alone), {"city": "Oslo"}),
        (_call(analysis, city + alone), {"city": "Oslo"}),  # a key again with no value keeps the value
    ]


@pytest.mark.parametrize("name", FORMATS)
def test_a_key_with_no_value_adds_nothing(name: str) -> None:
    """Whole, one character at a time and split at every place alike; the call is complete."""
    analysis = _analysis(name)
    parser = analysis.parser(tools=WEATHER_TOOLS)
    for text, arguments in _outputs(analysis):
        message = whole_checked_by_streams(parser, text)
        assert _calls(message) == [("get_weather", arguments, False)], (text, message)
        assert not message["content"], message


@pytest.mark.parametrize("name", FORMATS)
def test_text_after_such_a_call_streams_within_the_bound(name: str) -> None:
    analysis = _analysis(name)
    parser = analysis.parser(tools=WEATHER_TOOLS)
    for call, arguments in _outputs(analysis):
        text = call + PROSE
        message = whole_checked_by_streams(parser, text)
        assert _calls(message) == [("get_weather", arguments, False)]
        assert message["content"] == PROSE.strip()
        stream = parser.stream()
        emitted = most = 0
        for at, char in enumerate(text):
            for delta in stream.feed(char):
                emitted += len(delta.get("content") or "")
            if at >= len(call):
                most = max(most, at + 1 - len(call) - emitted)
        stream.finish()
        assert most <= policy.HOLD_BOUND, (text, most)


@pytest.mark.parametrize("name", FORMATS)
def test_no_prefix_of_such_a_call_loses_text(name: str) -> None:
    analysis = _analysis(name)
    parser = analysis.parser(tools=WEATHER_TOOLS)

    def parse(written: str) -> dict:
        whole = parser.parse(written)
        assert analyses.without_generated_ids(streamed_in_two(parser, written, len(written) // 2)) == \
            analyses.without_generated_ids(whole), written
        return whole

    # a key closed with something other than its value after it is markup the call consumed
    t = analysis.tools
    closer, opener = t.arg_key_end.split(">")[0].strip() + ">", t.arg_key_end.split(">", 1)[1].strip()
    alone = rf"{re.escape(t.arg_start.strip())}[^<>\s]+{re.escape(closer)}(?!\s*{re.escape(opener)})(?=\s*\S)"
    for text, _ in _outputs(analysis):
        losses = losses_at_every_cut(text, parse, [alone, *marker_patterns(analysis)], t.array)
        assert not losses, losses[0]
    for cut in (_call(analysis, _key(analysis, "city"))[:-len(t.call_end)], ):
        for tail in ("", "\n", "\n<", "\n<arg_v"):  # its value may still come: the key is cut off, no call
            assert parser.parse(cut + tail)["content"] == (cut + tail).strip()


@pytest.mark.parametrize("name", FORMATS)
def test_generation_writes_every_key_with_its_value(name: str) -> None:
    """The key alone is read, not written: the grammar generation uses has no member without a
    value; the reading language, which Lark reads too, has it, and Lark reads it as the parser does."""
    analysis = _analysis(name)
    request = Request(tools=tuple(WEATHER_TOOLS))
    assert "key-alone" not in str(build_language(analysis, request))
    assert "key-alone" not in analysis.gbnf(tools=WEATHER_TOOLS)
    assert "key-alone" in str(build_language(analysis, replace(request, reading=True)))
    for text, arguments in _outputs(analysis):
        message = parse_with_lark(analysis, text, tools=WEATHER_TOOLS)
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] \
            == [("get_weather", arguments)], text
