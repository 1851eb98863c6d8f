"""A tagged argument whose schema is a union with a string alternative (`oneOf [string, object]`):
raw text in the template's own nested syntax is that string, as it is written; a JSON value (a
quoted string included) is read as JSON, which is how the grammar writes a union's value, so
grammar and parser agree.
An argument whose union has no string alternative still reads the nested syntax as an object."""

from __future__ import annotations

import json
import random

import corpora
import pytest
from gbnf_sampler import Gbnf

import autoparser
from autoparser.generators.gbnf import build_grammar
from autoparser.language.request import has_string_alternative

OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}}
UNION_TOOL = {"type": "function", "function": {"name": "union_args", "parameters": {
    "type": "object", "properties": {
        "label": {"oneOf": [{"type": "string"}, OBJECT]},
        "limit": {"oneOf": [{"type": "integer"}, {"type": "object", "properties": {"max": {"type": "integer"}}}]},
    }}}}


@pytest.mark.parametrize("schema, expected", [
    ({"oneOf": [{"type": "string"}, OBJECT]}, True),
    ({"anyOf": [{"enum": ["a", "b"]}, {"type": "array"}]}, True),
    ({"type": ["string", "object"]}, True),
    ({"type": ["string", "null"]}, False),  # a nullable string is a string, no union
    ({"type": "string"}, False),
    ({"oneOf": [{"type": "integer"}, OBJECT]}, False),
    (None, False),
])
def test_a_union_with_a_string_alternative(schema: object, expected: bool) -> None:
    assert has_string_alternative(schema) is expected


@pytest.fixture(scope="module")
def nested_tags() -> autoparser.Analysis:
    """A template whose tagged values write objects as nested tags (MiniMax-M3's)."""
    path = next((p for p in corpora.llamacpp_templates() if p.stem == "MiniMax-M3"), None)
    if path is None:
        pytest.skip("the llama.cpp template corpus is not available")
    return autoparser.analyze(path.read_text(encoding="utf-8"))


def _call(analysis: autoparser.Analysis, key: str, value: str) -> dict:
    sep = "]<]minimax[>["
    text = (f'{sep}<tool_call>\n{sep}<invoke name="union_args">{sep}<{key}>{value}{sep}</{key}>'
            f'{sep}</invoke>\n{sep}</tool_call>')
    message = analysis.parser(tools=[UNION_TOOL]).parse(text)
    (call,) = message["tool_calls"]
    return json.loads(call["function"]["arguments"])


def test_nested_syntax_under_a_string_alternative_is_the_string(nested_tags: autoparser.Analysis) -> None:
    value = "]<]minimax[>[<text>hi]<]minimax[>[</text>"
    assert _call(nested_tags, "label", value) == {"label": value}
    assert _call(nested_tags, "label", "hi") == {"label": "hi"}
    assert _call(nested_tags, "label", '{"text": "hi"}') == {"label": {"text": "hi"}}  # JSON stays JSON
    assert _call(nested_tags, "label", '"hi"') == {"label": "hi"}  # a JSON string, as the grammar writes it


def test_nested_syntax_without_a_string_alternative_is_an_object(nested_tags: autoparser.Analysis) -> None:
    assert _call(nested_tags, "limit", "]<]minimax[>[<max>10]<]minimax[>[</max>") == {"limit": {"max": 10}}
    assert _call(nested_tags, "limit", "5") == {"limit": 5}


def test_the_grammar_writes_what_the_parser_reads_back(nested_tags: autoparser.Analysis) -> None:
    grammar = Gbnf(build_grammar(nested_tags, [UNION_TOOL], tool_choice="required", lazy=False,
                                 parallel_tool_calls=False).gbnf)
    rng = random.Random(3)
    for _ in range(12):
        text = grammar.sample(rng)
        (call,) = nested_tags.parser(tools=[UNION_TOOL], tool_choice="required",
                                      parallel_tool_calls=False).parse(text)["tool_calls"]
        arguments = json.loads(call["function"]["arguments"])
        for key, value in arguments.items():
            written = text.split(f"<{key}>", 1)[1].split(f"]<]minimax[>[</{key}>", 1)[0]
            assert value == json.loads(written), text
