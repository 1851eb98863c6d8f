"""Which reading wins where several reach one state, and which failed reading recovery goes on
from (policy rules `more-calls-win` and `nothing-lost`): comparisons of readings, nothing else.

Standard library only: the standalone module embeds it.
"""

from __future__ import annotations

from itertools import count

from autoparser.language import ir
from autoparser.language.readings import (
    _WHITESPACE,
    ARGS,
    OPENS,
    _Thread,
)
from autoparser.language.shapes import _below
from autoparser.language.terminals import (
    _Lit,
    _Text,
    _Trailer,
)


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


_IDENTS = count(1)


def _unseen(t: _Thread, seen: dict[tuple, tuple[tuple[int, int, int], int, tuple[int, ...]]],
            pruned: list[tuple[_Thread, int]]) -> bool:
    """Whether a reading that forked goes on: not where one in the same state (met at a fork
    earlier in this pass) would be chosen over it (`_prefer`). Readings that meet again within
    one pass are pruned at once, so that a long piece read whole does not multiply them. One
    pruned where the one it met had begun a call it had not (in this pass) goes into `pruned`
    with that one, to be read on should the end of the pass drop it for that call (from here
    on, the two read alike). The one met is noted by its number (`_Thread.ident`), not held:
    a pass's readings that failed are let go as it goes (`passes._Fold`)."""
    state = t.state()  # taken now, as the one met later will have read on from here
    counts = _counts(t)
    met = seen.get(state)
    if met is not None and _preferred(met[0], counts) == 0:
        if not set(met[2]) <= set(t.unchecked):
            pruned.append((t, met[1]))
        return False
    if not t.ident:
        t.ident = next(_IDENTS)
    seen[state] = counts, t.ident, t.unchecked
    return True


def _prefer(first: _Thread, second: _Thread) -> _Thread | None:
    """Of two readings in one state (they read alike from here), the one that would be chosen
    at the end of the output, and as the one to recover from if they fail: more calls begun
    wins a complete reading, more calls read whole a failed one; on a tie in calls, the one
    that read more markers as markup where a text could hold them (`ir.MARKUP`), then the
    first one. None where the two rules disagree (both are kept)."""
    return (first, second, None)[_preferred(_counts(first), _counts(second))]


def _counts(t: _Thread) -> tuple[int, int, int]:
    """What `_prefer` compares: calls read whole, calls begun, markers read as markup."""
    return t.calls_read, t.calls_held, t.markup


def _preferred(first: tuple[int, int, int], second: tuple[int, int, int]) -> int:
    """`_prefer` on the readings' `_counts`: 0 the first, 1 the second, 2 neither."""
    if first[:2] == second[:2]:
        return int(second[2] > first[2])
    if second[0] <= first[0] and second[1] <= first[1]:
        return 0
    if second[0] >= first[0] and second[1] > first[1]:
        return 1
    return 2


def _chosen(threads: list[_Thread]) -> _Thread:
    """Of complete readings, the one the end of the output keeps: the most calls begun (a text
    that reads as content or as a call is a call), then the most markers read as markup where
    a text could hold them, then the first in the language's order."""
    return max(threads, key=lambda t: (t.calls_held, t.markup))


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
    followed by what the block cannot hold). Readings are compared past the events they all
    share, again after each drop, as a stream compares them past the events that went out where
    a chunk ended: a long piece read whole, many calls in it, does not keep a reading for each
    call after which the rest was read as text."""
    shared = 0
    while len(threads) > 1:
        shared = _shared_events(threads, shared)
        if not any(_past_whole_call(t, shared) for t in threads):
            return threads
        kept = [t for t in threads if not _content_only(t, shared)]
        if len(kept) == len(threads):
            return threads
        threads = kept
    return threads


def _shared_events(threads: list[_Thread], known: int) -> int:
    """How many first events all the readings hold alike (`known` of them known to be)."""
    first = threads[0].events
    shared = known
    while shared < len(first) and all(len(t.events) > shared and t.events[shared] == first[shared]
                                      for t in threads[1:]):
        shared += 1
    return shared


def _content_only(t: _Thread, after: int = 0) -> bool:
    """Whether all the reading holds (past its first `after` events) is content, and it is inside
    no call (reasoning is not dropped here: a call inside it is its text where the end marker
    comes within the hold-back bound after it, `passes._not_reasoning_over`)."""
    events = t.events
    return len(events) > after and t.role != ir.REASONING and not _inside_call(t) and \
        not _whole_awaiting_id(t) and all(events[i][0] == ir.CONTENT for i in range(after, len(events)))


def _past_whole_call(t: _Thread, after: int = 0) -> bool:
    """Whether a call among the reading's held events (past its first `after`) was read whole,
    with arguments in it (a bare name, read as a call with no arguments, may as well be the text
    it reads as)."""
    if _whole_awaiting_id(t):
        return True
    events = t.events
    held = t.calls_held - sum(e[0] == OPENS for e in events[:after]) if after else t.calls_held
    # the call it is inside is the one held, unless that one is over and the next one began
    next_begun = 0 <= t.call.args_from < t.call_from + t.offset[0]
    whole = held > 1 or held == 1 and not (t.call.started and _inside_call(t) and not next_begun)
    return whole and any(events[i][0] == ARGS and events[i][1].strip("{} \t\n") for i in range(after, len(events)))


def _whole_awaiting_id(t: _Thread) -> bool:
    """Whether the reading's last call was read whole, with arguments in it, and has not begun
    among its events only because an id may follow its arguments (it is held for that id; where
    none comes, it begins as the call it is)."""
    call = t.call
    return call.done and call.awaits_id and not call.started and call.name is not None and \
        "".join(call.pending).strip("{} \t\n") != ""


def _closing_rank(t: _Thread, buf: str, pending: list[tuple] | None = None) -> tuple[int, bool, int]:
    """What ranks two readings that failed at one place, higher first: how far into a marker the
    output ends inside it read, whether it had closed the part it was inside (a call whose
    arguments ended, where the other began one more argument), how many calls it began among
    the events not emitted yet (`pending`, for a reading that failed before some went out)."""
    begun = _calls_begun(t) if pending is None else sum(e[0] == OPENS for e in pending)
    return _reach(t, buf), t.role is None and t.call.done, begun


def _broke_in_calls(t: _Thread) -> bool:
    """Whether a failed reading broke inside a call or a call section, after reasoning text."""
    section = t.section_at
    return t.reasoned and (_inside_call(t) or (section is not None and _below(t.stack, section[1])))


def _further(t: _Thread, other: _Thread) -> bool | None:
    """Whether failed reading `t` got further than `other` (None: as far)."""
    mine, theirs = (t.calls_read, t.pos, t.call.done), (other.calls_read, other.pos, other.call.done)
    return None if mine == theirs else mine > theirs


def _inside_call(t: _Thread) -> bool:
    """Whether the reading is inside a call, before its end marker (a JSON call object that
    broke off after its arguments)."""
    return t.after_call is not None and _below(t.stack, t.after_call)


def _inside_or_ending(t: _Thread) -> bool:
    """Whether reading `t` is inside a call (`_inside_call`) or at the call's end marker, the
    call's body read whole (it stands where the call is read over, not yet counted): a reading
    whose string ran on to a later quote may read the arguments whole and stop only at the end
    marker, still inside the call that broke (`_read_past_break`, `recovery._note_alike`)."""
    return _inside_call(t) or (t.after_call is not None and t.stack is t.call_over)


def _read_past_break(broken: _Thread, t: _Thread) -> bool:
    """Whether `t` read on, past where `broken` broke off its call at a place where a call may
    begin again inside its JSON string (`_Thread.resync_at`), inside that very call, whose
    arguments it has not read whole (or broke it off later), or read whole but for the call's end
    (`_inside_or_ending`: its string ran on past that place to a later quote, the later call's
    own, `"Oslo)(call get_weather :city "` of `"Paris"`): should it fail, recovery goes on from
    `broken`."""
    return (broken.resync_at >= 0 and (t.resync_at < 0 or t.resync_at > broken.resync_at)
            and t.calls_read == broken.calls_read and t.call_from == broken.call_from and t.pos >= broken.pos
            and (not t.call.done or _inside_or_ending(t)))
