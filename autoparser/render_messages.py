"""The messages a chat template sees: what transformers hands it, plus arguments that print as JSON.

Transformers drops message keys whose value is None (templates handle a missing key better than
None) and exposes a message's reasoning under both `reasoning_content` and `thinking`; so does this.

Where real templates need more than transformers gives, this is deliberately kinder: tool-call
`arguments` may be a dict or a JSON string, and either way the template gets a `JsonArguments`: a
mapping (so `arguments is mapping`, `.items()`, `| items`, `['key']` work) whose text form is JSON
(so `{{ arguments }}`, `'x' + arguments`, `arguments ~ 'x'` and `| string` print JSON, where
transformers would print a Python dict repr or fail). `arguments is string` is therefore false.
Arguments given as text keep that exact text for `{{ arguments }}`; `arguments | tojson` always
serializes the object, never a quoted string.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["JsonArguments", "prepare_messages"]


class JsonArguments(dict):
    """Tool-call arguments: a mapping whose text form is JSON.

    Models and clients give arguments either as an object or as its JSON text; templates read them
    either as a mapping or as text. This type serves both: it is the dict, and `str()` (used by
    `{{ }}`, `~`, `| string`) and `+` with a string give JSON. Arguments that arrived as text
    keep that exact text as their printed form.
    """

    __slots__ = ("_text",)

    def __init__(self, value: Mapping[str, Any], text: str | None = None) -> None:
        super().__init__(value)
        self._text = text

    def __str__(self) -> str:
        if self._text is not None:
            return self._text
        return json.dumps(self, ensure_ascii=False)

    def __add__(self, other: Any) -> Any:
        if isinstance(other, str):
            return str(self) + other
        return NotImplemented

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, str):
            return other + str(self)
        return NotImplemented


def _as_json_arguments(arguments: Any) -> Any:
    """Dicts and JSON-object text become `JsonArguments`; anything else is left as given."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to read: kept as text
            return arguments
        return JsonArguments(parsed, arguments) if isinstance(parsed, dict) else arguments
    if isinstance(arguments, Mapping) and not isinstance(arguments, JsonArguments):
        return JsonArguments(arguments)
    return arguments


def _normalize_call(call: Any) -> Any:
    if not isinstance(call, Mapping):
        return call
    call = dict(call)
    function = call.get("function")
    if isinstance(function, Mapping):
        function = dict(function)
        if "arguments" in function:
            function["arguments"] = _as_json_arguments(function["arguments"])
        call["function"] = function
    if "arguments" in call:
        call["arguments"] = _as_json_arguments(call["arguments"])
    return call


_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def prepare_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as transformers hands them to a template, plus `JsonArguments`.

    Copies each message (the caller's stay untouched), drops keys whose value is None, exposes
    reasoning under `reasoning_content` and `thinking` whichever name it came in, and wraps
    tool-call arguments.
    """
    prepared = []
    for message in messages:
        if not isinstance(message, Mapping):
            prepared.append(message)
            continue
        message = {key: value for key, value in message.items() if value is not None}
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        calls = message.get("tool_calls")
        if isinstance(calls, list | tuple):
            message["tool_calls"] = [_normalize_call(c) for c in calls]
        prepared.append(message)
    return prepared
