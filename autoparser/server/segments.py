"""Parser deltas as a sequence of output segments: reasoning, text, tool calls.

The Responses API and AG-UI both describe an answer as items that open, grow and close
(a reasoning item, a message, one item per function call), where chat completions sends flat
deltas. `Segmenter` turns the deltas into those steps once, so each wire format only names
its events.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

SegmentKind = Literal["reasoning", "text", "call"]


@dataclass
class Segment:
    kind: SegmentKind
    id: str
    """The item's own id (`rs_…`, `msg_…`, `fc_…`); a call's id for the client is `call_id`."""
    text: str = ""
    """The reasoning, the text, or the call's arguments so far."""
    name: str = ""
    call_id: str = ""
    logprobs: list[Any] = field(default_factory=list)


@dataclass
class Step:
    action: Literal["open", "append", "close"]
    segment: Segment
    text: str = ""
    logprobs: list[Any] = field(default_factory=list)


_PREFIX = {"reasoning": "rs_", "text": "msg_", "call": "fc_"}


def new_id(kind: SegmentKind) -> str:
    return _PREFIX[kind] + uuid.uuid4().hex


class Segmenter:
    """Feed deltas in order; `close` at the end. `segments` holds everything seen."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self._open: Segment | None = None
        self._calls: dict[int, Segment] = {}

    def feed(self, delta: dict[str, Any]) -> list[Step]:
        steps: list[Step] = []
        logprobs = list(delta.get("_logprobs") or [])
        if delta.get("reasoning_content"):
            steps += self._append("reasoning", delta["reasoning_content"], logprobs)
        if delta.get("content"):
            steps += self._append("text", delta["content"], logprobs)
        for call in delta.get("tool_calls") or []:
            steps += self._call(call)
        return steps

    def close(self) -> list[Step]:
        if self._open is None:
            return []
        segment, self._open = self._open, None
        return [Step("close", segment)]

    def _append(self, kind: SegmentKind, text: str, logprobs: list[Any]) -> list[Step]:
        steps: list[Step] = []
        if self._open is None or self._open.kind != kind:
            steps += self.close()
            steps += self._start(Segment(kind, new_id(kind)))
        segment = self._open
        assert segment is not None
        segment.text += text
        segment.logprobs += logprobs
        return [*steps, Step("append", segment, text, logprobs)]

    def _call(self, call: dict[str, Any]) -> list[Step]:
        index = call.get("index", 0)
        function = call.get("function") or {}
        steps: list[Step] = []
        segment = self._calls.get(index)
        if segment is None:
            steps += self.close()
            segment = Segment("call", new_id("call"), name=function.get("name") or "",
                              call_id=call.get("id") or "call_" + uuid.uuid4().hex[:24])
            self._calls[index] = segment
            steps += self._start(segment)
        elif function.get("name"):
            segment.name += function["name"]
        arguments = function.get("arguments") or ""
        if arguments:
            segment.text += arguments
            steps.append(Step("append", segment, arguments))
        return steps

    def _start(self, segment: Segment) -> list[Step]:
        self._open = segment
        self.segments.append(segment)
        return [Step("open", segment)]


def segments_of(message: dict[str, Any]) -> list[Segment]:
    """The segments of a whole message (the non-streamed answer), in output order."""
    segmenter = Segmenter()
    if message.get("reasoning_content"):
        segmenter.feed({"reasoning_content": message["reasoning_content"]})
    if message.get("content"):
        segmenter.feed({"content": message["content"]})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        segmenter.feed({"tool_calls": [{"index": index, "id": call.get("id"),
                                        "function": {"name": function.get("name"),
                                                     "arguments": function.get("arguments")}}]})
    segmenter.close()
    return segmenter.segments
