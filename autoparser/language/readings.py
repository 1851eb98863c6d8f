"""One reading of the text (`Reading`): the IR nodes still to match, its position, the terminal it
is inside and the events it has read, with the frames it pushes besides IR nodes.

Events are small tuples tagged by kind (`OPENS`, `ARGS`, `BRACE`, `CUT`, or a text role): a
reading makes thousands, compared between readings to find what they agree on, and tuples
compare and copy fastest. Standard library only: the standalone module embeds it.
"""

from __future__ import annotations

import json
import re
from operator import attrgetter
from typing import Any

from autoparser.language import ir
from autoparser.language.jsonscan import JsonScanner
from autoparser.language.mapper import literal_spelling, member_opening, quoted_text
from autoparser.language.values import (
    allows_null,
    decided_end,
)

# terminal results besides DONE: wait, no match, the text may end here, one reading breaks off here
# (where a call may begin again, met inside a call's JSON string) and another reads on
MORE, FAIL, SPLIT, BREAK = 0, 2, 3, 4
# what a reading's events are, besides text of a role (`ir.REASONING`, `ir.CONTENT`): a call opens
# (name, id), argument text, an object's opening brace held for the first key, a call cut off
OPENS, ARGS, BRACE, CUT = "opens", "args", "brace", "cut"
_WHITESPACE = " \t\n\r"
_BLANKS = re.compile(f"[{re.escape(_WHITESPACE)}]*")
# a text's slots that its start and the position stand for, and what its searches found (`_Text.clear`)
_DERIVED = ("spaces", "blank", "clear", "found", "held")
_ESCAPED = re.compile(r'["\\\x00-\x1f]')  # characters a JSON string spells otherwise
# A whole output is read in pieces (`policy.WHOLE_PIECE`). Readings that reach one state are merged
# where a piece ends; within one, the first reading is read as far as the piece goes before the
# others, so a longer piece lets a reading that will lose (say, bare JSON calls read as text) read further.
_JOINED = 1024  # text events read in parts are joined up to this length


_AS_IS = frozenset({type(None), str, int, bool, tuple, frozenset})  # (tested first: most values are these)


def _plain(value: Any) -> Any:
    """`value` as a hashable part of a reading's state (an object by its identity)."""
    if value.__class__ in _AS_IS or isinstance(value, str | int | bool | tuple | frozenset):
        return value
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    if value.__class__ is JsonScanner:
        return value.key()
    return id(value)


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


class _Value:
    """The raw text of a tagged value read so far, in pieces. Forks share the pieces (each reads
    only its first `count`; one that appends where another appended first copies them) and its
    state is a running hash of them: a value nested deep costs neither a fork nor a state its length."""

    __slots__ = ("parts", "count", "digest", "cut")

    def __init__(self, parts: list[str] | None = None, count: int = 0, digest: int = 0, cut: bool = False) -> None:
        self.parts = [] if parts is None else parts
        self.count, self.digest = count, digest
        self.cut = cut  # a literal whose quote the end of the output left open

    def append(self, piece: str) -> None:
        if len(self.parts) != self.count:
            self.parts = self.parts[:self.count]
        self.parts.append(piece)
        self.count += 1
        self.digest = hash((self.digest, piece))

    def copy(self) -> _Value:
        return _Value(self.parts, self.count, self.digest, self.cut)

    def key(self) -> tuple[int, int]:
        return self.count, self.digest

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self):
        parts = self.parts
        return iter(parts if len(parts) == self.count else parts[:self.count])


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
                 "confirm_next", "closed", "closed_at", "args_from", "pending_end")

    def __init__(self) -> None:
        self.name: str | None = None
        self.id: str | None = None
        self.args = False  # its arguments began
        self.started = False  # its start event was made
        self.pending: list[str] = []  # argument text read before the name
        self.pending_end = -1  # where the last of it was read (absolute)
        self.mode = ""  # how the arguments are written: "members", "json", "string"
        self.scanner: JsonScanner | None = None
        self.done = False  # its arguments were read whole
        self.awaits_id = False  # its start waits for an id the format writes after the arguments
        # its arguments started well (a JSON object's first key or its end, a first tagged value):
        # until then a failure makes the call text, and its events are held back
        self.confirmed = False
        self.confirm_next = False  # the next marker read confirms it
        self.closed = False  # its own structure was read to its end (what holds its arguments)
        self.closed_at = -1  # where that structure ended (absolute), once it did
        self.args_from = -1  # where its arguments began (absolute), once they did


class _Thread:
    __slots__ = ("stack", "pos", "events", "role", "head", "call", "parts", "member", "value", "count", "mark",
                 "skip", "own_id", "after_call", "section_calls", "calls_read",
                 "call_over", "streamed", "spool", "call_from", "section_at", "section_open", "first_in_section",
                 "offset", "call_at", "calls_held", "shared", "markup", "unchecked", "member_at", "value_end", "reasoned",
                 "after_dead", "left", "first_unread", "resync_at", "ident", "inside_too")

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
        self.value: _Value | None = None  # raw text of a tagged value being read
        self.member_at = -1  # where the text of that argument began (absolute), its key included
        self.value_end = -1  # where the text of its value read so far ends (absolute): its end marker follows
        self.count = 0  # tagged arguments read in the current call
        # where the last whole part read ends (text, a repeated item outside a call's name and id):
        # failing later, the rest is text
        self.mark = pos
        self.skip = ""  # a marker that may be left out (the end of reasoning skipped on resuming)
        self.own_id: list[str] | None = None  # the text of the id capture being read (it may hold the name)
        self.after_call: Any = None  # what follows the call being read (its end marker first)
        self.section_calls = 0  # calls read whole since the last text
        self.calls_read = 0  # calls read whole, up to their end marker
        self.call_over: Any = None  # what is left once the call is read whole (its end marker included)
        self.streamed: int | None = None  # a string value that streams: 0 not begun, 1 begun (None: kept whole)
        self.spool: tuple[str, str] | None = None  # a literal that may stream: its quote, the text held back
        self.call_from = pos  # where the part that holds the last call began (a separator before it included)
        # where the last call section began, what follows it, and its rule
        self.section_at: tuple[int, Any, ir.Rule] | None = None
        self.section_open = False  # no call has begun in that section yet
        self.first_in_section = False  # the call being read is that section's first
        self.markup = 0  # markers read as markup where a text beside them could hold them (`ir.MARKUP`)
        # where the calls began (absolute) that were not yet checked against the arguments other
        # readings read (`interpret.LanguageStream._outside_arguments`)
        self.unchecked: tuple[int, ...] = ()
        self.reasoned = False  # it read reasoning text (not in `state`: for recovery only)
        # it comes after the failed reading kept to recover from (`interpret.LanguageStream.dead`)
        # in the order of the readings, the language's order of options
        self.after_dead = False
        # its number where a pass noted its state at a fork (`preference._unseen`), else 0
        self.ident = 0
        # the text it stopped reading where another reading read on as text (a bracket where a
        # bare call may begin, a soft stop): that reading holds that very terminal while it reads on
        self.left: Any = None
        # where it took an option at the end of the text, before the character there was known
        # (`stepping._Stepping._fork_stacks`): that place (absolute), the characters the option can
        # begin with, and the options taken there together: [how many are not checked yet, whether
        # one began, what was left of the reading before them]
        self.first_unread: tuple[int, frozenset[str], list[Any]] | None = None
        # where it broke off its call at a call's or section's opener inside the call's JSON string
        # (absolute; -1: it did not): recovery goes on from there should the call fail later
        self.resync_at = -1
        # failed at its call's end marker where another reading failed inside that very call, at
        # the same place (`recovery._Recovery._broke_in_held_section`): for recovery only
        self.inside_too = False

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
        copy.closed, copy.closed_at = call.closed, call.closed_at
        copy.args_from, copy.pending_end = call.args_from, call.pending_end
        twin.call = copy
        twin.parts = list(self.parts)
        twin.member = None if self.member is None else list(self.member)
        twin.value = None if self.value is None else self.value.copy()
        twin.member_at, twin.value_end = self.member_at, self.value_end
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
        twin.markup = self.markup
        twin.unchecked = self.unchecked
        twin.reasoned = self.reasoned
        twin.after_dead = self.after_dead
        twin.left = self.left
        twin.first_unread = self.first_unread
        twin.resync_at = self.resync_at
        return twin

    def restore(self, kept: _Thread, shift: int) -> None:
        """Back to `kept`, a copy of this reading where it took options at the end of the text that
        the character there then ruled out, as a reading that saw that character never took them
        (entering a call's rule or a capture there changed what recovery reads of it); its events
        stay (what went out since was dropped from them), its places moved by `shift` since."""
        self.role, self.call, self.parts, self.member, self.value = kept.role, kept.call, kept.parts, kept.member, kept.value
        self.member_at, self.value_end, self.count = kept.member_at, kept.value_end, kept.count
        self.mark, self.call_from = kept.mark + shift, kept.call_from + shift
        self.skip, self.own_id = kept.skip, kept.own_id
        self.after_call, self.section_calls, self.calls_read, self.call_over = (
            kept.after_call, kept.section_calls, kept.calls_read, kept.call_over)
        self.streamed, self.spool = kept.streamed, kept.spool
        self.section_at = None if kept.section_at is None else (kept.section_at[0] + shift, *kept.section_at[1:])
        self.section_open, self.first_in_section = kept.section_open, kept.first_in_section
        self.markup, self.unchecked, self.reasoned, self.left = kept.markup, kept.unchecked, kept.reasoned, kept.left

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
        terminal = () if head is None else tuple(map(_plain, _state_slots(head.__class__)(head)))
        frames, node, here = [], self.stack, self.pos + self.offset[0]
        while node is not None:
            frames.append(_frame_state(node[0], here))
            node = node[1]
        return (self.pos, self.role, tuple(frames), head.__class__, terminal, call.name, call.id, call.args,
                call.started, tuple(call.pending), call.pending_end, call.mode, call.done, call.awaits_id, call.confirmed,
                call.confirm_next, call.closed, tuple(self.parts),
                _plain(self.member), None if self.value is None else self.value.key(), self.count, self.skip, _plain(self.own_id), self.streamed,
                self.spool)

    # what the terminal read goes where its capture says
    def text(self, piece: str) -> None:
        if not piece:
            return
        if self.own_id is not None:
            self.own_id.append(piece)
        if self.value is not None:
            self.value.append(piece)
            self.value_end = self.pos + self.offset[0]
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
        if self.role == ir.REASONING and not self.reasoned and not piece.isspace():
            self.reasoned = True
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
        opening = self.head.section[0] if getattr(self.head, "section", ()) else None
        if opening is not None and raw.startswith(opening):
            self.streamed = None
            return
        if (opening is not None and opening.startswith(raw)) or not raw.strip():
            return  # nothing visible yet, or what may still open the value's section
        node = self.member[1]
        spelling = literal_spelling(node)
        if spelling is not None:
            visible = raw.lstrip()
            if visible[0] in spelling.quotes or visible[0] in spelling.opens:
                self.streamed = None  # a literal: its value is read whole, at its end
                return
            if spelling.null.startswith(visible.rstrip()) and allows_null(getattr(node, "schema", None)):
                return  # what may still be a nullable string's null word
        if node.null.startswith(raw.strip()) and allows_null(node.schema):
            return  # what may still be a nullable string's null word
        self.streamed = 1
        self.arguments(f"{self.member_key()}\"{json.dumps(raw, ensure_ascii=False)[1:-1]}")

    def member_key(self) -> str:
        return (", " if self.count else "") + member_opening((self.member or [None])[0])

    def value_text(self, piece: str, opened: bool) -> None:
        """Text of a literal value: one that `opened` with a quote or a bracket confirms its call
        as it begins; a bare word (`1` in `x=1])`) only with the marker read after it."""
        if piece and self.value is not None:
            self.value.append(piece)
            self.value_end = self.pos + len(piece) + self.offset[0]  # the piece begins at `pos`
            call = self.call
            if not call.confirmed and not call.confirm_next and not piece.isspace():
                if opened:
                    call.confirmed = True
                else:
                    call.confirm_next = True
            if self.spool is not None:
                self.stream_literal(piece)

    def stream_literal(self, piece: str) -> None:
        """A quoted literal's text goes out as it arrives, decoded; held back: a quote at the end
        (it may close the value) and an escape that may be cut in two. A literal that does not
        begin with a quote is kept whole. Its event ends where the text it holds ends (`piece`
        begins at the position), as other events do: a reading that fails after it gives back
        as text only what follows."""
        quote, tail = self.spool or ("", "")
        end = self.pos + len(piece)
        spelling = self.member[1].spelling
        if not self.streamed:
            raw = "".join(self.value or ()).lstrip()
            if not raw:
                return
            if raw[0] not in spelling.quotes:
                self.spool = None
                return
            self.streamed, quote, tail, piece = 1, raw[0], "", raw[1:]
            self.arguments(f"{self.member_key()}\"")
        text = tail + piece
        cut = decided_end(text, quote, spelling.escape)
        if cut:
            self.arguments(json.dumps(quoted_text(text[:cut], spelling), ensure_ascii=False)[1:-1],
                           end - (len(text) - cut))
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

    def arguments(self, piece: str, end: int | None = None) -> None:
        """Argument text, its event ending at `end` (the position where None)."""
        if not piece:
            return
        at = (self.pos if end is None else end) + self.offset[0]
        if self.call.started:
            self.emit((ARGS, piece, at))
        else:
            self.call.pending.append(piece)
            self.call.pending_end = at

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
        # a call that waited in vain for its id goes out where it ended (a whole one) or where its
        # arguments read so far end: what followed is text
        at = self.pos + self.offset[0]
        if waited and call.done:
            at = min(self.pos, self.mark) + self.offset[0]
        elif waited and call.awaits_id:
            at = min(at, max(call.pending_end, call.args_from))
        self.emit((OPENS, call.name, call.id, at))
        if call.pending:
            self.emit((ARGS, "".join(call.pending), at))
            call.pending = []


def _end_of(event: tuple) -> int:
    return event[-1]


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


def _same_stack(one: Any, other: Any, here: int) -> bool:
    """Whether two stacks are alike as data (`_frame_state`), compared down to a tail they share.
    Two entries of which one is an IR node compared by identity differ unless they are one."""
    while one is not other:
        if one is None or other is None:
            return False
        mine, theirs = one[0], other[0]
        if mine is not theirs and (mine.__class__ not in _BY_CONTENT or theirs.__class__ not in _BY_CONTENT
                                   or _frame_state(mine, here) != _frame_state(theirs, here)):
            return False
        one, other = one[1], other[1]
    return True


_STATE_SLOTS: dict[type, Any] = {}


def _state_slots(cls: type) -> Any:
    """A function giving a terminal's slots that make up its state (all but `_DERIVED`), in order."""
    found = _STATE_SLOTS.get(cls)
    if found is None:
        slots = [slot for slot in cls.__slots__ if slot not in _DERIVED]
        found = _STATE_SLOTS[cls] = attrgetter(*slots) if len(slots) > 1 else \
            (lambda head, slots=tuple(slots): tuple(getattr(head, slot) for slot in slots))
    return found


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


# the stack entries `_frame_state` compares by their content (all others by identity)
_BY_CONTENT = frozenset({_Again, ir.Repeat, _MembersFrom, _Member, _EndCapture})
