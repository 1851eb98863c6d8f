"""Tool schemas that nest without end (`$ref` cycles and chains, 1,000-deep nesting, values nested
100,000 deep in `enum`/`const`) never raise `RecursionError`: each is converted, or refused with a
`SchemaError` naming the path; through the server that is a 400, and a parser failure on what the
model generated never turns into a 500 that discards it."""

from __future__ import annotations

from typing import Any

import pytest

from autoparser.generators.gbnf import json_schema_grammar
from autoparser.generators.schema_gbnf import SchemaError, check_schema, schema_to_gbnf
from autoparser.server.completion import Completion, OutputOptions
from autoparser.server.validation import InvalidInput, check_tools


def nested(depth: int, wrap: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = wrap(schema)
    return schema


def deep_value(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def ref_chain(length: int, through_all_of: bool = False) -> dict[str, Any]:
    """`a0` refers to `a1`, which refers to `a2`... (no cycle: every level is a real level)."""
    if through_all_of:
        defs = {f"a{i}": {"allOf": [{"$ref": f"#/$defs/a{i + 1}"}, {"type": "object"}]} for i in range(length)}
    else:
        defs = {f"a{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/a{i + 1}"}}, "required": ["x"]}
                for i in range(length)}
    defs[f"a{length}"] = {"type": "object", "properties": {"z": {"type": "string"}}}
    return {"$defs": defs, "$ref": "#/$defs/a0"}


TREE = {"$defs": {"node": {"type": "object", "properties": {
    "value": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
    "required": ["value"]}}, "$ref": "#/$defs/node"}

REFUSED = {
    "1000-deep properties": nested(1000, lambda s: {"type": "object", "properties": {"a": s}}),
    "1000-deep items": nested(1000, lambda s: {"type": "array", "items": s}),
    "1000-deep anyOf": nested(1000, lambda s: {"anyOf": [s, {"type": "null"}]}),
    "enum value 100,000 deep": {"enum": [deep_value(100_000)]},
    "const value 100,000 deep": {"const": deep_value(100_000)},
    "$ref chain of 1,500": ref_chain(1500),
    "allOf $ref chain of 1,500": ref_chain(1500, through_all_of=True),
}
CONVERTED = {
    "3,000-character property name beside extra keys": {
        "type": "object", "properties": {"k" * 3000: {"type": "string"}}, "additionalProperties": True},
    "$ref cycle": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    "$ref to the root": {"type": "object", "properties": {"next": {"$ref": "#"}}},
    "recursive tree": TREE,
    "$ref chain of 20": ref_chain(20),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_schemas_nested_without_end_are_refused_with_a_schema_error(name: str) -> None:
    schema = REFUSED[name]
    for convert in (lambda: schema_to_gbnf(schema), lambda: json_schema_grammar(schema)):
        with pytest.raises(SchemaError, match="deep"):
            convert()


@pytest.mark.parametrize("name", list(REFUSED))
def test_the_request_edge_never_recurses(name: str) -> None:
    """`check_tools` refuses what it can see without following references; the rest converts or
    is refused when the grammar is built (above), never with a RecursionError."""
    try:
        check_tools([{"type": "function", "function": {"name": "f", "parameters": REFUSED[name]}}])
        check_schema(REFUSED[name], owner="response_format")
    except (InvalidInput, SchemaError) as exc:
        assert "deep" in str(exc)


@pytest.mark.parametrize("name", list(CONVERTED))
def test_recursive_schemas_convert(name: str) -> None:
    assert "root" in schema_to_gbnf(CONVERTED[name]).gbnf


class FailingParser:
    """A parser stream that fails after some output, as a reader overwhelmed by nesting does."""

    def __init__(self, fail_at: int):
        self.fed = 0
        self.fail_at = fail_at

    def feed(self, text: str) -> list[dict[str, Any]]:
        self.fed += 1
        if self.fed >= self.fail_at:
            raise RecursionError("maximum recursion depth exceeded")
        return [{"content": text}]

    def finish(self) -> list[dict[str, Any]]:
        raise RecursionError("maximum recursion depth exceeded")

    def message(self) -> dict[str, Any]:
        raise RecursionError("maximum recursion depth exceeded")


@pytest.mark.parametrize("fail_at", [1, 3, 10])
def test_a_parser_failure_keeps_every_generated_token(fail_at: int) -> None:
    warnings: list[str] = []
    completion = Completion(FailingParser(fail_at), OutputOptions(), warnings)
    pieces = ['{"a": [', '[[[', "]]]", "]}", " tail"]
    streamed = [delta for piece in pieces for delta in completion.feed(piece)] + completion.finish()
    assert "".join(d.get("content") or "" for d in streamed) == "".join(pieces)
    message = completion.message()
    assert message["content"] == "".join(pieces) and message["tool_calls"] is None
    assert len(warnings) == 1 and "RecursionError" in warnings[0]
    assert completion.finish_reason("stop") == "stop"
