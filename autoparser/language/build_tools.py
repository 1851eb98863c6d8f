"""Tools and `tool_choice` as the builder reads them, and their JSON schemas as far as the layout of
tagged arguments needs them (`$ref`, `allOf`, plain strings). Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# -- tools and tool_choice ---------------------------------------------------------------------


def tool_function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = tool.get("function", tool)
    return fn if isinstance(fn, Mapping) else {}


def tool_name(tool: Mapping[str, Any]) -> str:
    return str(tool_function(tool).get("name", ""))


def chosen_tools(tools: list[Mapping[str, Any]], tool_choice: Any) -> tuple[str, list[Mapping[str, Any]]]:
    """Normalize `tool_choice` to ("none"|"auto"|"required", tools it allows)."""
    if isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function", tool_choice)
        name = fn.get("name") if isinstance(fn, Mapping) else None
        chosen = [t for t in tools if tool_name(t) == name]
        if not chosen:
            raise ValueError(f"tool_choice names {name!r}, which is not among the tools")
        return "required", chosen
    choice_ = tool_choice or "auto"
    if choice_ not in ("none", "auto", "required"):
        raise ValueError(f"tool_choice must be 'none', 'auto', 'required' or a named tool, not {choice_!r}")
    return choice_, list(tools)


# -- schemas, as far as the layout of tagged arguments needs them -------------------------------


def is_plain_string(schema: Any) -> bool:
    """A schema whose values the tagged formats write as raw text: only strings (or null,
    which raw text cannot spell and which is therefore left out)."""
    if not isinstance(schema, dict) or any(k in schema for k in ("anyOf", "oneOf", "allOf", "$ref")):
        return False
    declared = schema.get("type")
    if isinstance(declared, list):
        declared = [t for t in declared if t != "null"]
        declared = declared[0] if declared == ["string"] else None
    if declared == "string":
        return True
    if declared is None and isinstance(schema.get("enum"), list) and schema["enum"]:
        return all(isinstance(v, str) for v in schema["enum"])
    return False


def resolve_ref(root: Any, ref: Any) -> Any:
    """The target of a local ``$ref`` (``#/$defs/x``) in `root`; None when it does not resolve."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node = root
    for part in (p for p in ref[1:].split("/") if p):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def object_shape(root: Any) -> dict[str, Any]:
    """An object schema with a root ``$ref`` followed and ``allOf`` parts folded in, for its
    properties, required keys and `additionalProperties` (the values keep their own schemas)."""
    schema = root if isinstance(root, dict) else {}
    if "$ref" in schema:
        target = resolve_ref(root, schema["$ref"])
        schema = target if isinstance(target, dict) else {}
    return _fold_all_of(root, schema, [])


def _fold_all_of(root: Any, schema: dict[str, Any], seen: list[str]) -> dict[str, Any]:
    if not isinstance(schema.get("allOf"), list):
        return schema
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        if isinstance(part, dict) and "$ref" in part:
            if part["$ref"] in seen:
                continue
            seen.append(part["$ref"])
            target = resolve_ref(root, part["$ref"])
            part = {**(target if isinstance(target, dict) else {}), **{k: v for k, v in part.items() if k != "$ref"}}
        if not isinstance(part, dict):
            continue
        part = _fold_all_of(root, part, seen)
        for key, value in part.items():
            if key not in merged:
                merged[key] = value
            elif key == "properties" and isinstance(value, dict):
                props = dict(merged[key])
                for name, sub in value.items():
                    props[name] = sub if name not in props or props[name] == sub else {"allOf": [props[name], sub]}
                merged[key] = props
            elif key == "required" and isinstance(value, list):
                merged[key] = list(dict.fromkeys(list(merged[key]) + value))
    return merged
