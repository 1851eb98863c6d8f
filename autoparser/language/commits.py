"""What a stream emits of what its readings read (`_Commits`, a part of
`interpret.LanguageStream`): the events every living reading has, held where a call, a section or a
failed reading may still change them (policy rules `emit-what-all-readings-read`,
`calls-wait-for-arguments`, `undecided-too-long`), and their deltas.
"""

from __future__ import annotations

import os
from bisect import bisect_right

from autoparser.language import ir
from autoparser.language.policy import UNDECIDED_LIMIT
from autoparser.language.preference import _chosen
from autoparser.language.readings import ARGS, BRACE, CUT, OPENS, _end_of, _Thread
from autoparser.language.shapes import _below


class _Commits:
    """A stream's commits: the part of `interpret.LanguageStream` that decides which events go
    out (a mixin: it uses the stream's readings, buffer and output through `self`)."""

    def _commit(self, final: bool) -> None:
        """Emit the events every reading has (all of them when one reading is left). A call's
        start waits for its first argument text, so that a call that fails before is text."""
        if not final:
            self._forget_passed_dead()
        threads = self.threads
        first = threads[0].events
        if len(threads) == 1:
            if not first:
                return  # one reading, with nothing new to emit
            call = threads[0].call
            held_whole = not final and call.started and not call.confirmed
            agreed = len(first)
        else:
            held_whole = not final and any(t.call.started and not t.call.confirmed for t in threads)
            # where a call is held whole, no event past its start goes out: they are not compared,
            # so that the events held while it waits are not compared again with every chunk
            most = threads[0].call_at + 1 if held_whole and threads[0].call_at >= 0 else len(first)
            agreed = min(self._known_equal(threads), most)
            while agreed < most and all(len(t.events) > agreed and t.events[agreed] == first[agreed]
                                        for t in threads[1:]):
                agreed += 1
            # the last event compared may still grow (text joined to it): it is compared again
            self._agreed_known = (self.emitted, [t.events for t in threads], max(agreed - 1, 0))
        if agreed and not final and first[agreed - 1][0] == OPENS:
            agreed -= 1
        if agreed and held_whole:
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
        if len(threads) == 1 or not any(t.events for t in threads):
            return  # nothing held that readings could share or be undecided on
        if not final and self._dead_pending() is None:
            self._commit_common_text()
        if self._held() >= UNDECIDED_LIMIT and (final or self.limit_reached):
            # readings undecided for too long: the one that began the most calls wins, as at the end
            self.threads = [_chosen(threads)]
            self._commit(final)

    def _known_equal(self, threads: list[_Thread]) -> int:
        """How many first events the readings are known to share from the last commit: as many
        as then where nothing went out since and each reading holds the same event list (events
        before a list's last are never changed, only dropped when they go out)."""
        known = self._agreed_known
        if known is None or known[0] != self.emitted or len(known[1]) != len(threads):
            return 0
        if any(events is not t.events for events, t in zip(known[1], threads, strict=True)):
            return 0
        return known[2]

    def _failed_reading_wins(self) -> bool:
        """Whether the failed reading that recovery would go on from, should every living reading
        fail where it stands, has held text back for as long as readings may disagree: it wins as
        it would at the end, so the text's roles do not depend on how long it goes on (policy
        rule `undecided-too-long`)."""
        return (self.dead is not None and self._held() >= UNDECIDED_LIMIT and self.limit_reached
                and self._dead_pending() is not None)

    def _before_open_sections(self, events: list[tuple], agreed: int) -> int:
        """How many of the `agreed` events may go out: a section's opener and the text after it
        are held while a reading is inside a section whose first call has not begun, or whose
        start does not go out with them (a section that holds no call is text)."""
        held = self._open_section_at(agreed)
        if held is not None:
            agreed = bisect_right(events, held, hi=agreed, key=_end_of)  # events lie in text order
        return agreed

    def _open_section_at(self, agreed: int = 0) -> int | None:
        """Where the earliest section that may yet turn out to hold no call begins (absolute), in
        the readings inside one: no call in it has begun, or its first call's start is held beyond
        the first `agreed` events; None where there is none."""
        found = None
        for t in self.threads:
            if (t.section_open or t.first_in_section and t.call_at >= agreed) and _below(t.stack, t.section_at[1]):
                start = t.section_at[0] + self.offset[0]
                found = start if found is None else min(found, start)
        return found

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
        held = self._open_section_at()
        if held is not None:  # a section's opener and what follows it wait as in `_before_open_sections`
            shared = shared[:max(held - (first[2] - len(first[1])), 0)]
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
