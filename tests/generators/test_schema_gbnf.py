"""JSON Schema → GBNF: llama.cpp accepts every grammar, samples validate, limits are reported."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest
from gbnf_sampler import Gbnf
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from autoparser.generators.gbnf_builder import GrammarBuilder
from autoparser.generators.regex_gbnf import RegexUnsupported, regex_to_gbnf
from autoparser.generators.schema_gbnf import decimal_range, integer_range, schema_to_gbnf
from autoparser.llama.grammar_check import validate_gbnf


def check(value: object, schema: dict) -> None:
    """Validate with the schema's own draft and that draft's format checks."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(value)


SCHEMAS = {
    "string": {"type": "string"},
    "number": {"type": "number"},
    "integer": {"type": "integer"},
    "boolean": {"type": "boolean"},
    "null": {"type": "null"},
    "any": {},
    "type-list": {"type": ["string", "integer", "null"]},
    "enum-mixed": {"enum": ["a", 1, None, True, {"k": [1, 2]}, "quote\"d"]},
    "const": {"const": {"x": "y\nz"}},
    "string-bounds": {"type": "string", "minLength": 2, "maxLength": 5},
    "object-required-optional": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"},
                       "d": {"type": "null"}},
        "required": ["b", "d"],
    },
    "object-all-optional": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "string"}}},
    "object-open": {"type": "object"},
    "object-extra-schema": {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "i": {"type": "string"}},
        "additionalProperties": {"type": "number", "minimum": 0},
    },
    "object-extra-true": {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": True},
    "object-closed": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
    "required-undeclared": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "zz"]},
    "nested": {
        "type": "object",
        "properties": {
            "user": {"type": "object", "properties": {
                "name": {"type": "string"},
                "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                            "required": ["city"]}},
                "required": ["name", "address"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["user"],
    },
    "array-bounds": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5},
                     "minItems": 2, "maxItems": 4},
    "array-max-only": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
    "array-empty": {"type": "array", "maxItems": 0},
    "tuple": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False,
              "minItems": 1},
    "tuple-rest": {"type": "array", "prefixItems": [{"const": "op"}], "items": {"type": "number"}},
    "any-of": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 10}]},
    "one-of-disjoint": {"oneOf": [{"type": "string"}, {"type": "boolean"}]},
    "all-of-merge": {"allOf": [
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
        {"properties": {"b": {"type": "integer", "minimum": 3}}, "required": ["b"]},
    ]},
    "ref-defs": {
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                            "required": ["x", "y"]}},
        "type": "object",
        "properties": {"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}},
        "required": ["from", "to"],
    },
    "ref-recursive": {
        "definitions": {"node": {"type": "object", "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/definitions/node"}, "maxItems": 3}},
            "required": ["value"]}},
        "$ref": "#/definitions/node",
    },
    "ref-root": {"type": "object", "properties": {"name": {"type": "string"}, "next": {"$ref": "#"}},
                 "required": ["name"]},
    "integer-range": {"type": "integer", "minimum": -273, "maximum": 5000},
    "integer-exclusive": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000},
    "integer-min-only": {"type": "integer", "minimum": 18},
    "integer-max-only": {"type": "integer", "maximum": -3},
    "integer-draft4": {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "minimum": 1,
                       "exclusiveMinimum": True, "maximum": 3},
    "number-range": {"type": "number", "minimum": -90, "maximum": 90},
    "number-exclusive": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    "number-min": {"type": "number", "minimum": 0},
    "pattern-anchored": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,4}$"},
    "pattern-unanchored": {"type": "string", "pattern": "ab+c"},
    "pattern-escapes": {"type": "string", "pattern": '^"[^"\\\\]*"\\.\\d+(?:x|y)?$'},
    "pattern-classes": {"type": "string", "pattern": "^\\w+@\\w+\\.(com|org)$"},
    "format-date": {"type": "string", "format": "date"},
    "format-time": {"type": "string", "format": "time"},
    "format-date-time": {"type": "string", "format": "date-time"},
    "format-uuid": {"type": "string", "format": "uuid"},
    "format-email": {"type": "string", "format": "email"},
    "format-ipv4": {"type": "string", "format": "ipv4"},
    "format-hostname": {"type": "string", "format": "hostname"},
    "unicode-keys": {"type": "object", "properties": {"città": {"type": "string"}, "a\"b": {"type": "integer"}},
                     "required": ["città", "a\"b"]},
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_grammar_is_valid_and_samples_validate(name: str) -> None:
    schema = SCHEMAS[name]
    result = schema_to_gbnf(schema)
    assert result.warnings == []
    validate_gbnf(result.gbnf)
    grammar = Gbnf(result.gbnf)
    rng = random.Random(name)
    for _ in range(60):
        text = grammar.sample(rng)
        check(json.loads(text), schema)
        assert grammar.matches(text)


@pytest.mark.parametrize("name", ["object-required-optional", "nested", "ref-recursive", "tuple"])
def test_canonical_json_of_valid_values_is_accepted(name: str) -> None:
    schema = SCHEMAS[name]
    grammar = Gbnf(schema_to_gbnf(schema).gbnf)
    examples = {
        "object-required-optional": [{"b": 1, "d": None}, {"a": "x", "b": -7, "c": True, "d": None}],
        "nested": [{"user": {"name": "Ann", "address": {"city": "Oslo"}}, "tags": ["a", "b"]}],
        "ref-recursive": [{"value": 1, "children": [{"value": 2, "children": []}, {"value": 3}]}],
        "tuple": [["a"], ["a", 2]],
    }[name]
    for value in examples:
        for indent in (None, 2):
            assert grammar.matches(json.dumps(value, indent=indent, ensure_ascii=False))


def test_extra_keys_never_repeat_declared_names() -> None:
    grammar = Gbnf(schema_to_gbnf(SCHEMAS["object-extra-schema"]).gbnf)
    assert grammar.matches('{"id": 1, "idx": 2.5, "": 0}')
    assert grammar.matches('{"i": "s", "j": 3}')
    assert not grammar.matches('{"id": 1, "id": 2}')
    assert not grammar.matches('{"i": "s", "i": 2}')
    assert not grammar.matches('{"x": -1}')  # extra values are typed too


def test_closed_object_rejects_unknown_keys() -> None:
    grammar = Gbnf(schema_to_gbnf(SCHEMAS["object-closed"]).gbnf)
    assert grammar.matches('{"a": "x"}') and grammar.matches("{}")
    assert not grammar.matches('{"b": "x"}')


def test_whitespace_is_bounded() -> None:
    grammar = Gbnf(schema_to_gbnf({"type": "array", "items": {"type": "integer"}}).gbnf)
    assert grammar.matches("[" + " " * 20 + "1]")
    assert not grammar.matches("[" + " " * 21 + "1]")


def test_property_order_follows_the_schema() -> None:
    grammar = Gbnf(schema_to_gbnf(SCHEMAS["object-required-optional"]).gbnf)
    assert grammar.matches('{"a": "x", "b": 1, "d": null}')
    assert not grammar.matches('{"b": 1, "a": "x", "d": null}')


# -- numbers -----------------------------------------------------------------------------------


def _numbers(alternatives: list[str]) -> Gbnf:
    return Gbnf("root ::= " + " | ".join(alternatives) + "\n")


@settings(max_examples=60, deadline=None)
@given(st.integers(-3000, 3000), st.integers(0, 4000))
def test_integer_ranges_are_exact(lo: int, width: int) -> None:
    hi = lo + width
    grammar = _numbers(integer_range(lo, hi))
    probes = {lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 0, -1, 1, (lo + hi) // 2, 10 ** len(str(abs(hi))), -10}
    for n in probes:
        assert grammar.matches(str(n)) == (lo <= n <= hi), n
    assert not grammar.matches("-0") and not grammar.matches("007")


@pytest.mark.parametrize("lo,hi", [(None, 5), (7, None), (-12, None), (None, -40), (0, None)])
def test_half_open_integer_ranges(lo: int | None, hi: int | None) -> None:
    grammar = _numbers(integer_range(lo, hi))
    for n in range(-200, 200):
        assert grammar.matches(str(n)) == ((lo is None or n >= lo) and (hi is None or n <= hi)), n
    assert grammar.matches("123456789012345") == (hi is None)


@settings(max_examples=60, deadline=None)
@given(st.integers(-30, 30), st.booleans(), st.integers(0, 40), st.booleans(),
       st.decimals(-80, 80, places=2, allow_nan=False))
def test_decimal_ranges_are_exact(lo: int, lo_x: bool, width: int, hi_x: bool, value) -> None:  # type: ignore[no-untyped-def]
    hi = lo + width
    assume(not (lo == hi and (lo_x or hi_x)))
    grammar = _numbers(decimal_range(lo, lo_x, hi, hi_x))
    inside = (value > lo if lo_x else value >= lo) and (value < hi if hi_x else value <= hi)
    text = str(value)
    if text.startswith("-") and float(value) == 0:
        text = text[1:]
    assert grammar.matches(text) == inside, (text, lo, lo_x, hi, hi_x)


# -- patterns ----------------------------------------------------------------------------------

PATTERNS = [
    "^[a-z]+$", "^\\d{3}-\\d{4}$", "^(foo|bar)+baz?$", "^[^\\s]{2,5}$", "colou?r", "^a.c$",
    "^[\\w.-]+$", "^(?:[01]\\d|2[0-3]):[0-5]\\d$", '^[^"]*$', "^\\\\d$", "^[\\u00e0-\\u00ff]+$", "x*",
    "^(a|)b$",
]


def _pattern_grammar(pattern: str) -> Gbnf:
    b = GrammarBuilder()
    body = regex_to_gbnf(b, pattern, "p")
    b.set("root", f'"\\"" {body} "\\""')
    text = b.text()
    validate_gbnf(text)
    return Gbnf(text)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_pattern_samples_match_the_regex(pattern: str) -> None:
    grammar = _pattern_grammar(pattern)
    rng = random.Random(pattern)
    for _ in range(80):
        value = json.loads(grammar.sample(rng))
        if any(0x1C <= ord(c) <= 0x1F for c in value):
            continue  # whitespace to Python's re, not to ECMAScript's
        assert re.search(pattern, value), (pattern, value)


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_strings_matching_the_regex_are_accepted(pattern: str, data) -> None:  # type: ignore[no-untyped-def]
    # re.ASCII: \d and \w are ASCII in ECMAScript, as in the grammar
    value = data.draw(st.from_regex(re.compile(pattern, re.ASCII), fullmatch=pattern.startswith("^")))
    assume(all(not 0xD800 <= ord(c) <= 0xDFFF for c in value))
    assume(not any(c.isspace() and not c.isascii() for c in value))  # spaces to ECMAScript only
    assume("\n" not in value[-1:])  # Python's $ also matches before a final newline
    assume(not any(c in "\r\u2028\u2029" for c in value))  # ECMAScript's . excludes them, Python's does not
    assume("\x7f" not in value)  # free parts write DEL escaped, as llama.cpp's JSON grammar does
    grammar = _pattern_grammar(pattern)
    assert grammar.matches(json.dumps(value, ensure_ascii=False))


@pytest.mark.parametrize("pattern", ["(?=a)b", "(a)\\1", "\\bword", "\\p{L}+", "a{3000}", "^a|b^", "(?i)abc"])
def test_untranslatable_patterns_raise(pattern: str) -> None:
    with pytest.raises(RegexUnsupported):
        regex_to_gbnf(GrammarBuilder(), pattern, "p")


def test_raw_mode_excludes_characters() -> None:
    b = GrammarBuilder()
    body = regex_to_gbnf(b, "^.+$", "p", json_mode=False, exclude=[(ord("<"), ord("<"))])
    b.set("root", body)
    grammar = Gbnf(b.text())
    assert grammar.matches('a"b\\c') and not grammar.matches("a<b")


# -- warnings ----------------------------------------------------------------------------------

WARNED = {
    "not": ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "$/properties/a", "not"),
    "pattern": ({"type": "string", "pattern": "(?<=x)y"}, "$", "pattern"),
    "format": ({"type": "string", "format": "ipv6"}, "$", "format"),
    "multipleOf": ({"type": "integer", "multipleOf": 5}, "$", "multipleOf"),
    "uniqueItems": ({"type": "array", "uniqueItems": True}, "$", "uniqueItems"),
    "patternProperties": ({"type": "object", "patternProperties": {"^x": {}}}, "$", "patternProperties"),
    "number-fraction-bound": ({"type": "number", "minimum": 0.5}, "$", "minimum"),
    "one-of-overlap": ({"oneOf": [{"type": "object"}, {"type": "object", "properties": {"a": {}}}]}, "$", "oneOf"),
    "unknown-keyword": ({"type": "string", "frobnicate": 1}, "$", "frobnicate"),
    "remote-ref": ({"$ref": "https://example.com/s.json"}, "$", "$ref"),
    "left-recursion": ({"anyOf": [{"$ref": "#"}, {"type": "string"}]}, "#/anyOf/0", "$ref"),
    "huge-max-length": ({"type": "string", "maxLength": 5000}, "$", "maxLength"),
    "min-properties": ({"type": "object", "properties": {"a": {}}, "minProperties": 1}, "$", "minProperties"),
    "recursive-all-of": ({"$defs": {"a": {"type": "object", "properties": {
        "x": {"allOf": [{"$ref": "#/$defs/a"}, {"required": ["x"]}]}}}}, "$ref": "#/$defs/a"},
        "#/$defs/a/properties/x/properties/x/allOf/0", "$ref"),
}


@pytest.mark.parametrize("name", sorted(WARNED))
def test_inexpressible_keywords_are_reported(name: str) -> None:
    schema, path, keyword = WARNED[name]
    result = schema_to_gbnf(schema, owner="tool f")
    assert any(w.startswith(f"tool f: {path}: '{keyword}'") for w in result.warnings), result.warnings
    validate_gbnf(result.gbnf)
    grammar = Gbnf(result.gbnf)
    rng = random.Random(name)
    for _ in range(10):
        json.loads(grammar.sample(rng))


def test_nullable_adds_null() -> None:
    grammar = Gbnf(schema_to_gbnf({"type": "string", "nullable": True}).gbnf)
    assert grammar.matches("null") and grammar.matches('"x"') and not grammar.matches("1")


def test_annotations_are_not_warnings() -> None:
    schema = {"type": "object", "title": "T", "description": "d", "$schema": "x", "examples": [{}],
              "properties": {"a": {"type": "string", "default": "x", "deprecated": True, "x-vendor": 1}}}
    assert schema_to_gbnf(schema).warnings == []


def test_rule_names_are_valid_gbnf() -> None:
    schema = {"type": "object", "properties": {"snake_case name!": {"type": "string"}, "日本": {"type": "integer"}},
              "required": ["snake_case name!", "日本"]}
    text = schema_to_gbnf(schema).gbnf
    for line in text.splitlines():
        assert re.fullmatch(r"[a-zA-Z0-9-]+", line.split(" ::= ")[0])
    validate_gbnf(text)


# -- random schemas ----------------------------------------------------------------------------

_names = st.sampled_from(["a", "b", "name", "x_y", "città", "with space"])
_scalars = st.one_of(
    st.just({"type": "string"}),
    st.builds(lambda lo, n: {"type": "string", "minLength": lo, "maxLength": lo + n},
              st.integers(0, 3), st.integers(0, 4)),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.builds(lambda lo, n: {"type": "integer", "minimum": lo, "maximum": lo + n},
              st.integers(-500, 500), st.integers(0, 2000)),
    st.builds(lambda lo: {"type": "number", "exclusiveMinimum": lo}, st.integers(-5, 5)),
    st.lists(st.one_of(st.text(max_size=4), st.integers(-9, 9), st.booleans(), st.none()),
             min_size=1, max_size=4, unique=True).map(lambda vs: {"enum": vs}),
    st.sampled_from([{"type": "string", "format": "date"}, {"type": "string", "pattern": "^[a-c]{1,3}$"}]),
)


def _containers(children):  # type: ignore[no-untyped-def]
    objects = st.builds(
        lambda props, req, extra: {"type": "object", "properties": props,
                                   "required": [k for k in props if k in req],
                                   **({"additionalProperties": extra} if extra is not None else {})},
        st.dictionaries(_names, children, max_size=4), st.sets(_names),
        st.sampled_from([None, False, True, {"type": "integer"}]))
    arrays = st.builds(lambda item, lo, n: {"type": "array", "items": item, "minItems": lo, "maxItems": lo + n},
                       children, st.integers(0, 2), st.integers(0, 3))
    unions = st.lists(children, min_size=1, max_size=3).map(lambda bs: {"anyOf": bs})
    return st.one_of(objects, arrays, unions)


SCHEMA_STRATEGY = st.recursive(_scalars, _containers, max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(SCHEMA_STRATEGY, st.integers(0, 2**16))
def test_random_schemas_give_valid_grammars_and_values(schema: dict, seed: int) -> None:
    result = schema_to_gbnf(schema)
    assert result.warnings == []
    validate_gbnf(result.gbnf)
    grammar = Gbnf(result.gbnf)
    rng = random.Random(seed)
    for _ in range(5):
        text = grammar.sample(rng)
        check(json.loads(text), schema)
