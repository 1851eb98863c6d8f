"""The request side of the output language: where the output starts, what the request allows,
and the format rules every backend must read the same way.

The analysis is read as `AnalysisData` (the standalone module reads its embedded dict back with
`AnalysisData.from_dict`, and runs the same code). Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoparser.analysis_data import AnalysisData

KEY_HOLE = "{key}"  # where an argument's end marker names its key (`</{key}>`)
# the keys that hold a JSON call's arguments: the template's own, and the other common spelling
ARGS_KEYS = ("arguments", "parameters")
# characters that cannot be part of a tool name written between markers
NAME_FORBIDDEN = "\\s\"'<>{}\\[\\](),;=|`"
_FENCE_WITH_LANGUAGE = re.compile(r"(```)[A-Za-z][\w+-]*")
# punctuation that values often contain: a marker made only of it (or two characters long) is weak
_WEAK_CHARS = frozenset(",;:)]}'\"= \t\n")


def core(marker: str | None) -> str:
    """A marker without its surrounding whitespace."""
    return (marker or "").strip()


def is_weak(marker: str) -> bool:
    """Whether a marker core is punctuation that may occur inside values (`, `, `)`, `]`)."""
    return bool(marker) and (len(marker) <= 2 or all(c in _WEAK_CHARS for c in marker))


def args_keys(args_field: str | None) -> tuple[str, ...]:
    """The keys accepted for a JSON call's arguments, the template's own first."""
    field = args_field or "arguments"
    return (field,) + tuple(k for k in ARGS_KEYS if k != field)


def bare_fence(args_start: str) -> str:
    """For arguments opened by a code fence with a language tag (```json), the fence without
    the tag, which models also write; "" for any other opener."""
    fence = _FENCE_WITH_LANGUAGE.fullmatch(core(args_start))
    return fence.group(1) if fence else ""


# Where the output starts (`start_state`): inside reasoning the prompt opened; in content with
# reasoning over or never opened for this turn; free to open reasoning itself; or free with
# reasoning expected, so that an end marker with no start closes reasoning it implied.
OPEN, CLOSED, FREE, IMPLIED = "open", "closed", "free", "implied"


def after_last(text: str, markers: list[str]) -> int:
    """The position right after the last occurrence of any of `markers` in text (0: none)."""
    best = 0
    for marker in markers:
        if marker:
            found = text.rfind(marker)
            if found >= 0:
                best = max(best, found + len(marker))
    return best


def assistant_header(analysis: AnalysisData) -> str:
    """The generation prompt without its reasoning markers: what opens an assistant turn."""
    header = core(analysis.generation_prompt)
    for marker in (core(analysis.reasoning.start), core(analysis.reasoning.end)):
        if marker and marker in header:
            header = header[: header.index(marker)]
    return core(header)


def start_state(analysis: AnalysisData, thinking: bool | None, prompt: str | None) -> tuple[str, bool]:
    """Where the model's output starts, and whether it continues text the prompt began (prefill).

    With a prompt, reasoning is open only when the prompt's last turn opened it and did not
    close it; otherwise the output is content when the prompt continues the assistant's own
    message, or when the template opens reasoning itself (`forced_open`) and did not here (a
    turn after a tool result). `thinking` decides only when there is no prompt.
    """
    reasoning = analysis.reasoning
    mode = reasoning.mode
    start, end = core(reasoning.start), core(reasoning.end)
    has_reasoning = mode != "none" and bool(end)
    expected = has_reasoning and analysis.thinking_enabled(thinking)
    free = IMPLIED if expected and mode == "tagged" and start else FREE
    if expected and reasoning.start_inferred:
        free = OPEN  # the template never opens reasoning: the output starts inside it (policy.py)
    if prompt is None:
        if expected and reasoning.forced_open:
            return OPEN, False
        return free, False
    stops = [core(s) for s in analysis.stop]
    turn = after_last(prompt, stops)  # the last turn starts after the last end-of-turn marker
    if has_reasoning and start:
        opened = prompt.rfind(start)
        if opened >= turn and opened >= 0 and prompt.find(end, opened) < 0:
            return OPEN, bool(prompt[opened + len(start):].strip())
    header = assistant_header(analysis)
    anchor = after_last(prompt, [header, end if has_reasoning else ""])
    markers = analysis.tools.markers
    tool_markers = [core(m) for m in (markers.section_start, markers.call_start, markers.section_end, markers.call_end)]
    tail = prompt[anchor:]
    if anchor > turn and tail.strip() and header and not any(m and m in tail for m in tool_markers):
        return CLOSED, True  # the prompt ends inside the assistant's own partial answer
    # a template that opens reasoning itself and did not here (a turn after a tool result); where
    # thinking is not on for this request, a prompt that did not close reasoning leaves it free
    if has_reasoning and ((end and prompt.rstrip().endswith(end)) or (reasoning.forced_open and expected)):
        return CLOSED, False
    return free, False


def value_kind(schema: Any) -> str:
    """How a tagged argument's raw text becomes JSON: "string", "json" or "auto" (guess)."""
    if not isinstance(schema, dict):
        return "auto"
    kind = schema.get("type")
    if isinstance(kind, list):
        real = [k for k in kind if k != "null"]
        if real == ["string"]:
            return "string"
        return "auto" if "string" in real else "json"
    if kind == "string":
        return "string"
    if isinstance(kind, str):
        return "json"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        return "string"
    return "auto"


def has_string_alternative(schema: Any) -> bool:
    """Whether a union (`anyOf` / `oneOf`, or a list of types) has a string among its alternatives:
    raw text that is no JSON value is then that string, even where it looks structured in the
    template's own nested syntax."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if isinstance(kind, list) and "string" in kind and len([k for k in kind if k != "null"]) > 1:
        return True
    return any(isinstance(options, list) and any(value_kind(o) == "string" for o in options)
               for options in (schema.get("anyOf"), schema.get("oneOf")))


def schema_type(schema: Any) -> str | None:
    if isinstance(schema, dict) and isinstance(schema.get("type"), str):
        return schema["type"]
    return None


def tool_table(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
    """Tool name -> {argument name: schema}, or None when the request named no tools."""
    if not tools:
        return None
    table: dict[str, dict[str, Any]] = {}
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else {}
        name = function.get("name")
        if not isinstance(name, str):
            continue
        parameters = function.get("parameters") or {}
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        table[name] = properties if isinstance(properties, dict) else {}
    return table


@dataclass(frozen=True)
class Request:
    """What one request asks of the output (the OpenAI fields, and where the output starts).

    `special_tokens`: marker texts that are single tokens of the vocabulary. `lazy`: for
    ``"auto"``, free output until a trigger. `free_text_limit` caps every free text.
    `end_tokens`: texts of end-of-generation tokens; a closing marker is cut before one.
    `reading`: the language the parser reads (lenient policy), wider than the one generation
    writes: any tool name when no tools are given, JSON arguments of any shape, text between
    and after the calls as content, a reasoning block whatever `thinking` says (`build_reading._Reading`).
    `response_format`: the OpenAI `response_format` the answer follows (`json_schema`, `json_object`;
    `text` or None: free text); the parser reads a JSON answer in a code fence as that JSON.
    """

    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: Any = "auto"
    thinking: bool | None = None
    parallel_tool_calls: bool = True
    prompt: str | None = None
    special_tokens: tuple[str, ...] = ()
    lazy: bool = True
    free_text_limit: int | None = None
    end_tokens: tuple[str, ...] = ()
    policy: str = "lenient"
    reading: bool = False
    response_format: Mapping[str, Any] | None = None


def asks_for_json(response_format: Any) -> bool:
    """Whether an OpenAI `response_format` asks for a JSON answer (`json_schema`, `json_object`)."""
    return isinstance(response_format, Mapping) and response_format.get("type") in ("json_schema", "json_object")
