"""Where no reading continues, nothing is lost (policy rules `nothing-lost`, `cut-off-calls`): the
failed reading that recovery goes on from, what it keeps, and the text to where it failed as
content; then the language is read again from there with reasoning over.

A mixin of `interpret.LanguageStream`; standard library only.
"""

from __future__ import annotations

import re
from typing import Any

from autoparser.language import ir
from autoparser.language.jsonscan import is_whole_json
from autoparser.language.markers import MarkerSet, begins_one, exact_at, hold_for
from autoparser.language.policy import HOLD_BOUND
from autoparser.language.preference import (
    _broke_in_calls,
    _calls_begun,
    _closing_rank,
    _further,
    _inside_call,
    _inside_or_ending,
    _origin,
    _reach,
    _read_past_break,
)
from autoparser.language.readings import (
    _WHITESPACE,
    CUT,
    OPENS,
    _last_call,
    _Thread,
    _Value,
)
from autoparser.language.request import is_weak
from autoparser.language.shapes import (
    _below,
    _inside_reasoning,
    _without_spent_repeats,
)
from autoparser.language.terminals import (
    _Bracketed,
    _JsonValue,
    _Lit,
    _PyValue,
    _Text,
    _Trailer,
)

# the terminals a tagged value is read by: a reading that failed inside one failed inside the value
_VALUE_TERMINALS = (_Text, _JsonValue, _Bracketed, _PyValue)


class _Recovery:
    """Recovery of a stream whose readings all failed."""

    def _recovers_better(self, t: _Thread, first: bool, dead: tuple[_Thread, int] | None) -> bool:
        """Whether recovery goes on from `t`, a reading that just failed, rather than from `dead`
        (the failed reading kept so far, and the events emitted then; None: none). One that broke
        off a call where a call may begin again
        inside its JSON string (`_Thread.resync_at`) wins over one that read on in that call
        past it and failed before its arguments ended. Else the one that read more calls whole
        wins (a reading that runs
        on past a call's end, say inside a quoted value, to the end of the output, takes none);
        then the one that got further; at the same place, one inside a call's arguments (it keeps
        what they hold, wherever the chunks ended), then the one that saw the latest emitted
        events; and at the same place whatever those say, one that read further into a marker
        the output ends inside, or closed the call the other was still inside (`_closing_rank`);
        last, one still inside the language over one that read it whole and failed after it
        (recovering from that one drops what its trailer read), then, of two readings of one call,
        the one that read its section's opener (the other went on inside the section where
        recovery read on), then the `first` in the readings' order (whichever failed first in
        that pass, where both failed in one)."""
        if dead is None:
            return True
        other, emitted = dead
        _note_alike(t, other)
        # a reading of the calls as text that fails after one broke inside them (at the end of
        # turn): recovery goes on from the broken one, which may read later calls
        if self._text_before_later_call(t, other):
            return False
        if self._text_before_later_call(other, t):
            return True
        # a call broke off where a call may begin again, inside its string: there, the first time
        if _read_past_break(other, t) and not self._failed_at_later_call(t, other):
            return False
        if _read_past_break(t, other) and not self._failed_at_later_call(other, t):
            return True
        ended = self._ended_reasoning_at_calls(t, other)
        if ended is not None:
            return ended
        further = _further(t, other)
        if further:
            return True
        # events it held that went out after it failed (the others had them too) are none it had not seen
        seen = min(self.emitted, emitted + len(other.events))
        if further is None and (t.role == ir.ARGUMENTS, self.emitted) > (other.role == ir.ARGUMENTS, seen):
            return True
        if t.pos != other.pos:
            return False
        mine, theirs = _closing_rank(t, self.buf), _closing_rank(other, self.buf, other.events[seen - emitted:])
        if mine != theirs:
            return mine > theirs
        if (other.head.__class__ is _Trailer) != (t.head.__class__ is _Trailer):
            return other.head.__class__ is _Trailer
        if t.markup != other.markup:  # as `_prefer` keeps one of two readings that meet
            return t.markup > other.markup
        if t.call_from == other.call_from and (t.section_at is None) != (other.section_at is None):
            # one reading of that call read its section's opener, the other went on inside the
            # section where recovery read on: the one that knows where the section began, so that
            # whether the held text opens with it (`_broke_in_held_section`) does not depend on
            # which of the two failed first, where chunks ended
            return t.section_at is not None
        return first

    def _failed_at_later_call(self, t: _Thread, broken: _Thread) -> bool:
        """Whether `t` failed in its call's arguments outside any value (at a key), inside the
        markers of the later call where `broken` broke off its string (`_Thread.resync_at`): `t`
        ended that value before them and read them as its own call's next part (`(get_weather`
        as an argument's `(key`, the call's end left out), so it read no text of the value past
        them; recovery from it reads that call from there (`_later_call_around`), the value as
        it was written."""
        if t.role != ir.ARGUMENTS or t.head.__class__ in _VALUE_TERMINALS:
            return False
        start = broken.resync_at - self.offset[0]
        hit = self.reader.inner_resync.find_at(self.buf, start) if start >= 0 else None
        return hit is not None and start <= t.pos < start + len(hit[0])

    def _ended_reasoning_at_calls(self, t: _Thread, other: _Thread) -> bool | None:
        """At the end of the output, of two failed readings, one that went on reading reasoning
        its end marker never ended loses to one that ended it where calls begin and was cut off
        inside them by the end of the output (policy rule `cut-off-calls`): whether `t` wins that
        way, None where the two do not differ so. A call that broke before the end is text of
        the reasoning (policy rule `nothing-lost`): a reading of it as such reads on."""
        if not self.finished or not self.reader.reasoning_end:
            return None
        mine, theirs = self._reasoning_unended(t), self._reasoning_unended(other)
        if mine == theirs:
            return None
        if theirs and self._cut_off_in_calls(t):
            return True
        if mine and self._cut_off_in_calls(other):
            return False
        return None

    def _cut_off_in_calls(self, t: _Thread) -> bool:
        """Whether a failed reading broke inside a call or a call section, after reasoning text,
        where the output ends (its end-of-turn text aside), the call's arguments having started
        well (a call that did not read well is the reasoning's text)."""
        return _broke_in_calls(t) and t.call.confirmed and self._only_end_of_turn_from(_reach(t, self.buf))

    def _reasoning_unended(self, t: _Thread) -> bool:
        """Whether a reading is inside reasoning whose end marker has not come: reading its text,
        or (failed) waiting for the marker where the output ended."""
        head = t.head
        if t.role == ir.REASONING:
            return True
        return (self.finished and head.__class__ is _Lit and not head.done and head.core == self.reader.reasoning_end
                and self._only_end_of_turn_from(t.pos))

    def _cut_after_calls(self, best: _Thread) -> bool:
        """Whether the reading that failed only at the end of the output, right after a whole
        call (its end markers not written, or the header of the next call begun: `, {"name":`),
        read more calls than `best` (a complete reading)."""
        dead = self.dead
        if dead is None or dead[1] != self.emitted:
            return False
        t = dead[0]
        after_call = not t.call.started or (t.role is None and t.call.done)
        return _reach(t, self.buf) >= len(self.buf) and after_call and _calls_begun(t) > _calls_begun(best)

    def _cut_in_key_line(self, best: _Thread) -> bool:
        """Whether the reading that failed only at the end of the output, in the key of an
        argument on a line of its own (`_key_line_cut`), began more calls than `best` (a complete
        reading, which reads that call's text as content): the call was cut off there, as the
        first call of its section is (`_give_up`)."""
        dead = self.dead
        if dead is None or dead[1] != self.emitted:
            return False
        t = dead[0]
        return self._cut_in_key_at_end(t) and _calls_begun(t) > _calls_begun(best)

    def _cut_in_key_at_end(self, t: _Thread) -> bool:
        """Whether failed reading `t` broke in the key of an argument on a line of its own
        (`_key_line_cut`) with nothing after it but the end of turn: the output was cut off there."""
        return (_key_line_cut(t, self.buf, self.offset[0])
                and self._only_end_of_turn_from(_reach(t, self.buf), begun=True))

    def _shared_with_dead(self, events: list[tuple], agreed: int) -> int:
        """How many of the `agreed` events may go out while a failed reading that read more calls
        whole than every living one is what recovery would go on from, should they all fail: only
        those it read too (recovery goes on from its events after the ones emitted)."""
        pending = self._dead_pending()
        if pending is None:
            return agreed
        call = self.dead[0].call
        if call.started and not call.confirmed:
            # recovery from it makes that call text (`_give_up`): from its start, it emits none of its events
            pending = pending[:_last_call(pending, len(pending))]
        shared = 0
        while shared < min(agreed, len(pending)) and events[shared] == pending[shared]:
            shared += 1
        return shared

    def _text_over_broken_calls(self) -> bool:
        """Whether the failed reading recovery would go on from broke inside a call section that
        the held text opens with (nothing but whitespace before its opener), and every living
        reading reads that text, from there on, as text of one role and no call: content where
        a bare call may be text, reasoning that no end marker has closed. Should a later call
        begin after where it broke (`_later_call_after_text`), recovery from it, which reads
        that call, wins over such a reading at the end; until then, the text is held."""
        dead = self.dead
        if dead is None or not self.threads or not self._broke_in_held_section(dead[0]):
            return False
        later = self._later_call_end(dead[0]) if dead[0].resync_at >= 0 else None
        return all(self._reads_as_text(r, dead[0], later) for r in self.threads)

    def _text_before_later_call(self, t: _Thread, broken: _Thread) -> bool:
        """Whether `t`, a reading that failed, read as text of one role the calls failed reading
        `broken` broke inside, where a later call begins soon after that (`_later_call_soon`).
        Where `broken` broke off inside its string at that later call (`_Thread.resync_at`: a
        stream breaks off there only once the call's markers are whole), only what `t` read up
        to there counts: a stream, one character at a time, let the broken reading win there
        (`_later_call_after_text`), whatever `t` read after it."""
        if not self._broke_in_held_section(broken):
            return False
        later = self._later_call_end(broken, t.pos)
        return later is not None and self._reads_as_text(t, broken, later if broken.resync_at >= 0 else None)

    def _broke_in_held_section(self, broken: _Thread) -> bool:
        """Whether failed reading `broken` broke inside a call of a call section that the held
        text opens with, past the call's name. At its end marker, the body read whole, only where
        another reading broke inside that call at the same place (`_Thread.inside_too`: the call
        could go on there, `<|close|>argument<|open|>call`): which of the two failed first, and so
        which one is kept, depends on where chunks ended. Not where none did (a JSON call whose
        object closed before its end tag was left out is reasoning's text, whole or streamed)."""
        section = broken.section_at
        return not (self.reader.inner_resync is None or section is None or not _below(broken.stack, section[1])
                    or section[0] < self.safe or not (_inside_call(broken) or broken.inside_too) or _before_name(broken))

    def _reads_as_text(self, t: _Thread, broken: _Thread, upto: int | None = None) -> bool:
        """Whether `t` reads as text of one role the call section that the held text opens with
        and that failed reading `broken` broke inside (`_text_over_broken_calls`), up to `upto`
        (in the buffer; None: all it read)."""
        section = broken.section_at
        offset = self.offset[0]
        upto = None if upto is None else upto + offset
        return _one_role_from(t, section[0] + offset, broken.calls_read, self.buf, offset, upto)

    def _later_call_after_text(self, final: bool) -> bool | None:
        """Where the living readings read as text the calls a failed reading broke inside
        (`_text_over_broken_calls`): whether a later call begins (`ir.Language.resync`) within
        the hold-back bound after where it broke, so that recovery from it, which reads that
        call, wins (True), or none does, and the text reading stands (False); None where the
        readings are not so, or while it is not yet known (the text is held meanwhile)."""
        if not self._text_over_broken_calls():
            return None
        if self._later_call_soon(self.dead[0]):
            return True
        if final:
            return False
        start = max(self.dead[0].pos, self.dead[0].call_from + 1, 0)
        window = start + HOLD_BOUND
        if len(self.buf) <= window:
            return None  # the text has not gone past the bound yet: a later call may still begin within it
        # past the bound: only a later call's markers begun within it, not yet whole, may still be one
        begun_at = self.reader.inner_resync.safe_end(self.buf, start)
        return None if begun_at <= window else False

    def _later_call_soon(self, broken: _Thread, read_to: int | None = None) -> bool:
        """Whether a later call begins (`ir.Language.resync`, whole) within the hold-back bound
        after where failed reading `broken` broke (or holds that place: it broke inside the
        later call's first markers), after the call it broke in began, in the text up to
        `read_to` (where a reading of it as text failed: a stream has read that far then,
        however its chunks came)."""
        return self._later_call_end(broken, read_to) is not None

    def _later_call_end(self, broken: _Thread, read_to: int | None = None) -> int | None:
        """Where the markers of the later call `_later_call_soon` finds end (in the buffer), or None."""
        marks = self.reader.inner_resync
        text = self.buf if read_to is None else self.buf[:read_to]
        pos = max(broken.pos, 0)
        hit = _marker_reaching_past(marks, text, max(broken.call_from + 1, pos - marks.longest + 1, 0), pos)
        if hit is None or hit[0] > pos + HOLD_BOUND:
            return None
        # broken in its arguments, or right where that call begins: a reading that broke at a
        # key or the name of the call's own structure may have the later call inside its arguments
        if broken.role == ir.ARGUMENTS or not text[pos:hit[0]].strip():
            return hit[0] + len(hit[1])
        return None

    def _dead_pending(self) -> list[tuple] | None:
        """The events not yet emitted of the failed reading recovery would go on from, should
        every living reading fail where it stands: where it read more calls whole than every
        living one, or as many and got as far as all of them, inside the language (None where it
        did not). Were they to fail there, a tie would go to the one that failed first, as it
        does when all fail at once (a whole parse): events emitted meanwhile would decide it."""
        dead = self.dead
        if dead is None:
            return None
        if any(_read_past_break(dead[0], t) for t in self.threads) or self._text_over_broken_calls():
            return dead[0].events[self.emitted - dead[1]:] if self.emitted >= dead[1] else []
        reached = (dead[0].calls_read, dead[0].pos if dead[0].head.__class__ is not _Trailer else -1)
        if any((t.calls_read, _origin(t)) > reached for t in self.threads):
            return None
        return dead[0].events[self.emitted - dead[1]:] if self.emitted >= dead[1] else []

    def _forget_passed_dead(self) -> None:
        """Drop the failed reading kept to recover from where a living reading reads on, as text,
        the very text that one stopped reading at a split (`_Thread.left`: a bracket where a bare
        call may begin, a soft stop), past where it failed, with as many calls read whole: where
        that text ends, the reading that goes the failed one's way from there fails further or
        reads on, so recovery never goes on from the failed one, and the text its events would
        hold back goes out (policy rule `bounded-hold-back`). Whichever fails next replaces it."""
        dead = self.dead
        if dead is None or dead[0].left is None:
            return
        left, pos, calls = dead[0].left, dead[0].pos, dead[0].calls_read
        if any(t.head is left and t.pos > pos and t.calls_read >= calls for t in self.threads):
            self.dead = None

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
        # the output ended inside a value, a marker after it begun (`Paris}<too`): cut off there
        value_cut = self.finished and any(e[0] == CUT for e in best.events)
        # its events not emitted yet (others emitted since it failed are dropped)
        best.events = best.events[self.emitted - emitted:] if self.emitted >= emitted else []
        # a whole call whose id never came: what was written of the id's member is text
        id_unwritten = best.call.done and best.call.awaits_id and best.call.id is None and not best.call.started
        best.start_call(waited=True)  # a call that awaited its id has none
        unopened = bool(best.events) and best.events[-1][0] == OPENS  # a call with no argument text yet
        # a call cut off in its first argument's key, on a line its call cannot end before: cut off, not text
        key_cut = self.finished and self._cut_in_key_at_end(best)
        if best.call.started and not best.call.confirmed and not (self.finished and best.call.done) and not key_cut:
            # a call whose arguments did not start well is text (its events were held back)
            at = _last_call(best.events, len(best.events))
            unopened = at < len(best.events)
            best.events = best.events[:at + 1] if unopened else best.events
        opened = best.call.started and not unopened
        # a call the output ended inside (its end-of-turn text aside, or the beginning of one: a
        # value ends before a marker cut off) is cut off; one that broke before the end, which
        # recovery from a failed reading meets at the end, is not: the language is read again
        # after it, as where the failure is met earlier
        cut_at_end = value_cut or self._only_end_of_turn_from(_reach(best, self.buf), begun=True)
        if self.finished and best.role == ir.ARGUMENTS and opened and cut_at_end:
            self._cut_off(best)  # cut off inside arguments that had begun (else the call is text)
            self.fallback = True
            return
        # an argument whose value is held until it ends (a number, an object, a key the schema
        # does not name): kept where that value was read to its end, else its text is content
        held = self._held_member(best) if opened and best.call.confirmed else None
        events = best.events
        if unopened:
            events = events[:-1]  # the call that failed before its arguments is text
        section = best.section_at
        # the section holds no call that stays one: none began, or the first is withdrawn
        holds_none = best.section_open or (best.call.started and not opened and best.first_in_section)
        # a reading that read the language whole (`_Trailer`) withdraws a call of its last section
        read_whole = best.head.__class__ is _Trailer
        if section is not None and holds_none and (read_whole or _below(best.stack, section[1])):
            # a section that holds no call is text, its opener and the text read inside it too
            events = [e for e in events if e[-1] <= section[0] + self.offset[0]]
        else:
            section = None
        self._apply(events)
        self.emitted += len(events)
        inside = _inside_call(best) and not _next_call_begun(best, self.offset[0])
        if opened and self.out.calls and (self._closed_by(best) or inside):
            self.out.calls[-1].incomplete = True  # its arguments, or the call around them, broke off
        elif opened and self.out.calls and best.call.done and not best.call.closed:
            self.out.calls[-1].incomplete = True  # the call went on with text it has no place for
        # after a call read whole, the markers that close it are no text (whitespace before the
        # failure is); else the part begun is text
        cut = min(best.mark, best.pos)
        withdrawn = unopened and best.call.done
        if withdrawn:
            cut = max(self.safe, best.call_from)  # a call read whole but withdrawn: its text is content
        elif best.call.done and opened and inside and not id_unwritten:
            cut = best.pos
            while cut > self.safe and self.buf[cut - 1] in _WHITESPACE:
                cut -= 1
        elif best.call.done and opened and best.call.closed:
            # the call's own structure was read to its end (the `}` of a JSON call object): it is
            # no text, though no event marks where it ends; the end marker begun after it is
            cut = max(cut, best.call.closed_at - self.offset[0])
        if held is not None:
            cut = max(cut, held[1]) if held[0] else min(cut, held[1])
        if section is not None:
            cut = min(cut, max(self.safe, section[0]))
        # a reading that failed inside an end-of-turn marker (its first characters read as a
        # marker begun: `<` of `<|end|>` where `<` opens an argument) failed where that marker begins
        at = self._end_of_turn_around(best.pos, max(cut, self.safe))
        # a later call begun where the reading failed, read as this call's text: read again from it
        later = self._later_call_around(best, max(cut, self.safe), at) if best.resync_at < 0 else None
        if later is not None:
            at = later
        # whether the failed reading read text up to where it failed that is content now (emitted
        # already or not: whitespace a stream let out before the failure is the reading's too)
        # (an end-of-turn marker there aside: it is no text, read past below)
        read_up_to = at > cut and at + self.offset[0] > self.resumed_at and not self._end_of_turn_at(at)
        self.safe = max(self.safe, cut)
        # where the next call began (its marker read, not its name), the call failed in is that one, not kept
        rest = self._rest_of_section(best, opened and not _next_call_begun(best, self.offset[0]), later is not None)
        # reading the whole language again starts a character on, so that it cannot fail there again
        # (where a call broke off at a place a call may begin again, from that place)
        again = at > self.safe or read_up_to or not self.buf or best.resync_at >= 0 or later is not None or \
            (rest is not None and len(rest) == 1)
        # (an end-of-turn marker there is no text: the language is read again after it, as after
        # the language's own end)
        turn_end = 0 if again else self._end_of_turn_at(self.safe)
        failed = at if again else self.safe + (turn_end or 1)
        if read_whole and at > self.safe and not withdrawn:
            self.safe = failed  # the language was read whole: what follows is read again
        given = self.buf[self.safe:failed - turn_end]
        if self.finished and failed - turn_end >= len(self.buf):
            # an end-of-turn marker a failed reading read as its own text, ending the output, is
            # no text either (a call's arguments that never began well, read to the end), as
            # where a call is cut off (`_cut_off`)
            given = self._without_end_of_turn_at_end(given)
        self.out.add_content(given)
        self.safe = failed
        if self.finished and failed >= len(self.buf):
            self.fallback = True  # it failed at the end of the output: nothing is left to read again
            return
        self.resumed, self.resumed_at = True, failed + self.offset[0]
        # reasoning the failed reading was inside may still end at its end marker; after reasoning
        # that ended (or none), that marker is text
        self.reasoning_over = best.role != ir.REASONING and not _inside_reasoning(best.stack)
        self.threads = [_Thread(stack, failed, self.offset) for stack in rest or [(self.reader.root, None)]]

    def _held_member(self, t: _Thread) -> tuple[bool, int] | None:
        """The argument `t` broke in whose value is held until it ends, not streamed (None where
        there is none): ended and kept where the value was read to its end (the reading failed
        after it, at a marker or a separator), with where its text ends; else where its text
        begins, its key included (that text is content)."""
        if t.member is None or t.streamed or not "".join(t.value or ()).strip():
            return None
        if t.head.__class__ in _VALUE_TERMINALS:
            return False, max(t.member_at - self.offset[0], self.safe)
        value_end = t.value_end - self.offset[0]
        if value_end >= t.pos:
            # the value runs up to where the reading failed: whitespace before the failure is no
            # part of it, whether the text or the marker that failed read it (where chunks ended)
            raw = "".join(t.value or ())
            kept = raw.rstrip(_WHITESPACE)
            t.value, value_end = _Value([kept], 1), value_end - (len(raw) - len(kept))
        # the argument's text ends with its value: what the reading read after it (a marker
        # begun, `</city` of `</city>`) is text, as where the output is cut off (`_cut_off`)
        pos, t.pos = t.pos, value_end
        self._end_member(t)
        t.pos = pos
        return True, value_end

    def _end_of_turn_around(self, pos: int, lowest: int) -> int:
        """Where an end-of-turn marker begins that holds `pos` past its first character, from
        `lowest` on; else `pos`."""
        for at in self._end_of_turn_window(pos, lowest, pos):
            end = self._end_of_turn_at(at)
            if end and at + end > pos:
                return at
        return pos

    def _end_of_turn_window(self, pos: int, lowest: int, stop: int) -> range:
        """The places before `stop`, from `lowest` on, where an end-of-turn marker holding `pos` may begin."""
        return range(max(lowest, pos - self._longest_end_of_turn() + 1), stop)

    def _longest_end_of_turn(self) -> int:
        return max((len(end) for end in self.reader.end_of_turn), default=0)

    def _end_of_turn_at(self, at: int) -> int:
        """The length of the end-of-turn marker the text holds at `at`, 0 where none begins there."""
        return len(exact_at(self.reader.end_of_turn, self.buf, at) or "")

    def _without_end_of_turn(self, text: str) -> str:
        """`text` with the end-of-turn markers it holds left out, in one pass: the text around one
        that makes up another (`<|eo<|eom_id|>t_id|>`) is text, as the language reads it."""
        for index, end in enumerate(self.reader.end_of_turn):
            if end in text:
                rest = self.reader.end_of_turn[index:]
                return "".join(re.split("|".join(map(re.escape, rest)), text))
        return text

    def _without_end_of_turn_at_end(self, text: str) -> str:
        """`text` without the end-of-turn marker it ends with (whitespace after it aside)."""
        kept = text.rstrip()
        for end in self.reader.end_of_turn:
            if kept.endswith(end):
                return kept[:-len(end)]
        return text

    def _only_end_of_turn_from(self, at: int, begun: bool = False) -> bool:
        """Whether the text from `at` is whitespace around an end-of-turn marker or none (`begun`:
        or around the beginning of one, the output ended inside it)."""
        rest = self.buf[at:].strip()
        return rest in ("", *self.reader.end_of_turn) or (begun and begins_one(self.reader.end_of_turn, rest))

    def _later_call_around(self, t: _Thread, lowest: int, at: int) -> int | None:
        """Where a later call begins (`ir.Language.resync`, whole or begun) in the text the
        failed reading `t` read as its call's own, its name read, or where it stopped (`, get_weather`
        before `(`, `, {"name"` after a JSON call left unclosed): None where none does, nor where
        the language was read again from there already (a marker begun where a stream's text
        ends: recovery waits, `_later_call_undecided`)."""
        marks = self.reader.inner_resync
        if marks is None or not _in_call(t):
            return None
        for start in self._later_call_places(t, lowest, at):
            hit = marks.find_at(self.buf, start)
            if hit is not None and start + len(hit[0]) >= at:
                return start
        return None

    def _later_call_places(self, t: _Thread, lowest: int, at: int) -> range:
        """Where a later call read as the failed reading's call may begin: after where that call
        began (its own opener is no later call's), up to where it failed, not where the language
        was read again from already; one whose markers end right where it failed too (it read
        them whole as its own: `[[call` as an argument's `[[` and a key, failing at the space)."""
        marks = self.reader.inner_resync
        lowest = max(lowest, t.call_from + 1, at - marks.longest, self.resumed_at - self.offset[0] + 1)
        return range(lowest, min(at, len(self.buf) - 1) + 1)

    def _later_call_undecided(self) -> bool:
        """Whether the text from a place where the failed reading recovery would go on from may
        have read a later call's beginning as its call's own ends with what may yet be one
        (`_later_call_around`): recovery waits until it is whole or is none, as when the text
        is read whole."""
        dead, marks = self.dead, self.reader.inner_resync
        if dead is None or marks is None or not _in_call(dead[0]):
            return False
        t = dead[0]
        return any(marks.is_prefix(self.buf, start) for start in self._later_call_places(t, self.safe, t.pos))

    def _rest_of_section(self, t: _Thread, kept: bool, later: bool = False) -> list[Any] | None:
        """Where a reading that failed inside a call goes on: the call's text up to its end marker
        is content, and the section goes on after it (more calls, its end). The end marker is
        markup where the call was `kept`, else text. After a failed first call, the section
        holds no call yet: read as text whole, or (where a later call in it is read whole, which
        then wins) as the section going on. Where it failed in a `later` call begun, the text
        goes on to where a later call begins, as where a call ends in punctuation."""
        after = t.after_call
        if after is None or not _below(t.stack, after[1]):
            return None
        first = not kept and not t.section_calls
        rest = self.reader.call_rest(after[0], after[1], kept)
        following = _without_spent_repeats(after[1], t.pos + self.offset[0])
        if rest is None or later or first and is_weak(rest[2]):
            # punctuation ends no call reliably: the text goes on to where a later call may begin
            resync = self.reader.resync_rest(after)
            if resync is None:
                return None  # the section is text
            stack = (resync[0], (resync[1], following))
            if not first:
                return [stack, *self._section_again(t, resync[0])]
        else:
            stack = (rest[0], (rest[1], following))
        return [(self.reader.root, None), stack] if first else [stack]

    def _section_again(self, t: _Thread, content: Any) -> list[Any]:
        """Where a call that ends only in punctuation broke in a section that keeps a call: the
        broken call's text as `content`, then that section's opener written again (a later one
        where the calls go on, the broken one's end left unwritten), then what follows the
        section. After a first call, reading the whole language again finds that section."""
        section = t.section_at
        if section is None or not _below(t.stack, section[1]):
            return []
        return [(content, (section[2], _without_spent_repeats(section[1], t.pos + self.offset[0])))]

    def _cut_off(self, t: _Thread) -> None:
        """The output ended inside a call's arguments: they keep the values that were complete
        (a tagged value running to the end is complete; a JSON member still being written is
        not) and the call is marked incomplete."""
        closed = all(e[0] != OPENS for e in t.events) and self._arguments_closed()
        # an argument whose value had not begun: its key is text, with what followed it
        unbegun = t.call.mode == "members" and t.member is not None and not "".join(t.value or ()).strip()
        member_at = max(t.member_at - self.offset[0], self.safe) if unbegun and t.member_at >= 0 else -1
        if not unbegun and t.call.mode == "members" and t.member is not None and not closed:
            # a value read whole and the marker that ends it begun (`</lo` of `</{key}>`): that marker is text
            value_end = t.value_end - self.offset[0]
            if self.safe <= value_end < t.pos and self.buf[value_end:t.pos].strip():
                member_at = value_end
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
        # what the arguments could not hold (a member or a marker the output stopped inside) is text
        rest = self.buf[member_at if 0 <= member_at < t.pos else max(t.pos, self.safe):]
        if t.head.__class__ is _JsonValue:
            rest = t.head.scanner.held_raw() + rest
        rest = self._without_end_of_turn(rest)  # it ends the output: no text
        if rest.strip():
            self.out.add_content(rest)
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
        return bool(self.out.calls) and is_whole_json(self.out.calls[-1].arguments())

    def _content_rest(self) -> None:
        """No reading continues: the rest of the text is content, its end-of-turn markers no text,
        as in the language's own content (`LanguageReader._content_to`) and in a call cut off
        (`_cut_off`). Until the output ends, what may still grow into such a marker is held."""
        self._restore()
        rest = self.buf[self.safe:]
        held = len(rest) if self.finished else self._end_of_turn_held(rest)
        self.out.add_content(self._without_end_of_turn(rest[:held]))
        self.buf, self.safe = rest[held:], 0

    def _end_of_turn_held(self, text: str) -> int:
        """Where the end of `text` that may still be or become an end-of-turn marker begins (the
        end of `text` where none may)."""
        held = min((hold_for(text, 0, end) for end in self.reader.end_of_turn), default=len(text))
        for end in self.reader.end_of_turn:  # a marker whole across that place is held whole
            at = text.find(end, max(held - len(end) + 1, 0))
            if 0 <= at < held < at + len(end):
                held = at
        return held


def _one_role_from(t: _Thread, start: int, calls: int, buf: str, offset: int, upto: int | None = None) -> bool:
    """Whether a living reading holds text of one role (content or reasoning) only, no call,
    as many calls read as `calls`, from where `start` (absolute) is on: its text there begins
    there, whitespace aside, or before it (the texts it read that ended before it aside); with
    `upto` (absolute), in what it read before there only (what it read after, calls included,
    aside)."""
    events = t.events
    if upto is not None:
        before = 0
        while before < len(events) and _event_start(events[before]) < upto:
            before += 1
        events = events[:before]
        later_calls = sum(1 for e in t.events[len(events):] if e[0] == OPENS)
        if not events or not t.calls_read - later_calls <= calls <= t.calls_read:
            return False
    elif not events or t.calls_held or t.calls_read != calls or _inside_call(t):
        return False
    # text it read before the section (`)` before `<think>` that opens it) is none of the
    # section's: whether it went out already, and so is no event of the reading's, depends on
    # where chunks ended
    events = events[_texts_before(events, start):]
    if not events:
        return False
    role = events[0][0]
    if role not in (ir.CONTENT, ir.REASONING) or any(e[0] != role for e in events):
        return False
    begins = events[0][2] - len(events[0][1])
    if begins <= start:
        # (where the text before the buffer was set aside, `_trim`, too; a text that began before
        # the section reads it as text too: whether the part before went out first, and the
        # reading's event begins at the section, depends on where chunks ended)
        return True
    return start - offset >= 0 and not buf[start - offset:begins - offset].strip()


def _texts_before(events: list[tuple], start: int) -> int:
    """How many of `events` are texts that end at or before `start` (absolute), leading the rest."""
    count = 0
    while count < len(events) and events[count][0] in (ir.CONTENT, ir.REASONING) and events[count][2] <= start:
        count += 1
    return count


def _marker_reaching_past(marks: MarkerSet, text: str, lowest: int, pos: int) -> tuple[int, str] | None:
    """The first of `marks` in `text` that begins at `lowest` or later and ends past `pos`:
    (where it begins, its text), or None. One begun before `pos` that holds it (the place a
    reading broke may lie inside a later call's first markers), else the first from `pos` on."""
    for start in range(lowest, pos):
        held = marks.find_at(text, start)
        if held is not None and start + len(held[0]) > pos:
            return start, held[0]
    hit = marks.find(text, max(lowest, pos))
    return None if hit is None else (hit[0], hit[1])


def _event_start(event: tuple) -> int:
    """Where an event's text begins (absolute): a text's, from its end and length; another's, its place."""
    if event[0] in (ir.CONTENT, ir.REASONING):
        return event[2] - len(event[1])
    return event[-1]


def _note_alike(t: _Thread, other: _Thread) -> None:
    """Where two failed readings broke at one place in one call, one inside it and the other at
    its end marker, mark both as broken inside it (`_Thread.inside_too`): which of the two
    recovery keeps depends on which failed first, so on where chunks ended."""
    if (t.pos == other.pos and t.call_from == other.call_from and t.calls_read == other.calls_read
            and _inside_or_ending(t) and _inside_or_ending(other) and (_inside_call(t) or _inside_call(other))):
        t.inside_too = other.inside_too = True


def _key_line_cut(t: _Thread, buf: str, offset: int) -> bool:
    """Whether a failed reading broke in the key of an argument written on a line of its own
    (its value not begun), a line its call cannot end before (`ir.Gap.not_line` after the
    arguments): the call was cut off in that key, as a JSON call cut in a key is, not text."""
    if t.role != ir.ARGUMENTS or t.member is None or t.member_at < offset or "".join(t.value or ()).strip():
        return False
    indent = _barred_line_after(t)
    return indent is not None and re.match(rf"\n[ \t]{{{indent},}}", buf[t.member_at - offset:]) is not None


def _barred_line_after(t: _Thread) -> int | None:
    """The indentation of the line that the call `t` is inside cannot end before
    (`ir.Gap.not_line` after its arguments), None where there is none."""
    stack, end = t.stack, t.after_call
    while stack is not None and stack is not end:
        node = stack[0]
        if node.__class__ is ir.Gap and node.not_line is not None:
            return node.not_line
        stack = stack[1]
    return None


def _before_name(t: _Thread) -> bool:
    """Whether a failed reading broke in a call before it began reading the call's name (its
    opener's text read as another marker's)."""
    return t.call.name is None and t.role != ir.TOOL_NAME


def _in_call(t: _Thread) -> bool:
    """Whether a failed reading broke inside a call whose name it read, in its section."""
    return t.call.name is not None and t.after_call is not None and _below(t.stack, t.after_call[1])


def _next_call_begun(t: _Thread, offset: int) -> bool:
    """Whether the call `t` is inside began after the last call read whole, its header not read
    yet (`, {"` after a call in a JSON array): its text, the separator before it included, is
    content, not the end of the call before it."""
    return 0 <= t.call.args_from < t.call_from + offset
