"""The builder reads the typed analysis: its fields and defaults are the analyzer's, its dict form
is read back with `from_dict`, and the call index is the one the analysis confirmed."""

from __future__ import annotations

import dataclasses
import json

import analyses
import pytest
from gbnf_fixtures import ANALYSES, TOOLS

from autoparser.analysis import Analysis
from autoparser.analysis_data import AnalysisData
from autoparser.language import ir
from autoparser.language.build import Request, build_language, reasoning_cut
from autoparser.language.reading import Parser
from autoparser.tool_calls import FLAT_DEFAULTS, CallName, TagCalls


def _same(one: ir.Language, other: ir.Language) -> bool:
    return ir.to_json(one) == ir.to_json(other)


REQUESTS = (Request(tools=tuple(TOOLS)), Request(tools=tuple(TOOLS), tool_choice="required", thinking=False),
            Request(tools=tuple(TOOLS), reading=True, lazy=False), Request(reading=True, lazy=False, thinking=True))


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_an_analysis_and_its_dict_form_read_back_build_one_language(name: str) -> None:
    analysis = ANALYSES[name]()
    again = AnalysisData.from_dict(json.loads(analysis.to_json()))
    for request in REQUESTS:
        assert _same(build_language(again, request), build_language(analysis, request))
        assert reasoning_cut(again, request) == reasoning_cut(analysis, request)


def test_null_and_missing_parts_of_the_dict_form_take_the_analyzer_defaults() -> None:
    data = analyses.hermes().to_dict()
    nulled = {**data, "reasoning": None, "content": None, "messages": None, "triggers": None,
              "tools": {**data["tools"], **{k: None for k, v in FLAT_DEFAULTS.items() if v == ""}}}
    read = Analysis.from_dict(nulled)
    assert read.reasoning == Analysis().reasoning and read.content == Analysis().content
    assert read.messages == Analysis().messages and read.triggers == []
    assert all(getattr(read.tools, k) == "" for k, v in FLAT_DEFAULTS.items() if v == "")
    blank = Analysis.from_dict({**data, "reasoning": {}, "content": {}, "messages": {}, "triggers": [],
                                "tools": {**data["tools"], **{k: "" for k, v in FLAT_DEFAULTS.items() if v == ""}}})
    for request in REQUESTS:
        assert _same(build_language(read, request), build_language(blank, request))


def test_the_parser_reads_a_dict_form_as_the_analysis() -> None:
    analysis = analyses.kimi_k2_thinking()
    output = ("thinking</think>Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
              '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>')
    tools = analyses.WEATHER_TOOLS
    whole = Parser(analysis, tools=tools, thinking=True).parse(output)
    assert Parser(analysis.to_dict(), tools=tools, thinking=True).parse(output) == whole
    assert whole["tool_calls"][0]["function"]["name"] == "get_weather"


def _without_call_index(analysis: Analysis) -> Analysis:
    calls = analysis.tools.calls
    assert isinstance(calls, TagCalls) and calls.name.index is not None
    name = CallName(calls.name.start, calls.name.end)
    return dataclasses.replace(analysis, tools=dataclasses.replace(
        analysis.tools, calls=dataclasses.replace(calls, name=name)))


def test_the_call_index_is_the_one_the_analysis_confirmed() -> None:
    """Kimi-K2 numbers its calls (`functions.NAME:0`): with the index the analysis confirmed, any
    number is read there; without it, the first call's `:0` is part of the marker, as written."""
    indexed = analyses.kimi_k2()
    plain = _without_call_index(indexed)
    call = ('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:{n}<|tool_call_argument_begin|>'
            '{{"city": "Paris"}}<|tool_call_end|><|tool_calls_section_end|>')
    tools = analyses.WEATHER_TOOLS
    seventh = Parser(indexed, tools=tools).parse(call.format(n=7))
    assert [c["function"]["name"] for c in seventh["tool_calls"]] == ["get_weather"]
    assert Parser(plain, tools=tools).parse(call.format(n=7))["tool_calls"] == []
    assert [c["function"]["name"] for c in Parser(plain, tools=tools).parse(call.format(n=0))["tool_calls"]] \
        == ["get_weather"]
    generation = Request(tools=tuple(tools), tool_choice="required")
    assert "0-9" in str(build_language(indexed, generation))
    assert "0-9" not in str(build_language(plain, generation))


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_the_builder_flattens_the_call_layout_once(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The builder reads the markers by their serialized names through one flat view, not through
    `ToolsAnalysis.__getattr__`, which builds the flat form again on every read."""
    from autoparser.tool_calls import FLAT_DEFAULTS, ToolsAnalysis

    tools = ANALYSES[name]().tools
    view = tools.flat_view()
    assert all(getattr(view, key) == getattr(tools, key) for key in FLAT_DEFAULTS)
    assert view.calls is tools.calls and view.markers is tools.markers
    flattened = []
    to_dict = ToolsAnalysis.to_dict
    monkeypatch.setattr(ToolsAnalysis, "to_dict", lambda self: flattened.append(self) or to_dict(self))
    build_language(ANALYSES[name](), Request(tools=tuple(TOOLS)))
    assert len(flattened) == 1
