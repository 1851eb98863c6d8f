"""Where parsed text goes: the reasoning and content channels, tool calls, and the deltas.

Whitespace rule (the same for streaming and whole parses, which is what keeps them equal): a
channel drops the whitespace before its first visible character and after its last one, and
keeps every whitespace run in between exactly. A run is held until the channel knows whether
more visible text follows, so whitespace between structural parts (after `</think>`, before and
between tool calls, before the end-of-turn token) never reaches the client unless text follows.
"""

from __future__ import annotations

import secrets


def new_call_id() -> str:
    """A new tool call id, unique across calls, requests, parsers and processes."""
    return "call_" + secrets.token_hex(12)


class TextChannel:
    """Accumulates one text field of the message; `push` returns what may be emitted now."""

    __slots__ = ("parts", "pending", "started")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.pending: list[str] = []  # a whitespace run held until visible text follows it
        self.started = False

    def push(self, text: str) -> str:
        if not text:
            return ""
        if not self.started:
            text = text.lstrip()
            if not text:
                return ""
            self.started = True
        # `rstrip` rather than a `\s*\Z` search, which is quadratic in a long whitespace run
        cut = len(text.rstrip())
        if cut == 0:
            self.pending.append(text)
            return ""
        out = text[:cut]
        if self.pending:
            out = "".join(self.pending) + out
            self.pending = []
        if cut < len(text):
            self.pending.append(text[cut:])
        self.parts.append(out)
        return out

    def value(self) -> str | None:
        return "".join(self.parts) or None


GROUP = 64  # argument fragments joined into one string


class ToolCall:
    """One tool call of the message as it is being streamed.

    Argument fragments are joined in groups as `append` takes them, so a long argument streamed in
    tiny chunks is held as a few hundred strings rather than tens of thousands. A stream's hot path
    (`interpret.LanguageStream.feed`) adds chunks met before as the strings `LanguageReader.string_texts`
    shares, one reference each, joined with the next group.
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
        if len(recent) >= GROUP:
            self.group()

    def group(self) -> None:
        self.joined.append("".join(self.recent))
        self.recent.clear()

    def arguments(self) -> str:
        return "".join(self.joined) + "".join(self.recent)

    def as_dict(self) -> dict:
        call = {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments()}}
        if self.incomplete:
            call["incomplete"] = True
        return call


class Output:
    """Collects the message and the deltas of the current `feed`, merging neighbours of one kind.

    Neighbouring pieces are gathered in lists and joined once by `take`: adding to a delta's
    string in place would copy it on every piece (quadratic in a long whole-text parse).
    """

    __slots__ = ("reasoning", "content", "calls", "_pending", "_last", "key_pending", "_collect", "held")

    def __init__(self, deltas: bool = True) -> None:
        self.reasoning = TextChannel()
        self.content = TextChannel()
        self.calls: list[ToolCall] = []
        # (text key or call, its pieces) for text and argument deltas; (None, delta) for a call start
        self._pending: list[tuple[object, object]] = []
        self._last: object = None
        # an argument's key (`, "city": `), emitted only with the first text of its value
        self.key_pending = ""
        self._collect = deltas  # a whole-text parse needs the message only, not the deltas
        # where the deltas of a call not yet known to be valid begin: they are kept back until its
        # first argument text (or `confirm`), or withdrawn with the call by `withdraw`
        self.held: int | None = None

    def take(self) -> list[dict]:
        pending = self._pending
        if not pending:
            return []
        if self.held is not None:
            pending, self._pending = pending[: self.held], pending[self.held:]
            self.held = 0
        else:
            self._pending = []
            self._last = None
        deltas = []
        for owner, pieces in pending:
            if owner is None:
                deltas.append(pieces)
                continue
            text = pieces[0] if len(pieces) == 1 else "".join(pieces)
            if owner.__class__ is str:
                deltas.append({owner: text})
            else:
                deltas.append({"tool_calls": [{"index": owner.index, "function": {"arguments": text}}]})
        return deltas

    def hold(self) -> None:
        self.held = len(self._pending)
        self._last = None

    def confirm(self) -> None:
        self.held = None

    def withdraw(self) -> None:
        """The held call was no call: its deltas and the call itself are gone."""
        if self.held is None:
            return
        del self._pending[self.held:]
        self.calls.pop()
        self.key_pending = ""
        self.held = None
        self._last = None

    def _add(self, owner: object, text: str) -> None:
        if not self._collect:
            return
        if self._last is owner:
            self._pending[-1][1].append(text)
        else:
            self._pending.append((owner, [text]))
            self._last = owner

    def add_reasoning(self, text: str) -> None:
        out = self.reasoning.push(text)
        if out:
            self._add("reasoning_content", out)

    def add_content(self, text: str) -> None:
        out = self.content.push(text)
        if out:
            self._add("content", out)

    def start_call(self, call_id: str, name: str) -> ToolCall:
        call = ToolCall(len(self.calls), call_id, name)
        self.calls.append(call)
        if self._collect:
            self._pending.append((None, {"tool_calls": [{"index": call.index, "id": call_id, "type": "function",
                                                         "function": {"name": name, "arguments": ""}}]}))
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
        if self._collect:
            if self._last is call:
                self._pending[-1][1].append(text)
            else:
                self._pending.append((call, [text]))
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
