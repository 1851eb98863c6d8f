"""What the schema converter knows of JSON Schema's keywords.

Which keywords it reads, which it only tolerates (annotations) and which it cannot express; the
JSON type of a value; and how the parts of an ``allOf`` combine, keyword by keyword.
"""

from __future__ import annotations

import json
from typing import Any

from autoparser.generators.gbnf_builder import literal

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


def json_literal(value: Any) -> str:
    return literal(json.dumps(value, ensure_ascii=False))


def type_of(value: Any) -> str:
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


def matches_type(value: Any, types: list[str]) -> bool:
    t = type_of(value)
    return t in types or (t == "integer" and "number" in types)


def branches_disjoint(branches: list) -> bool:
    """Whether no value can match two of the branches (each a `const`, an `enum` or one type)."""
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
    return not any(type_of(json.loads(c)) in types or
                   (type_of(json.loads(c)) == "integer" and "number" in types) for c in consts)


def merge_schemas(a: dict, b: dict, conflicts: list[str]) -> dict:
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


def single_ref(schema: dict) -> dict | None:
    """The ``{"$ref": ...}`` of a schema that is nothing but ``allOf: [one reference]``."""
    parts = schema.get("allOf")
    if not isinstance(parts, list) or any(k not in ANNOTATIONS for k in schema if k != "allOf"):
        return None
    refs = [p for p in parts if isinstance(p, dict) and "$ref" in p]
    others = [p for p in parts if p not in refs]
    if len(refs) != 1 or any(p is not True and p != {} for p in others):
        return None
    return refs[0]
