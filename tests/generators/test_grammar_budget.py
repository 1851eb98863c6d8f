"""The grammar cost budget: schemas are priced before llama.cpp sees their grammar.

Over budget is an error naming the tool and the JSON path (the server answers 400), except a
``pattern`` whose nested bounds multiply past the regex budget, which is dropped with a warning.
"""

from __future__ import annotations

from typing import Any

import pytest

from autoparser.generators.schema_gbnf import DEFAULT_BUDGET, SchemaError, check_schema, schema_to_gbnf


def obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        schema["required"] = required
    return schema


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = obj({"a": schema})
    return schema


@pytest.mark.parametrize("schema, where, words", [
    (obj({"x": None}), "P.properties.x", "must be an object or a boolean, not null"),
    (obj({"x": 5}), "P.properties.x", "not a number"),
    (obj({"x": {"type": "integer", "minimum": -10 ** 400}}), "P.properties.x.minimum", "out of range"),
    (obj({"x": {"type": "number", "maximum": float("inf")}}), "P.properties.x.maximum", "out of range"),
    (obj({"x": {"enum": list(range(100_000))}}), "P.properties.x.enum", "100,000 values"),
    (obj({"x": {"enum": ["v" * 1000] * 100}}), "P.properties.x.enum", "characters"),
    (obj({f"p{i}": {"type": "integer"} for i in range(10_000)}), "P.properties", "10,000 properties"),
    (obj({f"p{i}": {"type": "integer"} for i in range(300)}), "P.properties", "300 optional properties"),
    (nested(150), "P" + ".properties.a" * 33, "nested more than 32 deep"),
    (obj({"x": {"anyOf": "nope"}}), "P.properties.x.anyOf", "must be a list"),
    (obj({"x": {"type": "string"}}, required="x"), "P.required", "list of property names"),  # type: ignore[arg-type]
    (obj({f"s{i}": {"type": "string", "maxLength": 2000} for i in range(60)}), "P.properties.s",
     "over the grammar budget"),
])
def test_schemas_over_budget_or_malformed_are_named_errors(schema: Any, where: str, words: str) -> None:
    with pytest.raises(SchemaError) as info:
        check_schema(schema, owner="tool f", param="P")
    assert str(info.value).startswith("tool f: ") and words in str(info.value)
    assert info.value.param is not None and info.value.param.startswith(where)
    assert "\n" not in str(info.value)


def test_the_budget_allows_ordinary_schemas() -> None:
    check_schema(obj({f"p{i}": {"type": "integer"} for i in range(DEFAULT_BUDGET.max_optional_properties)}),
                 owner="tool f")
    check_schema(obj({"x": {"enum": [f"v{i}" for i in range(DEFAULT_BUDGET.max_enum_values)]}}), owner="tool f")
    check_schema(nested(DEFAULT_BUDGET.max_depth), owner="tool f")
    check_schema(obj({f"p{i}": {"type": "integer"} for i in range(600)}, required=[f"p{i}" for i in range(600)]),
                 owner="tool f")


def test_the_converter_prices_too_but_reads_odd_schemas_leniently() -> None:
    assert schema_to_gbnf(obj({"x": None})).gbnf  # any value, as before
    with pytest.raises(SchemaError, match="out of range"):
        schema_to_gbnf(obj({"x": {"type": "integer", "minimum": -10 ** 400}}))
    with pytest.raises(SchemaError, match="100,000 values"):
        schema_to_gbnf(obj({"x": {"enum": list(range(100_000))}}))


def test_exponential_reference_expansion_is_refused() -> None:
    branch = {"type": "object"}  # a keyword beside `$ref` makes the converter inline the target
    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}", **branch}, {"$ref": f"#/$defs/d{i + 1}", **branch}]}
            for i in range(30)}
    defs["d30"] = {"type": "object", "properties": {"x": {"type": "string"}}}
    with pytest.raises(SchemaError, match="expands to more than"):
        schema_to_gbnf({"$ref": "#/$defs/d0", "$defs": defs})


def test_a_pattern_whose_nested_bounds_multiply_is_dropped_with_a_warning() -> None:
    result = schema_to_gbnf({"type": "string", "pattern": "^((a{0,2000}){0,2000})$"})
    assert any("multiply to 4,000,000" in w and "not enforced" in w for w in result.warnings)
    kept = schema_to_gbnf({"type": "string", "pattern": "^((a{0,40}){0,40})$"})
    assert not kept.warnings


def test_deeply_nested_pattern_groups_are_dropped_with_a_warning() -> None:
    result = schema_to_gbnf({"type": "string", "pattern": "(" * 5000 + "a" + ")" * 5000})
    assert any("nested too deeply" in w for w in result.warnings)


def test_optional_properties_grammar_grows_linearly() -> None:
    def size(n: int) -> int:
        return len(schema_to_gbnf(obj({f"p{i}": {"type": "integer"} for i in range(n)})).gbnf)

    assert size(200) < 2.2 * size(100)
