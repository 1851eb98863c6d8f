"""Where parsed text goes: the reasoning and content channels, tool calls, and the deltas.

Whitespace rule (the same for streaming and whole parses, which is what keeps them equal): a
channel drops the whitespace before its first visible character and after its last one, and
keeps every whitespace run in between exactly. A run is held until the channel knows whether
more visible text follows, so whitespace between structural parts (after `</think>`, before and
between tool calls, before the end-of-turn token) never reaches the client unless text follows.
"""

from __future__ import annotations

import re

_TRAILING_WS = re.compile(r"\s*\Z")


class TextChannel:
    """Accumulates one text field of the message; `push` returns what may be emitted now."""

    __slots__ = ("parts", "pending", "started")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.pending = ""
        self.started = False

    def push(self, text: str) -> str:
        if not text:
            return ""
        if not self.started:
            text = text.lstrip()
            if not text:
                return ""
            self.started = True
        cut = _TRAILING_WS.search(text).start()
        if cut == 0:
            self.pending += text
            return ""
        out = self.pending + text[:cut] if self.pending else text[:cut]
        self.pending = text[cut:]
        self.parts.append(out)
        return out

    def value(self) -> str | None:
        return "".join(self.parts) or None


class ToolCall:
    """One tool call of the message as it is being streamed.

    Argument fragments are joined in groups as they arrive, so a long argument streamed in tiny
    chunks is held as a few hundred strings rather than tens of thousands.
    """

    __slots__ = ("index", "id", "name", "recent", "joined", "incomplete")

    def __init__(self, index: int, call_id: str, name: str) -> None:
        self.index = index
        self.id = call_id
        self.name = name
        self.recent: list[str] = []
        self.joined: list[str] = []
        self.incomplete = False

    def append(self, text: str) -> None:
        recent = self.recent
        recent.append(text)
        if len(recent) >= 64:
            self.joined.append("".join(recent))
            recent.clear()

    def arguments(self) -> str:
        return "".join(self.joined) + "".join(self.recent)

    def as_dict(self) -> dict:
        call = {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments()}}
        if self.incomplete:
            call["incomplete"] = True
        return call


class Output:
    """Collects the message and the deltas of the current `feed`, merging neighbours of one kind."""

    __slots__ = ("reasoning", "content", "calls", "deltas", "_last", "key_pending", "held")

    def __init__(self) -> None:
        self.reasoning = TextChannel()
        self.content = TextChannel()
        self.calls: list[ToolCall] = []
        self.deltas: list[dict] = []
        self._last: object = None
        # an argument's key (`, "city": `), emitted only with the first text of its value
        self.key_pending = ""
        # where the deltas of a call not yet known to be valid begin: they are kept back until its
        # first argument text (or `confirm`), or withdrawn with the call by `withdraw`
        self.held: int | None = None

    def take(self) -> list[dict]:
        if self.held is not None:
            deltas, self.deltas = self.deltas[: self.held], self.deltas[self.held:]
            self.held = 0
            return deltas
        deltas = self.deltas
        self.deltas = []
        self._last = None
        return deltas

    def hold(self) -> None:
        self.held = len(self.deltas)
        self._last = None

    def confirm(self) -> None:
        self.held = None

    def withdraw(self) -> None:
        """The held call was no call: its deltas and the call itself are gone."""
        if self.held is None:
            return
        del self.deltas[self.held:]
        self.calls.pop()
        self.key_pending = ""
        self.held = None
        self._last = None

    def _text(self, key: str, text: str) -> None:
        if self._last == key:
            self.deltas[-1][key] += text
        else:
            self.deltas.append({key: text})
            self._last = key

    def add_reasoning(self, text: str) -> None:
        out = self.reasoning.push(text)
        if out:
            self._text("reasoning_content", out)

    def add_content(self, text: str) -> None:
        out = self.content.push(text)
        if out:
            self._text("content", out)

    def start_call(self, call_id: str, name: str) -> ToolCall:
        call = ToolCall(len(self.calls), call_id, name)
        self.calls.append(call)
        self.deltas.append({"tool_calls": [{"index": call.index, "id": call_id, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]})
        self._last = None
        return call

    def add_arguments(self, text: str) -> None:
        if not text:
            return
        self.held = None  # a call's first argument text makes it a call
        if self.key_pending:
            text, self.key_pending = self.key_pending + text, ""
        call = self.calls[-1]
        call.append(text)
        if self._last is call:
            self.deltas[-1]["tool_calls"][0]["function"]["arguments"] += text
        else:
            self.deltas.append({"tool_calls": [{"index": call.index, "function": {"arguments": text}}]})
            self._last = call

    def close_arguments(self, opened: bool) -> None:
        """Close the arguments object; a key still waiting for its value is dropped with it."""
        pending, self.key_pending = self.key_pending, ""
        if pending:
            opened = not pending.startswith("{")
        self.add_arguments("}" if opened else "{}")

    def message(self) -> dict:
        return {"role": "assistant", "reasoning_content": self.reasoning.value(),
                "content": self.content.value(), "tool_calls": [c.as_dict() for c in self.calls]}
