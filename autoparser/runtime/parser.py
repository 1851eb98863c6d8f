"""`Parser`: the per-request object that parses whole outputs and creates streams.

Everything that depends only on the analysis and the request (marker sets, the tool table, the
start state) is computed here once; a `StreamParser` then holds just its position and a short
buffer. `parse` runs the streaming engine over the whole text, so a stream of the same parser
ends with the message `parse` returns; only the call ids differ, each drawn afresh when a call
is first emitted (a stream's `message()` carries the ids its deltas carried).
"""

from __future__ import annotations

import re
from typing import Any

from autoparser.language.request import KEY_HOLE, NAME_FORBIDDEN
from autoparser.runtime.channels import Output
from autoparser.runtime.engine import StreamParser
from autoparser.runtime.markers import MarkerSet
from autoparser.runtime.messages import MessageStream
from autoparser.runtime.spec import Spec


def kinds(*pairs: tuple[str, str]) -> dict[str, str]:
    """Marker -> kind, the first pair of each marker winning; empty markers left out."""
    table: dict[str, str] = {}
    for marker, kind in pairs:
        if marker and marker not in table:
            table[marker] = kind
    return table


class KeyedValueEnd:
    """The value end markers when the end marker names the argument's key (`</city>`), one set per
    key, the first 256 kept. A class, not a closure, so that a parser stream can be pickled (the
    server hands a request's stream to the process that generates its output)."""

    def __init__(self, arg_end: str, others: list[tuple[str, str]]) -> None:
        self._arg_end = arg_end
        self._others = others
        self._sets: dict[str, MarkerSet] = {}

    def __call__(self, key: str) -> MarkerSet:
        markers = self._sets.get(key)
        if markers is None:
            markers = MarkerSet(kinds((self._arg_end.replace(KEY_HOLE, key), "end"), *self._others))
            if len(self._sets) < 256:
                self._sets[key] = markers
        return markers


def build_marker_sets(spec: Spec) -> dict[str, Any]:
    """The marker sets each engine mode searches, with what each marker means there."""

    stops = [(stop, "stop") for stop in spec.stops]
    # a reasoning end marker inside the answer is text (`Use the </think> tag.`)
    dropped = [(m, "drop") for m in spec.content_markers]
    if spec.reasoning_start and spec.reasoning_end:
        # an empty reasoning block inside the answer (a model re-opening its thought channel and
        # closing it at once) is markup, not text
        dropped.append((spec.reasoning_start + " " + spec.reasoning_end, "drop"))
    tool_markers: list[tuple[str, str]] = []
    if spec.tools_on:
        tool_markers = [(spec.section_start, "section"), (spec.call_start, "call")]
        if spec.markerless:
            tool_markers.append(("[", "bracket") if spec.array else ("{", "brace"))
        elif spec.format != "json" and not spec.section_start and not spec.call_start:
            tool_markers.append((spec.name_start, "named"))
        elif spec.name_opens_call:
            tool_markers.append((spec.name_start, "named"))
    interrupt = spec.tool_opener if spec.format != "none" else ""
    # a call's own opener interrupts reasoning too, where the model left out the section opener
    interrupts = [(interrupt, "interrupt"), (spec.call_start if interrupt else "", "interrupt"),
                  (spec.content_start, "interrupt")]
    section = [(spec.call_start, "call"), (spec.section_end, "end"), *stops, (spec.call_separator, "sep")]
    if not spec.call_start:
        section.append(("{" if spec.format == "json" else spec.name_start, "named"))
    value_enders: list[tuple[str, str]] = []
    if spec.bare_keys:
        # `name(key=value)`: a value's end marker may be left out before the call's end or the next
        # argument (checked by what follows, see `calls_tagged`)
        value_enders = [(spec.call_end, "call_end"), (spec.arg_separator, "sep")]
    name_stops = [spec.name_end, spec.id_start, spec.args_start, spec.arg_start, spec.call_end]
    name_pattern = "|".join(re.escape(m) for m in sorted({m for m in name_stops if m}, key=len, reverse=True))
    forbidden = f"[{NAME_FORBIDDEN}]"
    return {
        "reasoning": MarkerSet(kinds((spec.reasoning_end, "end"), *stops, *interrupts)),
        "stops": MarkerSet(kinds(*stops)),
        "deferred": MarkerSet(kinds((spec.reasoning_end, "end"))),
        "content": MarkerSet(kinds(*tool_markers, *dropped, *stops)),
        "plain": MarkerSet(kinds(*dropped, *stops)),
        "section": MarkerSet(kinds(*section)),
        "raw": MarkerSet(kinds((spec.call_end, "call_end"), (spec.call_start, "call"),
                               (spec.section_end, "end"), (spec.section_start, "section"), *stops)),
        "id_end": MarkerSet(kinds((spec.id_end, "id_end"), (spec.args_start, "args"))),
        "args_close": MarkerSet(kinds((spec.arg_start if spec.format == "tag_tagged" else "", "arg_start"),
                                      (spec.call_end, "call_end"), (spec.args_end, "args_end"))),
        "key_end": MarkerSet(kinds((spec.arg_key_end, "raw"), (spec.arg_key_end_json, "json"))),
        "between_args": MarkerSet(kinds((spec.arg_start, "arg"), (spec.arg_separator, "sep"),
                                        (spec.call_end, "call_end"), (spec.call_start, "call"),
                                        (spec.section_end, "section_end"), *stops,
                                        # after a literal value (or a bracketed one between weak
                                        # markers), its end marker is still ahead
                                        (spec.arg_end if spec.literal_values or spec.bare_keys else "",
                                         "sep"))),
        "value_end": MarkerSet(kinds((spec.arg_end, "end"), *stops, *value_enders)),
        "keyed_value_end": KeyedValueEnd(spec.arg_end, [*stops, *value_enders]),
        # where a literal value may end: before these markers' first characters (or whitespace)
        "value_boundary": frozenset(m[0] for m in (spec.arg_end, spec.call_end, spec.section_end, *spec.stops,
                                                   spec.arg_separator) if m),
        "name_stop": re.compile(f"{name_pattern}|{forbidden}" if name_pattern else forbidden),
        "name_stop_longest": max((len(m) for m in name_stops if m), default=1),
    }


class Parser:
    """Parses one request's model output, whole (`parse`) or incrementally (`stream`).

    `analysis` is an `Analysis` or its `to_dict()` form. `tools` are OpenAI tool dicts: when
    given, calls to other names stay content and tagged arguments are typed by each tool's JSON
    schema. `tool_choice="none"` turns tool parsing off; a `{"type": "function", "function":
    {"name": ...}}` choice accepts only that name. `tool_call_policy` is "lenient" or "strict"
    (see the CONTRACT's section 4).

    Tool call dicts carry `"incomplete": true` when their arguments had to be closed by repair
    (the output was cut off, or the JSON broke off mid-way); such a call should not be executed
    without checking.

    `prompt` is the rendered prompt the output continues: the parser starts where it leaves the
    model (inside reasoning only if it opened reasoning, inside the assistant's partial answer
    when it continues one); `thinking` is the fallback when no prompt is given.
    """

    def __init__(self, analysis: Any, tools: list[dict[str, Any]] | None = None,
                 thinking: bool | None = None, parallel_tool_calls: bool = True,
                 tool_choice: Any = "auto", tool_call_policy: str = "lenient",
                 prompt: str | None = None) -> None:
        data = analysis.to_dict() if hasattr(analysis, "to_dict") else dict(analysis)
        self.analysis = analysis
        self.spec = Spec(data, tools, thinking, parallel_tool_calls, tool_choice, tool_call_policy, prompt)
        self._sets = build_marker_sets(self.spec)
        self._call_spec: Spec | None = None
        if self.spec.message_format is not None:
            # one message's call body, parsed by the engine alone: no reasoning, turns or messages
            body = dict(data, reasoning={}, content={}, messages={}, stop=[])
            self._call_spec = Spec(body, tools, None, parallel_tool_calls, tool_choice, tool_call_policy)
            self._call_sets = build_marker_sets(self._call_spec)

    def stream(self) -> StreamParser | MessageStream:
        """A new incremental parser: `feed(chunk)` -> deltas, `finish()` -> deltas, `message()`."""
        if self._call_spec is not None:
            return MessageStream(self.spec, self._sets, self._call_parser)
        return StreamParser(self.spec, self._sets)

    def _call_parser(self, out: Output) -> StreamParser:
        parser = StreamParser(self._call_spec, self._call_sets)
        parser.out = out
        return parser

    def parse(self, text: str) -> dict[str, Any]:
        """The assistant message for a complete model output."""
        stream = self.stream() if self._call_spec is not None else StreamParser(self.spec, self._sets, deltas=False)
        stream.feed(text)
        stream.finish()
        return stream.message()
