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

HELD_FAILED = 64  # readings that failed in a pass held whole before they are folded as they fail (`_Fold`)
# the most choices a pass's fold keeps (`_Fold.choices`): each reading folded in whose calls began
# at places the end may or may not drop can double them, so past this the pass holds the rest whole
FOLD_CHOICES = 64


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
    makes the call the reasoning's text), so the text after the call is held no longer. A reading
    that read the call as a call and then a reasoning block of its own after it (`reasoning-in-answer`)
    reads no reasoning at the call's end, and stays."""
    return [t for t in threads
            if not any(_reasoning_at(t, at) and _reasoning_at(t, at + HOLD_BOUND) for at in call_ends)]


def _reasoning_at(t: _Thread, at: int) -> bool:
    """Whether the reading read reasoning text across `at` (absolute), or is reading it there."""
    head = t.head
    if t.role == ir.REASONING and head.__class__ is _Text and head.start + t.offset[0] < at <= t.pos + t.offset[0]:
        return True
    return any(e[0] == ir.REASONING and e[2] - len(e[1]) < at <= e[2] for e in t.events)


class _Failed:
    """A reading folded in that became recovery's choice for some outcome of the drops at the
    pass's end (`_Fold`): its step's `serial`, those of the choices it `beats`, the places its
    calls began in this pass (`_Thread.unchecked`: where they lie decides whether the end drops
    it), and how many readings waited before it."""

    __slots__ = ("serial", "beats", "unchecked", "before")

    def __init__(self, serial: int, beats: frozenset[int], unchecked: tuple[int, ...], before: int) -> None:
        self.serial, self.beats, self.unchecked, self.before = serial, beats, unchecked, before


class _Choice:
    """A failed reading that is recovery's choice so far where the pass's end keeps the readings
    whose calls began at `kept` and drops those whose calls began at `dropped` (their `unchecked`,
    policy rule `calls-not-inside-arguments`; readings that began calls at the same places are
    dropped together): its step's `serial` (0: the one kept before the pass) and `(reading,
    events emitted)`, or None."""

    __slots__ = ("serial", "dead", "kept", "dropped")

    def __init__(self, serial: int, dead: tuple[_Thread, int] | None, kept: frozenset[tuple[int, ...]],
                 dropped: frozenset[tuple[int, ...]]) -> None:
        self.serial, self.dead, self.kept, self.dropped = serial, dead, kept, dropped


class _Fold:
    """Recovery's choice among the readings that failed in a pass (`_recovers_better`, in the
    readings' order, less those the pass's end drops), made as they fail: a pass over a piece of a
    whole output may see hundreds fail, and holding them all to its end keeps them alive long
    enough for the garbage collector to walk them again and again. The first `HELD_FAILED` are
    `held` whole, with how many readings waited before each, and chosen among at the end (a
    stream's pass, one chunk long, sees few fail); past them the fold is `folding`: those held
    are folded in whenever they are more, and at the end. `choices` are the readings that are
    the choice so far for some outcome of the drops still to come; one that beats none of them
    is let go. `steps` are the ones that beat some, in order, which `chosen` replays once the
    drops are known. Where folding one in would leave more than `FOLD_CHOICES` choices, the fold
    is `full`: it and the readings after it are held whole to the end, and chosen among from
    the fold's choice on, as a pass that folds none chooses among them."""

    def __init__(self) -> None:
        self.held: list[tuple[_Thread, int]] = []
        self.folding = False
        self.full = False
        self.choices: list[_Choice] = []
        self.steps: list[_Failed] = []
        self.broken_at = -1  # the first place a failed reading broke off its call (`_Thread.resync_at`)

    def failed(self) -> list[_Thread | _Failed]:
        """The failed readings the pass's end may drop or keep: held, or folded in as steps."""
        return [*self.steps, *(t for t, _ in self.held)]

    def chosen(self, dropped: set[int]) -> tuple[_Failed, tuple[_Thread, int]] | None:
        """The step whose reading recovery goes on from, with that reading, the steps in
        `dropped` (their ids) left out; None where it is the one kept before the pass."""
        serial, step = 0, None
        for failed in self.steps:
            if serial in failed.beats and id(failed) not in dropped:
                serial, step = failed.serial, failed
        if step is None:
            return None
        return step, next(c.dead for c in self.choices if c.serial == serial)

    def add(self, serial: int, dead: tuple[_Thread, int], beats: frozenset[int], group: tuple[int, ...]) -> bool:
        """The reading `dead` of step `serial`, which beats the choices of `beats`, in the
        choices: where the end keeps it, it replaces those; where the end may drop it (`group`,
        the places its calls began), those stay the choice where it does. False, and the choices
        as they were, where they would be more than `FOLD_CHOICES`."""
        choices: dict[tuple, _Choice] = {}
        for c in self.choices:
            if c.serial not in beats or group in c.dropped:
                kept = [c]
            elif not group or group in c.kept:
                kept = [_Choice(serial, dead, c.kept, c.dropped)]
            else:
                kept = [_Choice(c.serial, c.dead, c.kept, c.dropped | {group}),
                        _Choice(serial, dead, c.kept | {group}, c.dropped)]
            for choice in kept:
                choices.setdefault((choice.serial, choice.kept, choice.dropped), choice)
            if len(choices) > FOLD_CHOICES:
                return False
        self.choices = list(choices.values())
        return True


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
        fold = _Fold()
        forks: dict[tuple, tuple[tuple[int, int, int], int, tuple[int, ...]]] = {}
        pruned: list[tuple[_Thread, int]] = []
        self._sort(t, result, waiting, fold, todo, forks, pruned)
        while todo:
            self._read_all(todo, waiting, fold, forks, pruned, final)
            todo = self._revived(waiting, fold, forks, pruned)
        in_order = waiting
        if fold.folding and not fold.full:
            self._fold_held(fold)
        waiting, dropped = self._outside_arguments(waiting, fold)
        if self.call_ends:
            held = [t for t, _ in fold.held]  # those folded read no reasoning (`_fold_in`)
            dropped |= {id(t) for t in held} - {id(t) for t in _not_reasoning_over(self.call_ends, held)}
            waiting = _not_reasoning_over(self.call_ends, waiting)
            self._forget_call_ends(waiting)
        if fold.steps or fold.held:
            self._keep_dead(fold, dropped, in_order)
        alive = _merged(waiting)
        if final and alive:
            # all are complete: the one with the most calls, then markup, then the first (`_chosen`)
            alive = [_chosen(alive)]
            if self._cut_after_calls(alive[0]) or self._cut_in_key_line(alive[0]) or \
                    self._calls_over_reasoning(alive[0]):
                # the reading cut off right after its calls or in a key line, or that read one in
                # reasoning, is recovered
                return []
            if self._text_over_dead_calls(alive[0]):
                return []  # the reading that read a whole call, then failed, is recovered instead
        elif alive and self.dead is not None:
            # a stream whose chunk ended after that call drops these at once (`_calls_over_text`)
            alive = [t for t in alive if not self._text_over_dead_calls(t)]
        return alive

    def _forget_call_ends(self, threads: list[_Thread]) -> None:
        """Forget the ends of calls every reading has read past by more than the hold-back bound:
        a reading that read reasoning text there was dropped when it did (`_not_reasoning_over`)."""
        self.call_ends = {at for at in self.call_ends if any(t.pos + t.offset[0] <= at + HOLD_BOUND for t in threads)}

    def _keep_dead(self, fold: _Fold, dropped: set[int], waiting: list[_Thread]) -> None:
        """Keep the reading to recover from among those that failed in this pass (`_recovers_better`),
        the `dropped` ones (their ids) left out, and mark the `waiting` ones (all of this pass, in
        order) that come after it in the readings' order. Where two fail alike, the first in that
        order is kept, as a whole parse, where both fail in one pass, keeps it, not the first to
        fail: a reading that waits for more text to fail fails later in a stream."""
        kept = None
        if fold.folding:
            chosen = fold.chosen(dropped)
            if chosen is not None:
                kept, self.dead = chosen[0].before, chosen[1]
        # those held (all, or, where the fold is full, those after it) from the fold's choice on
        for t, before in fold.held:  # in the readings' order: one kept in this pass comes first
            if id(t) not in dropped and self._recovers_better(t, kept is None and not t.after_dead, self.dead):
                self.dead, kept = (t, self.emitted), before
        if kept is not None:
            for index, t in enumerate(waiting):
                t.after_dead = index >= kept

    def _fold_held(self, fold: _Fold) -> None:
        """Fold the failed readings held so far into the choice (`_fold_in`), in order; from now
        on, the pass folds those it holds whenever they are more than `HELD_FAILED`, until the
        fold is full (those left are held)."""
        if not fold.folding:
            fold.folding, fold.choices = True, [_Choice(0, self.dead, frozenset(), frozenset())]
        for index, (t, before) in enumerate(fold.held):
            if not self._fold_in(t, fold, before):
                fold.full, fold.held = True, fold.held[index:]
                return
        fold.held = []

    def _fold_in(self, t: _Thread, fold: _Fold, before: int) -> bool:
        """Fold a reading that failed, with `before` readings waiting before it, into the choice
        of the one to recover from (`_Fold`), as `_keep_dead` chooses; False where the fold is
        too full to take it."""
        if t.role == ir.REASONING or any(e[0] == ir.REASONING for e in t.events):
            return False  # the pass's end may drop it for reasoning read past a call's end (`_not_reasoning_over`)
        group = t.unchecked
        judged: dict[int, bool] = {}
        for c in fold.choices:
            if c.serial not in judged and group not in c.dropped:
                # only the one kept before the pass has no reading kept in this pass before `t`
                judged[c.serial] = self._recovers_better(t, c.serial == 0 and not t.after_dead, c.dead)
        beats = frozenset(serial for serial, won in judged.items() if won)
        if not beats:
            return True  # whichever is the choice so far stays it: `t` is let go
        serial = len(fold.steps) + 1
        if not fold.add(serial, (t, self.emitted), beats, group):
            return False
        fold.steps.append(_Failed(serial, beats, group, before))
        return True

    def _read_all(self, todo: list[_Thread], waiting: list[_Thread], fold: _Fold,
                  forks: dict[tuple, tuple[tuple[int, int, int], int, tuple[int, ...]]],
                  pruned: list[tuple[_Thread, int]], final: bool) -> None:
        """Read the readings of `todo` on as far as the text goes, into `waiting` and `fold`;
        a fork met again in the same state goes into `pruned` with the reading it met (`_unseen`)."""
        while todo:
            t = todo.pop()
            self._sort(t, self._run(t, final), waiting, fold, todo, forks, pruned)

    def _sort(self, t: _Thread, result: Any, waiting: list[_Thread], fold: _Fold, todo: list[_Thread],
              forks: dict[tuple, tuple[tuple[int, int, int], int, tuple[int, ...]]],
              pruned: list[tuple[_Thread, int]]) -> None:
        """Put a reading read on into `fold` (with how many wait before it), `waiting`, or,
        where it forked, its forks not met before into `todo`."""
        if result is None:
            if _in_json_arguments(t):
                self.spans.append((t.call.args_from, t.pos + self.offset[0]))
            if t.resync_at >= 0 and (fold.broken_at < 0 or t.resync_at < fold.broken_at):
                fold.broken_at = t.resync_at
            fold.held.append((t, len(waiting)))
            if len(fold.held) > HELD_FAILED and not fold.full:
                self._fold_held(fold)
        elif result.__class__ is list:
            todo.extend(reversed([f for f in result if _unseen(f, forks, pruned)]))
        else:
            waiting.append(t)

    def _revived(self, waiting: list[_Thread], fold: _Fold,
                 forks: dict[tuple, tuple[tuple[int, int, int], int, tuple[int, ...]]],
                 pruned: list[tuple[_Thread, int]]) -> list[_Thread]:
        """The readings pruned at a fork for one waiting for text that the end of the pass drops
        (`_dropped`), to be read on from there: a reading dropped for a call inside arguments
        prunes nothing, as in a stream, which drops it at the end of a shorter chunk, before the
        two meet. The forks such readings passed are forgotten. (One pruned for a reading that
        failed would fail where it did.)"""
        if not pruned:
            return []
        dropped = self._dropped(waiting, fold)
        dropped = {t.ident for t in waiting if id(t) in dropped and t.ident}
        if not dropped:
            return []
        revived = [t for t, met in pruned if met in dropped]
        if revived:
            pruned[:] = [(t, met) for t, met in pruned if met not in dropped]
            for state in [state for state, (_, met, _) in forks.items() if met in dropped]:
                del forks[state]
        return list(reversed(revived))

    def _dropped(self, waiting: list[_Thread], fold: _Fold) -> set[int]:
        """The ids of the readings, waiting for text or failed in this pass, whose call began (in
        this pass) inside text another reading reads as a call's JSON arguments (policy rule
        `calls-not-inside-arguments`); none waiting where none would be left, unless a failed
        reading broke off its call before they began theirs (`_broken_before`)."""
        failed = fold.failed()
        if not any(t.unchecked for t in waiting) and not any(t.unchecked for t in failed):
            return set()
        starts, ends = _covered(self.spans + [(t.call.args_from, float("inf")) for t in waiting
                                              if _in_json_arguments(t)])

        def inside(t: _Thread | _Failed) -> bool:
            for at in t.unchecked:
                index = bisect_right(starts, at) - 1
                if index >= 0 and at < ends[index]:
                    return True
            return False

        dropped = {id(t) for t in waiting if inside(t)}
        if len(dropped) == len(waiting) and not self._broken_before(waiting, fold.broken_at):
            dropped = set()
        return dropped | {id(t) for t in failed if inside(t)}

    def _broken_before(self, waiting: list[_Thread], broken_at: int) -> bool:
        """Whether a reading that failed broke off its call inside its JSON string at a place
        where a call may begin again (`broken_at`, the first such place of those that failed in
        this pass, or the kept one's `_Thread.resync_at`) no later than where each reading waiting
        began its call: recovery goes on from that place, so a stream that dropped those readings
        while the call they began inside was still being read (recovering from the same place
        when it failed) and a text read in one pass alike drop them."""
        places = [broken_at] if broken_at >= 0 else []
        if self.dead is not None and self.dead[0].resync_at >= 0:
            places.append(self.dead[0].resync_at)
        return bool(places) and all(t.unchecked and min(t.unchecked) >= min(places) for t in waiting)

    def _outside_arguments(self, waiting: list[_Thread], fold: _Fold) -> tuple[list[_Thread], set[int]]:
        """The readings waiting for text, less those `_dropped` (policy rule
        `calls-not-inside-arguments`), before any are merged or kept to recover from, so that the
        pass a call began in decides nothing; and the ids of all those dropped."""
        dropped = self._dropped(waiting, fold)
        kept = [t for t in waiting if id(t) not in dropped]
        for t in kept:
            t.unchecked = ()
        return kept, dropped
