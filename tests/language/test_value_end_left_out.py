"""A value whose end tag the model left out, where each argument is an element whose opening tag
holds its key (`<parameter=city>\\nDallas\\n<parameter=state>`, Qwen3-Coder-style): the value ends
where the next argument's tag begins, or at the call's first closing tag where the call ends in two
(`</function>` before `</tool_call>`), as vLLM's Qwen3-Coder and Step-3.5 tests expect
(`test_extract_tool_calls_missing_closing_parameter_tag`). A value that mentions such a tag alone
keeps it. Generation still writes every end tag."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import analyses
import corpora
import pytest
from analyses import WEATHER_TOOLS, render_output, streamed_in_two, whole_checked_by_streams
from unplaced import losses_at_every_cut, marker_patterns

import autoparser
from autoparser.generators.lark import parse_with_lark
from autoparser.language import policy
from autoparser.language.build import build_language
from autoparser.language.request import Request, core

PROSE = " and then the answer goes on for a while, longer than the bound the stream may hold."
FORMATS = ["qwen3_coder", "Qwen3-Coder.jinja", "StepFun3.5-Flash.jinja"]


def _analysis(name: str) -> Any:
    if name in analyses.FAMILIES:
        return analyses.FAMILIES[name]()
    path = next((p for p in corpora.llamacpp_templates() if p.name == name), None)
    if path is None:
        pytest.skip(f"{name} is not in the corpora")
    return autoparser.load(str(path))


def _calls(message: dict[str, Any]) -> list[tuple[str, Any, bool]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]), bool(c.get("incomplete")))
            for c in message["tool_calls"]]


def _without_end_tag(text: str, analysis: Any, value: str) -> str:
    """`text` with the end tag after `value` left out (the whitespace before the tag kept where the
    format writes a line break after the value, as a model leaving the tag out writes it)."""
    end = analysis.tools.arg_end.rstrip()
    at = text.index(value + end) + len(value)
    return text[:at] + text[at + len(end):]


def _outputs(analysis: Any) -> list[tuple[str, dict[str, Any]]]:
    """Outputs with end tags left out, and the arguments each call is read with."""
    arguments = {"city": "Dallas", "days": 3}
    written = render_output(analysis, None, calls=[("get_weather", arguments)], stop=False)
    first = _without_end_tag(written, analysis, "Dallas")
    outputs = [(first, arguments)]
    t = analysis.tools
    call_end = core(t.call_end)
    if call_end.count("<") > 1:  # the call ends in two tags: the last value's may be left out too
        outputs.append((_without_end_tag(first, analysis, "3"), arguments))
    mentions = {"city": f"Use {core(t.arg_start)} or {call_end.split('>')[0]}> here", "days": 3}
    outputs.append((render_output(analysis, None, calls=[("get_weather", mentions)], stop=False), mentions))
    return outputs


@pytest.mark.parametrize("name", FORMATS)
def test_a_value_ends_where_the_next_argument_begins(name: str) -> None:
    """Whole, one character at a time and split at every place alike; Lark reads it so too."""
    analysis = _analysis(name)
    parser = analysis.parser(tools=WEATHER_TOOLS)
    for text, arguments in _outputs(analysis):
        message = whole_checked_by_streams(parser, text)
        assert _calls(message) == [("get_weather", arguments, False)], (text, message)
        assert not message["content"], message
        lark = parse_with_lark(analysis, text, tools=WEATHER_TOOLS)
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in lark["tool_calls"]] \
            == [("get_weather", arguments)], text


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

    for text, _ in _outputs(analysis):
        losses = losses_at_every_cut(text, parse, marker_patterns(analysis), analysis.tools.array)
        assert not losses, losses[0]


def test_not_where_the_whitespace_before_the_next_argument_would_be_the_value() -> None:
    """MiniMax-M2 writes the line break after a value's end tag (`Dallas</parameter>\n<parameter`):
    with the tag left out, that line break would end the value, so the tag stays required."""
    analysis = _analysis("MiniMax-M2.jinja")
    reading = build_language(analysis, Request(tools=tuple(WEATHER_TOOLS), reading=True))
    assert f"({core(analysis.tools.arg_start)!r} only before" not in str(reading)


@pytest.mark.parametrize("name", FORMATS)
def test_generation_writes_every_end_tag(name: str) -> None:
    """The leniency is the reading language's: the language generation writes ends every value
    with its end tag, and its grammar has no weak stop for the left-out tag."""
    analysis = _analysis(name)
    request = Request(tools=tuple(WEATHER_TOOLS))
    generated, reading = build_language(analysis, request), build_language(analysis, replace(request, reading=True))
    opener = core(analysis.tools.arg_start)
    assert f"({opener!r} only before" not in str(generated)
    assert f"({opener!r} only before" in str(reading)
