"""How a reading moves through the language: nodes expanded onto its stack, forks at choices
(pruned by the first characters each option can begin with), repetitions, captures, and the
members of tagged arguments in any order.

A mixin of `interpret.LanguageStream`; standard library only.
"""

from __future__ import annotations

import json
from typing import Any

from autoparser.language import ir
from autoparser.language.mapper import member_json, member_key, quoted_text
from autoparser.language.readings import (
    _END_CALL,
    _END_MEMBER,
    _FRAMES,
    _NONE_FITS,
    BRACE,
    BREAK,
    FAIL,
    MORE,
    SPLIT,
    _Again,
    _Call,
    _EndCall,
    _EndCapture,
    _EndMember,
    _Member,
    _MembersFrom,
    _Thread,
    _Value,
)
from autoparser.language.request import value_kind
from autoparser.language.shapes import _first_marker
from autoparser.language.terminals import (
    NEXT_CHAR,
    _Bracketed,
    _Chars,
    _Gap,
    _JsonValue,
    _Lit,
    _PyValue,
    _Text,
    _Trailer,
)
from autoparser.language.values import decode_string_body


class _Stepping:
    """The reading engine of a stream: `_run` reads one reading as far as the text goes."""

    def _run(self, t: _Thread, final: bool) -> Any:
        """Read on with `t`: itself when it waits for text (or is complete), a list of readings
        when it forks, None when it fails."""
        buf = self.buf
        unread = t.first_unread
        if unread is not None and unread[0] - self.offset[0] < len(buf):
            # an option taken before the character it begins with was there: as where that
            # character was known at the fork, one it rules out was never taken, and where it
            # rules out all taken there, the reading fails where it forked
            t.first_unread = None
            group = unread[2]
            group[0] -= 1
            if buf[unread[0] - self.offset[0]] in unread[1]:
                group[1] = True
            elif group[0] or group[1]:
                return []
            else:
                t.stack, t.head = group[2], None
                t.restore(group[3], group[4] - self.offset[0])
                return None
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
                    twin.left = head
                    return [twin, t]
                if status == BREAK:  # a call may begin again inside its string: one reading breaks off there
                    twin = t.fork(t.stack)
                    twin.head, twin.resync_at = head.broken_copy(), t.pos + self.offset[0]
                    return [twin, t]
                if head.__class__ is _Trailer:
                    return t
                t.head = None
                continue
            if t.after_call is not None and t.stack is t.call_over:
                t.after_call = None  # the call was read up to its end marker
                t.section_calls += 1
                t.calls_read += 1
                if t.reasoned:
                    self.call_ends.add(t.pos + self.offset[0])
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
                t.section_at = (t.pos, t.stack, node)
                t.section_open = True  # what it reads is held until a call in it begins
            elif node.kind == ir.CALL:
                t.call_from = t.mark
                t.unchecked += (t.pos + self.offset[0],)
                t.after_call = t.stack
                ends = t.stack is not None and bool(_first_marker(t.stack[0]))
                t.call_over = t.stack[1] if ends else t.stack
            elif node.kind == ir.MARKUP:
                t.markup += 1
            t.stack = (node.body, (_END_CALL, t.stack) if self.reader.is_call(node) else t.stack)
        elif cls is _EndCall:
            t.call.closed, t.call.closed_at = True, t.pos + self.offset[0]
        elif cls is ir.Lit:
            if self.reasoning_over and not t.skip and self.reader.reasoning_end and \
                    node.text.strip() == self.reader.reasoning_end:
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
            t.head = _Text(node, markers, weak, t.pos, self.reader.split(self._follow(t.stack)), t.value is not None,
                           self.reader.section if t.value is not None else ())
        elif cls is ir.Gap:
            if node.max or node.not_line is not None:
                t.head = _Gap(node)
        elif cls is ir.Chars:
            t.head = _Chars(node, self.reader.chars(node))
        elif cls is ir.Json:
            self._json(t, node)
        elif cls is ir.PyValue:
            self._value(t, node)
            t.head = _PyValue(node, self.reader.quoted_breaks(node.spelling), self.reader.inner_resync)
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
            if not _in_name_or_id(t):
                t.mark = t.pos
            return self._repeat(t, node, node.min, node.max, final)
        elif cls is _Again:
            if t.pos + self.offset[0] == node.start:
                return None if node.left_min > 0 else []
            if not _in_name_or_id(t):
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
            t.member_at = t.pos + self.offset[0]
            t.stack = (node.body, (_END_MEMBER, t.stack))
        elif cls is _EndMember:
            if t.pos >= len(self.buf) and not final and self._follow(t.stack, members=True) is not None:
                # whether the member ends here is judged on the character after it (`_may_follow`):
                # where a chunk ends right after it, the reading waits for that character
                t.stack, t.head = (node, t.stack), NEXT_CHAR
                return None
            if not self._may_follow(t):
                return _NONE_FITS  # its value would be converted only for the reading to fail next
            self._end_member(t)
        elif cls is ir.Lazy:
            t.stack = (self.reader.unlazy(node), t.stack)
        else:
            raise TypeError(f"no reading for {cls.__name__}")
        return None

    def _may_follow(self, t: _Thread) -> bool:
        """Whether what is left of the reading can start with the next character, where there is one."""
        if t.pos >= len(self.buf):
            return True
        follow = self._follow(t.stack, members=True)
        return follow is None or self.buf[t.pos] in follow

    def _follow(self, stack: Any, members: bool = False) -> frozenset[str] | None:
        """The characters what is left of a reading can start with (None: any); with `members`,
        the members left to read are judged by their separator, else they may start with any."""
        chars: set[str] = set()
        firsts = self.reader.firsts.of
        while stack is not None:
            node, stack = stack
            if node.__class__ in _FRAMES:
                continue
            if members and node.__class__ is _MembersFrom:
                # past its first member, the next one begins with the separator; or the members end
                if not node.read:
                    return None
                first, empty = firsts(node.members.separator)
                if first is None or empty:
                    return None
                chars |= first
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
        before = t.stack
        # what the reading was before it took the options, should the character rule them all out
        kept = (t.fork(before), self.offset[0]) if not char else ()
        stacks = []
        firsts = []
        for nodes, first, empty in options:
            if not empty and (char and first is not None and char not in first or not char and final):
                continue
            stack = t.stack
            for node in reversed(nodes):
                stack = (node, stack)
            stacks.append(stack)
            firsts.append(None if empty else first)
        if not stacks:
            return _NONE_FITS
        forks = [t.fork(stack) for stack in stacks[:-1]]
        t.stack = stacks[-1]  # `t` itself reads the last option
        forks.append(t)
        if not char:
            _check_firsts_later(t.first_unread, forks, firsts, pos + self.offset[0], (before, *kept))
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
            call.args_from = t.pos + self.offset[0]
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
            call.name = _string_value(text) if text.startswith('"') else text
            t.start_call()
        elif role == ir.CALL_ID:
            call.id, t.own_id = "".join(t.own_id or ()), None
            t.start_call(waited=True)
        elif role == ir.ARGUMENTS:
            call.done = True
            if call.mode == "json":
                self.spans.append((call.args_from, t.pos + self.offset[0]))
            call.confirmed = call.confirmed or not call.confirm_next  # a bare word waits for the marker after it
            if call.mode == "members":
                t.arguments("}")
            elif call.mode == "string":
                t.arguments(_string_value(text))
        t.role = None
        t.parts = []

    def _arguments_text(self, t: _Thread, text: str) -> None:
        if t.role == ir.ARGUMENTS:
            t.arguments(text)

    def _json(self, t: _Thread, node: ir.Json) -> None:
        if t.member is not None:
            self._value(t, node)
        t.head = _JsonValue(node, self.reader.value_markers, self.reader.inner_resync)

    def _value(self, t: _Thread, node: Any) -> None:
        """A tagged argument's value starts: its text is kept for `_end_member`; a string value
        written as raw text or as a quoted literal also streams."""
        if t.member is not None:
            t.member[1] = node
            t.value = _Value()
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
        options = [self._member_then(members, member, member_key(member), _MembersFrom(members, read | {i}),
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
        cut = t.value is not None and t.value.cut
        streamed, spool, t.streamed, t.spool = t.streamed, t.spool, None, None
        t.member, t.value = None, None
        if node is None:
            return  # a member that read a key and no value (`ir.Members`) adds nothing
        if streamed and spool is not None:
            quote, tail = spool
            tail = tail[:-1] if tail.endswith(quote) else tail
            t.arguments(json.dumps(quoted_text(tail, node.spelling), ensure_ascii=False)[1:-1] + '"')
        elif streamed:
            t.arguments('"')
        else:
            t.arguments((", " if t.count else "") + member_json(key, raw, node, self.reader.section, cut))
        t.count += 1


def _check_firsts_later(unread: Any, forks: list[_Thread], firsts: list[Any], at: int, before: tuple) -> None:
    """Options taken at `at`, the end of the text, before the character there is known: each
    (but one that may begin with any) is checked against it once it comes (`_run`), together
    with the others taken there (with those of a fork there that this one is an option of).
    `before`: the stack before them, a copy of the reading then and the stream's offset then."""
    if unread is not None and unread[0] == at:
        group = unread[2]
        group[0] -= 1  # the reading that forked goes on as its options
    else:
        unread, group = None, [0, False, *before]
    for fork, first in zip(forks, firsts, strict=True):
        if unread is not None:
            first = unread[1] if first is None else first & unread[1]
        elif first is None:
            group[1] = True  # an option that may begin with anything: the fork does not fail
            fork.first_unread = None
            continue
        group[0] += 1
        fork.first_unread = (at, first, group)


def _string_value(token: str) -> str:
    """The value of a JSON string token as the scanner passed it: raw control characters and
    lone backslashes, which it lets through, stay as written instead of failing `json.loads`."""
    try:
        return json.loads(token)
    except ValueError:
        return decode_string_body(token[1:-1] if len(token) > 1 and token.endswith('"') else token[1:])


def _in_name_or_id(t: _Thread) -> bool:
    """Whether `t` is reading a call's name or id: a word of it is no whole part of the output
    (cut off there, the name or id is text from where it began)."""
    return t.own_id is not None or t.role == ir.TOOL_NAME or t.role == ir.CALL_ID
