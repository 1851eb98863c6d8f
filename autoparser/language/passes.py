"""One pass of a stream's readings over the text it holds: each reading read on as far as the
text goes, forks met again in one state pruned, readings whose call began inside another's JSON
arguments dropped (policy rule `calls-not-inside-arguments`), the reading to recover from kept
where some failed (`recovery.py`), and those waiting for text merged where they read alike.

A mixin of `interpret.LanguageStream`; standard library only.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from autoparser.language import ir
from autoparser.language.policy import HOLD_BOUND
from autoparser.language.preference import (
    _broke_in_calls,
    _chosen,
    _content_only,
    _past_whole_call,
    _prefer,
    _unseen,
    _whole_awaiting_id,
)
from autoparser.language.readings import OPENS, _same_stack, _Thread
from autoparser.language.terminals import _Text, _Trailer


def _twin(entry: list[Any], alike: list[list[Any]]) -> list[Any] | None:
    """The entry of `alike` whose reading is in the state of `entry`'s, or None. Entries are
    [reading, its state], the state computed when first needed: the stacks are compared first,
    frame by frame up to a tail they share, as readings that read one text alike (reasoning that
    a marker or the output's end may end) part there, and a state costs more."""
    t = entry[0]
    for other in alike:
        if _same_stack(other[0].stack, t.stack, t.pos + t.offset[0]):
            if other[1] is None:
                other[1] = other[0].state()
            if entry[1] is None:
                entry[1] = t.state()
            if other[1] == entry[1]:
                return other
    return None


def _merged(waiting: list[_Thread]) -> list[_Thread]:
    """The readings waiting for text, in order, less those another one in the same state is
    preferred to: readings that reached one state by different paths read alike from here (a full
    state is computed only where another reading is alike at a glance)."""
    alive: list[_Thread] = []
    seen: dict[tuple, _Thread] = {}
    groups: dict[tuple, list[list[Any]]] = {}
    for t in waiting:
        if t.head is None or t.head.__class__ is _Trailer:
            key = t.key()
            met = seen.get(key)
            if met is not None:
                if _prefer(met, t) is not t:
                    continue
                alive.remove(met)
            seen[key] = t
        elif len(waiting) > 1:
            glance = (t.pos, t.role, t.head.__class__)
            alike = groups.get(glance)
            if alike is None:
                groups[glance] = [[t, None]]
            else:
                entry = [t, None]
                twin = _twin(entry, alike)
                if twin is None:
                    alike.append(entry)
                else:
                    keep = _prefer(twin[0], t)
                    if keep is twin[0]:
                        continue
                    if keep is t:
                        alive.remove(twin[0])
                        twin[0] = t
                    else:
                        alike.append(entry)
        alive.append(t)
    return alive


def _in_json_arguments(t: _Thread) -> bool:
    """Whether the reading is inside a call's arguments written as one JSON value."""
    call = t.call
    return call.args_from >= 0 and not call.done and call.mode == "json"


def _covered(spans: list[tuple[int, float]]) -> tuple[list[int], list[float]]:
    """The text the spans (start, end) cover, as the starts and ends of the runs they join into,
    in order: where a position lies is then found by bisection, however many spans there are."""
    starts: list[int] = []
    ends: list[float] = []
    for start, end in sorted(spans):
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return starts, ends


def _not_reasoning_over(call_ends: set[int], threads: list[_Thread]) -> list[_Thread]:
    """The readings, less those that read as reasoning text the `HOLD_BOUND` characters after
    the end of a call another reading read whole after reasoning (`call_ends`): a call read whole
    in reasoning no end marker has closed ends that reasoning (policy rule `nothing-lost`), decided
    once the text after it has gone on that far without the end marker (which, coming sooner,
    makes the call the reasoning's text), so the text after the call is held no longer."""
    return [t for t in threads if not any(_reasoning_at(t, at + HOLD_BOUND) for at in call_ends)]


def _reasoning_at(t: _Thread, at: int) -> bool:
    """Whether the reading read reasoning text across `at` (absolute), or is reading it there."""
    head = t.head
    if t.role == ir.REASONING and head.__class__ is _Text and head.start + t.offset[0] < at <= t.pos + t.offset[0]:
        return True
    return any(e[0] == ir.REASONING and e[2] - len(e[1]) < at <= e[2] for e in t.events)


class _Passes:
    """The pass of `interpret.LanguageStream` (`_run_all`), with what it decides."""

    threads: list[_Thread]
    spans: list[tuple[int, float]]
    dead: tuple[_Thread, int] | None
    call_ends: set[int]
    emitted: int
    offset: list[int]

    def _text_over_dead_calls(self, best: _Thread) -> bool:
        """Whether `best`, a complete reading, reads as content what the failed reading recovery
        would go on from read as a whole bare call: the stream drops such a text reading where a
        chunk ends after the call (`_calls_over_text`), so the whole parse does not keep it either."""
        dead = self.dead
        if not self.reader.bare_calls or dead is None or not _content_only(best) or not _past_whole_call(dead[0]):
            return False
        pending = dead[0].events[max(self.emitted - dead[1], 0):]  # a call that went out is the text reading's too
        return any(e[0] == OPENS for e in pending) or _whole_awaiting_id(dead[0])

    def _calls_over_reasoning(self, best: _Thread) -> bool:
        """Whether the failed reading recovery would go on from ended reasoning that no end
        marker closed where calls began, and read more calls whole than `best`, a complete
        reading whose last event is that reasoning's text, or was cut off inside a call by the
        end of the output (policy rule `cut-off-calls`): a call that reads well ends such
        reasoning, as where `best` failed at the end too (`_ended_reasoning_at_calls`). (A call
        that broke before the end is the reasoning's text: the reading of it as a call failed
        earlier, without a call read whole.)"""
        dead = self.dead
        if dead is None or self.emitted < dead[1] or not best.events or best.events[-1][0] != ir.REASONING:
            return False
        t = dead[0]
        if t.calls_read > best.calls_read and _broke_in_calls(t):
            return True
        return dead[1] == self.emitted and self._cut_off_in_calls(t)

    def _run_all(self, final: bool) -> list[_Thread]:
        """Every reading read on as far as the text goes; those still alive, in order."""
        self.spans = []
        threads = self.threads
        if not threads:
            return []
        if self.call_ends:
            self._forget_call_ends(threads)
        todo = list(reversed(threads))
        t = todo.pop()
        result = self._run(t, final)
        if result is t and not todo and not final and not t.unchecked:
            return threads  # one reading, waiting for text, with no call to check: nothing to compare
        waiting: list[_Thread] = []
        failed: list[_Thread] = []
        forks: dict[tuple, tuple[tuple[int, int, int], _Thread, tuple[int, ...]]] = {}
        pruned: list[tuple[_Thread, _Thread]] = []
        before: dict[int, int] = {}  # for each reading that failed, how many in the readings' order wait before it
        self._sort(t, result, waiting, failed, todo, forks, pruned, before)
        while todo:
            self._read_all(todo, waiting, failed, forks, pruned, before, final)
            todo = self._revived(waiting, failed, forks, pruned)
        in_order = waiting
        waiting, failed = self._outside_arguments(waiting, failed)
        if self.call_ends:
            waiting, failed = _not_reasoning_over(self.call_ends, waiting), _not_reasoning_over(self.call_ends, failed)
            self._forget_call_ends(waiting)
        if failed:
            self._keep_dead(failed, in_order, before)
        alive = _merged(waiting)
        if final and alive:
            # all are complete: the one with the most calls, then markup, then the first (`_chosen`)
            alive = [_chosen(alive)]
            if self._cut_after_calls(alive[0]) or self._calls_over_reasoning(alive[0]):
                return []  # the reading cut off right after its calls, or that read one in reasoning, is recovered
            if self._text_over_dead_calls(alive[0]):
                return []  # the reading that read a whole call, then failed, is recovered instead
        return alive

    def _forget_call_ends(self, threads: list[_Thread]) -> None:
        """Forget the ends of calls every reading has read past by more than the hold-back bound:
        a reading that read reasoning text there was dropped when it did (`_not_reasoning_over`)."""
        self.call_ends = {at for at in self.call_ends if any(t.pos + t.offset[0] <= at + HOLD_BOUND for t in threads)}

    def _keep_dead(self, failed: list[_Thread], waiting: list[_Thread], before: dict[int, int]) -> None:
        """Keep the reading to recover from among those that failed in this pass (`_recovers_better`),
        and mark the `waiting` ones (all of this pass, in order) that come after it in the readings'
        order. Where two fail alike, the first in that order is kept, as a whole parse, where both
        fail in one pass, keeps it, not the first to fail: a reading that waits for more text to
        fail fails later in a stream."""
        kept = None
        for t in failed:  # in the readings' order: one kept in this pass comes first
            if self._recovers_better(t, kept is None and not t.after_dead):
                self.dead, kept = (t, self.emitted), before[id(t)]
        if kept is not None:
            for index, t in enumerate(waiting):
                t.after_dead = index >= kept

    def _read_all(self, todo: list[_Thread], waiting: list[_Thread], failed: list[_Thread],
                  forks: dict[tuple, tuple[tuple[int, int, int], _Thread, tuple[int, ...]]],
                  pruned: list[tuple[_Thread, _Thread]], before: dict[int, int], final: bool) -> None:
        """Read the readings of `todo` on as far as the text goes, into `waiting` and `failed`;
        a fork met again in the same state goes into `pruned` with the reading it met (`_unseen`)."""
        while todo:
            t = todo.pop()
            self._sort(t, self._run(t, final), waiting, failed, todo, forks, pruned, before)

    def _sort(self, t: _Thread, result: Any, waiting: list[_Thread], failed: list[_Thread], todo: list[_Thread],
              forks: dict[tuple, tuple[tuple[int, int, int], _Thread, tuple[int, ...]]],
              pruned: list[tuple[_Thread, _Thread]], before: dict[int, int]) -> None:
        """Put a reading read on into `failed` (noting how many wait before it), `waiting`, or,
        where it forked, its forks not met before into `todo`."""
        if result is None:
            if _in_json_arguments(t):
                self.spans.append((t.call.args_from, t.pos + self.offset[0]))
            before[id(t)] = len(waiting)
            failed.append(t)
        elif result.__class__ is list:
            todo.extend(reversed([f for f in result if _unseen(f, forks, pruned)]))
        else:
            waiting.append(t)

    def _revived(self, waiting: list[_Thread], failed: list[_Thread],
                 forks: dict[tuple, tuple[tuple[int, int, int], _Thread, tuple[int, ...]]],
                 pruned: list[tuple[_Thread, _Thread]]) -> list[_Thread]:
        """The readings pruned at a fork for one waiting for text that the end of the pass drops
        (`_dropped`), to be read on from there: a reading dropped for a call inside arguments
        prunes nothing, as in a stream, which drops it at the end of a shorter chunk, before the
        two meet. The forks such readings passed are forgotten. (One pruned for a reading that
        failed would fail where it did.)"""
        if not pruned:
            return []
        dropped = self._dropped(waiting, failed) & {id(t) for t in waiting}
        if not dropped:
            return []
        revived = [t for t, met in pruned if id(met) in dropped]
        if revived:
            pruned[:] = [(t, met) for t, met in pruned if id(met) not in dropped]
            for state in [state for state, (_, met, _) in forks.items() if id(met) in dropped]:
                del forks[state]
        return list(reversed(revived))

    def _dropped(self, waiting: list[_Thread], failed: list[_Thread]) -> set[int]:
        """The ids of the readings, waiting for text or failed in this pass, whose call began (in
        this pass) inside text another reading reads as a call's JSON arguments (policy rule
        `calls-not-inside-arguments`); none waiting where none would be left."""
        if not any(t.unchecked for t in waiting) and not any(t.unchecked for t in failed):
            return set()
        starts, ends = _covered(self.spans + [(t.call.args_from, float("inf")) for t in waiting
                                              if _in_json_arguments(t)])

        def inside(t: _Thread) -> bool:
            for at in t.unchecked:
                index = bisect_right(starts, at) - 1
                if index >= 0 and at < ends[index]:
                    return True
            return False

        dropped = {id(t) for t in waiting if inside(t)}
        if len(dropped) == len(waiting) and not self._broken_before(waiting, failed):
            dropped = set()
        return dropped | {id(t) for t in failed if inside(t)}

    def _broken_before(self, waiting: list[_Thread], failed: list[_Thread]) -> bool:
        """Whether a reading that failed broke off its call inside its JSON string at a place
        where a call may begin again (`_Thread.resync_at`) no later than where each reading
        waiting began its call: recovery goes on from that place, so a stream that dropped
        those readings while the call they began inside was still being read (recovering from
        the same place when it failed) and a text read in one pass alike drop them."""
        places = [t.resync_at for t in failed if t.resync_at >= 0]
        if self.dead is not None and self.dead[0].resync_at >= 0:
            places.append(self.dead[0].resync_at)
        return bool(places) and all(t.unchecked and min(t.unchecked) >= min(places) for t in waiting)

    def _outside_arguments(self, waiting: list[_Thread], failed: list[_Thread]) -> tuple[list, list]:
        """The readings waiting for text and those that failed in this pass, less those `_dropped`
        (policy rule `calls-not-inside-arguments`), before any are merged or kept to recover from,
        so that the pass a call began in decides nothing."""
        dropped = self._dropped(waiting, failed)
        kept = [t for t in waiting if id(t) not in dropped]
        for t in kept:
            t.unchecked = ()
        return kept, [t for t in failed if id(t) not in dropped]
