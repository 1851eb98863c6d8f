"""Request bodies of the wrong shape are 400s that name the field, never 500s: the shapes a
fuzzer found (a reasoning item whose content is a number, `text.format` as a string, a content
part whose type is an object, a tool schema whose `required` or `type` holds objects)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from autoparser.server.errors import APIError
from autoparser.server.preamble import example_arguments
from autoparser.server.protocol import parse_request, template_messages
from autoparser.server.responses import parse_responses_request

BASE = {"model": "tiny", "max_output_tokens": 2}

MALFORMED_RESPONSES = {
    "reasoning content is a number": ({"input": [{"type": "reasoning", "content": 5}]}, "input[0].content"),
    "reasoning summary is a string": ({"input": [{"type": "reasoning", "summary": "thought"}]}, "input[0].summary"),
    "reasoning part text is a number": ({"input": [{"type": "reasoning", "summary": [{"text": 5}]}]},
                                        "input[0].summary[0]"),
    "reasoning part is a list": ({"input": [{"type": "reasoning", "content": [[]]}]}, "input[0].content[0]"),
    "text.format is a string": ({"input": "hi", "text": {"format": "json_object"}}, "text.format"),
    "text.format is a list": ({"input": "hi", "text": {"format": [{"type": "json_object"}]}}, "text.format"),
    "refusal is a number": ({"input": [{"role": "user", "content": [{"type": "refusal", "refusal": 5}]}]},
                            "input[0].content[0].refusal"),
    "content part type is an object": ({"input": [{"role": "user", "content": [{"type": {}, "text": "x"}]}]},
                                       "input[0].content[0]"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_RESPONSES))
def test_malformed_responses_bodies_are_400s_naming_the_field(name: str) -> None:
    fields, param = MALFORMED_RESPONSES[name]
    with pytest.raises(APIError) as info:
        parse_responses_request(json.dumps({**BASE, **fields}).encode())
    assert info.value.status == 400 and info.value.param == param, info.value.body()


def test_well_formed_reasoning_and_format_still_translate() -> None:
    _request, chat = parse_responses_request(json.dumps({
        **BASE, "text": {"format": {"type": "json_object"}},
        "input": [{"role": "user", "content": "hi"},
                  {"type": "reasoning", "summary": [{"type": "summary_text", "text": "a"}, {"text": "b"}]},
                  {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]}).encode())
    assert chat.response_format is not None
    assert chat.messages[1].reasoning_content == "a\nb"


def test_a_chat_content_part_whose_type_is_an_object_is_a_400() -> None:
    request = parse_request({"model": "tiny", "messages": [{"role": "user", "content": [{"type": {"a": []},
                                                                                           "text": "x"}]}]})
    with pytest.raises(APIError) as info:
        template_messages(request.messages)
    assert info.value.status == 400 and info.value.param == "messages[0].content[0]"


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": [{"a": []}]},
    {"type": "object", "properties": {"a": {"type": {"nested": True}}}, "required": ["a"]},
    {"type": "object", "properties": {"a": {"type": [{"x": 1}]}}, "required": ["a"]},
    {"type": "object", "properties": ["a"], "required": "a"},
    [],
])
def test_the_preamble_example_survives_odd_schemas(schema: Any) -> None:
    example = example_arguments(schema)
    assert isinstance(example, dict) and json.dumps(example)


@pytest.mark.parametrize("fmt", [
    {"type": "json_object"},
    {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}},
])
def test_the_response_format_reaches_the_parser_which_unwraps_a_fenced_answer(fmt: dict[str, Any]) -> None:
    from analyses import hermes

    from autoparser.server.protocol import response_format

    request = parse_request({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "response_format": fmt})
    asked = response_format(request)
    assert asked is not None and asked["type"] == fmt["type"]
    parser = hermes().parser(response_format=asked)
    assert parser.parse('```json\n{"a": 1}\n```')["content"] == '{"a": 1}'
    free = parse_request({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
    assert response_format(free) is None
