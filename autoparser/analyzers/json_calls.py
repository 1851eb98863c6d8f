"""Calls written as JSON objects: the object that holds the probe call's name and arguments, and
the key names it uses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from autoparser.analyzers.call_markers import Span
from autoparser.analyzers.probes import ARGS_A, ARGS_B, ID_A, NAME_A, NAME_B
from autoparser.tool_calls import JsonCalls


@dataclass
class FoundObject:
    start: int
    end: int
    value: dict[str, Any]


def json_objects(text: str) -> list[FoundObject]:
    """Every JSON object in `text`, found by decoding at each `{`."""
    decoder = json.JSONDecoder()
    found = []
    for at, char in enumerate(text):
        if char != "{":
            continue
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(FoundObject(at, end, value))
    return found


def find_json_call(text: str, name: str = NAME_A, args: dict[str, Any] = ARGS_A,
                   after: int = 0) -> FoundObject | None:
    """The JSON object that is one call: the smallest holding name and arguments, widened to wrappers."""
    objects = [o for o in json_objects(text) if o.start >= after]
    inner = [o for o in objects if _holds(o.value, name) and any(_is_args(v, args) for v in _values(o.value))]
    if not inner:
        return None
    call = min(inner, key=lambda o: o.end - o.start)
    while True:
        wrappers = [o for o in objects if o.start < call.start and o.end >= call.end and call.value in o.value.values()]
        if not wrappers:
            return call
        call = min(wrappers, key=lambda o: o.end - o.start)


def json_calls(one: str, two: str | None, call: FoundObject) -> tuple[JsonCalls, list[Span]] | None:
    """The key names of call A, and the spans of the calls in both renders."""
    inner, function_field = call.value, None
    for key, value in call.value.items():
        if isinstance(value, dict) and NAME_A in value.values():
            function_field, inner = key, value
    args_field = next(k for k, v in inner.items() if _is_args(v, ARGS_A))
    id_field = None
    for container in (call.value, inner):
        for key, value in container.items():
            if value == ID_A:
                id_field = key
    spans = [Span(call.start, call.end)]
    if two is not None:
        first = find_json_call(two)
        second = find_json_call(two, NAME_B, ARGS_B, after=first.end if first else 0)
        if first is None or second is None:
            return None
        spans += [Span(first.start, first.end), Span(second.start, second.end)]
    found = JsonCalls(name_field=next(k for k, v in inner.items() if v == NAME_A), args_field=args_field,
                      id_field=id_field if id_field is not None else _numbered_id_field(two, call.value),
                      function_field=function_field,
                      array=one[: call.start].rstrip().endswith("[") and one[call.end:].lstrip().startswith("]"),
                      args_as_string=isinstance(inner[args_field], str))
    return found, spans


def json_args_span(text: str, args: dict[str, Any], after: int = 0) -> Span | None:
    """Where the arguments `args` are written as a JSON object of their own."""
    for found in json_objects(text):
        if found.start >= after and found.value == args:
            return Span(found.start, found.end)
    return None


def _numbered_id_field(two: str | None, first: dict[str, Any]) -> str | None:
    """A key the template fills with the call's position instead of the given id: "0" then "1",
    or counted on from calls that earlier turns hold ("1" then "2" after a retrieval turn)."""
    second = find_json_call(two, NAME_B, ARGS_B) if two is not None else None
    if second is None:
        return None
    for key, value in first.items():
        at, next_at = _position(value), _position(second.value.get(key))
        if at is not None and next_at == at + 1:
            return key
    return None


def _position(value: Any) -> int | None:
    text = str(value)
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 3 else None


def _holds(value: Any, target: Any) -> bool:
    if value == target:
        return True
    if isinstance(value, dict):
        return any(_holds(v, target) for v in value.values())
    if isinstance(value, list):
        return any(_holds(v, target) for v in value)
    return False


def _is_args(value: Any, args: dict[str, Any]) -> bool:
    if value == args:
        return True
    if isinstance(value, str):
        try:
            return json.loads(value) == args
        except ValueError:
            return False
    return False


def _values(obj: dict[str, Any]) -> list[Any]:
    out = list(obj.values())
    for v in obj.values():
        if isinstance(v, dict):
            out.extend(v.values())
    return out
