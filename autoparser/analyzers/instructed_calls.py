"""Calls a template never renders, read from the example call its instructions show.

Some templates drop an assistant's tool calls from the history, yet the instructions they write
when tools are given show how to write one::

    <tool_call>
    {"name": <function-name>, "arguments": <args-json-object>}
    </tool_call>

Read strictly, such an example states a JSON call format: an object of exactly two members, one
naming the function and one holding its arguments (their values placeholders or JSON), written
between a marker and its closing counterpart. The example must appear only in the prompt with
tools (the text the tools add), must not be a tool definition, and must be the only call format
the instructions show. Anything less (prose, an object without markers, a third member) is not
read as a call format.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from autoparser.analyzers.diff import is_marker, segments
from autoparser.analyzers.probes import NAME_A, NAME_B, Prober
from autoparser.analyzers.reasoning import closing_counterpart
from autoparser.tool_calls import CallMarkers, JsonCalls, ToolsAnalysis

# A placeholder for a value: `<function-name>`, `<args-json-object>`, `...`
_PLACEHOLDER = re.compile(r"<[^<>{}\n]{1,48}>|\.\.\.|\u2026")
_KEY = re.compile(r"""\s*(?:"([A-Za-z_][\w-]{0,31})"|'([A-Za-z_][\w-]{0,31})')\s*:\s*""")
_NAME_WORD = re.compile(r"name", re.IGNORECASE)
_ARGS_WORD = re.compile(r"arg|param", re.IGNORECASE)
_WINDOW = 240  # how far a marker next to the example is looked for: longer than any marker
_GAP = re.compile(r"[ \t]*\n?[ \t]*")  # the whitespace an example shows between a marker and the object


@dataclass(frozen=True)
class Member:
    key: str
    value: Any  # the decoded JSON value, or the placeholder's text
    placeholder: bool


@dataclass(frozen=True)
class InstructedCall:
    """One example call: its markers (with the whitespace shown) and its two keys."""

    call_start: str
    call_end: str
    name_field: str
    args_field: str
    text: str  # the example as written, markers included


def instructed_tools(prober: Prober, tool_shapes: tuple[list[dict[str, Any]], ...],
                     kwargs: dict[str, Any]) -> tuple[ToolsAnalysis, InstructedCall] | None:
    """The call format the instructions show, when the template renders no call."""
    shape = prober.shape
    try:
        for system in dict.fromkeys((shape.system, True)):
            prober.shape = dataclasses.replace(shape, system=system)
            without = prober.prompt(**kwargs) or ""
            for tools in tool_shapes:
                found = _only_example(prober.prompt(tools=tools, **kwargs) or "", without)
                if found is not None:
                    markers = CallMarkers(call_start=found.call_start, call_end=found.call_end)
                    calls = JsonCalls(name_field=found.name_field, args_field=found.args_field)
                    return ToolsAnalysis(supported=True, parallel=True, markers=markers, calls=calls,
                                         from_instructions=True), found
    finally:
        prober.shape = shape
    return None


def _only_example(prompt: str, without_tools: str) -> InstructedCall | None:
    """The example call in the text the tools add; None when there is none, or several that
    disagree."""
    found = [call for call in example_calls(prompt) if call.text not in without_tools]
    formats = {dataclasses.replace(call, text="") for call in found}
    return found[0] if len(formats) == 1 else None


def example_calls(text: str) -> list[InstructedCall]:
    """Every example call in `text`: a two-member object naming a function and its arguments,
    right between a marker and its closing counterpart."""
    out = []
    for at, char in enumerate(text):
        if char != "{":
            continue
        parsed = _object(text, at)
        if parsed is None:
            continue
        members, end = parsed
        fields = _call_fields(members)
        if fields is None:
            continue
        opener, closer = _marker_before(text, at), _marker_after(text, end)
        if opener is None or closer is None or closer[0] not in closing_counterpart(opener[0]):
            continue
        start_at, call_start = opener[1], text[opener[1]:at]
        call_end = text[end:closer[1]]
        out.append(InstructedCall(call_start=call_start, call_end=call_end, name_field=fields[0],
                                  args_field=fields[1], text=text[start_at:closer[1]]))
    return out


def _object(text: str, at: int) -> tuple[list[Member], int] | None:
    """The members of the object opening at `at` and where it ends; keys quoted with either quote,
    each value JSON or a placeholder."""
    members: list[Member] = []
    pos = at + 1
    decoder = json.JSONDecoder()
    while True:
        key = _KEY.match(text, pos)
        if key is None:
            return None
        pos = key.end()
        placeholder = _PLACEHOLDER.match(text, pos)
        if placeholder is not None:
            members.append(Member(key.group(1) or key.group(2), placeholder.group(), True))
            pos = placeholder.end()
        else:
            try:
                value, pos = decoder.raw_decode(text, pos)
            except ValueError:
                return None
            members.append(Member(key.group(1) or key.group(2), value, False))
        rest = re.compile(r"\s*([,}])").match(text, pos)
        if rest is None:
            return None
        pos = rest.end()
        if rest.group(1) == "}":
            return members, pos


def _call_fields(members: list[Member]) -> tuple[str, str] | None:
    """The keys of the name and the arguments, when the two members are exactly those: one
    naming the function (its key or placeholder says "name", its JSON value a string), the other
    the arguments (its key or placeholder says "arg" or "param", its JSON value an object). A
    value naming one of the tools makes the object a definition, not an example."""
    if len(members) != 2 or members[0].key == members[1].key:
        return None
    for name, args in (members, members[::-1]):
        if _is_name(name) and _is_args(args) and not (_is_name(args) and _is_args(name)):
            return name.key, args.key
    return None


def _is_name(member: Member) -> bool:
    if member.placeholder:
        return bool(_NAME_WORD.search(member.key) or _NAME_WORD.search(member.value))
    return (isinstance(member.value, str) and bool(_NAME_WORD.search(member.key))
            and member.value not in (NAME_A, NAME_B))


def _is_args(member: Member) -> bool:
    if member.placeholder:
        return bool(_ARGS_WORD.search(member.key) or _ARGS_WORD.search(member.value))
    return isinstance(member.value, dict) and bool(_ARGS_WORD.search(member.key))


def _marker_before(text: str, at: int) -> tuple[str, int] | None:
    """The marker right before `at` (across the whitespace shown) and where it starts."""
    head = text[max(0, at - _WINDOW):at]
    gap = len(head) - len(head.rstrip(" \t\n"))
    if not _GAP.fullmatch(head[len(head) - gap:]):
        return None
    pieces = segments(head[:len(head) - gap])
    if not pieces or not is_marker(pieces[-1]):
        return None
    return pieces[-1], at - gap - len(pieces[-1])


def _marker_after(text: str, at: int) -> tuple[str, int] | None:
    """The marker right after `at` (across the whitespace shown) and where it ends."""
    gap = _GAP.match(text, at)
    pos = gap.end() if gap else at
    pieces = segments(text[pos:pos + _WINDOW])
    if not pieces or not is_marker(pieces[0]):
        return None
    return pieces[0], pos + len(pieces[0])
