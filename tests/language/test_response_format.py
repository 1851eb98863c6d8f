"""An answer asked for as JSON (`response_format`) and written in a code fence: the fence is markup.

The parser is told the request's `response_format`; where it asks for JSON (`json_schema`,
`json_object`), the answer may be that JSON wrapped in ```` ```json ```` (or ```` ``` ````) and a
closing fence, and the content is the JSON. Anything else around the fence keeps the text as
written. The response format's grammar (`json_schema_grammar`) writes the JSON bare; its
sentences read as themselves, bare or fenced, with the parser, streamed, and with Lark.
"""

from __future__ import annotations

import random

import pytest
from analyses import FAMILIES, parse, streamed_in_random_chunks
from gbnf_sampler import Gbnf

from autoparser.generators.gbnf import json_object_grammar, json_schema_grammar
from autoparser.generators.lark import parse_with_lark
from autoparser.language.build import Request, build_language
from autoparser.language.reading import Parser

INVOICE = {"type": "object", "properties": {"amount": {"type": "number"}, "date": {"type": "string"}},
           "required": ["amount", "date"]}
SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "invoice", "schema": INVOICE}}
OBJECT_FORMAT = {"type": "json_object"}
ANSWER = '{"amount": 123.45, "date": "2025-12-03"}'


@pytest.mark.parametrize("fmt", [SCHEMA_FORMAT, OBJECT_FORMAT], ids=["json_schema", "json_object"])
@pytest.mark.parametrize("text", [f"```json\n{ANSWER}\n```", f"```\n{ANSWER}\n```\n", f"  ```json {ANSWER}```",
                                  ANSWER], ids=["json-fence", "bare-fence", "one-line", "no-fence"])
def test_a_fenced_json_answer_is_its_json(fmt: dict, text: str) -> None:
    for family in ("hermes", "llama31", "qwen3", "mistral_array"):
        message = parse(FAMILIES[family](), text, response_format=fmt)
        assert message["content"] == ANSWER, family
        assert message["tool_calls"] == []


def test_after_reasoning_the_fenced_answer_is_its_json() -> None:
    text = f"<think>the invoice</think>```json\n{ANSWER}\n```"
    message = parse(FAMILIES["qwen3"](), text, response_format=SCHEMA_FORMAT)
    assert (message["reasoning_content"], message["content"]) == ("the invoice", ANSWER)


@pytest.mark.parametrize("text", [
    f"```json\n{ANSWER}\n``` and that is all",  # text after the fence
    f"Here it is: ```json\n{ANSWER}\n```",  # text before it
    f"```json\n{ANSWER}",  # no closing fence
    "```json\nnot json\n```",
    '```json\n{"a": "a fence ``` in a string"\n```',  # the JSON broken off
])
def test_a_fence_with_more_around_it_is_text(text: str) -> None:
    assert parse(FAMILIES["hermes"](), text, response_format=SCHEMA_FORMAT)["content"] == text.strip()


@pytest.mark.parametrize("fmt", [None, {"type": "text"}], ids=["none", "text"])
def test_without_a_json_response_format_the_fence_is_text(fmt: dict | None) -> None:
    text = f"```json\n{ANSWER}\n```"
    assert parse(FAMILIES["hermes"](), text, response_format=fmt)["content"] == text


def test_a_fence_inside_a_json_string_is_the_string() -> None:
    answer = '{"code": "```python\\nprint(1)\\n```"}'
    assert parse(FAMILIES["hermes"](), f"```json\n{answer}\n```", response_format=OBJECT_FORMAT)["content"] == answer


def test_calls_are_still_read_where_a_response_format_is_asked() -> None:
    analysis = FAMILIES["hermes"]()
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    message = parse(analysis, text, response_format=SCHEMA_FORMAT)
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]


def test_the_fence_is_stated_in_the_language_as_markup() -> None:
    analysis = FAMILIES["hermes"]()
    plain = str(build_language(analysis, Request(reading=True, lazy=False)))
    asked = str(build_language(analysis, Request(reading=True, lazy=False, response_format=OBJECT_FORMAT)))
    assert "answer-fence" not in plain
    assert "answer-fence ::= '```json' | '```'" in asked and "<content: json-any>" in asked


def test_streamed_in_any_chunks_the_fenced_answer_is_its_json() -> None:
    parser = Parser(FAMILIES["qwen3"](), response_format=SCHEMA_FORMAT)
    text = f"<think>x</think>\n```json\n{ANSWER}\n```\n"
    for seed in range(20):
        assert streamed_in_random_chunks(parser, text, seed)["content"] == ANSWER


@pytest.mark.parametrize("grammar, fmt", [(json_schema_grammar(INVOICE), SCHEMA_FORMAT),
                                          (json_schema_grammar({"type": "array", "items": {"type": "integer"}}),
                                           {"type": "json_schema", "json_schema": {"schema": {"type": "array"}}}),
                                          (json_object_grammar(), OBJECT_FORMAT)],
                         ids=["invoice", "array", "object"])
def test_the_response_format_grammar_and_the_parser_agree(grammar, fmt: dict) -> None:
    """Every sentence of the response format's grammar is an answer the parser (whole and
    streamed) and Lark read as that JSON, written bare or in a fence."""
    sentences = Gbnf(grammar.gbnf)
    rng = random.Random(7)
    for family in ("hermes", "qwen3", "llama31"):
        analysis = FAMILIES[family]()
        for _ in range(4):
            sentence = sentences.sample(rng)
            assert sentences.matches(sentence)
            for text in (sentence, f"```json\n{sentence.strip()}\n```"):
                message = parse(analysis, text, response_format=fmt)
                assert message["content"] == sentence.strip(), (family, text)
                lark = parse_with_lark(analysis, text, response_format=fmt)
                assert lark["content"] == sentence.strip(), (family, text)
