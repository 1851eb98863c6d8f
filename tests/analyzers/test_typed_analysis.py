"""The tool-call analysis as typed parts: what the analyzer found on real templates, read without
the serialized form, and the serialized form read back into the same parts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from corpora import llamacpp_templates

import autoparser
from autoparser.tool_calls import (
    CallId,
    CallIndex,
    CallMarkers,
    CallName,
    JsonArguments,
    JsonCalls,
    NestedValues,
    TagCalls,
    TaggedArguments,
    ToolsAnalysis,
)

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"


def _tools(name: str) -> ToolsAnalysis:
    path = next((p for p in llamacpp_templates() if p.name == name), None)
    if path is None:
        pytest.skip(f"{name} not in the llama.cpp corpus")
    return autoparser.analyze(Path(path).read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS).tools


def test_a_call_index_is_kept_only_when_two_calls_count_up() -> None:
    kimi = _tools("moonshotai-Kimi-K2.jinja")
    assert kimi.calls == TagCalls(
        name=CallName(start="functions.", end=":0<|tool_call_argument_begin|>",
                      index=CallIndex(marker=":{index}<|tool_call_argument_begin|>", base=0)),
        arguments=JsonArguments())
    counted_from_one = _tools("Kimi-K3.jinja").calls
    assert isinstance(counted_from_one, TagCalls)
    assert counted_from_one.name.index == CallIndex(marker='" index="{index}"', base=1)
    # a name end with no number that counts the calls has none
    assert _tools("deepseek-ai-DeepSeek-V3.1.jinja").calls.name.index is None


def test_json_calls_in_an_array_with_an_id_field() -> None:
    tools = _tools("mistralai-Mistral-Nemo-Instruct-2407.jinja")
    assert tools.format == "json"
    assert tools.calls == JsonCalls(name_field="name", args_field="arguments", id_field="id", array=True)
    assert tools.markers == CallMarkers(section_start="[TOOL_CALLS]", call_separator=", ")


def test_fenced_json_arguments() -> None:
    tools = _tools("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    assert tools.calls == TagCalls(name=CallName(start="function<｜tool▁sep｜>", end="\n"),
                                   arguments=JsonArguments(start="```json\n", end="\n```"))


@pytest.mark.parametrize(("template", "call_id"), [
    ("Mistral-Small-3.2-24B-Instruct-2506.jinja", CallId(start="[CALL_ID]", end="[ARGS]")),
    ("upstage-Solar-Open-100B.jinja", CallId(end="<|tool_call:name|>", before_name=True)),
])
def test_the_call_id_position(template: str, call_id: CallId) -> None:
    calls = _tools(template).calls
    assert isinstance(calls, TagCalls) and calls.id == call_id


def test_argument_encodings() -> None:
    python = _tools("LFM2.5-8B-A1B.jinja").calls.arguments
    assert python == TaggedArguments(key_end="=", separator=", ", encoding="python")
    keyed = _tools("MiniMax-M3.jinja").calls.arguments
    assert isinstance(keyed, TaggedArguments) and keyed.encoding == "raw_strings"
    assert keyed.end_names_key and keyed.end.endswith("</{key}>")
    assert keyed.nested == NestedValues(style="tags", item="item")
    quoted = _tools("google-gemma-4-31B-it.jinja").calls.arguments
    assert isinstance(quoted, TaggedArguments) and quoted.key_end_before_json == ":"
    assert quoted.nested == NestedValues(style="quoted", quote='<|"|>')


def test_a_prompt_that_opens_the_call() -> None:
    tools = _tools("meetkai-functionary-medium-v3.2.jinja")
    assert tools.opened_by_prompt and tools.calls.name == CallName(start=">>>", end="\n")


def test_the_analysis_is_assembled_not_edited_and_reads_as_its_serialized_form() -> None:
    tools = _tools("moonshotai-Kimi-K2.jinja")
    with pytest.raises(dataclasses.FrozenInstanceError):
        tools.parallel = False  # type: ignore[misc]
    flat = tools.to_dict()
    assert {key: getattr(tools, key) for key in flat} == flat
    assert ToolsAnalysis.from_dict(json.loads(json.dumps(flat))) == tools
