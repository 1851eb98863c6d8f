"""Arguments written with bare keys, where the marker after a key says whether a quoted string
follows (`k:<|q|>text<|q|>`) or a JSON value (`k:42`), and objects and arrays are written in the
template's own syntax (`{inner:<|q|>v<|q|>}`): without tools, whose schemas would say which
arguments are strings, every value is read as written, a stream giving the message a whole read
gives.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from analyses import streamed_in_random_chunks, without_generated_ids

from autoparser.analysis import Analysis, ToolsAnalysis

Q = "<|q|>"


def bare_keys() -> Analysis:
    return Analysis(
        generation_prompt="<turn|model>",
        tools=ToolsAnalysis.from_dict(dict(
            supported=True, format="tag_tagged", call_start="<|call>", call_end="}<call|>", name_start="do:",
            name_end="{", parallel=True, arg_key_end=f":{Q}", arg_end=Q, arg_separator=",", arg_string_raw=True,
            arg_key_end_json=":", arg_nested="quoted", arg_nested_quote=Q)),
        stop=["<turn|end>"], triggers=["<|call>"])


def read(text: str, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    parser = bare_keys().parser(tools=tools)
    message = parser.parse(text)
    for seed in range(5):
        assert without_generated_ids(streamed_in_random_chunks(parser, text, seed)) == \
            without_generated_ids(message), seed
    return message


def arguments(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]]


@pytest.mark.parametrize(("written", "value"), [
    ("7", 7),
    ("-2.5", -2.5),
    ("false", False),
    ("null", None),
    (f"{{depth:{Q}deep{Q},n:[1,2]}}", {"depth": "deep", "n": [1, 2]}),
    (f"[{Q}x, y{Q},{Q}z{Q}]", ["x, y", "z"]),
    (f"[{{k:{Q}}}{Q}}}]", [{"k": "}"}]),
])
def test_a_value_of_no_schema_is_read_as_written(written: str, value: Any) -> None:
    message = read(f"<|call>do:plan{{label:{Q}a{Q},v:{written}}}<call|>")
    assert arguments(message) == [{"label": "a", "v": value}]
    assert message["content"] is None


def test_strings_and_values_mix_in_one_call_among_text() -> None:
    text = f"On it.<|call>do:plan{{n:3,name:{Q}Ann, Bo{Q},opts:{{fast:true}}}}<call|>"
    message = read(text)
    assert arguments(message) == [{"n": 3, "name": "Ann, Bo", "opts": {"fast": True}}]
    assert message["content"] == "On it."


def test_the_schema_still_decides_where_tools_are_given() -> None:
    tools = [{"type": "function", "function": {"name": "plan", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer"}, "opts": {"type": "object"}}}}}]
    message = read("<|call>do:plan{n:3,opts:{fast:true}}<call|>", tools)
    assert arguments(message) == [{"n": 3, "opts": {"fast": True}}]
