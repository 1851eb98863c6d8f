"""A streaming reader of an output language (`ir.Language`): text in, OpenAI deltas out.

Why by hand: the reader must stream (a delta as soon as the text decides it, a marker never
emitted, not even a prefix of one), run in linear time, and use only the standard library so
that the standalone module can embed it. Lark reads whole texts; a generic streaming parser
would neither keep the fast paths below nor emit the message's deltas.

How it reads: it follows every reading of the text at once. A *thread* is one reading: the IR
nodes still to match (a linked stack), its position, the terminal it is inside (free text, a
JSON value, a marker...), and the events it has read (texts by role, call starts, argument
fragments). Choices and repetitions fork threads; a thread dies where the text cannot continue
it. The built languages decide their choices by their leading markers, so forks are pruned by
each option's first characters (computed once per node) and the readings that remain part soon.
An event is emitted once every living thread has read it, so text that all readings agree on
(free text before a marker, a call's arguments) streams at once, and text whose role is still
open is held only until the readings part. At the end the first complete reading (in the
language's order of options) gives the message.

Where no reading continues (the model left the language), nothing is lost: the reading that
got furthest keeps what it read (a call whose arguments had started is closed and marked
incomplete, a call that had not is text), the text from its last whole part to where it failed
is content, and the language is read again from there with reasoning over: text after the
calls is content, a call after one that was no call is a call. At the end of the output, a call
cut off keeps the values that were complete.

Fast paths: free text is searched for its stop markers with one regular expression
(`markers.MarkerSet`), holding back only a possible marker prefix; JSON values go
through `jsonscan.JsonScanner` (a long string is consumed by one regular expression, and
a chunk of plain string text goes straight out); every character is consumed once per thread.
"""

from __future__ import annotations

import json
import os
import re
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from autoparser.language import ir
from autoparser.language.jsonscan import DONE, ERROR, JsonScanner, is_string_body
from autoparser.language.markers import FULL, PARTIAL, MarkerSet, match_at
from autoparser.language.message import GROUP, Output, ToolCall, new_call_id
from autoparser.language.policy import UNDECIDED_LIMIT, WHOLE_PIECE
from autoparser.language.request import is_weak, value_kind
from autoparser.language.values import (
    allows_null,
    convert_literal_value,
    convert_tagged_value,
    decode_string_body,
    nested_to_json,
)

_CDATA = ("<![CDATA[", "]]>")
MORE, FAIL, SPLIT = 0, 2, 3  # terminal results besides DONE: wait, no match, the text may end here
# what a reading's events are, besides text of a role (`ir.REASONING`, `ir.CONTENT`): a call opens
# (name, id), argument text, an object's opening brace held for the first key, a call cut off
OPENS, ARGS, BRACE, CUT = "opens", "args", "brace", "cut"
_WHITESPACE = " \t\n\r"
_BLANKS = re.compile(f"[{re.escape(_WHITESPACE)}]*")
_DERIVED = ("spaces", "blank")  # a text's slots that its start and the position stand for
_ESCAPED = re.compile(r'["\\\x00-\x1f]')  # characters a JSON string spells otherwise
# A whole output is read in pieces (`policy.WHOLE_PIECE`). Readings that reach one state are merged
# where a piece ends; within one, the first reading is read as far as the piece goes before the
# others, so a longer piece lets a reading that will lose (say, bare JSON calls read as text) read further.
_JOINED = 1024  # text events read in parts are joined up to this length


# -- first characters, per node ------------------------------------------------------------------


class _Firsts:
    """For each node: the characters its text can start with (None: any) and whether it can be
    empty. Computed once per node and kept, so a choice costs a set lookup per option."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[frozenset[str] | None, bool]] = {}
        self._keep: list[Any] = []

    def of(self, node: Any) -> tuple[frozenset[str] | None, bool]:
        key = id(node)
        found = self._cache.get(key)
        if found is None:
            if node.__class__ in _MADE_WHILE_READING:
                return None, True  # decided by reading; not kept, or a long output would pile them up
            self._cache[key] = (None, True)  # a recursive reference reads as "anything"
            found = self._cache[key] = self._compute(node)
            self._keep.append(node)
        return found

    def _compute(self, node: Any) -> tuple[frozenset[str] | None, bool]:  # noqa: C901 - one case per kind
        if isinstance(node, ir.Lit):
            core = node.text.strip()
            if not core:
                return frozenset(node.text[:1]), True  # whitespace: as much of it as there is
            return frozenset(core[0] + _WHITESPACE), False  # whitespace before a marker is skipped
        if isinstance(node, ir.Gap):
            return frozenset(_WHITESPACE), True
        if isinstance(node, ir.Chars):
            return None, node.min == 0
        if isinstance(node, ir.Text):
            return None, not node.nonempty
        if isinstance(node, ir.Json):
            # an object, or a string that holds one (arguments written as a JSON string)
            return (frozenset('{"' + _WHITESPACE), False) if node.kind == "object" else (None, False)
        if isinstance(node, ir.Bracketed):
            return frozenset("{[" + _WHITESPACE), False
        if isinstance(node, ir.Capture | ir.Rule):
            return self.of(node.body)
        if isinstance(node, ir.Repeat):
            chars, empty = self.of(node.item)
            return chars, empty or node.min == 0
        if isinstance(node, ir.Seq):
            return self._sequence(node.items)
        if isinstance(node, ir.Choice):
            return self._union([self.of(o) for o in node.options])
        return None, True  # PyValue, RawString, Members, Lazy, frames: decided by reading

    def _sequence(self, items: tuple[Any, ...]) -> tuple[frozenset[str] | None, bool]:
        chars: set[str] = set()
        for item in items:
            first, empty = self.of(item)
            if first is None:
                return None, empty and all(self.of(i)[1] for i in items)
            chars |= first
            if not empty:
                return frozenset(chars), False
        return frozenset(chars), True

    @staticmethod
    def _union(found: list[tuple[frozenset[str] | None, bool]]) -> tuple[frozenset[str] | None, bool]:
        empty = any(e for _, e in found)
        if any(f is None for f, _ in found):
            return None, empty
        return frozenset().union(*(f for f, _ in found)), empty


# -- frames: what a thread pushes besides IR nodes -------------------------------------------------


class _EndCapture:
    __slots__ = ("role",)

    def __init__(self, role: str) -> None:
        self.role = role


class _MembersFrom:
    """The next member of `members`, or their end; `read`: the indexes of those read so far."""

    __slots__ = ("members", "read")

    def __init__(self, members: ir.Members, read: frozenset[int]) -> None:
        self.members, self.read = members, read


class _Member:
    """Read one tagged argument (`key` None: the key is read from the text)."""

    __slots__ = ("body", "key")

    def __init__(self, body: Any, key: str | None) -> None:
        self.body, self.key = body, key


class _EndMember:
    __slots__ = ()


class _Again:
    """The rest of a repetition, after one item that started at `start`: an item that read
    nothing ends the repetition (an empty item repeated forever)."""

    __slots__ = ("repeat", "left_min", "left_max", "start")

    def __init__(self, repeat: ir.Repeat, left_min: int, left_max: int | None, start: int) -> None:
        self.repeat, self.left_min, self.left_max, self.start = repeat, left_min, left_max, start


class _EndCall:
    """The end of a call's own structure (the innermost part holding its arguments)."""

    __slots__ = ()


_END_MEMBER = _EndMember()
_END_CALL = _EndCall()
_FRAMES = (_EndCapture, _EndMember, _EndCall)


_MADE_WHILE_READING = (_MembersFrom, _Member, _Again)
# no option of a fork can start with the next character: the reading fails there (recovery may
# go on from it), where a reading that ends on purpose returns an empty list
_NONE_FITS: list = []


# -- a reading ---------------------------------------------------------------------------------------


class _Call:
    """The captures of the call being read."""

    __slots__ = ("name", "id", "args", "started", "pending", "mode", "scanner", "done", "awaits_id", "confirmed",
                 "confirm_next", "closed")

    def __init__(self) -> None:
        self.name: str | None = None
        self.id: str | None = None
        self.args = False  # its arguments began
        self.started = False  # its start event was made
        self.pending: list[str] = []  # argument text read before the name
        self.mode = ""  # how the arguments are written: "members", "json", "string"
        self.scanner: JsonScanner | None = None
        self.done = False  # its arguments were read whole
        self.awaits_id = False  # its start waits for an id the format writes after the arguments
        # its arguments started well (a JSON object's first key or its end, a first tagged value):
        # until then a failure makes the call text, and its events are held back
        self.confirmed = False
        self.confirm_next = False  # the next marker read confirms it
        self.closed = False  # its own structure was read to its end (what holds its arguments)


class _Thread:
    __slots__ = ("stack", "pos", "events", "role", "head", "call", "parts", "member", "value", "count", "mark",
                 "skip", "own_id", "after_call", "section_calls", "calls_read",
                 "call_over", "streamed", "spool", "call_from", "section_at", "section_open", "first_in_section",
                 "offset", "call_at", "calls_held", "shared")

    def __init__(self, stack: Any, pos: int, offset: list[int]) -> None:
        self.stack = stack  # (node, rest) pairs, None at the bottom
        self.pos = pos
        self.offset = offset  # the stream's: its events' positions are `pos` plus this
        self.call_at = -1  # the index in `events` of the last call start (-1: none held)
        self.calls_held = 0  # the call starts among `events`
        self.events: list[tuple] = []
        self.shared = False  # `events` is another reading's list too: copied before a change
        self.role: str | None = None
        self.head: Any = None  # the terminal being read
        self.call = _Call()
        self.parts: list[str] = []  # the text of a name or id capture
        self.member: list[Any] | None = None  # [key, value node] of the tagged argument being read
        self.value: list[str] | None = None  # raw text of a tagged value being read
        self.count = 0  # tagged arguments read in the current call
        self.mark = pos  # where the last whole part read ends (text, a repeated item): failing later, the rest is text
        self.skip = ""  # a marker that may be left out (the end of reasoning skipped on resuming)
        self.own_id: list[str] | None = None  # the text of the id capture being read (it may hold the name)
        self.after_call: Any = None  # what follows the call being read (its end marker first)
        self.section_calls = 0  # calls read whole since the last text
        self.calls_read = 0  # calls read whole, up to their end marker
        self.call_over: Any = None  # what is left once the call is read whole (its end marker included)
        self.streamed: int | None = None  # a string value that streams: 0 not begun, 1 begun (None: kept whole)
        self.spool: tuple[str, str] | None = None  # a literal that may stream: its quote, the text held back
        self.call_from = pos  # where the part that holds the last call began (a separator before it included)
        self.section_at: tuple[int, Any] | None = None  # where the last call section began, and what follows it
        self.section_open = False  # no call has begun in that section yet
        self.first_in_section = False  # the call being read is that section's first

    def fork(self, stack: Any) -> _Thread:
        twin = _Thread(stack, self.pos, self.offset)
        twin.events = self.events  # shared until one of them changes it: most forks fail first
        twin.shared = self.shared = True
        twin.call_at, twin.calls_held = self.call_at, self.calls_held
        twin.role = self.role
        call, copy = self.call, _Call()
        copy.name, copy.id, copy.args, copy.started = call.name, call.id, call.args, call.started
        copy.pending, copy.mode, copy.done, copy.awaits_id = list(call.pending), call.mode, call.done, call.awaits_id
        copy.confirmed, copy.confirm_next = call.confirmed, call.confirm_next
        copy.closed = call.closed
        twin.call = copy
        twin.parts = list(self.parts)
        twin.member = None if self.member is None else list(self.member)
        twin.value = None if self.value is None else list(self.value)
        twin.count = self.count
        twin.mark = self.mark
        twin.skip = self.skip
        twin.own_id = None if self.own_id is None else list(self.own_id)
        twin.after_call, twin.section_calls, twin.calls_read = self.after_call, self.section_calls, self.calls_read
        twin.call_over = self.call_over
        twin.streamed, twin.spool = self.streamed, self.spool
        twin.call_from = self.call_from
        twin.section_at, twin.section_open = self.section_at, self.section_open
        twin.first_in_section = self.first_in_section
        return twin

    def drop_events(self, count: int) -> None:
        """The first `count` held events went out."""
        if self.calls_held:
            self.calls_held -= sum(e[0] == OPENS for e in self.events[:count])
        if self.shared:
            self.events, self.shared = self.events[count:], False
        else:
            del self.events[:count]
        self.call_at = max(self.call_at - count, -1)

    def own_events(self) -> list[tuple]:
        """`events`, copied first where another reading shares it."""
        if self.shared:
            self.events, self.shared = list(self.events), False
        return self.events

    def emit(self, event: tuple) -> None:
        self.own_events().append(event)

    def last_call(self, end: int) -> int:
        """The index of the last call start among the first `end` held events (`end` if none)."""
        if 0 <= self.call_at < end:
            return self.call_at
        return _last_call(self.events, end) if self.call_at >= end else end

    def key(self) -> tuple:
        frames, node = [], self.stack
        while node is not None:
            frames.append(id(node[0]))
            node = node[1]
        return self.pos, self.role, id(self.head), tuple(frames)

    def state(self) -> tuple:
        """All that decides how this reading goes on and what it gives (not where a failure
        would resume), but its held events, which are compared apart (`alike`); a terminal's
        state object other than plain data and a JSON scanner keeps the reading distinct. A
        text's held whitespace is the text from its start to the position, so its start stands
        for it."""
        head, call = self.head, self.call
        terminal = () if head is None else tuple(_plain(getattr(head, slot)) for slot in head.__slots__
                                                 if slot not in _DERIVED)
        frames, node, here = [], self.stack, self.pos + self.offset[0]
        while node is not None:
            frames.append(_frame_state(node[0], here))
            node = node[1]
        return (self.pos, self.role, tuple(frames), head.__class__, terminal, call.name, call.id, call.args,
                call.started, tuple(call.pending), call.mode, call.done, call.awaits_id, call.confirmed,
                call.confirm_next, call.closed, tuple(self.parts),
                _plain(self.member), _plain(self.value), self.count, self.skip, _plain(self.own_id), self.streamed,
                self.spool)

    # what the terminal read goes where its capture says
    def text(self, piece: str) -> None:
        if not piece:
            return
        if self.own_id is not None:
            self.own_id.append(piece)
        if self.value is not None:
            self.value.append(piece)
            if not self.call.confirmed and not piece.isspace():
                self.call.confirmed = True  # a tagged value began
            if self.streamed is not None and self.spool is None:
                self.stream_value(piece)
        elif self.role == ir.REASONING or self.role == ir.CONTENT:
            self.reasoning_or_content(piece)
            self.mark = self.pos
        elif self.role == ir.TOOL_NAME or self.role == ir.CALL_ID:
            self.parts.append(piece)
        elif self.role == ir.ARGUMENTS:
            self.arguments(piece)

    def reasoning_or_content(self, piece: str) -> None:
        """Text of the answer or of reasoning: joined to the text right before it of the same role
        up to a bound, so that a text read in many parts (a `{` run where `{` may open a call) is a
        few events a fork copies, and a long text held is not copied again with every part."""
        end = self.pos + self.offset[0]
        events = self.events
        if events:
            last = events[-1]
            if last[0] == self.role and last[2] == end - len(piece) and len(last[1]) < _JOINED:
                self.own_events()[-1] = (self.role, last[1] + piece, end)
                return
        self.emit((self.role, piece, end))

    def stream_value(self, piece: str) -> None:
        """A string value's text goes out as it arrives, its key with its first visible text (a
        value never written is never invented); one that may be CDATA is kept whole."""
        if self.streamed:
            self.arguments(json.dumps(piece, ensure_ascii=False)[1:-1] if _ESCAPED.search(piece) else piece)
            return
        raw = "".join(self.value or ())
        if raw.startswith(_CDATA[0]):
            self.streamed = None
            return
        if _CDATA[0].startswith(raw) or not raw.strip():
            return  # nothing visible yet, or what may still be CDATA
        if "null".startswith(raw.strip()) and allows_null(getattr(self.member[1], "schema", None)):
            return  # what may still be a nullable string's null
        self.streamed = 1
        self.arguments(f"{self.member_key()}\"{json.dumps(raw, ensure_ascii=False)[1:-1]}")

    def member_key(self) -> str:
        lead = ", " if self.count else ""
        return f"{lead}{json.dumps((self.member or [''])[0] or '', ensure_ascii=False)}: "

    def value_text(self, piece: str) -> None:
        """Text of a literal value: a quoted or bracketed one confirms its call as it begins; a
        bare word (`1` in `x=1])`) only with the marker read after it."""
        if piece and self.value is not None:
            self.value.append(piece)
            call = self.call
            if not call.confirmed and not call.confirm_next and not piece.isspace():
                if piece.lstrip()[0] in "'\"[({":
                    call.confirmed = True
                else:
                    call.confirm_next = True
            if self.spool is not None:
                self.stream_literal(piece)

    def stream_literal(self, piece: str) -> None:
        """A quoted literal's text goes out as it arrives, decoded; held back: a quote at the end
        (it may close the value) and an escape that may be cut in two. A literal that does not
        begin with a quote is kept whole."""
        quote, tail = self.spool or ("", "")
        if not self.streamed:
            raw = "".join(self.value or ()).lstrip()
            if not raw:
                return
            if raw[0] not in "'\"":
                self.spool = None
                return
            self.streamed, quote, tail, piece = 1, raw[0], "", raw[1:]
            self.arguments(f"{self.member_key()}\"")
        text = tail + piece
        cut = len(text)
        slash = text.rfind("\\", max(0, cut - 10))
        run = slash
        while run > 0 and text[run - 1] == "\\":
            run -= 1
        if slash >= 0 and (slash - run) % 2 == 0:  # the last backslash begins an escape
            cut = slash
        if cut and text[cut - 1] == quote:
            cut -= 1
        if cut:
            self.arguments(json.dumps(decode_string_body(text[:cut]), ensure_ascii=False)[1:-1])
        self.spool = (quote, text[cut:])

    def name_text(self, piece: str) -> None:
        """Text of a marker: part of a name or id, or a text (a bracket that opens no call)."""
        if self.role == ir.CONTENT or self.role == ir.REASONING:
            self.text(piece)
            return
        if self.own_id is not None:
            self.own_id.append(piece)
        if (self.role == ir.TOOL_NAME or self.role == ir.CALL_ID) and self.value is None:
            self.parts.append(piece)

    def key_text(self, piece: str) -> None:
        """Text of a character run: a tagged argument's key (read from the text), a name or an id."""
        if self.member is not None and self.member[0] is None and self.value is None:
            self.member[0] = piece
        elif self.own_id is not None and self.role != ir.TOOL_NAME:
            self.own_id.append(piece)
        else:
            self.name_text(piece)

    def arguments(self, piece: str) -> None:
        if not piece:
            return
        if self.call.started:
            self.emit((ARGS, piece, self.pos + self.offset[0]))
        else:
            self.call.pending.append(piece)

    def start_call(self, waited: bool = False) -> None:
        """The call's start event, once its name is read and its arguments began (`waited`: or
        no longer awaiting an id that may come after the arguments)."""
        call = self.call
        if call.started or call.name is None or not call.args or (call.awaits_id and not waited):
            return
        call.started = True
        self.first_in_section, self.section_open = self.section_open, False
        self.call_at = len(self.events)
        self.calls_held += 1
        self.emit((OPENS, call.name, call.id, self.pos + self.offset[0]))
        if call.pending:
            self.emit((ARGS, "".join(call.pending), self.pos + self.offset[0]))
            call.pending = []


# -- terminals -----------------------------------------------------------------------------------------


class _Lit:
    """A marker: its core as written (inner whitespace flexible, as the parser finds markers),
    whitespace before it skipped (the parser skips whitespace between structural parts; text
    before a marker has taken its own), and as much of the whitespace it ends with as the text has."""

    __slots__ = ("core", "trail", "done")

    def __init__(self, node: ir.Lit) -> None:
        text = node.text
        self.core = text.strip()
        self.trail = text[len(text.rstrip()):] if self.core else text
        self.done = not self.core  # the core was read

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        pos = t.pos
        if not self.done:
            while pos < len(buf) and buf[pos] in _WHITESPACE and pos - t.pos < 64:
                pos += 1
            if pos == len(buf) and not final:
                return MORE
            found, end = match_at(buf, pos, self.core, final)
            if found != FULL:
                return MORE if found == PARTIAL else FAIL
            t.name_text(buf[pos:end])
            t.pos = pos = end
            self.done = True
            if t.call.confirm_next and not is_weak(self.core):
                t.call.confirmed = True  # punctuation (`)`, `, `) may still be part of broken syntax
        trail = self.trail
        index = 0
        while index < len(trail) and pos < len(buf) and buf[pos] == trail[index]:
            pos += 1
            index += 1
        if index < len(trail) and pos == len(buf) and not final:
            self.trail = trail[index:]
            t.pos = pos
            return MORE
        t.pos = pos
        return DONE


class _Chars:
    __slots__ = ("node", "pattern")

    def __init__(self, node: ir.Chars, pattern: re.Pattern[str]) -> None:
        self.node, self.pattern = node, pattern

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        found = self.pattern.match(buf, t.pos)
        run = found.end() - t.pos
        most = self.node.max
        if found.end() == len(buf) and not final and (most is None or run < most):
            return MORE
        if run < self.node.min:
            return FAIL
        if most is not None and run > most:
            return FAIL
        t.pos = found.end()
        t.key_text(found.group())
        return DONE


class _Gap:
    """Whitespace, at most `max` characters (as much as there is)."""

    __slots__ = ("most",)

    def __init__(self, most: int) -> None:
        self.most = most

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        pos, end = t.pos, t.pos
        while end < len(buf) and end - pos < self.most and buf[end] in _WHITESPACE:
            end += 1
        if end == len(buf) and end - pos < self.most and not final:
            return MORE
        t.pos = end
        return DONE


class _Text:
    """Free text up to the first of its stop markers (held back only while it may be one). Where
    the marker that follows (`end`) begins with whitespace that is there, the text ends before it.
    A text does not begin (after whitespace) with one of its `not_first` markers: there it is empty.
    In a value (`soft`), a soft stop (`MarkerSet` kind "soft", punctuation such as `,` or `)`)
    ends the text in one reading and is part of it in another: what follows decides."""

    __slots__ = ("markers", "weak", "weak_prefix", "leads", "lead", "nonempty", "start", "split", "after",
                 "firsts", "past", "soft", "cdata", "spaces", "empty", "blank")

    def __init__(self, node: ir.Text, markers: MarkerSet, weak: tuple[Any, Any] | None, start: int,
                 split: re.Pattern[str] | None, soft: bool = False) -> None:
        self.markers = markers
        self.weak, self.weak_prefix = weak or (None, None)
        self.leads = node.weak is not None and node.weak.leads  # a weak marker it begins with is text
        end = node.end or ""
        self.lead = end[:len(end) - len(end.lstrip())] if end.strip() else ""
        self.nonempty = node.nonempty
        self.start = start
        self.split = split  # brackets where what follows may begin (a bare JSON call)
        self.after = start  # where to look for the next one
        self.firsts = tuple(m.strip() for m in node.not_first if m.strip())  # cleared once checked
        self.past = start  # the end of the last soft stop read as text
        # the whitespace it begins with, read past while a `not_first` marker may follow it (the
        # marker's if one does, else the text's), so that a long run pins no text behind the reading
        self.spaces: list[str] = []
        self.empty = True  # no text read yet
        self.soft = soft
        self.cdata = "start" if soft else ""  # a value's CDATA section: "start" (may open), "open", ""
        self.blank = start  # how far the whitespace at the position was read (see `_cdata`, `step`)

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        if self.firsts:
            found = self._first_marker(t, buf, final)
            if found == DONE:
                self.spaces = []  # the whitespace before the marker is the marker's, as markers are found
                if self.nonempty:
                    t.pos = self.start
                    return FAIL
            if found != FAIL:
                return found
        if self.cdata and self._cdata(t, buf, final) == MORE:
            return MORE
        if self.past > t.pos:
            self._read(t, buf, self.past)  # the soft stop another reading ended the text at
        pos = t.pos
        # no marker begins with whitespace: a run of it held at the position is searched once
        blank = self.blank = _BLANKS.match(buf, max(pos, self.blank)).end()
        hit = self.markers.find(buf, blank, final=final)
        stop = hit[0] if hit is not None else None
        held = None
        if self.weak is not None:
            since = self.start + 1 if self.leads and blank == self.start else blank
            found = self.weak.search(buf, since, stop if stop is not None else len(buf))
            if found is not None:
                stop = found.start()
            elif not final:
                held = self._weak_hold(buf, max(pos, since), stop)
        if self.soft and hit is not None and hit[2] == "soft" and stop == hit[0] and held is None and (
                self.split is None or not self.split.search(buf, pos, stop)):
            self._read(t, buf, stop)
            self.past = stop + len(hit[1])
            return SPLIT
        keep_spaces = False
        if held is None and stop is None and not final:
            held = self._safe(buf, pos, blank)
            keep_spaces = held == pos and bool(self.lead)  # they may be the end marker's
        if self.split is not None:
            bracket = self.split.search(buf, max(pos, self.after), held if held is not None else
                                        stop if stop is not None else len(buf))
            if bracket is not None:
                self._read(t, buf, bracket.start())
                self.after = bracket.start() + 1
                return SPLIT
        if held is not None:
            self._read(t, buf, held, keep_spaces)
            return MORE
        if stop is None:
            stop = len(buf)
            if t.value is not None and t.call.started:
                t.emit((CUT, stop + t.offset[0]))  # a value running to the end of output: its call was cut off
        lead = self.lead
        if lead and stop - len(lead) >= pos and buf.startswith(lead, stop - len(lead)):
            stop -= len(lead)
        elif lead and self.spaces and stop == pos:
            spaces = "".join(self.spaces)  # the end marker's whitespace is the last of those held
            self.spaces = [spaces[:-len(lead)]] if spaces.endswith(lead) else [spaces]
        self._read(t, buf, stop)
        if self.nonempty and self.empty:
            t.pos = self.start
            return FAIL
        return DONE

    def _cdata(self, t: _Thread, buf: str, final: bool) -> int:
        """A value that opens with an XML CDATA section (`<![CDATA[a < b]]>`) reads it whole:
        markers inside it are its text. MORE while it is open; DONE once past it (or none)."""
        if self.cdata == "start":
            pos = self.blank = _BLANKS.match(buf, max(t.pos, self.blank)).end()
            if pos > t.pos:  # the whitespace before it is held, so that a long run pins no text
                self.spaces.append(buf[t.pos:pos])
                t.pos = pos
            found, _ = match_at(buf, pos, _CDATA[0], final)
            if found == PARTIAL or (pos == len(buf) and not final):
                return MORE
            if found != FULL:
                self.cdata = ""
                return DONE
            self.cdata = "open"
        close = buf.find(_CDATA[1], t.pos)
        if close < 0:
            if final:
                self.cdata = ""
                self._read(t, buf, len(buf))
                return DONE
            self._read(t, buf, max(t.pos, len(buf) - len(_CDATA[1]) + 1))
            return MORE
        self.cdata = ""
        self._read(t, buf, close + len(_CDATA[1]))
        return DONE

    def _first_marker(self, t: _Thread, buf: str, final: bool) -> int:
        """Whether the text begins with a `not_first` marker after whitespace (the reading goes
        past the whitespace, holding it): DONE (it does: the text is empty), MORE (it may), FAIL
        (it does not: read it as text from now on)."""
        pos = _BLANKS.match(buf, t.pos).end()
        if pos > t.pos:
            self.spaces.append(buf[t.pos:pos])
            t.pos = pos
        if pos == len(buf) and not final:
            return MORE
        found = [match_at(buf, pos, marker, final)[0] for marker in self.firsts]
        if FULL in found:
            return DONE
        if PARTIAL in found and not final:
            return MORE
        self.firsts = ()
        return FAIL

    def _safe(self, buf: str, pos: int, blank: int) -> int:
        """How far the text may be read: not into a marker's possible beginning, nor (where the
        end marker begins with whitespace) into the whitespace before it; `buf[pos:blank]` is
        whitespace."""
        end = self.markers.safe_end(buf, pos)
        if self.lead:  # the whitespace the end marker begins with may be coming
            run = end
            while run > blank and buf[run - 1] in _WHITESPACE:
                run -= 1
            if run < end or end <= blank:
                # only the last characters of a whitespace run can be the marker's, so a long run
                # is read as it comes, and pins no text behind the reading
                run_start = run if run > blank else pos
                end = max(run_start, end - len(self.lead))
        return end

    def _weak_hold(self, buf: str, pos: int, stop: int | None) -> int | None:
        """Where a weak marker that may still count begins (it waits for what follows it)."""
        limit = stop if stop is not None else len(buf)
        index = buf.find(self.weak_prefix[0], max(pos, len(buf) - 256))
        while 0 <= index < limit:
            if self.weak_prefix[1].match(buf, index):
                return index
            index = buf.find(self.weak_prefix[0], index + 1)
        return None

    def _read(self, t: _Thread, buf: str, end: int, keep_spaces: bool = False) -> None:
        """Read the text up to `end`, the whitespace held before it first (unless `keep_spaces`:
        with no more text, they may still be the end marker's)."""
        if self.spaces and (end > t.pos or not keep_spaces):
            spaces, self.spaces = "".join(self.spaces), []
            if spaces:
                self.empty = False
                t.text(spaces)
        if end > t.pos:
            self.empty = False
            start, t.pos = t.pos, end
            t.text(buf[start:end])


class _JsonValue:
    """A JSON value, scanned as it arrives. As a call's arguments it streams; as a tagged value,
    or a string holding the arguments, it is kept whole."""

    __slots__ = ("scanner", "node", "opened", "began")

    def __init__(self, node: ir.Json) -> None:
        self.node = node
        self.scanner = JsonScanner("{" if node.kind == "object" else "")
        self.opened = False  # the arguments' `{` was read (confirming the call waits for what follows)
        self.began = False  # argument text went out (whitespace before the value never does)

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        start = t.pos
        if not self.scanner.started and t.role == ir.ARGUMENTS and t.call.mode == "json" and t.value is None:
            first = self._first_char(buf, start)
            if first == '"':
                t.call.mode = "string"  # arguments written as a JSON string holding them: kept whole
                self.scanner = JsonScanner()
            elif first and first != "{":
                return FAIL  # a call's arguments are an object
        pos, status, emitted = self.scanner.scan(buf, start, final)
        if not t.call.confirmed and t.role == ir.ARGUMENTS and t.value is None:
            self._confirm(t, buf, start, pos)
        if status == ERROR:
            self._broken(t, pos, emitted)
            return FAIL
        t.pos = pos
        if t.value is not None:
            t.value.append(buf[start:pos])
        elif t.role == ir.ARGUMENTS and t.call.mode == "json":
            self._stream(t, pos, emitted)
        else:
            t.parts.append(buf[start:pos])
        if status == DONE:
            return DONE if self.node.kind == "string" or t.call.mode != "string" or _holds_object(t.parts) else FAIL
        return FAIL if final else MORE

    def _confirm(self, t: _Thread, buf: str, start: int, end: int) -> None:
        """Arguments start well with a first key or the end of the object after `{` (any other
        value: its first character)."""
        for char in buf[start:end]:
            if char in _WHITESPACE:
                continue
            if char == "{" and not self.opened:
                self.opened = True
                continue
            t.call.confirmed = not self.opened or char in '"}'
            return

    def _stream(self, t: _Thread, pos: int, emitted: str) -> None:
        """Streamed arguments: their event ends where the member the scanner holds begins, so
        that a member breaking off later is the model's text from its start, not lost."""
        if not self.began:
            # whitespace before the value is no argument text: it opens no call, in any chunking
            emitted = emitted.lstrip(_WHITESPACE)
            self.began = bool(emitted)
        if not emitted:
            return
        if self.scanner.holding:
            t.pos = pos - len(self.scanner.held_raw())
        t.arguments(emitted)
        t.pos = pos

    def _broken(self, t: _Thread, pos: int, emitted: str) -> None:
        """The value breaks off at `pos`: what was read whole before is streamed arguments as
        in any chunking, and the reading fails there."""
        t.pos = pos
        if t.value is None and t.role == ir.ARGUMENTS and t.call.mode == "json":
            self._stream(t, pos, emitted)

    @staticmethod
    def _first_char(buf: str, pos: int) -> str:
        """The first character after whitespace, if the text has one yet."""
        pos = _BLANKS.match(buf, pos).end()
        return buf[pos] if pos < len(buf) else ""


class _Bracketed:
    """An object or array in the template's own syntax: from its opening bracket to the one
    that closes it, text between two quote markers skipped (it may hold brackets)."""

    __slots__ = ("quote", "pattern", "depth", "quoted")

    def __init__(self, node: ir.Bracketed, pattern: re.Pattern[str]) -> None:
        self.quote, self.pattern = node.quote, pattern
        self.depth = 0
        self.quoted = False

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        pos = t.pos
        if not self.depth:
            while pos < len(buf) and buf[pos] in _WHITESPACE:
                pos += 1
            if pos == len(buf):
                return FAIL if final else MORE
            if buf[pos] not in "{[":
                return FAIL
            self.depth, pos = 1, pos + 1
        while True:
            if self.quoted:
                close = buf.find(self.quote, pos)
                if close < 0:
                    return self._held(t, buf, final)
                pos, self.quoted = close + len(self.quote), False
                continue
            match = self.pattern.search(buf, pos)
            if match is None:
                return self._held(t, buf, final)
            piece, pos = match.group(), match.end()
            if piece == self.quote:
                self.quoted = True
            elif piece in "[{":
                self.depth += 1
            else:
                self.depth -= 1
                if not self.depth:
                    t.value_text(buf[t.pos:pos])
                    t.pos = pos
                    return DONE

    def _held(self, t: _Thread, buf: str, final: bool) -> int:
        """No closing bracket yet: read on, holding a quote marker's beginning at the end."""
        if final:
            return FAIL
        quote, end = self.quote, len(buf)
        for size in range(min(len(quote) - 1, len(buf)), 0, -1):
            if buf.endswith(quote[:size]):
                end -= size
                break
        end = max(end, t.pos)
        t.value_text(buf[t.pos:end])
        t.pos = end
        return MORE


_PY_END = re.compile(r"""[^\s,)\]}'"]*""")


class _PyValue:
    """A Python or JSON literal: quoted text, a bracketed value, or a bare word. A quoted value's
    closing quote ends it in one reading, and is a quote inside it in another (models leave
    quotes unescaped; what follows decides)."""

    __slots__ = ("depth", "quote", "started", "outer")

    def __init__(self) -> None:
        self.depth = 0
        self.quote = ""
        self.started = False
        self.outer = False  # the quote open is the whole value's

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        pos, end = t.pos, len(buf)
        while pos < end:
            char = buf[pos]
            if self.quote:
                if char == "\\" and pos + 1 >= end and not final:
                    break  # an escape cut in two
                pos += 2 if char == "\\" else 1
                if char == self.quote:
                    if self.outer:
                        t.value_text(buf[t.pos:pos])
                        t.pos = pos
                        return SPLIT
                    self.quote = ""
            elif char in "'\"":
                self.quote, self.started, self.outer = char, True, not self.depth and not self.started
                pos += 1
            elif char in "[({":
                self.depth, self.started = self.depth + 1, True
                pos += 1
            elif self.depth:
                self.depth -= char in "])}"
                pos += 1
            elif self.started:
                break
            elif char.isspace():
                pos += 1
            else:
                word = _PY_END.match(buf, pos).end()
                if word == pos:
                    return FAIL
                if word == end and not final:
                    break  # the word may go on
                pos, self.started = word, True
            if self.started and not self.depth and not self.quote:
                t.value_text(buf[t.pos:pos])
                t.pos = pos
                return DONE
        t.value_text(buf[t.pos:pos])
        t.pos = pos
        return FAIL if final else MORE


class _Trailer:
    """After the language: whitespace and end-of-turn markers only. Text after an end of turn
    is read again from the marker's end, the whitespace before it kept (`seen`: a marker was read;
    `marked`: its end, where a failure puts the reading back, while the position moves on)."""

    __slots__ = ("ends", "seen", "marked", "blank")

    def __init__(self, ends: tuple[str, ...]) -> None:
        self.ends = ends
        self.seen = False
        self.marked = 0  # the last marker's end: where a failure resumes (its whitespace is text)
        self.blank = 0  # how far the whitespace was read

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        pos = max(t.pos, self.blank)
        while True:
            pos = self.blank = _BLANKS.match(buf, pos).end()
            if pos >= len(buf):
                break
            end = next((e for e in self.ends if buf.startswith(e, pos)), None)
            if end is None:
                if not final and any(len(buf) - pos < len(e) and e.startswith(buf[pos:]) for e in self.ends):
                    break
                t.pos = self.marked if self.seen else pos
                return FAIL
            pos = self.marked = pos + len(end)
            self.seen = True
        t.pos = pos
        return DONE if final else MORE


# -- the reader --------------------------------------------------------------------------------------------


class LanguageReader:
    """Everything about one language that does not change while reading: terminals' marker sets
    and patterns, first characters, the end-of-turn texts. Shared by all streams."""

    def __init__(self, language: ir.Language, end_of_turn: tuple[str, ...] = ()) -> None:
        self.language = language
        self.root = self.unlazy(language.root)
        self.end_of_turn = tuple(sorted({e.strip() for e in end_of_turn if e.strip()}, key=len, reverse=True))
        self.firsts = _Firsts()
        # a bracket that opens a call with no marker before it (bare JSON calls) may be text: there,
        # a call read whole decides its text at once (`_calls_over_text`)
        self.bare_calls = language.bare_calls
        self._markers: dict[int, tuple[MarkerSet, Any]] = {}
        self._chars: dict[str, re.Pattern[str]] = {}
        self._splits: dict[str, re.Pattern[str]] = {}
        self._ids: dict[int, bool] = {}
        self._rests: dict[tuple[int, bool], Any] = {}
        self._calls: dict[int, bool] = {}
        self._keep: list[Any] = []
        self.reasoning_end = language.reasoning_end

    def stream(self, deltas: bool = True, call_id: Callable[[], str] = new_call_id) -> LanguageStream:
        return LanguageStream(self, deltas, call_id)

    def parse(self, text: str) -> dict[str, Any]:
        """The message of a whole output, read in pieces: what the readings agree on is let go
        between pieces, so an output of many calls does not keep every reading's events to the end."""
        stream = self.stream(deltas=False)
        for at in range(0, len(text), WHOLE_PIECE):
            stream.feed(text[at:at + WHOLE_PIECE])
        stream.finish()
        return stream.message()

    def unlazy(self, node: Any) -> Any:
        """A lazy language as one to read: reasoning (where the guard says), free content up to a
        trigger, then the body or nothing."""
        if not isinstance(node, ir.Lazy):
            return node
        triggers = tuple(t.strip() for t in node.triggers if t.strip())
        reasoning: Any = ir.EMPTY
        guard = node.guard
        if guard is not None and guard.end:
            block = ir.seq(ir.Capture(ir.REASONING, ir.Text((guard.end,), guard.end)), ir.Lit(guard.end))
            if guard.inside:
                reasoning = block
            elif guard.start:
                reasoning = ir.optional(ir.seq(ir.Gap(64), ir.Lit(guard.start), block))
        content = ir.Capture(ir.CONTENT, ir.Text(triggers))
        return ir.seq(reasoning, content, ir.optional(node.body))

    def text_markers(self, node: ir.Text) -> tuple[MarkerSet, Any]:
        found = self._markers.get(id(node))
        if found is None:
            stops = {s.strip() for s in node.stops if s.strip()}
            if node.end and node.end.strip():
                stops.add(node.end.strip())
            weak = None
            if node.weak is not None:
                stops.discard(node.weak.marker)
                mark, before = re.escape(node.weak.marker), re.escape(node.weak.before)
                word = r"[^\W\d][\w.\-]*\s*" if node.weak.word else ""
                weak = (re.compile(rf"{mark}(?=\s*{word}{before})"),
                        (node.weak.marker[0], re.compile(rf"{mark}\s*(?:{word})?\Z")))
            kinds = {stop: "soft" if _is_soft(stop, node) else "stop" for stop in stops}
            found = self._markers[id(node)] = (MarkerSet(kinds), weak)
            self._keep.append(node)
        return found

    def is_call(self, rule: ir.Rule) -> bool:
        """Whether `rule` is a call's own structure: the innermost rule holding its arguments."""
        found = self._calls.get(id(rule))
        if found is None:
            found = self._calls[id(rule)] = _holds_arguments(rule.body)
            self._keep.append(rule)
        return found

    def id_may_follow(self, stack: Any) -> bool:
        """Whether what is left of a reading holds a call id capture."""
        while stack is not None:
            node, stack = stack
            if node.__class__ not in _FRAMES and node.__class__ is not _Again and self._holds_id(node):
                return True
        return False

    def _holds_id(self, node: Any) -> bool:
        found = self._ids.get(id(node))
        if found is None:
            self._ids[id(node)] = False  # a recursive reference holds nothing more
            found = self._ids[id(node)] = any(self._holds_id(part) for part in _parts(node)) or (
                isinstance(node, ir.Capture) and node.role == ir.CALL_ID)
            self._keep.append(node)
        return found

    def call_rest(self, closing: Any, after: Any, kept: bool) -> tuple[Any, Any, str] | None:
        """After a call that failed: content up to its end marker (`closing`) or to what may
        follow the call (`after`: more calls, the section's end), then that marker if it is
        there, as markup (`kept`) or as content; None where the call ends with no marker."""
        key = (id(closing), id(after[0]) if after is not None else 0, kept)
        found = self._rests.get(key)
        if found is None:
            end = _first_marker(closing)
            stops = (end, *sorted(self._leads(after)))
            found = (ir.Capture(ir.CONTENT, ir.Text(stops, hint="content")),
                     ir.optional(closing if kept else ir.Capture(ir.CONTENT, closing)), end) if end else None
            self._rests[key] = found
            self._keep.append((closing, after))
        return found

    def _leads(self, stack: Any) -> set[str]:
        """The markers what is left of a reading may begin with."""
        found: set[str] = set()
        while stack is not None:
            node, stack = stack
            if node.__class__ in _FRAMES:
                continue
            if node.__class__ is _Again:
                node = node.repeat
            found |= _lead_markers(node, 8)
            if not self.firsts.of(node)[1]:
                break
        return found

    def split(self, follow: frozenset[str] | None) -> re.Pattern[str] | None:
        """Where free text may end early: before a bracket that what follows may begin with."""
        brackets = "".join(sorted(set("{[") & follow)) if follow is not None else ""
        return self._splits.setdefault(brackets, re.compile(f"[{re.escape(brackets)}]")) if brackets else None

    def brackets(self, quote: str) -> re.Pattern[str]:
        """What a `Bracketed` value looks for: a bracket, or its quote marker."""
        pattern = self._chars.get("brackets" + quote)
        if pattern is None:
            pattern = self._chars["brackets" + quote] = re.compile(r"[\[\]{}]|" + re.escape(quote))
        return pattern

    def chars(self, node: ir.Chars) -> re.Pattern[str]:
        pattern = self._chars.get(node.allowed)
        if pattern is None:
            pattern = self._chars[node.allowed] = re.compile(f"[{node.allowed}]*")
        return pattern


class LanguageStream:
    """One output read incrementally: `feed(chunk)` and `finish()` give deltas, `message()` the
    assistant message (CONTRACT sections 4 and 5)."""

    def __init__(self, reader: LanguageReader, deltas: bool = True,
                 call_id: Callable[[], str] = new_call_id) -> None:
        self.reader = reader
        self.out = Output(deltas)
        continues = reader.language.continues
        if continues:  # the output goes on with the prompt's own text: its whitespace is kept
            (self.out.reasoning if continues == ir.REASONING else self.out.content).started = True
        self.call_id = call_id
        self.buf = ""
        # how much text before `buf` was dropped: positions are relative to `buf`, those of events
        # made by readings are absolute (the readings share this cell)
        self.offset = [0]
        self.threads = [_Thread((reader.root, None), 0, self.offset)]
        self.safe = 0  # where the text not yet accounted for by emitted events begins
        # the reading that got furthest before all failed, and how many events had been emitted then
        self.dead: tuple[_Thread, int] | None = None
        self.emitted = 0  # events emitted so far
        self.resumed = False  # reading again after text that no reading took (reasoning is over)
        self.reasoning_over = False  # ... and it did not stop inside reasoning: its end marker is text
        self.finished = False
        self.fallback = False  # no reading continues: the rest is content
        self.string_call: ToolCall | None = None
        self.escape = False  # a backslash that ended the last chunk inside that call's string, held
        self.aside: list[str] = []  # the text just before `buf` that recovery may still need
        self.aside_len = 0

    # -- public ----------------------------------------------------------------------------

    def feed(self, chunk: str) -> list[dict]:
        if self.finished:
            raise RuntimeError("feed() after finish()")
        call = self.string_call
        if call is not None:
            if self.escape:
                chunk, self.escape = "\\" + chunk, False
            if not is_string_body(chunk):
                if chunk[-1:] == "\\" and is_string_body(chunk, 0, len(chunk) - 1):
                    # an escape the chunk cut in two: its backslash waits for the next chunk
                    # here, as the reading would hold it
                    chunk, self.escape = chunk[:-1], True
                else:
                    call = None
            if call is not None:
                # the hot path: more plain text of a JSON string in streamed arguments (`ToolCall.append`
                # written out, as a call costs a tenth of the time a chunk takes here)
                if not chunk:
                    return []
                recent = call.recent
                recent.append(chunk)
                if len(recent) >= GROUP:
                    call.group()
                return [{"tool_calls": [{"index": call.index, "function": {"arguments": chunk}}]}]
        if chunk:
            self._trim()
            self.buf += chunk
            self._advance(False)
            self.string_call = self._in_string()
        return self.out.take()

    def finish(self) -> list[dict]:
        if not self.finished:
            self.string_call = None
            if self.escape:  # a backslash the output ends with is read as the reading reads it
                self.escape = False
                self.feed("\\")
            self.finished = True
            self._advance(True)
        return self.out.take()

    def message(self) -> dict:
        return self.out.message()

    # -- reading -------------------------------------------------------------------------

    def _in_string(self) -> ToolCall | None:
        """The call whose streamed arguments are inside a JSON string with nothing held: the
        next chunk, if it is plain string text, goes straight out."""
        threads = self.threads
        if len(threads) != 1 or not self.out.calls:
            return None
        t = threads[0]
        head = t.head
        if (head.__class__ is not _JsonValue or not head.scanner.in_string or t.pos != len(self.buf)
                or not t.call.started or t.call.mode != "json" or t.value is not None or t.events):
            return None
        self.safe = t.pos
        return self.out.calls[-1]

    def _trim(self) -> None:
        """Drop the text every living reading has passed (positions shift with it), once there is
        enough of it to be worth the shifting. The part recovery may still need (from `safe`, where
        the failed reading failed, where a text that holds its leading whitespace began) is set
        aside in pieces and put back before recovering, so that held events pin no text."""
        if self.fallback or len(self.buf) < 4096 or not self.threads:
            return
        dead = self.dead
        if dead is not None and all(t.calls_read >= dead[0].calls_read and _origin(t) > dead[0].pos
                                    for t in self.threads):
            self.dead = None  # every living reading got further: whichever fails next replaces it
        low = min(t.pos for t in self.threads)
        if low <= 0 or (low <= 4096 and low * 2 <= len(self.buf)):
            return
        needed = min([self.safe, *(_origin(t) for t in self.threads)] + ([self.dead[0].pos] if self.dead else []))
        if needed >= low:
            self.aside, self.aside_len = [], 0
        elif needed >= 0:
            self.aside, self.aside_len = [self.buf[needed:low]], low - needed
        else:
            self.aside.append(self.buf[:low])
            self.aside_len += low
            if (low - needed) * 2 < self.aside_len:  # most of what is aside is no longer needed
                self.aside = ["".join(self.aside)[-(low - needed):]]
                self.aside_len = low - needed
        self.buf = self.buf[low:]
        self._shift(-low)

    def _restore(self) -> None:
        """Put back the text set aside before the buffer."""
        if self.aside_len:
            self.buf = "".join(self.aside) + self.buf
            size = self.aside_len
            self.aside, self.aside_len = [], 0
            self._shift(size)

    def _shift(self, delta: int) -> None:
        """Move every position by `delta`, the buffer having lost or gained that much text in front."""
        self.safe += delta
        self.offset[0] -= delta
        for t in self.threads + ([self.dead[0]] if self.dead is not None else []):
            t.pos += delta
            t.mark += delta
            t.call_from += delta
            if t.section_at is not None:
                t.section_at = (t.section_at[0] + delta, t.section_at[1])
            if t.head.__class__ is _Text:
                t.head.start += delta
                t.head.after += delta
                t.head.past += delta
                t.head.blank += delta
            elif t.head.__class__ is _Trailer:
                t.head.blank += delta
                t.head.marked += delta

    def _advance(self, final: bool) -> None:
        while not self.fallback:
            alive = self._run_all(final)
            if alive:
                self.threads = alive if final or not self.reader.bare_calls else _calls_over_text(alive)
                self._commit(final)
                return
            self.threads = []
            self._give_up()
        self._content_rest()

    def _run_all(self, final: bool) -> list[_Thread]:
        """Every reading read on as far as the text goes; those still alive, in order."""
        todo = list(reversed(self.threads))
        alive: list[_Thread] = []
        seen: set[tuple] = set()
        groups: dict[tuple, list[list[Any]]] = {}
        forks: dict[tuple, tuple[int, int]] = {}
        while todo:
            t = todo.pop()
            result = self._run(t, final)
            if result is None:
                if self._recovers_better(t):
                    self.dead = (t, self.emitted)
            elif result.__class__ is list:
                todo.extend(reversed([f for f in result if _unseen(f, forks)]))
            else:
                # readings that reached one state by different paths read alike from here: one is
                # kept (a full state is computed only where another reading is alike at a glance)
                if t.head is None or t.head.__class__ is _Trailer:
                    key = t.key()
                    if key in seen:
                        continue
                    seen.add(key)
                elif todo or alive:
                    glance = (t.pos, t.role, t.head.__class__)
                    alike = groups.get(glance)
                    if alike is None:
                        groups[glance] = [[t, None]]
                    else:
                        state = t.state()
                        for entry in alike:
                            if entry[1] is None:
                                entry[1] = entry[0].state()
                        twin = next((entry for entry in alike if entry[1] == state), None)
                        if twin is None:
                            alike.append([t, state])
                        else:
                            keep = _prefer(twin[0], t)
                            if keep is twin[0]:
                                continue
                            if keep is t:
                                alive.remove(twin[0])
                                twin[0] = t
                            else:
                                alike.append([t, state])
                alive.append(t)
        if final and alive:
            # all are complete: the one with the most calls (a text that reads as content or as a
            # call is a call), else the first in the language's order
            alive = [max(alive, key=_calls_begun)]
            if self._cut_after_calls(alive[0]):
                return []  # the reading cut off right after its calls is recovered instead
        return alive

    def _recovers_better(self, t: _Thread) -> bool:
        """Whether recovery goes on from `t`, a reading that just failed, rather than from the
        failed reading kept so far. The one that read more calls whole wins (a reading that runs
        on past a call's end, say inside a quoted value, to the end of the output, takes none);
        then the one that got further; at the same place, one inside a call's arguments (it keeps
        what they hold, wherever the chunks ended), then the one that saw the latest emitted
        events; and at the same place whatever those say, one that read further into a marker
        the output ends inside, or closed the call the other was still inside (`_closed_more`);
        last, one still inside the language over one that read it whole and failed after it
        (recovering from that one drops what its trailer read), whichever failed first."""
        dead = self.dead
        if dead is None:
            return True
        other, emitted = dead
        further = _further(t, other)
        if further:
            return True
        if further is None and (t.role == ir.ARGUMENTS, self.emitted) > (other.role == ir.ARGUMENTS, emitted):
            return True
        if t.pos != other.pos:
            return False
        return _closed_more(t, other, self.buf) or (
            other.head.__class__ is _Trailer and t.head.__class__ is not _Trailer
            and not _closed_more(other, t, self.buf))

    def _cut_after_calls(self, best: _Thread) -> bool:
        """Whether the reading that failed only at the end of the output, right after a whole
        call (its end markers not written), read more calls than `best` (a complete reading)."""
        dead = self.dead
        if dead is None or dead[1] != self.emitted:
            return False
        t = dead[0]
        return t.pos >= len(self.buf) and t.role is None and t.call.done and _calls_begun(t) > _calls_begun(best)

    def _commit(self, final: bool) -> None:
        """Emit the events every reading has (all of them when one reading is left). A call's
        start waits for its first argument text, so that a call that fails before is text."""
        threads = self.threads
        first = threads[0].events
        if len(threads) == 1:
            agreed = len(first)
        else:
            agreed = 0
            while agreed < len(first) and all(len(t.events) > agreed and t.events[agreed] == first[agreed]
                                               for t in threads[1:]):
                agreed += 1
        if agreed and not final and first[agreed - 1][0] == OPENS:
            agreed -= 1
        if agreed and not final and any(t.call.started and not t.call.confirmed for t in threads):
            agreed = threads[0].last_call(agreed)  # a call not yet known to be one is held whole
        if agreed and not final:
            agreed = self._before_open_sections(first, agreed)
        if agreed and not final:
            agreed = self._shared_with_dead(first, agreed)
        if agreed:
            self._apply(first[:agreed])
            self.emitted += agreed
            for t in threads:
                t.drop_events(agreed)
        if len(threads) > 1 and not final and self._dead_pending() is None:
            self._commit_common_text()
        if len(threads) > 1 and sum(len(t.events) for t in threads) > UNDECIDED_LIMIT:
            self.threads = threads[:1]  # readings undecided for too long: the first one wins
            self._commit(final)

    def _before_open_sections(self, events: list[tuple], agreed: int) -> int:
        """How many of the `agreed` events may go out: a section's opener and the text after it
        are held while a reading is inside a section where no call has begun (a section that
        holds no call is text)."""
        for t in self.threads:
            if t.section_open and _below(t.stack, t.section_at[1]):
                start = t.section_at[0] + self.offset[0]
                agreed = bisect_right(events, start, hi=agreed, key=_end_of)  # events lie in text order
        return agreed

    def _shared_with_dead(self, events: list[tuple], agreed: int) -> int:
        """How many of the `agreed` events may go out while a failed reading that read more calls
        whole than every living one is what recovery would go on from, should they all fail: only
        those it read too (recovery goes on from its events after the ones emitted)."""
        pending = self._dead_pending()
        if pending is None:
            return agreed
        shared = 0
        while shared < min(agreed, len(pending)) and events[shared] == pending[shared]:
            shared += 1
        return shared

    def _dead_pending(self) -> list[tuple] | None:
        """The events not yet emitted of the failed reading recovery would go on from, should
        every living reading fail where it stands: where it read more calls whole than every
        living one, or as many and got as far as all of them, inside the language (None where it
        did not). Were they to fail there, a tie would go to the one that failed first, as it
        does when all fail at once (a whole parse): events emitted meanwhile would decide it."""
        dead = self.dead
        if dead is None:
            return None
        reached = (dead[0].calls_read, dead[0].pos if dead[0].head.__class__ is not _Trailer else -1)
        if any((t.calls_read, _origin(t)) > reached for t in self.threads):
            return None
        return dead[0].events[self.emitted - dead[1]:] if self.emitted >= dead[1] else []

    def _commit_common_text(self) -> None:
        """Where the readings part inside a text of one role (reasoning that one reading ends at a
        marker and another reads on), the text they share goes out at once, however the
        readings cut it into pieces."""
        while self._share_first_text():
            pass

    def _share_first_text(self) -> bool:
        """Emit the text the readings' first held events share; whether there was some."""
        threads = self.threads
        nexts = [t.events[0] if t.events else None for t in threads]
        first = nexts[0]
        if first is None or first[0] not in (ir.REASONING, ir.CONTENT) or \
                any(e is None or e[0] != first[0] for e in nexts):
            return False
        shared = os.path.commonprefix([e[1] for e in nexts])
        if not shared:
            return False
        self._apply([(first[0], shared, first[2] - len(first[1]) + len(shared))])
        self.emitted += 1
        for t, e in zip(threads, nexts, strict=True):
            if len(e[1]) == len(shared):
                t.drop_events(1)
            else:
                t.own_events()[0] = (e[0], e[1][len(shared):], e[2])
        return True

    def _apply(self, events: list[tuple]) -> None:
        out = self.out
        for event in events:
            kind = event[0]
            if kind == ARGS:
                out.add_arguments(event[1])
            elif kind == ir.CONTENT:
                out.add_content(event[1])
            elif kind == ir.REASONING:
                out.add_reasoning(event[1])
            elif kind == OPENS:
                out.start_call(event[2] or self.call_id(), event[1])
            elif kind == BRACE:
                out.key_pending = event[1]
            elif kind == CUT and out.calls:
                out.calls[-1].incomplete = True
        if events:
            self.safe = events[-1][-1] - self.offset[0]

    def _give_up(self) -> None:
        """No reading continues: recover, losing nothing.

        The reading that got furthest keeps what it read (a call whose arguments had started is
        closed and marked incomplete; a call not yet started is text); the text from there to
        where it failed is content; then the language is read again from where it failed, with
        reasoning over (text after the calls, a call after one that was no call). At the end
        of the output, a call cut off keeps its complete values. With no reading at all, the
        rest is content."""
        self._restore()
        if self.dead is None:
            self.fallback = True
            self.buf, self.safe = self.buf[self.safe:], 0
            return
        best, emitted = self.dead
        self.dead = None
        # its events not emitted yet (others emitted since it failed are dropped)
        best.events = best.events[self.emitted - emitted:] if self.emitted >= emitted else []
        best.start_call(waited=True)  # a call that awaited its id has none
        unopened = bool(best.events) and best.events[-1][0] == OPENS  # a call with no argument text yet
        if best.call.started and not best.call.confirmed and not (self.finished and best.call.done):
            # a call whose arguments did not start well is text (its events were held back)
            at = _last_call(best.events, len(best.events))
            unopened = at < len(best.events)
            best.events = best.events[:at + 1] if unopened else best.events
        opened = best.call.started and not unopened
        if self.finished and best.role == ir.ARGUMENTS and opened:
            self._cut_off(best)  # cut off inside arguments that had begun (else the call is text)
            self.fallback = True
            return
        events = best.events
        if unopened:
            events = events[:-1]  # the call that failed before its arguments is text
        section = best.section_at
        # the section holds no call that stays one: none began, or the first is withdrawn
        holds_none = best.section_open or (best.call.started and not opened and best.first_in_section)
        if section is not None and holds_none and _below(best.stack, section[1]):
            # a section that holds no call is text, its opener and the text read inside it too
            events = [e for e in events if e[-1] <= section[0] + self.offset[0]]
        else:
            section = None
        self._apply(events)
        self.emitted += len(events)
        if opened and self.out.calls and (self._closed_by(best) or _inside_call(best)):
            self.out.calls[-1].incomplete = True  # its arguments, or the call around them, broke off
        elif opened and self.out.calls and best.call.done and not best.call.closed:
            self.out.calls[-1].incomplete = True  # the call went on with text it has no place for
        # after a call read whole, the markers that close it are no text (whitespace before the
        # failure is); else the part begun is text
        cut = min(best.mark, best.pos)
        if unopened and best.call.done:
            cut = max(self.safe, best.call_from)  # a call read whole but withdrawn: its text is content
        elif best.call.done and opened and _inside_call(best):
            cut = best.pos
            while cut > self.safe and self.buf[cut - 1] in _WHITESPACE:
                cut -= 1
        if section is not None:
            cut = min(cut, max(self.safe, section[0]))
        self.safe = max(self.safe, cut)
        rest = self._rest_of_section(best, opened)
        # reading the whole language again starts a character on, so that it cannot fail there again
        failed = best.pos if best.pos > self.safe or not self.buf or (rest is not None and len(rest) == 1) else self.safe + 1
        if best.head.__class__ is _Trailer and best.pos > self.safe:
            self.safe = failed  # the language was read whole: what follows is read again
        self.out.add_content(self.buf[self.safe:failed])
        self.safe = failed
        if self.finished and failed >= len(self.buf):
            self.fallback = True  # it failed at the end of the output: nothing is left to read again
            return
        self.resumed = True
        # reasoning the failed reading was inside may still end at its end marker; after reasoning
        # that ended (or none), that marker is text
        self.reasoning_over = best.role != ir.REASONING and not _inside_reasoning(best.stack)
        self.threads = [_Thread(stack, failed, self.offset) for stack in rest or [(self.reader.root, None)]]

    def _rest_of_section(self, t: _Thread, kept: bool) -> list[Any] | None:
        """Where a reading that failed inside a call goes on: the call's text up to its end marker
        is content, and the section goes on after it (more calls, its end). The end marker is
        markup where the call was `kept`, else text. After a failed first call, the section
        holds no call yet: read as text whole, or (where a later call in it is read whole, which
        then wins) as the section going on."""
        after = t.after_call
        if after is None or not _below(t.stack, after[1]):
            return None
        first = not kept and not t.section_calls
        rest = self.reader.call_rest(after[0], after[1], kept)
        if rest is None or first and is_weak(rest[2]):
            return None  # punctuation ends no call reliably: the section is text
        stack = (rest[0], (rest[1], after[1]))
        return [(self.reader.root, None), stack] if first else [stack]

    def _cut_off(self, t: _Thread) -> None:
        """The output ended inside a call's arguments: they keep the values that were complete
        (a tagged value running to the end is complete; a JSON member still being written is
        not) and the call is marked incomplete."""
        closed = all(e[0] != OPENS for e in t.events) and self._arguments_closed()
        if t.call.mode == "members" and t.member is not None and "".join(t.value or ()).strip() and not closed:
            head = t.head
            if head.__class__ is _PyValue and head.quote and head.outer and t.value is not None:
                t.value.append(head.quote)  # a quoted string cut off keeps what was written of it
            self._end_member(t)
        self._apply(t.events)
        if closed:
            pass
        elif t.call.mode == "members":
            self.out.add_arguments("}")
        elif t.call.mode == "json" and t.head.__class__ is _JsonValue:
            self.out.add_arguments(t.head.scanner.closing())
        if self.out.calls:
            self.out.calls[-1].incomplete = True
        self.buf, self.safe = "", 0

    def _closed_by(self, t: _Thread) -> bool:
        """Close the emitted arguments of `t`'s call if they are still open; whether they were."""
        call, head = t.call, t.head
        if self._arguments_closed():
            return False
        if call.mode == "json" and head.__class__ is _JsonValue and t.role == ir.ARGUMENTS:
            if head.scanner.started and not head.scanner.done:
                self.out.add_arguments(head.scanner.closing())
                return True
        if call.mode == "members" and t.role == ir.ARGUMENTS:
            self.out.add_arguments(('"' if t.streamed else "") + "}")
            return True
        return False

    def _arguments_closed(self) -> bool:
        """Whether the last call's emitted arguments are whole already. The reading recovered
        from may have failed before another one, whose events went out, closed them."""
        if not self.out.calls:
            return False
        try:
            json.loads(self.out.calls[-1].arguments())
        except ValueError:
            return False
        return True

    def _content_rest(self) -> None:
        self._restore()
        self.out.add_content(self.buf[self.safe:])
        self.buf, self.safe = "", 0

    # -- one reading ----------------------------------------------------------------------

    def _run(self, t: _Thread, final: bool) -> Any:
        """Read on with `t`: itself when it waits for text (or is complete), a list of readings
        when it forks, None when it fails."""
        buf = self.buf
        while True:
            head = t.head
            if head is not None:
                status = head.step(t, buf, final)
                if status == MORE:
                    return t
                if status == FAIL:
                    return None
                if status == SPLIT:  # one reading ends the text here, the other reads on
                    twin = t.fork(t.stack)
                    return [twin, t]
                if head.__class__ is _Trailer:
                    return t
                t.head = None
                continue
            if t.after_call is not None and t.stack is t.call_over:
                t.after_call = None  # the call was read up to its end marker
                t.section_calls += 1
                t.calls_read += 1
            if t.stack is None:
                t.start_call(waited=True)
                t.head = _Trailer(self.reader.end_of_turn)
                continue
            node, t.stack = t.stack
            forks = self._expand(t, node, final)
            if forks is _NONE_FITS:
                return None  # it fails here, as it would reading one option after another
            if forks is not None:
                return forks

    def _expand(self, t: _Thread, node: Any, final: bool) -> list[_Thread] | None:  # noqa: C901
        """Put `node` to work in `t`: push its parts, start its terminal, or fork on it."""
        cls = node.__class__
        if cls is ir.Seq:
            for item in reversed(node.items):
                t.stack = (item, t.stack)
        elif cls is ir.Rule:
            if node.kind == ir.SECTION:
                t.section_at = (t.pos, t.stack)
                t.section_open = True  # what it reads is held until a call in it begins
            elif node.kind == ir.CALL:
                t.call_from = t.mark
                t.after_call = t.stack
                ends = t.stack is not None and bool(_first_marker(t.stack[0]))
                t.call_over = t.stack[1] if ends else t.stack
            t.stack = (node.body, (_END_CALL, t.stack) if self.reader.is_call(node) else t.stack)
        elif cls is _EndCall:
            t.call.closed = True
        elif cls is ir.Lit:
            if self.reasoning_over and not t.skip and node.text.strip() == self.reader.reasoning_end:
                return []  # reasoning is over: its end marker is text
            if t.skip:
                skipped, t.skip = t.skip == node.text.strip(), ""
                if skipped and self.reasoning_over:
                    return None  # the end of reasoning that is over: not read, its text is the answer's
                if skipped:
                    return self._fork_stacks(t, [((node,), *self.reader.firsts.of(node)), ((), None, True)], final)
            if node.text:
                t.head = _Lit(node)
        elif cls is ir.Text:
            if t.member is not None and t.member[0] is not None and t.value is None:
                self._value(t, node)  # the raw value of an argument the schema does not name
            markers, weak = self.reader.text_markers(node)
            t.head = _Text(node, markers, weak, t.pos, self.reader.split(self._follow(t.stack)), t.value is not None)
        elif cls is ir.Gap:
            if node.max:
                t.head = _Gap(node.max)
        elif cls is ir.Chars:
            t.head = _Chars(node, self.reader.chars(node))
        elif cls is ir.Json:
            self._json(t, node)
        elif cls is ir.PyValue:
            self._value(t, node)
            t.head = _PyValue()
        elif cls is ir.RawString:
            self._value(t, node)
            t.stack = (node.text, t.stack)
        elif cls is ir.Bracketed:
            t.head = _Bracketed(node, self.reader.brackets(node.quote))
        elif cls is ir.Capture:
            if self.resumed and node.role == ir.REASONING:
                # reading again after reasoning is over: no reasoning, and its end marker optional
                # where the failed reading was inside it (else not read at all)
                body = node.body
                t.skip = (body.end.strip() if isinstance(body, ir.Text) and body.end else "") or self.reader.reasoning_end
                return None
            if node.role in (ir.REASONING, ir.CONTENT):
                t.mark = t.pos
                t.section_calls = 0
            self._begin_capture(t, node)
            t.stack = (node.body, (_EndCapture(node.role), t.stack))
        elif cls is _EndCapture:
            self._end_capture(t, node.role)
        elif cls is ir.Choice:
            return self._fork(t, node.options, final)
        elif cls is ir.Repeat:
            t.mark = t.pos
            return self._repeat(t, node, node.min, node.max, final)
        elif cls is _Again:
            if t.pos + self.offset[0] == node.start:
                return None if node.left_min > 0 else []
            t.mark = t.pos
            return self._repeat(t, node.repeat, node.left_min, node.left_max, final)
        elif cls is ir.Members:
            if t.role == ir.ARGUMENTS and t.call.started:
                t.emit((BRACE, "{", t.pos + t.offset[0]))  # it goes out with the first member's text
            else:
                self._arguments_text(t, "{")
            t.member, t.count = None, 0
            t.stack = (_MembersFrom(node, frozenset()), t.stack)
        elif cls is _MembersFrom:
            return self._members(t, node, final)
        elif cls is _Member:
            t.member = [node.key, None]
            t.stack = (node.body, (_END_MEMBER, t.stack))
        elif cls is _EndMember:
            self._end_member(t)
        elif cls is ir.Lazy:
            t.stack = (self.reader.unlazy(node), t.stack)
        else:
            raise TypeError(f"no reading for {cls.__name__}")
        return None

    def _follow(self, stack: Any) -> frozenset[str] | None:
        """The characters what is left of a reading can start with (None: any)."""
        chars: set[str] = set()
        firsts = self.reader.firsts.of
        while stack is not None:
            node, stack = stack
            if node.__class__ in _FRAMES:
                continue
            first, empty = firsts(node)
            if first is None:
                return None
            chars |= first
            if not empty:
                break
        return frozenset(chars)

    def _fork(self, t: _Thread, options: Any, final: bool) -> list[_Thread]:
        """A reading per option that can start here (judged by its first characters)."""
        firsts = self.reader.firsts.of
        return self._fork_stacks(t, [((option,), *firsts(option)) for option in options], final)

    def _fork_stacks(self, t: _Thread, options: list[tuple[tuple, Any, bool]], final: bool) -> list[_Thread]:
        """A reading per option (the nodes it pushes, its first characters, whether it can be
        empty) that can start at the text here."""
        buf, pos = self.buf, t.pos
        char = buf[pos] if pos < len(buf) else ""
        stacks = []
        for nodes, first, empty in options:
            if not empty and (char and first is not None and char not in first or not char and final):
                continue
            stack = t.stack
            for node in reversed(nodes):
                stack = (node, stack)
            stacks.append(stack)
        if not stacks:
            return _NONE_FITS
        forks = [t.fork(stack) for stack in stacks[:-1]]
        t.stack = stacks[-1]  # `t` itself reads the last option
        forks.append(t)
        return forks

    def _repeat(self, t: _Thread, node: ir.Repeat, least: int, most: int | None, final: bool) -> list[_Thread] | None:
        if most == 0:
            return None
        more = _Again(node, max(least - 1, 0), None if most is None else most - 1, t.pos + self.offset[0])
        if least > 0:
            t.stack = (node.item, (more, t.stack))
            return None
        first, empty = self.reader.firsts.of(node.item)
        return self._fork_stacks(t, [((node.item, more), None if empty else first, False), ((), None, True)], final)

    # -- captures ---------------------------------------------------------------------------------------

    def _begin_capture(self, t: _Thread, node: ir.Capture) -> None:
        role = node.role
        call = t.call
        if call.awaits_id and role != ir.CALL_ID:
            t.start_call(waited=True)  # the id did not come before what follows the call
        if role in (ir.TOOL_NAME, ir.CALL_ID, ir.ARGUMENTS):
            done = {ir.TOOL_NAME: call.name is not None, ir.CALL_ID: call.id is not None,
                    ir.ARGUMENTS: call.args}[role]
            if done:
                t.call = call = _Call()
        t.role = role
        t.parts = []
        if role == ir.CALL_ID:
            t.own_id = []
        if role == ir.ARGUMENTS:
            call.args = True
            body = node.body
            call.mode = "members" if isinstance(body, ir.Members) else \
                "string" if isinstance(body, ir.Json) and body.kind == "string" else "json"
            # the parser returns the model's own id, which some formats write after the arguments
            call.awaits_id = call.id is None and self.reader.id_may_follow(t.stack)
            t.start_call()

    def _end_capture(self, t: _Thread, role: str) -> None:
        call = t.call
        text = "".join(t.parts)
        if role == ir.TOOL_NAME:
            call.name = json.loads(text) if text.startswith('"') else text
            t.start_call()
        elif role == ir.CALL_ID:
            call.id, t.own_id = "".join(t.own_id or ()), None
            t.start_call(waited=True)
        elif role == ir.ARGUMENTS:
            call.done = True
            call.confirmed = call.confirmed or not call.confirm_next  # a bare word waits for the marker after it
            if call.mode == "members":
                t.arguments("}")
            elif call.mode == "string":
                t.arguments(json.loads(text))
        t.role = None
        t.parts = []

    def _arguments_text(self, t: _Thread, text: str) -> None:
        if t.role == ir.ARGUMENTS:
            t.arguments(text)

    def _json(self, t: _Thread, node: ir.Json) -> None:
        if t.member is not None:
            self._value(t, node)
        t.head = _JsonValue(node)

    def _value(self, t: _Thread, node: Any) -> None:
        """A tagged argument's value starts: its text is kept for `_end_member`; a string value
        written as raw text or as a quoted literal also streams."""
        if t.member is not None:
            t.member[1] = node
            t.value = []
            kind = value_kind(getattr(node, "schema", None))
            t.streamed = 0 if node.__class__ is ir.RawString and kind == "string" or \
                node.__class__ is ir.PyValue and kind != "json" else None
            t.spool = ("", "") if node.__class__ is ir.PyValue and t.streamed is not None else None

    def _members(self, t: _Thread, at: _MembersFrom, final: bool) -> list[_Thread]:
        """The next member, or the end. Read more leniently than generation writes them: the
        members in any order, each once, extra members (any key) among them, and the end at any
        point (a required argument the model left out is not invented)."""
        members, read = at.members, at.read
        first = not read
        options = [self._member_then(members, member, _key_of(member), _MembersFrom(members, read | {i}),
                                     first)
                   for i, (member, _) in enumerate(members.items) if i not in read]
        if members.extra is not None:
            options.append(self._member_then(members, members.extra, None, _MembersFrom(members, read | {-len(read) - 1}),
                                             first))
        options.append(((), None, True))
        return self._fork_stacks(t, options, final)

    def _member_then(self, members: ir.Members, member: Any, key: str | None, rest: Any,
                     first: bool) -> tuple[tuple, Any, bool]:
        lead = member if first else members.separator
        chars, empty = self.reader.firsts.of(lead)
        nodes = (_Member(member, key), rest) if first else (members.separator, _Member(member, key), rest)
        return nodes, None if empty else chars, False

    def _end_member(self, t: _Thread) -> None:
        key, node = t.member
        raw = "".join(t.value or [])
        streamed, spool, t.streamed, t.spool = t.streamed, t.spool, None, None
        t.member, t.value = None, None
        if streamed and spool is not None:
            quote, tail = spool
            tail = tail[:-1] if tail.endswith(quote) else tail
            t.arguments(json.dumps(decode_string_body(tail), ensure_ascii=False)[1:-1] + '"')
        elif streamed:
            t.arguments('"')
        else:
            lead = ", " if t.count else ""
            t.arguments(f"{lead}{json.dumps(key or '', ensure_ascii=False)}: {_convert(raw, node)}")
        t.count += 1


def _origin(t: _Thread) -> int:
    """Where a living reading is, for recovery: where its text began while it holds the
    whitespace that text began with, or the end of the last end-of-turn marker after the
    language (it may yet fail there), else its position."""
    head = t.head
    if head.__class__ is _Trailer and head.seen:
        return head.marked
    return head.start if head.__class__ is _Text and head.spaces else t.pos


def _reach(t: _Thread, buf: str) -> int:
    """Where a failed reading's text ends: the end of the output where it failed inside the
    marker the output ends with (a cut-off `<param`), else where it failed."""
    head = t.head
    if head.__class__ is _Lit and not head.done and t.pos >= 0:
        rest = buf[t.pos:].lstrip(_WHITESPACE)
        if rest and head.core.startswith(rest):
            return len(buf)
    return t.pos


def _unseen(t: _Thread, seen: dict[tuple, tuple[int, int]]) -> bool:
    """Whether a reading that forked goes on: not where one in the same state (met at a fork
    earlier in this pass) would be chosen over it (`_prefer`). Readings that meet again within
    one pass are pruned at once, so that a long piece read whole does not multiply them."""
    state = t.state()  # taken now, as the one met later will have read on from here
    counts = (t.calls_read, t.calls_held)
    met = seen.get(state)
    if met is not None and _preferred(met, counts) == 0:
        return False
    seen[state] = counts
    return True


def _end_of(event: tuple) -> int:
    return event[-1]


def _prefer(first: _Thread, second: _Thread) -> _Thread | None:
    """Of two readings in one state (they read alike from here), the one that would be chosen
    at the end of the output, and as the one to recover from if they fail: more calls begun
    wins a complete reading, more calls read whole a failed one, the first one on a tie. None
    where the two rules disagree (both are kept)."""
    choice = _preferred((first.calls_read, first.calls_held), (second.calls_read, second.calls_held))
    return (first, second, None)[choice]


def _preferred(first: tuple[int, int], second: tuple[int, int]) -> int:
    """`_prefer` on the readings' (calls read whole, calls begun): 0 the first, 1 the second,
    2 neither."""
    if second[0] <= first[0] and second[1] <= first[1]:
        return 0
    if second[0] >= first[0] and second[1] > first[1]:
        return 1
    return 2


def _calls_begun(t: _Thread) -> int:
    """The calls a reading began among its events not emitted yet, whole or not (`_Thread.calls_read`
    counts the calls read whole)."""
    return t.calls_held


def _calls_over_text(threads: list[_Thread]) -> list[_Thread]:
    """The readings, less those that read as text what another one read as a whole call: a text
    that reads as content or as a call is a call (the rule the end of the output applies, applied
    as soon as the call is whole, so that a model writing bare JSON calls does not keep a reading
    of all its calls as text, undecided, to the end). Only where calls are bare JSON: elsewhere a
    reading past a call may fail where the text reading goes on (a call inside a fenced block
    followed by what the block cannot hold)."""
    if len(threads) == 1 or not any(_past_whole_call(t) for t in threads):
        return threads
    return [t for t in threads if not _content_only(t)]


def _content_only(t: _Thread) -> bool:
    """Whether all the reading holds is content, and it is inside no call (reasoning is not
    dropped: a call inside it may turn out to be its text, once its end marker comes)."""
    return bool(t.events) and not t.calls_held and t.role != ir.REASONING and not _inside_call(t) and \
        all(e[0] == ir.CONTENT for e in t.events)


def _past_whole_call(t: _Thread) -> bool:
    """Whether a call among the reading's held events was read whole, with arguments in it (a
    bare name, read as a call with no arguments, may as well be the text it reads as)."""
    whole = t.calls_held > 1 or t.calls_held == 1 and not (t.call.started and _inside_call(t))
    return whole and any(e[0] == ARGS and e[1].strip("{} \t\n") for e in t.events)


def _closed_more(t: _Thread, other: _Thread, buf: str) -> bool:
    """Of two readings that failed at one place: whether `t` read further into a marker the
    output ends inside, or had closed the part `other` was still inside (a call whose arguments
    ended, where the other began one more argument), or read more whole calls."""
    def rank(r: _Thread) -> tuple[int, bool, int]:
        return _reach(r, buf), r.role is None and r.call.done, _calls_begun(r)

    return rank(t) > rank(other)


def _below(stack: Any, part: Any) -> bool:
    """Whether `part` is what is left of `stack` at some depth (the reading has not passed it)."""
    while stack is not None:
        if stack is part:
            return True
        stack = stack[1]
    return part is None


def _further(t: _Thread, other: _Thread) -> bool | None:
    """Whether failed reading `t` got further than `other` (None: as far)."""
    mine, theirs = (t.calls_read, t.pos, t.call.done), (other.calls_read, other.pos, other.call.done)
    return None if mine == theirs else mine > theirs


def _inside_call(t: _Thread) -> bool:
    """Whether the reading is inside a call, before its end marker (a JSON call object that
    broke off after its arguments)."""
    return t.after_call is not None and _below(t.stack, t.after_call)


def _lead_markers(node: Any, depth: int) -> set[str]:
    """The marker cores a node may begin with (as far as `depth` levels of nodes show)."""
    if depth == 0:
        return set()
    if isinstance(node, ir.Lit):
        return {node.text.strip()} if node.text.strip() else set()
    if isinstance(node, ir.Choice):
        return set().union(*(_lead_markers(o, depth - 1) for o in node.options))
    if isinstance(node, ir.Repeat | ir.Capture | ir.Rule):
        return _lead_markers(node.item if isinstance(node, ir.Repeat) else node.body, depth - 1)
    if isinstance(node, ir.Seq):
        found: set[str] = set()
        for item in node.items:
            if isinstance(item, ir.Gap):
                continue
            found |= _lead_markers(item, depth - 1)
            if not (isinstance(item, ir.Repeat) and item.min == 0):
                break
        return found
    return set()


def _first_marker(node: Any) -> str:
    """The core of the marker a node begins with, whitespace aside ("" where it begins otherwise)."""
    while True:
        if isinstance(node, ir.Lit):
            return node.text.strip()
        if isinstance(node, ir.Repeat) and node.max == 1:
            node = node.item  # a marker that may be left out
        elif isinstance(node, ir.Seq):
            items = [i for i in node.items if not isinstance(i, ir.Gap)]
            if not items:
                return ""
            node = items[0]
        else:
            return ""


def _last_call(events: list[tuple], end: int) -> int:
    """The index of the last call start in `events[:end]` (`end` if there is none)."""
    for index in range(end - 1, -1, -1):
        if events[index][0] == OPENS:
            return index
    return end


def _holds_object(parts: list[str]) -> bool:
    """Whether a JSON string holds a JSON object (arguments written as a string)."""
    try:
        return isinstance(json.loads(json.loads("".join(parts))), dict)
    except ValueError:
        return False


def _frame_state(frame: Any, here: int) -> Any:
    """A stack entry as data: an IR node by identity, a frame made while reading by its content.
    The rest of a repetition whose last item read something (it began before `here`) reads as
    the repetition itself with the counts left: the number of items read, or where a reading
    split a run of them, makes no difference from here."""
    cls = frame.__class__
    if cls is _Again:
        return ir.Repeat, id(frame.repeat), frame.left_min, frame.left_max, frame.start == here
    if cls is ir.Repeat:
        return cls, id(frame), frame.min, frame.max, False
    if cls is _MembersFrom:
        return cls, id(frame.members), frame.read
    if cls is _Member:
        return cls, id(frame.body), frame.key
    if cls is _EndCapture:
        return cls, frame.role
    return id(frame)


def _plain(value: Any) -> Any:
    """`value` as a hashable part of a reading's state (an object by its identity)."""
    if value is None or isinstance(value, str | int | bool | tuple | frozenset):
        return value
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    if value.__class__ is JsonScanner:
        return tuple(_plain(getattr(value, slot)) for slot in JsonScanner.__slots__)
    return id(value)


def _inside_reasoning(stack: Any) -> bool:
    """Whether what is left of a reading closes a reasoning capture (it is inside one)."""
    while stack is not None:
        node, stack = stack
        if node.__class__ is _EndCapture and node.role == ir.REASONING:
            return True
    return False


def _parts(node: Any) -> tuple[Any, ...]:
    """A node's direct parts (the members of tagged arguments are values: no call id there)."""
    if isinstance(node, ir.Seq):
        return node.items
    if isinstance(node, ir.Choice):
        return node.options
    if isinstance(node, ir.Repeat):
        return (node.item,)
    if isinstance(node, ir.Capture | ir.Rule):
        return (node.body,)
    if isinstance(node, ir.Lazy):
        return (node.body,)
    return ()


def _holds_arguments(node: Any) -> bool:
    """Whether `node` captures a call's arguments itself, not inside a rule of its own."""
    if isinstance(node, ir.Capture) and node.role == ir.ARGUMENTS:
        return True
    if isinstance(node, ir.Rule | ir.Lazy):
        return False
    return any(_holds_arguments(part) for part in _parts(node))


def _is_soft(stop: str, node: ir.Text) -> bool:
    """Whether a stop of a value's text may also be part of it: punctuation that values contain
    (`,` in `Paris, France` before the value's own end marker, `]` in `[a, b]`)."""
    return is_weak(stop) and stop != (node.end or "").strip()


def _key_of(member: Any) -> str | None:
    return member.key if isinstance(member, ir.Rule) else None


def _without_cdata(value: str) -> str:
    opening, closing = _CDATA
    if value.startswith(opening) and closing in value:
        inner, _, rest = value[len(opening):].partition(closing)
        return inner + rest
    return value


def _convert(raw: str, node: Any) -> str:
    """The JSON text of a tagged argument's value, read from its raw text by its schema."""
    schema = getattr(node, "schema", None)
    if isinstance(node, ir.PyValue):
        kind, text = value_kind(schema), raw.strip()
        if kind != "json" and len(text) > 1 and text[0] in "'\"" and text[-1] == text[0]:
            return json.dumps(decode_string_body(text[1:-1]), ensure_ascii=False)
        return convert_literal_value(raw, kind, schema)
    if isinstance(node, ir.Json):
        return convert_tagged_value(raw, "json", schema)
    raw = _without_cdata(raw)
    kind = "json" if isinstance(node, ir.RawString) and node.as_json else value_kind(schema)
    if kind == "string":
        # a nullable string written as `null` is null (a raw string cannot spell it otherwise)
        return "null" if raw.strip() == "null" and allows_null(schema) else json.dumps(raw, ensure_ascii=False)
    nested = nested_to_json(raw, node.nested) if isinstance(node, ir.RawString) and node.nested else None
    return nested if nested is not None else convert_tagged_value(raw, kind, schema)


__all__ = ["LanguageReader", "LanguageStream", "new_call_id"]
