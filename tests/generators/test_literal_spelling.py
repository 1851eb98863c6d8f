"""A value's literal spelling (`ir.Spelling`) is the language's: GBNF, Lark and the runtime write
and read a language whose literals are respelled alike, with no change to any of them."""

from __future__ import annotations

import json
from typing import Any

import analyses
import pytest
from gbnf_sampler import Gbnf
from lark.exceptions import UnexpectedInput

from autoparser.generators.gbnf import write_gbnf
from autoparser.generators.lark_ir import read_message, write_lark
from autoparser.language import ir
from autoparser.language.build import Request, build_language
from autoparser.language.interpret import LanguageReader
from autoparser.llama.grammar_check import validate_gbnf

TOOLS = (
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
        "unit": {"type": "null"}}, "required": ["city"]}}},
)
# backtick quotes, angle brackets, and words of their own for the constants
SPELLING = {"quotes": "`", "opens": "<(", "closes": ">)", "null": "nil", "true": "yes", "false": "no"}
CALL = "<|tool_call_start|>[get_weather({})]<|tool_call_end|>"


def _respelled(data: Any) -> Any:
    """A language written as JSON data with every value's literal spelling changed."""
    if isinstance(data, dict):
        if data.get("$node") == "Spelling":
            return {**data, **SPELLING}
        return {key: _respelled(value) for key, value in data.items()}
    return [_respelled(item) for item in data] if isinstance(data, list) else data


def _language(reading: bool) -> ir.Language:
    language = build_language(analyses.lfm2_python(), Request(tools=TOOLS, reading=reading, lazy=False))
    respelled = ir.from_json(_respelled(ir.to_json(language)))
    assert respelled != language
    return respelled


def _runtime(language: ir.Language, text: str) -> list[dict]:
    whole = [json.loads(c["function"]["arguments"]) for c in LanguageReader(language).parse(text)["tool_calls"]]
    stream = LanguageReader(language).stream()
    events = [event for char in text for event in stream.feed(char)] + stream.finish()
    streamed = "".join(d["function"].get("arguments", "") for e in events for d in e.get("tool_calls", []))
    assert [json.loads(streamed)] == whole
    return whole


def _lark(language: ir.Language, text: str) -> list[dict]:
    message = read_message(write_lark(language), text)
    return [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]]


RESPELLED = [
    ("city=`Pa'ris`", {"city": "Pa'ris"}),
    ('city="Paris", days=3', {"city": "Paris", "days": 3}),
    ("city=`a\\`b`, metric=yes", {"city": "a`b", "metric": True}),
    ("city=`Oslo`, metric=no, unit=nil", {"city": "Oslo", "metric": False, "unit": None}),
    ("city=`Oslo`, metric=true, unit=null", {"city": "Oslo", "metric": True, "unit": None}),
]


@pytest.mark.parametrize(("arguments", "value"), RESPELLED)
def test_a_respelled_language_generates_and_reads_alike(arguments: str, value: dict) -> None:
    text = CALL.format(arguments)
    gbnf = write_gbnf(_language(reading=False)).gbnf
    validate_gbnf(gbnf)
    assert Gbnf(gbnf).matches(text)
    reading = _language(reading=True)
    assert _runtime(reading, text) == [value]
    assert _lark(reading, text) == [value]


@pytest.mark.parametrize("arguments", ["city='Paris'", "city=`Oslo`, metric=True", "city=`Oslo`, unit=None"])
def test_the_python_spelling_is_not_generated_for_a_respelled_language(arguments: str) -> None:
    assert not Gbnf(write_gbnf(_language(reading=False)).gbnf).matches(CALL.format(arguments))


def test_the_python_spelling_is_generated_for_python_literals() -> None:
    language = build_language(analyses.lfm2_python(), Request(tools=TOOLS, lazy=False))
    gbnf = write_gbnf(language).gbnf
    validate_gbnf(gbnf)
    text = CALL.format("city='Pa\\'ris', metric=True, unit=None")
    assert Gbnf(gbnf).matches(text)
    reading = build_language(analyses.lfm2_python(), Request(tools=TOOLS, reading=True, lazy=False))
    value = {"city": "Pa'ris", "metric": True, "unit": None}
    assert _runtime(reading, text) == [value] == _lark(reading, text)
    with pytest.raises(UnexpectedInput):
        _lark(_language(reading=True), CALL.format("city=`Oslo`, days=<1, 2"))
