"""The grammar cost budget: a schema is checked before it is converted.

`check_schema` refuses a schema that is malformed or would cost llama.cpp's grammar matcher more
than a `GrammarBudget` allows, with a `SchemaError` naming the tool and the JSON path.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from autoparser.generators.gbnf_builder import MAX_REPETITION


class SchemaError(ValueError):
    """A schema the grammar cannot serve: malformed, or over the grammar cost budget.

    The message names the tool and the JSON path; `param` is that path in OpenAI's spelling.
    """

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class GrammarBudget:
    """What one schema may cost the grammar, checked before llama.cpp sees it.

    llama.cpp's matcher keeps one stack per way the text so far can continue, and checks every
    candidate token against each: alternatives (enum values, optional properties that may come
    next) multiply its per-token work, and repetition bounds multiply its size. Over budget,
    `check_schema` raises `SchemaError` (the server answers 400) rather than degrading, because
    a grammar that silently allowed other values would break the schema's promise. The one
    exception is a ``pattern`` whose nested bounds multiply past the regex budget: like any
    pattern the translator cannot express, it is dropped with a warning (`regex_gbnf`), the
    value still a length-bounded JSON string.
    """

    max_depth: int = 32
    """Subschemas nested inside each other (`properties`, `items`, `anyOf`...), and JSON values
    nested inside each other in `enum` and `const`."""
    max_expanded_depth: int = 64
    """Subschemas nested inside each other once `$ref` and `allOf` are followed (a reference to a
    reference to ... counts a level each): the converter recurses this deep at most."""
    max_subschemas: int = 5_000
    """Subschemas in the whole schema, and subschemas visited while converting it (`$ref` and
    `allOf` expansions included)."""
    max_properties: int = 1_000
    """Declared properties of one object."""
    max_optional_properties: int = 256
    """Optional properties of one object: each may come next after any earlier one."""
    max_enum_values: int = 1_000
    """Values of one `enum`: each is an alternative at the value's start."""
    max_enum_chars: int = 64_000
    """JSON text of all values of one `enum`."""
    max_repetition: int = 100_000
    """Bounded repetitions (`maxLength`, `maxItems`) summed over the schema: llama.cpp expands each
    `{m,n}` into n copies."""


DEFAULT_BUDGET = GrammarBudget()
_NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_LARGEST_NUMBER = 1e300
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("additionalProperties", "items", "additionalItems", "not", "if", "then", "else",
                  "contains", "propertyNames", "unevaluatedProperties", "unevaluatedItems")


def _where(param: str, parts: tuple[Any, ...]) -> str:
    out = param
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def check_schema(schema: Any, owner: str, param: str = "$", strict: bool = True,
                 budget: GrammarBudget = DEFAULT_BUDGET) -> None:
    """Refuse a schema that is malformed or would cost the grammar more than `budget`.

    `owner` names the tool (or `response_format`) in the message, `param` is where the schema
    sits in the request. With `strict`, every place that holds a schema must hold an object or a
    boolean (``"properties": {"x": null}`` is an error); otherwise the converter's lenient reading
    (any value, with a warning) applies and only the budget, the nesting and the numbers are
    checked. Raises `SchemaError`; runs in time linear in the schema.
    """
    stack: list[tuple[Any, tuple[Any, ...], int]] = [(schema, (), 0)]
    count = repetition = 0

    def fail(parts: tuple[Any, ...], message: str) -> SchemaError:
        where = _where(param, parts)
        return SchemaError(f"{owner}: {where}: {message}", param=where)

    while stack:
        node, parts, depth = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            if strict and not (node is None and not parts):
                raise fail(parts, f"a schema must be an object or a boolean, not {_json_type(node)}")
            continue
        count += 1
        if depth > budget.max_depth:
            raise fail(parts, f"subschemas nested more than {budget.max_depth} deep")
        if count > budget.max_subschemas:
            raise fail(parts, f"more than {budget.max_subschemas:,} subschemas, over the grammar budget")
        for key in _NUMBER_KEYWORDS:
            value = node.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and not (
                    isinstance(value, float) and math.isfinite(value) or
                    isinstance(value, int) and abs(value) <= _LARGEST_NUMBER):
                raise fail((*parts, key), "the number is out of range")
        for key in ("const", "enum"):
            if key in node and _nested_deeper(node[key], budget.max_depth + (key == "enum")):
                raise fail((*parts, key), f"the value is nested more than {budget.max_depth} deep")
        _check_enum(node, parts, budget, fail)
        repetition += sum(v for k in ("maxLength", "maxItems") if isinstance(v := node.get(k), int)
                          and not isinstance(v, bool) and 0 < v <= MAX_REPETITION)
        if repetition > budget.max_repetition:
            raise fail(parts, f"length and item bounds add up to over {budget.max_repetition:,} "
                              "repetitions, over the grammar budget")
        _check_properties(node, parts, budget, strict, fail)
        for key in _SCHEMA_VALUES:
            if key in node:
                value = node[key]
                if isinstance(value, list) and key in ("items", "additionalItems"):
                    stack.extend((item, (*parts, key, i), depth + 1) for i, item in enumerate(value))
                elif isinstance(value, dict | bool) or strict:
                    stack.append((value, (*parts, key), depth + 1))
        for key in _SCHEMA_MAPS:
            value = node.get(key)
            if isinstance(value, dict):
                stack.extend((sub, (*parts, key, name), depth + 1) for name, sub in value.items())
            elif value is not None and strict:
                raise fail((*parts, key), f"must be an object, not {_json_type(value)}")
        for key in _SCHEMA_LISTS:
            value = node.get(key)
            if isinstance(value, list):
                stack.extend((sub, (*parts, key, i), depth + 1) for i, sub in enumerate(value))
            elif value is not None and strict:
                raise fail((*parts, key), f"must be a list of schemas, not {_json_type(value)}")


def _nested_deeper(value: Any, limit: int) -> bool:
    """Whether the JSON value `value` nests lists and objects more than `limit` deep (walked
    without recursion, so any depth is answered)."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth >= limit:
                return True
            stack.extend((item, depth + 1) for item in (node.values() if isinstance(node, dict) else node))
    return False


def _check_enum(node: dict, parts: tuple[Any, ...], budget: GrammarBudget, fail: Any) -> None:
    values = node.get("enum")
    if not isinstance(values, list):
        return
    _check_count(len(values), budget.max_enum_values, "values", (*parts, "enum"), fail)
    size = 0
    for value in values:
        size += len(json.dumps(value, ensure_ascii=False)) if isinstance(value, dict | list) else len(str(value)) + 2
        if size > budget.max_enum_chars:
            raise fail((*parts, "enum"), f"the values' text is over the grammar budget of "
                                         f"{budget.max_enum_chars:,} characters")


def _check_properties(node: dict, parts: tuple[Any, ...], budget: GrammarBudget, strict: bool, fail: Any) -> None:
    props = node.get("properties")
    if not isinstance(props, dict):
        return
    _check_count(len(props), budget.max_properties, "properties", (*parts, "properties"), fail)
    required = node.get("required")
    if strict and required is not None and not (isinstance(required, list)
                                                and all(isinstance(r, str) for r in required)):
        raise fail((*parts, "required"), "must be a list of property names")
    named = set(required) & set(props) if isinstance(required, list) and all(
        isinstance(r, str) for r in required) else set()
    _check_count(len(props) - len(named), budget.max_optional_properties, "optional properties",
                 (*parts, "properties"), fail)


def _check_count(count: int, limit: int, what: str, parts: tuple[Any, ...], fail: Any) -> None:
    if count > limit:
        raise fail(parts, f"{count:,} {what}, over the grammar budget of {limit:,}")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)
