"""JSON Schema → GBNF, written for tool arguments.

llama.cpp ships a converter, but it drops keywords it cannot express without saying so; this one
reports every such keyword as a warning naming the tool, the JSON path and the keyword, so the
server can surface it with the request. Choices, all of which keep every generated value valid:

* Properties are emitted in the schema's ``properties`` order; required ones must appear,
  optional ones may be skipped. Any order is *not* allowed (a grammar for all orders of n
  optional keys is exponential, and models follow the schema order anyway).
* ``additionalProperties`` absent on an object that declares ``properties`` (even ``{}``, the
  usual spelling of "no arguments") means "no extra keys" (stricter than JSON Schema, still
  valid); a bare ``{"type": "object"}`` is any object. ``true`` or a schema allows extra keys after the
  declared ones; their names can never repeat a declared name.
* Whitespace between JSON tokens is optional and bounded (`WS_MAX` characters), integers without
  a bound have at most 16 digits, and fractions at most 16: unbounded repetition lets small
  models loop forever.
* ``oneOf`` is written as ``anyOf``; when its branches can overlap a warning says exclusivity is
  not enforced.
* Integer bounds become exact digit-range rules; number bounds are exact when they are
  integers, otherwise a warning. String ``pattern`` goes through `regex_gbnf`; ``format`` knows
  date, time, date-time, uuid, email (loosely), ipv4, hostname and uri (loosely).
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from autoparser.generators.gbnf_builder import (
    INT_DIGITS,
    MAX_REPETITION,
    GrammarBuilder,
    alt,
    class_char,
    json_bool,
    json_char,
    json_int,
    json_null,
    json_number,
    json_string,
    json_value,
    literal,
    optional,
    repeat,
    rule_name,
    seq,
    ws,
)
from autoparser.generators.regex_gbnf import RegexUnsupported, regex_to_gbnf
from autoparser.language.build import resolve_ref

ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "example", "$schema", "$id", "id", "$comment",
    "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "$anchor", "$dynamicAnchor",
    "contentEncoding", "contentMediaType", "discriminator", "xml", "externalDocs", "strict",
})
COMMON = frozenset({"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "nullable"})
BY_TYPE = {
    "string": frozenset({"minLength", "maxLength", "pattern", "format"}),
    "integer": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "format"}),
    "number": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "format"}),
    "object": frozenset({"properties", "required", "additionalProperties", "minProperties", "maxProperties",
                         "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
                         "dependencies", "unevaluatedProperties"}),
    "array": frozenset({"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
                        "contains", "minContains", "maxContains", "unevaluatedItems"}),
    "boolean": frozenset(),
    "null": frozenset(),
}
UNSUPPORTED = frozenset({
    "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas", "dependencies",
    "unevaluatedProperties", "unevaluatedItems", "contains", "minContains", "maxContains",
    "not", "if", "then", "else", "$dynamicRef", "$recursiveRef",
})
KNOWN = ANNOTATIONS | COMMON | frozenset().union(*BY_TYPE.values()) | UNSUPPORTED
JSON_TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")

FORMATS = {
    "date": "date",
    "time": "time",
    "date-time": "date-time",
    "uuid": "uuid",
    "email": "email",
    "idn-email": "email",
    "ipv4": "ipv4",
    "hostname": "hostname",
    "uri": "uri",
    "uri-reference": "uri",
    "iri": "uri",
    "url": "uri",
}


def format_rule(b: GrammarBuilder, fmt: str) -> str:
    """A rule for the text of a string `format`; the text never needs JSON escapes."""
    # valid month/day pairs; February stops at 28 (leap years are not worth a grammar)
    b.fixed("fmt-date", '[0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | '
                        '( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | '
                        '"02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) )')
    b.fixed("fmt-time", '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? '
                        '( "Z" | [+\\-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )')
    kind = FORMATS[fmt]
    if kind == "date":
        return "fmt-date"
    if kind == "time":
        return "fmt-time"
    if kind == "date-time":
        return b.fixed("fmt-date-time", 'fmt-date "T" fmt-time')
    if kind == "uuid":
        return b.fixed("fmt-uuid", '[0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12}')
    if kind == "email":
        b.fixed("fmt-label", "[a-zA-Z0-9] [a-zA-Z0-9\\-]{0,30}")
        return b.fixed("fmt-email", '[a-zA-Z0-9._%+\\-]{1,40} "@" fmt-label ( "." fmt-label ){1,3}')
    if kind == "ipv4":
        b.fixed("fmt-octet", '"25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]')
        return b.fixed("fmt-ipv4", 'fmt-octet "." fmt-octet "." fmt-octet "." fmt-octet')
    if kind == "hostname":
        b.fixed("fmt-label", "[a-zA-Z0-9] [a-zA-Z0-9\\-]{0,30}")
        return b.fixed("fmt-hostname", 'fmt-label ( "." fmt-label ){0,4}')
    return b.fixed("fmt-uri", '[a-zA-Z] [a-zA-Z0-9+.\\-]{0,15} ":" [^ "\\\\<>\\x00-\\x1F\\x7F]{1,200}')


# -- the grammar cost budget -------------------------------------------------------------------


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
    if len(values) > budget.max_enum_values:
        raise fail((*parts, "enum"), f"{len(values):,} values, over the grammar budget of "
                                     f"{budget.max_enum_values:,}")
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
    if len(props) > budget.max_properties:
        raise fail((*parts, "properties"), f"{len(props):,} properties, over the grammar budget of "
                                           f"{budget.max_properties:,}")
    required = node.get("required")
    if strict and required is not None and not (isinstance(required, list)
                                                and all(isinstance(r, str) for r in required)):
        raise fail((*parts, "required"), "must be a list of property names")
    named = set(required) & set(props) if isinstance(required, list) and all(
        isinstance(r, str) for r in required) else set()
    optional = len(props) - len(named)
    if optional > budget.max_optional_properties:
        raise fail((*parts, "properties"), f"{optional:,} optional properties, over the grammar budget of "
                                           f"{budget.max_optional_properties:,}")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


@dataclass
class SchemaWarnings:
    """Collects "cannot express" messages, each naming the tool, the path and the keyword."""

    owner: str
    messages: list[str] = field(default_factory=list)

    def add(self, path: str, keyword: str, why: str) -> None:
        msg = f"{self.owner}: {path}: '{keyword}' {why}"
        if msg not in self.messages:
            self.messages.append(msg)


def _json_literal(value: Any) -> str:
    return literal(json.dumps(value, ensure_ascii=False))


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _matches_type(value: Any, types: list[str]) -> bool:
    t = _type_of(value)
    return t in types or (t == "integer" and "number" in types)


_ROOT: Any = object()


class SchemaConverter:
    """Converts one schema (a tool's ``parameters``) into rules of a shared `GrammarBuilder`.

    `prefix` starts every rule name this converter creates, so several tools coexist in one
    grammar; JSON primitives (``ws``, ``json-string``...) are shared. `string_limit` caps the
    length of strings the schema leaves unbounded (see `gbnf.build_grammar`'s `free_text_limit`).
    """

    def __init__(self, builder: GrammarBuilder, prefix: str, root_schema: Any,
                 warnings: SchemaWarnings, string_limit: int | None = None):
        check_schema(root_schema, owner=warnings.owner, strict=False, budget=DEFAULT_BUDGET)
        self.b = builder
        self.string_limit = string_limit  # cap for strings the schema leaves unbounded
        self.prefix = rule_name(prefix)
        self.root = root_schema
        self.w = warnings
        self._visits = 0  # subschemas visited, `$ref`/`allOf` expansions included
        self._depth = 0  # subschemas being visited inside each other, expansions included
        self._ref_rules: dict[str, str] = {}
        self._unguarded: list[str] = []  # refs being expanded with no "{" or "[" consumed yet
        self._inlining: list[str] = []  # refs whose target is being merged into a parent schema

    # -- entry points ------------------------------------------------------------------------

    def convert(self, schema: Any = _ROOT, path: str = "$", hint: str = "") -> str:
        """The rule name of the JSON text of a value of `schema` (default: the root schema).

        A sentinel marks "the root": a subschema that is `null` is read as "any value", not as
        the root again (which recursed without end)."""
        expr = self.visit(self.root if schema is _ROOT else schema, path, hint or self.prefix)
        return self._named(hint or self.prefix, expr)

    def _named(self, hint: str, expr: str) -> str:
        if _is_name(expr):
            return expr
        return self.b.define(hint, expr)

    def _hint(self, hint: str, part: str) -> str:
        return rule_name(f"{hint}-{part}")

    # -- dispatch --------------------------------------------------------------------------

    @contextmanager
    def _deeper(self, path: str) -> Iterator[None]:
        """One level down; a chain of references (each a few Python frames) stops at the
        budget's expanded depth with a `SchemaError` rather than a `RecursionError`."""
        self._depth += 1
        try:
            if self._depth > DEFAULT_BUDGET.max_expanded_depth:
                raise SchemaError(f"{self.w.owner}: {path}: subschemas nest more than "
                                  f"{DEFAULT_BUDGET.max_expanded_depth} deep once $ref and allOf are followed")
            yield
        finally:
            self._depth -= 1

    def visit(self, schema: Any, path: str, hint: str) -> str:
        self._visits += 1
        if self._visits > DEFAULT_BUDGET.max_subschemas:  # references that expand exponentially
            raise SchemaError(f"{self.w.owner}: {path}: expands to more than "
                              f"{DEFAULT_BUDGET.max_subschemas:,} subschemas, over the grammar budget")
        with self._deeper(path):
            return self._visit(schema, path, hint)

    def _visit(self, schema: Any, path: str, hint: str) -> str:
        if schema is True or schema == {} or schema is None:
            return json_value(self.b)
        if schema is False:
            self.w.add(path, "false", "schema allows no value; the grammar allows none either")
            return self._never()
        if not isinstance(schema, dict):
            self.w.add(path, "schema", f"is not an object ({type(schema).__name__}); any value allowed")
            return json_value(self.b)
        if "$ref" in schema:
            return self.visit_ref(schema, path, hint)
        single = _single_ref(schema)
        if single is not None:  # {"allOf": [{"$ref": ...}]}: a plain reference, recursion-safe
            return self.visit_ref(single, path, hint)
        inlined: list[str] = []
        schema = self.merge_all_of(schema, path, inlined)
        self._inlining += inlined
        try:
            return self.visit_merged(schema, path, hint)
        finally:
            del self._inlining[len(self._inlining) - len(inlined):]

    def visit_merged(self, schema: dict, path: str, hint: str) -> str:
        """`visit` for a schema whose ``$ref`` and ``allOf`` are resolved."""
        self.warn_unknown(schema, path)
        if "const" in schema:
            return _json_literal(schema["const"])
        if "enum" in schema:
            return self.visit_enum(schema, path)
        if "anyOf" in schema or "oneOf" in schema:
            return self.visit_any_of(schema, path, hint)
        types = self.types_of(schema, path)
        if types is None:
            return json_value(self.b)
        exprs = [self.visit_type(t, schema, path, hint if len(types) == 1 else self._hint(hint, t))
                 for t in types]
        return alt(*exprs)

    def types_of(self, schema: dict, path: str) -> list[str] | None:
        """The JSON types the value may take (None: any value)."""
        declared = schema.get("type")
        if isinstance(declared, str):
            types = [declared]
        elif isinstance(declared, list) and declared:
            types = [t for t in declared if isinstance(t, str)]
        else:
            # no type: infer from the keywords present (a subset of the valid values)
            types = [t for t in ("object", "array", "string", "number")
                     if any(k in schema for k in BY_TYPE[t])]
            if not types:
                return None
        unknown = [t for t in types if t not in JSON_TYPES]
        for t in unknown:
            self.w.add(path, "type", f"has unknown type {t!r}; ignored")
        types = [t for t in types if t in JSON_TYPES]
        if "integer" in types and "number" in types:
            types.remove("integer")
        if schema.get("nullable") is True and "null" not in types:
            types.append("null")
        if not types:
            return None
        return types

    def visit_type(self, t: str, schema: dict, path: str, hint: str) -> str:
        if t == "string":
            return self.visit_string(schema, path, hint)
        if t == "integer":
            return self.visit_integer(schema, path, hint)
        if t == "number":
            return self.visit_number(schema, path, hint)
        if t == "boolean":
            return json_bool(self.b)
        if t == "null":
            return json_null(self.b)
        if t == "object":
            return self.visit_object(schema, path, hint)
        return self.visit_array(schema, path, hint)

    def warn_unknown(self, schema: dict, path: str) -> None:
        for key in schema:
            if key in UNSUPPORTED:
                self.w.add(f"{path}", key, "is not expressible in the grammar; not enforced")
            elif key not in KNOWN and not key.startswith("x-"):
                self.w.add(path, key, "is an unknown keyword; not enforced")

    def _never(self) -> str:
        return self.b.fixed("never", "[^\\x00-\\U0010FFFF]")

    # -- combinators -------------------------------------------------------------------------

    def visit_ref(self, schema: dict, path: str, hint: str) -> str:
        ref = schema["$ref"]
        target = self.resolve(ref, path)
        if target is None:
            return json_value(self.b)
        rest = {k: v for k, v in schema.items() if k != "$ref" and k not in ANNOTATIONS}
        if rest and ref in self._inlining:
            self.w.add(path, "$ref", f"{ref} is recursive; keywords beside it are not enforced")
        elif rest:
            self._inlining.append(ref)
            try:
                return self.visit({"allOf": [target, rest]}, path, hint)
            finally:
                self._inlining.pop()
        if ref in self._ref_rules:
            if ref in self._unguarded:
                self.w.add(path, "$ref", f"{ref} refers to itself before any value starts; any value allowed")
                return json_value(self.b)
            return self._ref_rules[ref]
        name = self.b.reserve(self._hint(self.prefix, ref.rsplit("/", 1)[-1] or "root"))
        self._ref_rules[ref] = name
        self._unguarded.append(ref)
        try:
            expr = self.visit(target, ref, name)
        finally:
            self._unguarded.remove(ref)
        self.b.set(name, expr)
        return name

    def resolve(self, ref: Any, path: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            self.w.add(path, "$ref", f"{ref!r} is not a local reference; any value allowed")
            return None
        node = resolve_ref(self.root, ref)
        if node is None:
            self.w.add(path, "$ref", f"{ref!r} does not resolve; any value allowed")
        return node

    def visit_enum(self, schema: dict, path: str) -> str:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            self.w.add(path, "enum", "is empty or not a list; no value allowed")
            return self._never()
        declared = schema.get("type")
        if declared:
            types = [declared] if isinstance(declared, str) else list(declared)
            values = [v for v in values if _matches_type(v, types)] or values
        return alt(*[_json_literal(v) for v in values])

    def visit_any_of(self, schema: dict, path: str, hint: str) -> str:
        key = "anyOf" if "anyOf" in schema else "oneOf"
        branches = schema[key]
        if not isinstance(branches, list) or not branches:
            self.w.add(path, key, "is empty; any value allowed")
            return json_value(self.b)
        if "anyOf" in schema and "oneOf" in schema:
            self.w.add(path, "oneOf", "next to anyOf is not enforced")
        base = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf") and k not in ANNOTATIONS}
        exprs = []
        for i, branch in enumerate(branches):
            merged = {"allOf": [base, branch]} if base else branch
            exprs.append(self.visit(merged, f"{path}/{key}/{i}", self._hint(hint, str(i))))
        if key == "oneOf" and not self._disjoint(branches):
            self.w.add(path, "oneOf", "branches may overlap; exclusivity is not enforced")
        return alt(*exprs)

    def _disjoint(self, branches: list) -> bool:
        seen: set[str] = set()
        for branch in branches:
            if not isinstance(branch, dict):
                return False
            if "const" in branch:
                kinds = {json.dumps(branch["const"], sort_keys=True)}
            elif "enum" in branch and isinstance(branch["enum"], list):
                kinds = {json.dumps(v, sort_keys=True) for v in branch["enum"]}
            elif isinstance(branch.get("type"), str):
                kinds = {"type:" + branch["type"]}
            else:
                return False
            if "type:number" in kinds | seen and ("type:integer" in kinds | seen):
                return False
            if kinds & seen:
                return False
            seen |= kinds
        consts = {k for k in seen if not k.startswith("type:")}
        types = {k[5:] for k in seen if k.startswith("type:")}
        return not any(_type_of(json.loads(c)) in types or
                       (_type_of(json.loads(c)) == "integer" and "number" in types) for c in consts)

    def merge_all_of(self, schema: dict, path: str, inlined: list[str] | None = None) -> dict:
        """Fold ``allOf`` into its parent when the parts combine keyword by keyword.

        The targets of ``$ref`` parts are merged in too, and their pointers appended to
        `inlined`; a reference already being inlined higher up (a recursive schema) is left out
        with a warning instead of being expanded forever.
        """
        if "allOf" not in schema:
            return schema
        inlined = inlined if inlined is not None else []
        parts = schema["allOf"]
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        if not isinstance(parts, list):
            self.w.add(path, "allOf", "is not a list; ignored")
            return merged
        for i, part in enumerate(parts):
            here = f"{path}/allOf/{i}"
            if isinstance(part, dict) and "$ref" in part:
                ref = part["$ref"]
                if ref in self._inlining or ref in inlined:
                    self.w.add(here, "$ref", f"{ref} is recursive inside allOf; that part is not enforced")
                    continue
                inlined.append(ref)
                target = self.resolve(ref, here)
                rest = {k: v for k, v in part.items() if k != "$ref"}
                part = _merge(copy.deepcopy(target) if isinstance(target, dict) else {}, rest, [])
            if part is True or part is None:
                continue
            if not isinstance(part, dict):
                self.w.add(here, "allOf", "part is not an object; ignored")
                continue
            with self._deeper(here):
                part = self.merge_all_of(part, here, inlined)
            conflicts: list[str] = []
            merged = _merge(merged, part, conflicts)
            for key in conflicts:
                self.w.add(here, key, "conflicts with another allOf part; the first one is used")
        return merged

    # -- scalars -------------------------------------------------------------------------

    def visit_string(self, schema: dict, path: str, hint: str) -> str:
        min_len = schema.get("minLength", 0)
        max_len = schema.get("maxLength")
        pattern = schema.get("pattern")
        fmt = schema.get("format")
        quote = '"\\""'
        content = None
        if isinstance(pattern, str):
            try:
                content = regex_to_gbnf(self.b, pattern, self._hint(hint, "pattern"))
            except RegexUnsupported as exc:
                self.w.add(path, "pattern", f"{pattern!r} cannot be translated ({exc}); not enforced")
            if fmt is not None:
                self.w.add(path, "format", "together with pattern is not enforced")
        elif isinstance(fmt, str) and fmt in FORMATS:
            content = format_rule(self.b, fmt)
        elif fmt is not None:
            self.w.add(path, "format", f"{fmt!r} is not supported; not enforced")
        if content is not None:
            if min_len or max_len is not None:
                self.w.add(path, "minLength/maxLength", "together with pattern/format is not enforced")
            return seq(quote, content, quote)
        if max_len is None and self.string_limit is not None:
            max_len = max(self.string_limit, min_len or 0)
        if not min_len and max_len is None:
            return json_string(self.b)
        lo, hi = self._length_bounds(min_len, max_len, path, "minLength", "maxLength")
        return seq(quote, repeat(json_char(self.b), lo, hi), quote)

    def _length_bounds(self, lo: Any, hi: Any, path: str, lo_key: str, hi_key: str) -> tuple[int, int | None]:
        lo = int(lo) if isinstance(lo, int | float) and lo > 0 else 0
        hi = int(hi) if isinstance(hi, int | float) and hi >= 0 else None
        if lo > MAX_REPETITION:
            self.w.add(path, lo_key, f"above {MAX_REPETITION} is not enforced")
            lo = 0
        if hi is not None and hi > MAX_REPETITION:
            self.w.add(path, hi_key, f"above {MAX_REPETITION} is not enforced")
            hi = None
        if hi is not None and hi < lo:
            self.w.add(path, hi_key, f"is below {lo_key}; no value allowed")
            hi = lo
        return lo, hi

    def _bounds(self, schema: dict, path: str) -> tuple[Any, bool, Any, bool]:
        """(low, low_exclusive, high, high_exclusive) from draft-4 and draft-6+ spellings."""
        lo, lo_x, hi, hi_x = schema.get("minimum"), False, schema.get("maximum"), False
        emin, emax = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if emin is True:
            lo_x = True
        elif isinstance(emin, int | float) and not isinstance(emin, bool):
            if lo is None or emin >= lo:
                lo, lo_x = emin, True
        if emax is True:
            hi_x = True
        elif isinstance(emax, int | float) and not isinstance(emax, bool):
            if hi is None or emax <= hi:
                hi, hi_x = emax, True
        for key, value in (("minimum", lo), ("maximum", hi)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or math.isnan(value) or math.isinf(value)):
                self.w.add(path, key, f"{value!r} is not a number; ignored")
                if key == "minimum":
                    lo = None
                else:
                    hi = None
        return lo, lo_x, hi, hi_x

    def visit_integer(self, schema: dict, path: str, hint: str) -> str:
        self._check_multiple_of(schema, path, integer=True)
        self._check_number_format(schema, path)
        lo, lo_x, hi, hi_x = self._bounds(schema, path)
        if schema.get("format") == "int32":
            lo = max(lo, -(2 ** 31)) if lo is not None else -(2 ** 31)
            hi = min(hi, 2 ** 31 - 1) if hi is not None else 2 ** 31 - 1
        if lo is None and hi is None:
            return json_int(self.b)
        ilo = None if lo is None else (math.floor(lo) + 1 if lo_x or lo != math.floor(lo) else int(lo))
        ihi = None if hi is None else (math.ceil(hi) - 1 if hi_x or hi != math.ceil(hi) else int(hi))
        if ilo is not None and ihi is not None and ilo > ihi:
            self.w.add(path, "minimum/maximum", "leave no integer; no value allowed")
            return self._never()
        return alt(*integer_range(ilo, ihi))

    def visit_number(self, schema: dict, path: str, hint: str) -> str:
        self._check_multiple_of(schema, path, integer=False)
        self._check_number_format(schema, path)
        lo, lo_x, hi, hi_x = self._bounds(schema, path)
        if lo is not None and lo != math.floor(lo):
            self.w.add(path, "exclusiveMinimum" if lo_x else "minimum", f"{lo} is not an integer; not enforced")
            lo, lo_x = None, False
        if hi is not None and hi != math.floor(hi):
            self.w.add(path, "exclusiveMaximum" if hi_x else "maximum", f"{hi} is not an integer; not enforced")
            hi, hi_x = None, False
        if lo is None and hi is None:
            return json_number(self.b)
        lo = None if lo is None else int(lo)
        hi = None if hi is None else int(hi)
        if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_x or hi_x))):
            self.w.add(path, "minimum/maximum", "leave no number; no value allowed")
            return self._never()
        return alt(*decimal_range(lo, lo_x, hi, hi_x))

    def _check_multiple_of(self, schema: dict, path: str, integer: bool) -> None:
        m = schema.get("multipleOf")
        if m is None or (integer and isinstance(m, int | float) and m == 1):
            return
        self.w.add(path, "multipleOf", f"{m} is not enforced")

    def _check_number_format(self, schema: dict, path: str) -> None:
        fmt = schema.get("format")
        if fmt is not None and fmt not in ("int32", "int64", "float", "double"):
            self.w.add(path, "format", f"{fmt!r} is not supported for numbers; not enforced")

    # -- containers ------------------------------------------------------------------------

    @contextmanager
    def _guarded(self) -> Iterator[None]:
        """Inside an object or array a "{" or "[" is consumed: no reference being expanded
        recurses unguarded any more, until the container is left."""
        saved, self._unguarded = self._unguarded, []
        try:
            yield
        finally:
            self._unguarded = saved

    def visit_object(self, schema: dict, path: str, hint: str) -> str:
        with self._guarded():
            return self._visit_object(schema, path, hint)

    def _visit_object(self, schema: dict, path: str, hint: str) -> str:
        b, w = self.b, ws(self.b)
        props = schema.get("properties") or {}
        if not isinstance(props, dict):
            self.w.add(path, "properties", "is not an object; ignored")
            props = {}
        required = [r for r in schema.get("required") or [] if isinstance(r, str)]
        addl = schema.get("additionalProperties", None)
        if "properties" not in schema and addl is None:
            addl = True  # a bare {"type": "object"} is any object ("properties": {} means none)
        names = list(props) + [r for r in required if r not in props]
        members: list[tuple[str, bool]] = []
        for name in names:
            sub = props.get(name, True)
            if sub is False:
                if name in required:
                    self.w.add(f"{path}/properties/{name}", "false", "is required but allows no value")
                continue
            value = self.convert(sub, f"{path}/properties/{name}", self._hint(hint, name))
            member = b.define(self._hint(hint, f"{name}-kv"), seq(_json_literal(name), w, '":"', w, value, w))
            members.append((member, name in required))
        extra = None
        if addl is not None and addl is not False:
            value = self.convert(addl, f"{path}/additionalProperties", self._hint(hint, "extra"))
            key = key_not_in(b, self._hint(hint, "extra-key"), names)
            extra = b.define(self._hint(hint, "extra-kv"), seq(key, w, '":"', w, value, w))
        self._check_property_counts(schema, path, members, extra)
        body = ordered_members(b, hint, members, f'"," {w}', extra)
        return seq('"{"', w, body, '"}"')

    def _check_property_counts(self, schema: dict, path: str, members: list[tuple[str, bool]],
                               extra: str | None) -> None:
        n_required = sum(1 for _, req in members if req)
        lo, hi = schema.get("minProperties"), schema.get("maxProperties")
        if isinstance(lo, int) and lo > n_required:
            self.w.add(path, "minProperties", f"{lo} is not enforced beyond the required properties")
        if isinstance(hi, int) and (extra is not None or hi < len(members)):
            self.w.add(path, "maxProperties", f"{hi} is not enforced")

    def visit_array(self, schema: dict, path: str, hint: str) -> str:
        with self._guarded():
            return self._visit_array(schema, path, hint)

    def _visit_array(self, schema: dict, path: str, hint: str) -> str:
        b, w = self.b, ws(self.b)
        prefix = schema.get("prefixItems")
        rest = schema.get("items", True)
        if isinstance(rest, list):  # draft-4 tuple form
            prefix, rest = rest, schema.get("additionalItems", True)
        elif prefix is not None and "additionalItems" in schema and "items" not in schema:
            rest = schema["additionalItems"]
        lo, hi = self._length_bounds(schema.get("minItems", 0), schema.get("maxItems"), path,
                                     "minItems", "maxItems")
        if schema.get("uniqueItems") is True and (hi is None or hi > 1):
            self.w.add(path, "uniqueItems", "is not enforced")
        open_, close = '"["', '"]"'
        if prefix:
            return seq(open_, w, self._tuple_items(prefix, rest, lo, hi, path, hint), close)
        if hi == 0 or rest is False:
            if lo > 0:
                self.w.add(path, "minItems", "cannot be met; no value allowed")
                return self._never()
            return seq(open_, w, close)
        value = self.convert(rest, f"{path}/items", self._hint(hint, "item"))
        element = b.define(self._hint(hint, "element"), seq(value, w))
        nxt = b.define(self._hint(hint, "element-next"), seq('","', w, element))
        more = repeat(nxt, max(lo - 1, 0), None if hi is None else hi - 1)
        if lo >= 1:
            return seq(open_, w, element, more, close)
        return seq(open_, w, optional(seq(element, more)), close)

    def _tuple_items(self, prefix: list, rest: Any, lo: int, hi: int | None, path: str, hint: str) -> str:
        b, w = self.b, ws(self.b)
        n_prefix = len(prefix) if hi is None else min(len(prefix), hi)
        elements = []
        for i in range(n_prefix):
            value = self.convert(prefix[i], f"{path}/prefixItems/{i}", self._hint(hint, f"item{i}"))
            elements.append(b.define(self._hint(hint, f"element{i}"), seq(value, w)))
        tail = ""
        if rest is not False and (hi is None or hi > len(prefix)):
            value = self.convert(rest, f"{path}/items", self._hint(hint, "item"))
            element = b.define(self._hint(hint, "element"), seq(value, w))
            nxt = b.define(self._hint(hint, "element-next"), seq('","', w, element))
            extra_min = max(lo - len(prefix), 0)
            tail = repeat(nxt, extra_min, None if hi is None else hi - len(prefix))
        elif lo > len(prefix):
            self.w.add(path, "minItems", "cannot be met; no value allowed")
            return self._never()
        # elements[0] (',' elements[1] (... tail)?)? with the first `lo` ones mandatory
        expr = tail
        for i in range(n_prefix - 1, -1, -1):
            part = seq('","', w, elements[i], expr) if i > 0 else seq(elements[0], expr)
            expr = part if i < lo else optional(part)
        return expr


def _merge(a: dict, b: dict, conflicts: list[str]) -> dict:
    """Combine two schemas that must both hold (the simple, keyword-by-keyword cases)."""
    out = dict(a)
    for key, value in b.items():
        if key not in out:
            out[key] = value
        elif key in ANNOTATIONS:
            continue
        elif key == "properties":
            props = dict(out[key])
            for name, sub in value.items():
                props[name] = sub if name not in props or props[name] == sub else {"allOf": [props[name], sub]}
            out[key] = props
        elif key == "required":
            out[key] = list(dict.fromkeys(list(out[key]) + list(value)))
        elif key == "type":
            ta = {out[key]} if isinstance(out[key], str) else set(out[key])
            tb = {value} if isinstance(value, str) else set(value)
            both = ta & tb
            if "number" in ta and "integer" in tb or "integer" in ta and "number" in tb:
                both.add("integer")
            out[key] = sorted(both) if both else out[key]
            if not both:
                conflicts.append(key)
        elif key in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"):
            out[key] = value if isinstance(value, bool) else max(out[key], value)
        elif key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"):
            out[key] = value if isinstance(value, bool) else min(out[key], value)
        elif key == "enum":
            kept = [v for v in out[key] if v in value]
            out[key] = kept or out[key]
            if not kept:
                conflicts.append(key)
        elif key == "additionalProperties":
            if value is False or out[key] is False:
                out[key] = False
            elif out[key] != value:
                out[key] = {"allOf": [out[key], value]}
        elif key == "items" and isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = value if out[key] == value else {"allOf": [out[key], value]}
        elif out[key] != value:
            conflicts.append(key)
    return out


def _single_ref(schema: dict) -> dict | None:
    """The ``{"$ref": ...}`` of a schema that is nothing but ``allOf: [one reference]``."""
    parts = schema.get("allOf")
    if not isinstance(parts, list) or any(k not in ANNOTATIONS for k in schema if k != "allOf"):
        return None
    refs = [p for p in parts if isinstance(p, dict) and "$ref" in p]
    others = [p for p in parts if p not in refs]
    if len(refs) != 1 or any(p is not True and p != {} for p in others):
        return None
    return refs[0]


def _is_name(expr: str) -> bool:
    return bool(expr) and all(c.isalnum() or c == "-" for c in expr)


def ordered_members(b: GrammarBuilder, hint: str, members: list[tuple[str, bool]], sep: str,
                    extra: str | None) -> str:
    """Members in the given order, required ones present, optional ones skippable.

    `sep` goes between two present members; `extra` (one additional member, e.g. an undeclared
    key) may repeat after the declared ones. The construction keeps two suffix languages per
    position: "something was already written" (next member needs `sep`) and "nothing yet".
    """
    if extra is None and all(req for _, req in members):
        return seq(*[part for i, (m, _) in enumerate(members) for part in ((sep, m) if i else (m,))])
    n = len(members)
    after: list[str] = [""] * (n + 1)
    fresh: list[str] = [""] * (n + 1)
    if extra is not None:
        more = b.define(rule_name(f"{hint}-extra-next"), seq(sep, extra))
        after[n] = f"{more}*"
        fresh[n] = optional(seq(extra, f"{more}*"))
    for i in range(n - 1, -1, -1):
        member, req = members[i]
        nxt = after[i + 1]
        if not req and nxt and not _is_name(nxt):
            nxt = after[i + 1] = b.define(rule_name(f"{hint}-after{i + 1}"), nxt)
        rest = fresh[i + 1]
        if len(rest) > _INLINE_LIMIT and not _is_name(rest):
            # named, not copied into every earlier alternative: inline, the text (and the time
            # to build it) would grow with the square of the number of optional members
            rest = fresh[i + 1] = b.define(rule_name(f"{hint}-from{i + 1}"), rest)
        if req:
            after[i] = seq(sep, member, nxt)
            fresh[i] = seq(member, nxt)
        else:
            after[i] = seq(optional(seq(sep, member)), nxt)
            fresh[i] = alt(seq(member, nxt), rest) if rest else optional(seq(member, nxt))
    return fresh[0]


_INLINE_LIMIT = 240


def key_not_in(b: GrammarBuilder, hint: str, names: list[str]) -> str:
    """A JSON string rule for keys that are none of `names` (undeclared additional properties).

    A trie over the names: at each node the key may stop (unless a name ends there), continue
    along the trie, or leave it with any other character. Extra keys use no escape sequences,
    so a name that would need one can never be produced anyway.
    """
    plain_cls = '[^"\\\\\\x7F\\x00-\\x1F]'
    plain = b.fixed("key-char", plain_cls)
    if not names:
        return b.fixed("key-any", f'"\\"" {plain}* "\\""')
    trie: dict = {}
    for name in names:
        if any(c in '"\\' or ord(c) < 0x20 or ord(c) == 0x7F for c in name):
            continue
        node = trie
        for c in name:
            node = node.setdefault(c, {})
        node[""] = {}

    # One rule per trie node, named in pre-order and defined in post-order, walked without
    # recursion: a declared name thousands of characters long is a trie that deep.
    @dataclass
    class State:
        node: dict
        depth: int
        via: str  # the character leading here from the parent
        name: str = ""
        children: list[str] = field(default_factory=list)
        options: list[str] = field(default_factory=list)

    def enter(node: dict, depth: int, via: str) -> State | str:
        children = sorted(c for c in node if c)
        if not children:  # a declared name ends here and nothing extends it: one more char needed
            return b.fixed("key-more", f"{plain}+")
        return State(node, depth, via, b.reserve(f"{hint}-{depth}"), children)

    def finish(state: State) -> str:
        leave = "".join(class_char(c) for c in state.children)
        state.options.append(seq(f'[^"\\\\\\x7F\\x00-\\x1F{leave}]', f"{plain}*"))
        body = " | ".join(state.options)
        if "" not in state.node:  # no declared name ends here, so the key may stop
            body = f"( {body} )?"
        return b.set(state.name, body)

    first = enter(trie, 0, "")
    root = first if isinstance(first, str) else ""
    stack = [] if isinstance(first, str) else [first]
    while stack:
        state = stack[-1]
        if len(state.options) < len(state.children):
            c = state.children[len(state.options)]
            child = enter(state.node[c], state.depth + 1, c)
            if isinstance(child, str):
                state.options.append(seq(literal(c), child))
            else:
                stack.append(child)
            continue
        stack.pop()
        rule = finish(state)
        if stack:
            stack[-1].options.append(seq(literal(state.via), rule))
        else:
            root = rule
    return b.define(hint, f'"\\"" {root} "\\""')


# -- numbers ----------------------------------------------------------------------------------


def _join_digits(expr: str) -> str:
    """``"1" "2" [0-3]`` → ``"12" [0-3]``: adjacent digit literals read better merged."""
    while True:
        merged = re.sub(r'"(\d+)" "(\d+)"', r'"\1\2"', expr)
        if merged == expr:
            return expr
        expr = merged


def _digits_class(lo: str, hi: str) -> str:
    return literal(lo) if lo == hi else f"[{lo}-{hi}]"


def _any_digits(n: int) -> str:
    return "" if n == 0 else ("[0-9]" if n == 1 else f"[0-9]{{{n}}}")


def _same_length(lo: str, hi: str) -> list[str]:
    """Sequences matching the decimal strings between `lo` and `hi` (same length)."""
    if lo == hi:
        return [literal(lo)]
    k = len(lo) - 1
    if k == 0:
        return [_digits_class(lo, hi)]
    if lo[0] == hi[0]:
        return [seq(literal(lo[0]), s) for s in _same_length(lo[1:], hi[1:])]
    out: list[str] = []
    first, last = int(lo[0]), int(hi[0])
    if lo[1:] != "0" * k:
        out += [seq(literal(lo[0]), s) for s in _same_length(lo[1:], "9" * k)]
        first += 1
    tail: list[str] = []
    if hi[1:] != "9" * k:
        tail = [seq(literal(hi[0]), s) for s in _same_length("0" * k, hi[1:])]
        last -= 1
    if first <= last:
        out.append(seq(_digits_class(str(first), str(last)), _any_digits(k)))
    return out + tail


def uint_range(lo: int, hi: int | None) -> list[str]:
    """Alternatives for the non-negative integers in [lo, hi] (hi None: no upper bound)."""
    out: list[str] = []
    n_lo = len(str(lo))
    top = hi if hi is not None else 10 ** max(n_lo, INT_DIGITS) - 1
    for d in range(n_lo, len(str(top)) + 1):
        a = max(lo, 10 ** (d - 1) if d > 1 else 0)
        z = min(top, 10 ** d - 1)
        if a > z:
            continue
        if hi is None and d > n_lo and a == 10 ** (d - 1) and z == 10 ** d - 1:
            out.append(seq("[1-9]", f"[0-9]{{{d - 1},{len(str(top)) - 1}}}"))
            break
        out += [_join_digits(x) for x in _same_length(str(a), str(z))]
    return out


def integer_range(lo: int | None, hi: int | None) -> list[str]:
    """Alternatives for the JSON integers in [lo, hi] (None: unbounded on that side)."""
    out: list[str] = []
    if hi is None or hi >= 0:
        out += uint_range(max(lo, 0) if lo is not None else 0, hi)
    if lo is None or lo < 0:
        mag_lo = max(1, -hi) if hi is not None else 1
        mag_hi = -lo if lo is not None else None
        neg = uint_range(mag_lo, mag_hi)
        if neg:
            out.append(seq('"-"', alt(*neg)))
    return out


FRAC_ANY = f'( "." [0-9]{{1,{INT_DIGITS - 1}}} )?'
FRAC_NONZERO = f'"." "0"{{0,{INT_DIGITS - 2}}} [1-9] [0-9]{{0,{INT_DIGITS - 2}}}'
FRAC_ZERO = f'( "." "0"{{1,{INT_DIGITS - 1}}} )?'


def magnitude_range(lo: int, lo_x: bool, hi: int | None, hi_x: bool) -> list[str]:
    """Alternatives for decimals (no sign, no exponent) with value in the interval lo..hi."""
    out: list[str] = []
    if hi is None:
        if lo_x:
            out.append(seq(alt(*uint_range(lo, lo)), FRAC_NONZERO))
            out.append(seq(alt(*uint_range(lo + 1, None)), FRAC_ANY))
        else:
            out.append(seq(alt(*uint_range(lo, None)), FRAC_ANY))
        return out
    if lo == hi:
        return [] if lo_x or hi_x else [seq(literal(str(lo)), FRAC_ZERO)]
    out.append(seq(literal(str(lo)), FRAC_NONZERO if lo_x else FRAC_ANY))
    if lo + 1 <= hi - 1:
        out.append(seq(alt(*uint_range(lo + 1, hi - 1)), FRAC_ANY))
    if not hi_x:
        out.append(seq(literal(str(hi)), FRAC_ZERO))
    return out


def decimal_range(lo: int | None, lo_x: bool, hi: int | None, hi_x: bool) -> list[str]:
    """Alternatives for JSON numbers in the interval with integer ends (None: unbounded)."""
    out: list[str] = []
    if hi is None or hi > 0 or (hi == 0 and not hi_x):
        if lo is not None and lo >= 0:
            out += magnitude_range(lo, lo_x, hi, hi_x)
        else:
            out += magnitude_range(0, False, hi, hi_x)
    if lo is None or lo < 0:
        if hi is not None and hi < 0:
            m_lo, m_lo_x = -hi, hi_x
        else:
            m_lo, m_lo_x = 0, True
        m_hi, m_hi_x = (None, False) if lo is None else (-lo, lo_x)
        neg = magnitude_range(m_lo, m_lo_x, m_hi, m_hi_x)
        if neg:
            out.append(seq('"-"', alt(*neg)))
    return out


# -- standalone use ------------------------------------------------------------------------


@dataclass
class SchemaGrammar:
    gbnf: str
    warnings: list[str]


def schema_to_gbnf(schema: Any, root: str = "root", owner: str = "schema", ws_around: bool = False) -> SchemaGrammar:
    """A complete grammar whose `root` is one JSON value of `schema`.

    `ws_around` allows bounded whitespace before and after the value (for response formats).
    """
    b = GrammarBuilder()
    warnings = SchemaWarnings(owner)
    value = SchemaConverter(b, "schema" if root != "schema" else "value", schema, warnings).convert()
    body = seq(ws(b), value, ws(b)) if ws_around else value
    b.set(root, body)
    return SchemaGrammar(b.text(root), warnings.messages)
