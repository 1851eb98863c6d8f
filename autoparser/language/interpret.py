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
a chunk of streamed arguments that is whole string text goes straight out, mostly decided by one
lookup of the short chunks met before); where every reading waits inside free text of one role
with nothing held (prose read as reasoning that a marker, the output's end or a call may end, in
one reading each), a chunk in which no marker of theirs begins or ends cut, no weak one (a bare
JSON call's `{`) counts or may, and no bracket stands where a bare call may begin, is read once
for all of them and goes out, with no pass over the readings; every character is consumed once
per thread.

What decides when text goes out is stated in `policy.py`. The reader's parts: this module (the
compiled language, `LanguageReader`, and a stream's buffer and fast paths, `LanguageStream`);
`commits.py` (which events go out, and their deltas); `readings.py` (one reading and its events); `stepping.py` (how a reading moves
through the IR); `terminals.py` (free text, markers, JSON and literal values); `preference.py`
(which reading wins); `passes.py` (one pass of the readings over the text); `recovery.py` (what is kept where every reading failed); `shapes.py` (what
nodes begin with and where a reading stands); `mapper.py` (captured text to the message's JSON).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from autoparser.language import ir
from autoparser.language.commits import _Commits
from autoparser.language.jsonscan import (
    cut_texts,
    is_string_text,
    remember,
    string_texts,
    text_before_cut,
    value_markers,
)
from autoparser.language.markers import MarkerSet, begins_one, ending_pattern
from autoparser.language.message import Output, ToolCall, new_call_id
from autoparser.language.passes import _Passes
from autoparser.language.policy import BARE_CALLS_PIECE, UNDECIDED_LIMIT, WHOLE_PIECE
from autoparser.language.preference import (
    _calls_over_text,
    _origin,
)
from autoparser.language.readings import (
    _FRAMES,
    _Again,
    _same_stack,
    _Thread,
)
from autoparser.language.recovery import _Recovery
from autoparser.language.request import is_weak
from autoparser.language.shapes import (
    _first_marker,
    _Firsts,
    _holds_arguments,
    _lead_markers,
    _of_reading,
    _parts,
)
from autoparser.language.stepping import _Stepping
from autoparser.language.terminals import (
    _is_soft,
    _JsonValue,
    _Text,
    _Trailer,
)

# while every reading waits inside free text: where a chunk may stop being plain text, the texts'
# marker sets, the characters a plain chunk never holds, and the weak markers (`LanguageReader.plain_end`)
Plain = tuple[re.Pattern[str], tuple[MarkerSet, ...], re.Pattern[str] | None, tuple[Any, ...]]

SPLIT_CHARS = "{["  # the brackets a bare JSON call begins with, where free text may end early


def _weak_held(marker: str, word: str, before: str, header: str = "") -> re.Pattern[str]:
    """What a text holds at the end of what has come while a weak marker may still count: the
    marker begun, or the marker, whitespace, a word and what must follow begun, or the marker,
    whitespace and a line's `header` begun."""
    begun = "".join(f"|{re.escape(marker[:n])}" for n in range(1, len(marker)))
    then = "".join(f"|{re.escape(before[:n])}" for n in range(1, len(before)))
    heads = "".join(f"|{re.escape(header[:n])}" for n in range(1, len(header)))
    begun += rf"|{re.escape(marker)}[ \t]*(?:{heads[1:]})" if heads else ""
    return re.compile(rf"(?:{re.escape(marker)}\s*(?:{word})?(?:{then[1:]})?{begun})\Z")


def _strong_without(markers: Any, chars: str) -> list[str]:
    """The markers that are no punctuation (`is_weak`) and hold none of `chars`."""
    return [m for m in markers if not is_weak(m) and not any(c in m for c in chars)]


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
        self._rests: dict[tuple, Any] = {}
        self._lead_sets: dict[int, frozenset[str]] = {}
        self._calls: dict[int, bool] = {}
        self._keep: list[Any] = []
        self._plain: dict[tuple, Plain] = {}
        self._quoted: dict[str, MarkerSet | None] = {}
        self.reasoning_end = language.reasoning_end
        self.section = language.value_section
        # markers a JSON value may meet where it is unfinished: there the value breaks off
        self.value_markers = value_markers(m for m in language.markers() if not is_weak(m))
        # where a call may begin again that is no punctuation: met inside a JSON string of a call's
        # arguments, a reading breaks off the call there (`_JsonValue`), and a chunk holding one,
        # or ending with what may yet be one, leaves the streamed string's fast path
        # (their inner whitespace any whitespace: `, { "name"` where only punctuation ends a call)
        inner = tuple(m for m in language.resync if not is_weak(m))
        self.inner_resync = MarkerSet(dict.fromkeys(inner, "resync")) if inner else None
        # a chunk holding one of them, or ending with what may yet be one (tested where it holds a first character)
        self.resync_firsts = re.compile(f"[{re.escape(''.join(sorted({m[0] for m in inner})))}]") if inner else None
        # ... ending with what may yet be one (`LanguageStream._resync_begun`): searched only in the
        # text's last characters, as long as the longest of them, where such an end can begin (a
        # search of the whole text tries the pattern's nested prefixes at every place a marker begins)
        self.resync_begun = re.compile(ending_pattern(inner)) if inner else None
        self.resync_longest = self.inner_resync.longest if self.inner_resync is not None else 0
        # short chunks known to be whole string text that the streamed string's fast path takes
        # at once: with such places, only those that hold none and end with no beginning of one
        self.string_texts = string_texts if not inner else {}
        # ... and those whole string text but for what may yet be one at their end: where that begins
        self.begun_at: dict[str, int] = {}

    def stream(self, deltas: bool = True, call_id: Callable[[], str] = new_call_id) -> LanguageStream:
        return LanguageStream(self, deltas, call_id)

    def parse(self, text: str) -> dict[str, Any]:
        """The message of a whole output, read in pieces: what the readings agree on is let go
        between pieces, so an output of many calls does not keep every reading's events to the end."""
        stream = self.stream(deltas=False)
        size = BARE_CALLS_PIECE if self.bare_calls else WHOLE_PIECE
        for at in range(0, len(text), size):
            stream._feed_piece(text[at:at + size])
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
                opener = ir.choice(ir.Lit(guard.start), ir.Lit(guard.alone)) if guard.alone else ir.Lit(guard.start)
                reasoning = ir.optional(ir.seq(ir.Gap(64), opener, block))
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
                mark = re.escape(node.weak.marker)
                word = ir.WORD if node.weak.word else ""
                weak = (re.compile(rf"{mark}(?={node.weak.follows(re.escape)})"),
                        (node.weak.marker[0], _weak_held(node.weak.marker, word, node.weak.before,
                                                         node.weak.header)))
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
            if _of_reading(node):
                return False  # the members left to read, or what follows a failed call: values and markers
            self._ids[id(node)] = False  # a recursive reference holds nothing more
            found = self._ids[id(node)] = any(self._holds_id(part) for part in _parts(node)) or (
                isinstance(node, ir.Capture) and node.role == ir.CALL_ID)
            self._keep.append(node)
        return found

    def call_rest(self, closing: Any, after: Any, kept: bool) -> tuple[Any, Any, str] | None:
        """After a call that failed: content up to its end marker (`closing`) or to what may
        follow the call (`after`: more calls, the section's end), then that marker if it is
        there, as markup (`kept`) or as content; None where the call ends with no marker. Kept by
        the markers, not by what follows (frames made while reading, new with every failure)."""
        end = _first_marker(closing)
        if not end:
            return None
        stops = (end, *sorted(self._leads(after)))
        key = (id(closing), stops, kept)
        found = self._rests.get(key)
        if found is None:
            found = self._rests[key] = (self._content_to(stops),
                                        ir.optional(closing if kept else ir.Capture(ir.CONTENT, closing)), end)
            self._keep.append(closing)
        return found

    def resync_rest(self, after: Any) -> tuple[Any, Any] | None:
        """After a call that failed where it ends only in punctuation: content up to where a later
        call may begin (`ir.Language.resync`) or to a marker that is no punctuation what follows
        the call begins with (the section's end), then what follows the call, its end marker
        left out; None where the language states no such place."""
        if not self.language.resync:
            return None
        stops = (*self.language.resync, *sorted(m for m in self._leads(after) if not is_weak(m)))
        following = after[0]
        if _of_reading(following):
            return self._content_to(stops), ir.optional(following)
        key = (id(following), "optional")
        found = self._rests.get(key)
        if found is None:
            found = self._rests[key] = ir.optional(following)
            self._keep.append(following)
        return self._content_to(stops), found

    def _content_to(self, stops: tuple[str, ...]) -> Any:
        """Content up to the first of `stops`, or of the end-of-turn markers (they end the output,
        as they end the language's own content), one node for each set of them."""
        found = self._rests.get(stops)
        if found is None:
            ends = tuple(e for e in self.end_of_turn if e not in stops)
            found = self._rests[stops] = ir.Capture(ir.CONTENT, ir.Text((*stops, *ends), hint="content"))
        return found

    def _leads(self, stack: Any) -> set[str]:
        """The markers what is left of a reading may begin with."""
        found: set[str] = set()
        while stack is not None:
            node, stack = stack
            if node.__class__ is _Again:
                node = node.repeat
            if _of_reading(node):
                continue
            found |= self._lead_markers(node)
            if not self.firsts.of(node)[1]:
                break
        return found

    def _lead_markers(self, node: Any) -> frozenset[str]:
        found = self._lead_sets.get(id(node))
        if found is None:
            # deep enough for a call whose name marker opens it: the next call's rule, the call
            # with its end marker, the call, the tool's call, its first marker
            found = self._lead_sets[id(node)] = frozenset(_lead_markers(node, 12))
            self._keep.append(node)
        return found

    def split(self, follow: frozenset[str] | None) -> re.Pattern[str] | None:
        """Where free text may end early: before a bracket that what follows may begin with."""
        brackets = "".join(sorted(set(SPLIT_CHARS) & follow)) if follow is not None else ""
        return self._splits.setdefault(brackets, re.compile(f"[{re.escape(brackets)}]")) if brackets else None

    def quoted_breaks(self, spelling: ir.Spelling) -> MarkerSet | None:
        """The markers a quoted literal's text does not run past once a quote that may have
        closed it was read as its text (`_PyValue`): the language's markers that are no
        punctuation and hold none of the spelling's quotes (those may be a string's own text)
        nor its escape (the string's text up to one is read wherever the chunks end)."""
        own = spelling.quotes + spelling.escape
        key = "quoted" + own
        if key not in self._quoted:
            kept = dict.fromkeys(_strong_without(self.language.markers(), own), "stop")
            # nor where a later call begins (`ir.Language.resync`): there the call broke off
            kept.update((m, "resync") for m in _strong_without(self.language.resync, own) if m not in kept)
            self._quoted[key] = MarkerSet(kept) if kept else None
        return self._quoted[key]

    def brackets(self, quote: str) -> re.Pattern[str]:
        """What a `Bracketed` value looks for: a bracket, or its quote marker."""
        pattern = self._chars.get("brackets" + quote)
        if pattern is None:
            pattern = self._chars["brackets" + quote] = re.compile(r"[\[\]{}]|" + re.escape(quote))
        return pattern

    def plain_end(self, markers: tuple[MarkerSet, ...], barred: str = "", weak: tuple[Any, ...] = ()) -> Plain:
        """For free texts read together that stop at `markers`: a character one of them or a
        `weak` marker (`text_markers`) begins with or that is `barred` (where a chunk may stop
        being plain text), the distinct sets (kept by `text_markers`), the `barred` characters,
        which a plain chunk never holds (a bare call may begin there), and the weak markers."""
        key = (*(id(m) for m in markers), barred, *(id(w[0]) for w in weak))
        found = self._plain.get(key)
        if found is None:
            chars = {c for m in markers for c in m.firsts} | set(barred) | {w[1][0] for w in weak}
            firsts = "".join(sorted(chars))
            distinct = tuple({id(m): m for m in markers}.values())
            weak = tuple({id(w[0]): w for w in weak}.values())
            found = self._plain[key] = (re.compile(f"[{re.escape(firsts)}]" if firsts else "(?!)"), distinct,
                                        re.compile(f"[{re.escape(barred)}]") if barred else None, weak)
        return found

    def chars(self, node: ir.Chars) -> re.Pattern[str]:
        pattern = self._chars.get(node.allowed)
        if pattern is None:
            pattern = self._chars[node.allowed] = re.compile(f"[{node.allowed}]*")
        return pattern


class LanguageStream(_Commits, _Passes, _Recovery, _Stepping):
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
        self.firsts = reader.resync_firsts
        self.texts = reader.string_texts
        self.begun_at = reader.begun_at
        self.buf = ""
        # how much text before `buf` was dropped: positions are relative to `buf`, those of events
        # made by readings are absolute (the readings share this cell)
        self.offset = [0]
        self.threads = [_Thread((reader.root, None), 0, self.offset)]
        self.safe = 0  # where the text not yet accounted for by emitted events begins
        # the reading that got furthest before all failed, and how many events had been emitted then
        self.dead: tuple[_Thread, int] | None = None
        self.emitted = 0  # events emitted so far
        # (emitted, the readings' event lists, how many of their first events are known equal):
        # while nothing goes out, a commit compares only the events new since the last one
        self._agreed_known: tuple[int, list[list[tuple]], int] | None = None
        self.resumed = False  # reading again after text that no reading took (reasoning is over)
        self.resumed_at = 0  # where the language was last read again from (absolute)
        self.reasoning_over = False  # ... and it did not stop inside reasoning: its end marker is text
        self.finished = False
        self.fallback = False  # no reading continues: the rest is content
        self.string_call: ToolCall | None = None
        self.hot: ToolCall | None = None  # that call while no backslash is held: `feed`'s hot path
        self.escape = False  # a backslash that ended the last chunk inside that call's string, held
        self.begun = ""  # ... or the beginning of a place where a call may begin again (`escape` set too)
        self.aside: list[str] = []  # the text just before `buf` that recovery may still need
        self.aside_len = 0
        # the arguments read in this pass, (where they began, where they ended) as absolute positions
        self.spans: list[tuple[int, float]] = []
        # where calls read whole after reasoning text end (absolute), until every reading is past
        # the hold-back bound after them (`passes._not_reasoning_over`)
        self.call_ends: set[int] = set()
        # while every reading waits inside free text of one role with nothing held: where a
        # chunk may stop being plain text, and the texts' marker sets (`_plain_end`), for `_feed`'s text path
        self.plain: Plain | None = None
        # whether readings still undecided give way at the end of the text being read (they do
        # where the held text reaches the limit, and past it at `_read_over_limit`'s places)
        self.limit_reached = False

    # -- public ----------------------------------------------------------------------------

    def feed(self, chunk: str) -> list[dict]:
        call = self.hot
        if call is None:
            if not self.escape:
                return self._feed(chunk)
            if self.begun:  # what may yet be a place where a call begins again, held: see `_string_rest`
                call, chunk, self.begun = self.string_call, self.begun + chunk, ""
                piece = self.texts.get(chunk)
                if piece is None:
                    return self._string_rest(call, chunk)
            else:  # the hot path after a backslash held back: it goes before the chunk
                call, chunk = self.string_call, "\\" + chunk
                try:
                    piece = string_texts[chunk]
                except KeyError:
                    return self._string_rest(call, chunk)
            self.escape, self.hot = False, call
        else:
            try:
                piece = self.texts[chunk]  # never where a call may begin again: see `_string_rest`
            except KeyError:
                piece = cut_texts.get(chunk)
                if piece is None:
                    return self._string_rest(call, chunk)
                # a backslash cut from its escape waits for the next chunk
                self.escape, self.hot = True, None
                if not piece:
                    return []
        # the hot path: more text of a JSON string in streamed arguments, mostly chunks met before
        # as whole string text, which go straight out. Written for speed, as each step costs about
        # a tenth of what a chunk takes here: a chunk is looked up by subscript (faster than
        # `get`; a miss raises), and the call keeps the string met before, not grouped here
        # (`ToolCall.append` joins them with the next text it takes).
        call.recent.append(piece)
        return [{"tool_calls": [{"index": call.index, "function": {"arguments": piece}}]}]

    def _feed_piece(self, piece: str) -> list[dict]:
        """`feed` for a long piece of a whole output: inside a string it is tested at once, as
        such a piece is never one met before."""
        call = self.hot
        return self.feed(piece) if call is None else self._string_rest(call, piece)

    def _string_rest(self, call: ToolCall, text: str) -> list[dict]:
        """Text of `feed`'s hot path not known to be whole string text. Where it ends with a
        backslash cut from its escape, what comes before goes out and the backslash waits for the
        next chunk (tested first: such a chunk is never whole string text, and no expression need
        say so); where it is whole string text, it goes out; otherwise it ends the string or goes
        wrong, and the reading reads on. Where it holds a place where a call may begin again, the
        reading reads it (a call may break off there); where it is whole string text but for what
        may yet be one at its end, what comes before goes out and the rest waits for the next
        chunk, as the reading would hold it."""
        at = self.begun_at.get(text) if self.firsts is not None else None
        if at is None and self.firsts is not None and self.firsts.search(text) is not None and self._may_resync(text):
            at = self._resync_begun(text)
            if at is None:
                self.escape = False
                return self._feed(text)
        if at is not None:
            piece, self.begun = text[:at], text[at:]
            self.escape, self.hot = True, None
            if not piece:
                return []
        elif (piece := text_before_cut(text)) is not None:
            self.escape, self.hot = True, None
            if not piece:
                return []
        elif is_string_text(text):
            piece = text
            self.escape, self.hot = False, call
            if self.texts is not string_texts:
                remember(self.texts, text, text)
        else:
            self.escape = False
            return self._feed(text)
        call.append(piece)
        return [{"tool_calls": [{"index": call.index, "function": {"arguments": piece}}]}]

    def _may_resync(self, chunk: str) -> bool:
        """Whether a chunk of a streamed string holds a place where a call may begin again, or
        ends with what may yet be one (`LanguageReader.inner_resync`): the reading reads it."""
        return self.reader.inner_resync.pattern.search(chunk) is not None or self._resync_end(chunk) is not None

    def _resync_end(self, text: str) -> re.Match[str] | None:
        """Where `text` ends with what may yet be a place where a call begins again (the longest such end)."""
        reader = self.reader
        return reader.resync_begun.search(text, max(len(text) - reader.resync_longest, 0))

    def _resync_begun(self, text: str) -> int | None:
        """Where `text`, whole string text before it and holding no place where a call may begin
        again, ends with what may yet be one (the longest such end, as `_JsonValue` holds it);
        None where it is not so."""
        begun = self._resync_end(text)
        if begun is None or self.reader.inner_resync.pattern.search(text) is not None:
            return None
        at = begun.start()
        if at and not is_string_text(text[:at]):
            return None
        remember(self.begun_at, text, at)
        return at

    def _feed(self, chunk: str) -> list[dict]:
        if self.finished:
            raise RuntimeError("feed() after finish()")
        if chunk:
            # readings undecided for too long give way at the very character where the held text
            # reaches the limit, wherever the chunks end (policy rule `undecided-too-long`)
            # (text that went out meanwhile leaves room for more, so the room is measured again)
            room = UNDECIDED_LIMIT - self._held()
            self.limit_reached = True  # (where the held text reaches it, it is at this text's end)
            while 0 < room < len(chunk):
                self._read(chunk[:room])
                chunk = chunk[room:]
                room = UNDECIDED_LIMIT - self._held()
            if room <= 0:
                self._read_over_limit(chunk)
            else:
                self._read(chunk)
        return self.out.take()

    def _read_over_limit(self, chunk: str) -> None:
        """Text read while the held text is already over the limit (one reading may hold a long
        member by itself): readings that disagree from here give way only where the text read so
        far ends at a multiple of `WHOLE_PIECE`, where a whole parse's pieces end, so that where
        they give way does not depend on how the chunks came (policy rule `undecided-too-long`)."""
        while chunk:
            end = len(self.buf) + self.offset[0]
            size = min(len(chunk), WHOLE_PIECE - end % WHOLE_PIECE)
            self.limit_reached = (end + size) % WHOLE_PIECE == 0
            self._read(chunk[:size])
            chunk = chunk[size:]

    def _read(self, chunk: str) -> None:
        self._trim()
        self.buf += chunk
        plain = self.plain
        if plain is not None and (plain[0].search(chunk) is None or self._is_plain(plain, chunk)):
            self._read_plain(chunk)
        else:
            self._advance(False)
            self.string_call = self.hot = self._in_string()
            self.plain = None if self.hot is not None else self._plain_end()

    def _held(self) -> int:
        """How many characters of the text no emitted event accounts for yet, counted once
        however many readings hold them and however the chunks came."""
        return len(self.buf) - self.safe

    def finish(self) -> list[dict]:
        if not self.finished:
            self.string_call = self.hot = None
            held: list[dict] = []
            if self.begun:  # what may have begun a place where a call begins again is read
                self.escape, begun, self.begun = False, self.begun, ""
                held = self._feed(begun)
            if self.escape:  # a backslash the output ends with is read as the reading reads it
                self.escape = False
                self.feed("\\")
            self.finished = True
            self._advance(True)
            return held + self.out.take()
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
        if self.dead is not None and self._dead_pending() is not None:
            return None  # the text it reads is held: its call may break off where it broke off
        if (head.__class__ is not _JsonValue or not head.scanner.in_string or t.pos != len(self.buf)
                or not t.call.started or t.call.mode != "json" or t.value is not None or t.events):
            return None
        self.safe = t.pos
        return self.out.calls[-1]

    def _is_plain(self, plain: Plain, chunk: str) -> bool:
        """Whether `chunk`, the end of the text, where a marker may begin, is plain text for every
        set of markers: no barred character in it, no marker, none that it ends with the beginning
        of, no weak marker that counts or that may (`_Text.step`: there it stops or holds)."""
        if plain[2] is not None and plain[2].search(chunk) is not None:
            return False
        buf = self.buf
        end = len(buf)
        start = end - len(chunk)
        for weak, (first, held) in plain[3]:
            if first in chunk and (weak.search(buf, start) is not None or held.search(buf, start) is not None):
                return False
        return all(m.find(buf, start, final=False) is None and m.safe_end(buf, start) == end for m in plain[1])

    def _plain_end(self) -> Plain | None:
        """Where every reading waits at the end of the text inside a free text of one role (the
        answer, reasoning), with no events held and nothing that a text's next characters decide
        but its markers: what ends a chunk's plain text (`LanguageReader.plain_end`), else None.
        Readings whose stacks differ keep differing while they only read text, so none merge; a
        failed reading that holds nothing back now holds nothing back as they read on. A weak
        marker is decided by what follows it, as is a bracket where a bare call may begin: a chunk
        where the weak marker neither counts nor may, and without such a bracket, reads as though
        the text had none."""
        threads = self.threads
        if self.fallback or self.escape or not threads:
            return None
        end = len(self.buf)
        role = threads[0].role
        if role != ir.REASONING and role != ir.CONTENT:
            return None
        barred = ""
        weak: list[tuple[Any, Any]] = []
        for t in threads:
            head = t.head
            if (head.__class__ is not _Text or t.pos != end or t.events or t.role != role or t.value is not None
                    or t.own_id is not None or t.unchecked or t.call_at != -1 or t.section_open
                    or t.first_unread is not None
                    or t.call.started and not t.call.confirmed):
                return None
            if head.lead or head.soft or head.cdata or head.firsts or head.spaces or head.past > end:
                return None
            if head.weak is not None:
                weak.append((head.weak, head.weak_prefix))
            if head.split is not None:
                barred += "".join(c for c in SPLIT_CHARS if c not in barred and head.split.match(c))
        for index, t in enumerate(threads):
            if any(_same_stack(t.stack, other.stack, -1) for other in threads[index + 1:]):
                return None
        if self.dead is not None and self._dead_pending() is not None:
            return None
        return self.reader.plain_end(tuple(t.head.markers for t in threads), barred, tuple(weak))

    def _read_plain(self, chunk: str) -> None:
        """Every reading reads `chunk` as text of its role, as `_advance` would have them read
        it (`_Text.step` up to the end of the text, held back nowhere) and let it go at once: one
        scan for all of them, no pass over the readings. (A text's `blank`, where the whitespace
        at its position ends, stays behind the position, where a step reads it as the position.)"""
        end = len(self.buf)
        threads = self.threads
        role = threads[0].role
        reasoned = role == ir.REASONING and not chunk.isspace()
        for t in threads:
            t.head.empty = False
            t.pos = t.mark = end
            if reasoned:
                t.reasoned = True
            if t.shared:
                t.events, t.shared = [], False
        self.spans = []
        self._apply([(role, chunk, end + self.offset[0])])
        self.emitted += 1

    def _trim(self) -> None:
        """Drop the text every living reading has passed (positions shift with it), once there is
        enough of it to be worth the shifting. The part recovery may still need (from `safe`, where
        the failed reading failed, where a text that holds its leading whitespace began) is set
        aside in pieces and put back before recovering, so that held events pin no text."""
        if self.fallback or len(self.buf) < 4096 or not self.threads:
            return
        dead = self.dead
        if dead is not None and all(t.calls_read >= dead[0].calls_read and _origin(t) > dead[0].pos
                                    for t in self.threads) and self._dead_pending() is None:
            # every living reading got further: whichever fails next replaces it. One recovery
            # would still go on from (a living reading read past where it broke) stays, so a
            # trimmed stream recovers as the whole parse does
            self.dead = None
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
                t.section_at = (t.section_at[0] + delta, *t.section_at[1:])
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
                # a reading of the calls the held text opens with as one text loses to the one
                # that broke in them where a later call begins soon after: recovery reads that call
                later = self._later_call_after_text(final)
                if later is False:
                    self.dead = None
                if not later:
                    self._commit(final)
                    if final or not self._failed_reading_wins():
                        return
            self.threads = []
            if not alive and not final and (self._end_of_turn_begun() or self._later_call_undecided()):
                return  # recovery waits to see whether the end of turn (no text) or a later call comes
            self._give_up()
        self._content_rest()

    def _end_of_turn_begun(self) -> bool:
        """Whether the text from where recovery would go on (`_give_up`: where the failed reading
        failed, or the end of the text accounted for, whichever is later) is the beginning of an
        end-of-turn marker, and nothing else: recovery, which reads such a marker as no text, waits
        until it is whole or is not one, as when the text is read whole. So too where the failed
        reading failed inside what may be such a marker, its first characters read as another
        (`_end_of_turn_around`)."""
        dead = self.dead
        if dead is None:
            return False
        pos = max(self.safe, dead[0].pos)
        longest = self._longest_end_of_turn()
        return any(begins_one(self.reader.end_of_turn, self.buf[at:at + longest])
                   for at in self._end_of_turn_window(pos, self.safe, min(pos + 1, len(self.buf))))
