"""The terminals a reading can be inside: literal markers, character classes, gaps, free text,
JSON values, bracketed values in the template's own syntax, literals (as `ir.Spelling` writes
them) and the trailer after the language. Each `step(reading, buf, final)` consumes what it can and returns where it stopped,
or `MORE` (wait for text), `FAIL` (no match) or `SPLIT` (the text may end here).

Fast paths: free text is searched for its stop markers with one regular expression
(`markers.MarkerSet`), holding back only a possible marker prefix; JSON values go through
`jsonscan.JsonScanner`. Standard library only: the standalone module embeds it.
"""

from __future__ import annotations

import copy
import re
from functools import lru_cache
from typing import Any

from autoparser.language import ir
from autoparser.language.jsonscan import DONE, ERROR, JsonScanner
from autoparser.language.mapper import literal_spelling, open_literal_body
from autoparser.language.markers import FULL, NONE, PARTIAL, MarkerSet, begins_one, exact_at, match_at
from autoparser.language.readings import (
    _BLANKS,
    _WHITESPACE,
    BREAK,
    CUT,
    FAIL,
    MORE,
    SPLIT,
    _holds_object,
    _Thread,
)
from autoparser.language.request import is_weak

# -- terminals -----------------------------------------------------------------------------------------

def _word_ends(buf: str, end: int, marker: str, final: bool) -> int:
    """A bounded marker read up to `end`: FULL where it does not end in a word character or no
    word character follows it, PARTIAL while the next character is still to come, else NONE."""
    if not _is_word(marker[-1:]):
        return FULL
    if end < len(buf):
        return NONE if _is_word(buf[end]) else FULL
    return FULL if final else PARTIAL


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _whitespace_end(buf: str, pos: int) -> int:
    """Where the whitespace from `pos` ends: at most 64 characters of it are skipped, so that a
    reading waiting for a marker after whitespace holds back a bounded amount."""
    end = pos
    while end < len(buf) and buf[end] in _WHITESPACE and end - pos < 64:
        end += 1
    return end


class _Lit:
    """A marker: its core as written (inner whitespace flexible, as the parser finds markers),
    whitespace before it skipped (the parser skips whitespace between structural parts; text
    before a marker has taken its own), and as much of the whitespace it ends with as the text has."""

    __slots__ = ("core", "trail", "done", "exact", "bounded", "not_before")

    def __init__(self, node: ir.Lit) -> None:
        text = node.text
        self.core = text.strip()
        self.trail = text[len(text.rstrip()):] if self.core else text
        self.done = not self.core  # the core was read
        self.exact = node.exact  # the trail is read whole or the marker is not there
        self.bounded = node.bounded
        self.not_before = node.not_before.strip()

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        pos = t.pos
        if not self.done:
            pos = _whitespace_end(buf, pos)
            if pos == len(buf) and not final:
                return MORE
            found, end = match_at(buf, pos, self.core, final)
            if found == FULL and self.bounded:
                found = _word_ends(buf, end, self.core, final)
            if found == FULL and self.not_before:
                found = _not_followed_by(buf, end, self.not_before, final)
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
        if self.exact and index < len(trail):
            return FAIL
        t.pos = pos
        return DONE


def _not_followed_by(buf: str, end: int, marker: str, final: bool) -> int:
    """Whether a marker read up to `end` is there, `marker` not following it (whitespace aside):
    FULL, NONE, or PARTIAL where only whitespace or a part of `marker` follows it so far."""
    pos = _whitespace_end(buf, end)
    if pos == len(buf):
        return NONE if final else PARTIAL
    found, _ = match_at(buf, pos, marker, False)  # a part of it at the end: it may still come
    return FULL if found == NONE else NONE if found == FULL or final else PARTIAL


class _Chars:
    __slots__ = ("node", "pattern")

    def __init__(self, node: ir.Chars, pattern: re.Pattern[str]) -> None:
        self.node, self.pattern = node, pattern

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        found = self.pattern.match(buf, t.pos)
        run = found.end() - t.pos
        most = self.node.max
        if found.end() == len(buf) and not final and (most is None or run <= most):
            return MORE  # (a run as long as the most allowed fails if one more character follows)
        if run < self.node.min:
            return FAIL
        if most is not None and run > most:
            t.pos += most  # it fails at the character past the most allowed, however the text came
            return FAIL
        if found.group() in self.node.excluded:
            return FAIL
        t.pos = found.end()
        t.key_text(found.group())
        return DONE


@lru_cache(maxsize=16)
def _barred_line(indent: int) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """The line a gap may not come before (`ir.Gap.not_line`), what may still become it, and
    that line begun where the output ends (its indentation written, nothing after it)."""
    return (re.compile(ir.indented_line(indent)), re.compile(r"(?:\n[ \t]*)?\Z"),
            re.compile(rf"\n[ \t]{{{indent},}}\Z"))


@lru_cache(maxsize=64)
def _weak_cut(weak: ir.Weak) -> re.Pattern[str] | None:
    """The weak marker at the end of the output where what follows it there may still have made it count."""
    follows = weak.cut_follows()
    return None if follows is None else re.compile(re.escape(weak.marker) + follows)


class _Gap:
    """Whitespace, at most `max` characters (as much as there is); not before a line its
    `not_line` bars (a line break, then as deep an indentation): there it fails."""

    __slots__ = ("most", "barred")

    def __init__(self, node: ir.Gap) -> None:
        self.most = node.max
        self.barred = _barred_line(node.not_line) if node.not_line is not None else None

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        barred = self.barred
        if barred is not None:
            if barred[0].match(buf, t.pos):
                return FAIL
            if not final and barred[1].match(buf, t.pos):
                return MORE
            if final and barred[2].match(buf, t.pos):
                return FAIL  # the output ended in such a line begun: what it began was cut off
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
                 "firsts", "bounded", "past", "soft", "cdata", "section", "spaces", "empty", "blank", "weak_cut",
                 "clear", "found", "held")

    def __init__(self, node: ir.Text, markers: MarkerSet, weak: tuple[Any, Any] | None, start: int,
                 split: re.Pattern[str] | None, soft: bool = False, section: tuple[str, ...] = ()) -> None:
        self.markers = markers
        self.weak, self.weak_prefix = weak or (None, None)
        self.leads = node.weak is not None and node.weak.leads  # a weak marker it begins with is text
        self.weak_cut = _weak_cut(node.weak) if node.weak is not None else None
        end = node.end or ""
        self.lead = end[:len(end) - len(end.lstrip())] if end.strip() else ""
        self.nonempty = node.nonempty
        self.start = start
        self.split = split  # brackets where what follows may begin (a bare JSON call)
        self.after = start  # where to look for the next one
        self.firsts = tuple(m.strip() for m in node.not_first if m.strip())  # cleared once checked
        self.bounded = node.bounded
        self.past = start  # the end of the last soft stop read as text
        # the whitespace it begins with, read past while a `not_first` marker may follow it (the
        # marker's if one does, else the text's), so that a long run pins no text behind the reading
        self.spaces: list[str] = []
        self.empty = True  # no text read yet
        self.soft = soft
        self.section = section  # the section a value may be wrapped in (`ir.Language.value_section`)
        self.cdata = "start" if section else ""  # that section: "start" (may open), "open", ""
        self.blank = start  # how far the whitespace at the position was read (see `_cdata`, `step`)
        # what earlier searches found, by absolute position (the text there never changes as the
        # buffer is trimmed or grows), so that a text stepped at each bracket of a long run
        # searches only what is new (`_find`, `_safe_end`): no marker begins in [clear[0], clear[1]);
        # with the text's end at found[0] and `final` found[1], a search from found[2] to found[3]
        # finds found[4]; with it at held[0], from held[1] the first place a marker may begin is held[2]
        self.clear = (0, 0)
        self.found: tuple[int, bool, int, int, tuple[int, str, str] | None] = (-1, False, 0, 0, None)
        self.held = (-1, 0, 0)

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
        hit = self._find(buf, blank, t.offset[0], final)
        stop = hit[0] if hit is not None else None
        held = None
        if self.weak is not None:
            # a weak marker that is whitespace (a line break) is looked for in the run, not after it
            since = self.start + 1 if self.leads and blank == self.start else \
                pos if self.weak_prefix[0] in _WHITESPACE else blank
            found = self.weak.search(buf, since, stop if stop is not None else len(buf))
            if found is not None:
                stop = found.start()
            elif not final:
                held = self._weak_hold(buf, max(pos, since), stop)
                if held is not None and self.lead:  # the whitespace before it may be the end marker's
                    held = self._before_lead(buf, pos, blank, held)
            elif stop is None and self.weak_cut is not None:
                # the output ended inside what may have made the weak marker count: a marker cut off
                cut = self.weak_cut.search(buf, since)
                stop = cut.start() if cut is not None else None
        if self.soft and hit is not None and hit[2] == "soft" and stop == hit[0] and held is None and (
                self.split is None or not self.split.search(buf, pos, stop)):
            self._read(t, buf, stop)
            self.past = stop + len(hit[1])
            return SPLIT
        keep_spaces = False
        if stop is None and not final:
            # (a weak marker held may come after whitespace the end marker may begin with)
            safe = self._safe(buf, pos, blank, t.offset[0])
            held = safe if held is None else min(held, safe)
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
            # a value running to the end of output: its call was cut off (unless the value is a
            # line, which the end of output ends as a line break would)
            if t.value is not None and t.call.started and (
                    not (self.weak_prefix and self.weak_prefix[0] == "\n") or self._open_literal(t, buf, stop)):
                t.emit((CUT, stop + t.offset[0]))
            if t.value is not None:
                # ... and where it was cut inside a marker (`</param`), the value ends before it:
                # the marker that failed there is text (policy rule `cut-off-calls`)
                stop = self.markers.safe_end(buf, pos)
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

    @staticmethod
    def _open_literal(t: _Thread, buf: str, stop: int) -> bool:
        """Whether a line value the end of the output ends is a quoted literal left open there
        (`"Pa`): the output was cut inside it, not after its line (`ir.RawString.literals`)."""
        spelling = literal_spelling(t.member[1]) if t.member is not None and t.value is not None else None
        if spelling is None or open_literal_body("".join(t.value) + buf[t.pos:stop], spelling) is None:
            return False
        t.value.cut = True
        return True

    def _cdata(self, t: _Thread, buf: str, final: bool) -> int:
        """A value that opens with the language's value section (XML CDATA, `<![CDATA[a < b]]>`) reads it whole:
        markers inside it are its text. MORE while it is open; DONE once past it (or none)."""
        if self.cdata == "start":
            if self.weak is not None and self.weak_prefix[0] in _WHITESPACE:
                # a line break that ends the value is looked for before the whitespace is read past
                if self.weak.match(buf, t.pos):
                    self.cdata = ""
                    return DONE
                if not final and self.weak_prefix[1].match(buf, t.pos):
                    return MORE
            pos = self.blank = _BLANKS.match(buf, max(t.pos, self.blank)).end()
            if pos > t.pos:  # the whitespace before it is held, so that a long run pins no text
                self.spaces.append(buf[t.pos:pos])
                t.pos = pos
            found, _ = match_at(buf, pos, self.section[0], final)
            if found == PARTIAL or (pos == len(buf) and not final):
                return MORE
            if found != FULL:
                self.cdata = ""
                return DONE
            self.cdata = "open"
        close = buf.find(self.section[1], t.pos)
        if close < 0:
            if final:
                self.cdata = ""
                self._read(t, buf, len(buf))
                return DONE
            self._read(t, buf, max(t.pos, len(buf) - len(self.section[1]) + 1))
            return MORE
        self.cdata = ""
        self._read(t, buf, close + len(self.section[1]))
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
        found = [self._first_at(buf, pos, marker, final) for marker in self.firsts]
        if FULL in found:
            return DONE
        if PARTIAL in found and not final:
            return MORE
        self.firsts = ()
        return FAIL

    def _first_at(self, buf: str, pos: int, marker: str, final: bool) -> int:
        found, end = match_at(buf, pos, marker, final)
        return _word_ends(buf, end, marker, final) if found == FULL and self.bounded else found

    def _find(self, buf: str, pos: int, offset: int, final: bool) -> tuple[int, str, str] | None:
        """`markers.find(buf, pos, final=final)`, searching only what earlier searches did not:
        with the same end of the text, a search from no later found the same up to `found[3]`;
        and no match is longer than `markers.longest`, so one that did not begin before the
        last `longest - 1` characters does not begin there however the text goes on."""
        here, end = pos + offset, len(buf) + offset
        last = self.found
        if last[0] == end and last[1] == final and last[2] <= here <= last[3]:
            hit = last[4]
            return None if hit is None else (hit[0] - offset, hit[1], hit[2])
        since, clear = self.clear
        start = clear - offset if since <= here < clear else pos
        hit, until = self.markers.find_from(buf, start, final)
        searched = min(len(buf) - self.markers.longest + 1, until)
        if searched > start:
            self.clear = (since if start > pos else here, searched + offset)
        self.found = (end, final, here, until + offset, None if hit is None else (hit[0] + offset, hit[1], hit[2]))
        return hit

    def _safe_end(self, buf: str, pos: int, offset: int) -> int:
        """`markers.safe_end(buf, pos)`, found once for each end of the text: a place past `pos`
        where the text from there may grow into a marker is the first such from `pos` too."""
        end, since, found = self.held
        if end == len(buf) + offset and since - offset <= pos <= found - offset:
            return found - offset
        found = self.markers.safe_end(buf, pos)
        self.held = (len(buf) + offset, pos + offset, found + offset)
        return found

    def _safe(self, buf: str, pos: int, blank: int, offset: int) -> int:
        """How far the text may be read: not into a marker's possible beginning, nor (where the
        end marker begins with whitespace) into the whitespace before it; `buf[pos:blank]` is
        whitespace."""
        end = self._safe_end(buf, pos, offset)
        return self._before_lead(buf, pos, blank, end) if self.lead else end

    def _before_lead(self, buf: str, pos: int, blank: int, end: int) -> int:
        """`end` moved back before the whitespace the end marker begins with, where the text up
        to `end` ends with whitespace: a marker found at `end` ends the text before that whitespace
        (`step`), so it is held until the marker is known."""
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

    __slots__ = ("scanner", "node", "opened", "began", "resync", "met", "broken")

    def __init__(self, node: ir.Json, markers: tuple[str, ...] = (), resync: MarkerSet | None = None) -> None:
        self.node = node
        self.scanner = JsonScanner("{" if node.kind == "object" else "", markers)
        self.opened = False  # the arguments' `{` was read (confirming the call waits for what follows)
        self.began = False  # argument text went out (whitespace before the value never does)
        self.resync = resync  # where a call may begin again (`LanguageReader.inner_resync`)
        self.met = -1  # the last of them met inside a string of streamed arguments (absolute)
        self.broken = False  # the reading broke off there (`BREAK`): it fails

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        if self.broken:
            return FAIL
        if not self.resync or t.role != ir.ARGUMENTS or t.call.mode != "json" or t.value is not None:
            return self._read(t, buf, final)
        # streamed arguments read up to where a call may begin: inside a string there, the
        # reading that breaks off the call at it is kept, should this one fail further on
        stop = _resync_after_met(self, t, buf, final)
        if stop is None:
            return self._read(t, buf, final)
        status = self._read(t, buf[:stop], False)
        if status != MORE:
            return status
        # a backslash right before it escapes nothing the string may hold there: the call broke off before it too
        cut_escape = t.pos == stop - 1 and buf[t.pos] == "\\"
        if t.pos < stop and not cut_escape or not self.scanner.in_text:
            return self._read(t, buf, final)
        return _break_at(self, t, buf, stop)

    def broken_copy(self) -> _JsonValue:
        """This value as read so far, for the reading that breaks off here (`BREAK`)."""
        twin = _JsonValue(self.node)
        twin.scanner, twin.opened, twin.began = self.scanner.copy(), self.opened, self.began
        twin.met, twin.broken = self.met, True
        return twin

    def _read(self, t: _Thread, buf: str, final: bool) -> int:
        start = t.pos
        if not self.scanner.started and t.role == ir.ARGUMENTS and t.call.mode == "json" and t.value is None:
            first = self._first_char(buf, start)
            if first == '"':
                t.call.mode = "string"  # arguments written as a JSON string holding them: kept whole
                self.scanner = JsonScanner(markers=self.scanner.markers)
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
            t.value_end = pos + t.offset[0]
        elif t.role == ir.ARGUMENTS and t.call.mode == "json":
            self._stream(t, pos, emitted)
        elif t.role == ir.CONTENT:  # an answer written as JSON (a response format's)
            t.text(buf[start:pos])
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
                    t.value_text(buf[t.pos:pos], True)
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
        t.value_text(buf[t.pos:end], True)
        t.pos = end
        return MORE


@lru_cache(maxsize=64)
def _word_end(spelling: ir.Spelling) -> re.Pattern[str]:
    """A bare word of a literal spelling: up to whitespace, a quote, a closing bracket or a separator."""
    return re.compile(f"[^\\s{re.escape(spelling.quotes + spelling.closes + spelling.separators)}]*")


def _resync_after_met(value: _JsonValue | _PyValue, t: _Thread, buf: str, final: bool) -> int | None:
    """Where the first place a call may begin again inside `value` stands past the position and
    the last such place met (`met`), or (more to come) where the text ends with what may yet be
    one; None where neither."""
    resync, start = value.resync, max(t.pos, value.met - t.offset[0] + 1)
    hit = resync.find(buf, start)
    if not final:
        held = resync.safe_end(buf, start)
        if held < len(buf) and (hit is None or held < hit[0]):
            return held
    return hit[0] if hit is not None else None


def _break_at(value: _JsonValue | _PyValue, t: _Thread, buf: str, stop: int) -> int:
    """A string value read up to `stop`, where a call may begin again: the reading breaks off
    there (`BREAK`), noting where it was met (`met`), once the place is whole; MORE while what
    ends the text may yet be one."""
    if value.resync.find_at(buf, stop) is None:
        return MORE
    value.met = stop + t.offset[0]
    return BREAK


class _PyValue:
    """A literal value as its `ir.Spelling` writes it: quoted text, a bracketed value, or a bare
    word. A quoted value's closing quote ends it in one reading, and is a quote inside it in
    another (models leave quotes unescaped; what follows decides). That other reading fails
    where its text meets one of `breaks` (`LanguageReader.quoted_breaks`): a model that left a
    quote unescaped did not write the call's or the turn's markers inside the string too, and a
    reading left open there would hold all the text after the call until the output ends. It
    fails where the marker begins, its text read up to there (recovery gives it back, as the
    value or as text), wherever the chunks end: until the marker is whole or is not one, the
    beginning of one at the end of the text is not read."""

    __slots__ = ("spelling", "word", "depth", "quote", "started", "outer", "opened", "breaks", "passed", "resync",
                 "met", "broken")

    def __init__(self, node: ir.PyValue, breaks: MarkerSet | None = None, resync: MarkerSet | None = None) -> None:
        self.spelling = node.spelling
        self.word = _word_end(node.spelling)
        self.depth = 0
        self.quote = ""
        self.started = False
        self.outer = False  # the quote open is the whole value's
        self.opened = False  # the value begins with a quote or a bracket (not a bare word)
        self.breaks = breaks
        self.passed = False  # a quote that may have closed the value was read as its text
        self.resync = resync  # where a call may begin again (`LanguageReader.inner_resync`)
        self.met = -1  # the last of them met inside the quoted value (absolute)
        self.broken = False  # the reading broke off there (`BREAK`): it fails

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        """As `_JsonValue` does in a JSON string, a quoted value read up to where a call may
        begin again inside it forks a reading that breaks off the call there (`BREAK`), kept
        should the others fail further on in that call. Its quote read where such a place was
        met inside it closes it: a string whose quotes were left unescaped does not hold the
        beginning of a later call too."""
        if self.broken:
            return FAIL
        if self.resync is None or self.passed:
            return self._step(t, buf, final)
        stop = _resync_after_met(self, t, buf, final)
        if stop is None:
            return self._step(t, buf, final)
        status = self._step(t, buf[:stop], False)
        if status != MORE:
            return status
        if t.pos < stop or not (self.quote and self.outer):
            return self._step(t, buf, final)
        return _break_at(self, t, buf, stop)

    def broken_copy(self) -> _PyValue:
        """This value as read so far, for the reading that breaks off here (`BREAK`)."""
        twin = copy.copy(self)
        twin.broken = True
        return twin

    def _step(self, t: _Thread, buf: str, final: bool) -> int:  # noqa: C901 - one case per character kind
        pos, end = t.pos, len(buf)
        spelling = self.spelling
        while pos < end:
            char = buf[pos]
            if self.quote:
                escaped = char == spelling.escape
                if escaped and pos + 1 >= end and not final:
                    break  # an escape cut in two
                pos += 2 if escaped else 1
                if char == self.quote:
                    if self.outer:
                        if self._broken(t, buf, pos - 1):
                            return FAIL
                        t.value_text(buf[t.pos:pos], True)
                        t.pos = pos
                        if self.met >= 0:
                            return DONE  # it held where a call may begin again: the quote closes it
                        self.passed = self.breaks is not None
                        return SPLIT
                    self.quote = ""
            elif char in spelling.quotes:
                self.outer = not self.depth and not self.started
                self.opened = self.opened or self.outer
                self.quote, self.started = char, True
                pos += 1
            elif char in spelling.opens:
                self.opened = self.opened or not self.started
                self.depth, self.started = self.depth + 1, True
                pos += 1
            elif self.depth:
                self.depth -= char in spelling.closes
                pos += 1
            elif self.started:
                break
            elif char.isspace():
                pos += 1
            else:
                word = self.word.match(buf, pos).end()
                if word == pos:
                    return FAIL
                if word == end and not final:
                    break  # the word may go on
                pos, self.started = word, True
            if self.started and not self.depth and not self.quote:
                t.value_text(buf[t.pos:pos], self.opened)
                t.pos = pos
                return DONE
        if self.quote and self.passed:
            if self._broken(t, buf, pos):
                return FAIL
            if not final and pos == end:
                pos = self.breaks.safe_end(buf, t.pos)  # a marker begun is read once it is whole or is none
        t.value_text(buf[t.pos:pos], self.opened)
        t.pos = pos
        return FAIL if final else MORE

    def _broken(self, t: _Thread, buf: str, upto: int) -> bool:
        """Whether the string's text from the position up to `upto`, past a quote read as its
        own, holds one of `breaks`: then its text up to the first is read, and the reading fails
        there. (None begins before the position: a marker's beginning at the end of the text is
        not read, and none holds a quote.)"""
        if not self.passed:
            return False
        hit = self.breaks.find(buf, t.pos, upto)
        if hit is None:
            return False
        t.value_text(buf[t.pos:hit[0]], True)
        t.pos = hit[0]
        if hit[2] == "resync" and buf[hit[0] - 1:hit[0]] != self.quote:
            # a later call begins inside the string: it broke off there (right after the quote,
            # the quote closed it, as the reading that ended the value there reads)
            t.resync_at = hit[0] + t.offset[0]
        return True


class _NextChar:
    """Reads nothing: waits until the character at the position is there (or the output ended),
    so that what comes next is judged on it wherever the chunks end, as in the whole text."""

    __slots__ = ()

    def step(self, t: _Thread, buf: str, final: bool) -> int:
        return MORE if t.pos >= len(buf) and not final else DONE


NEXT_CHAR = _NextChar()


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
            end = exact_at(self.ends, buf, pos)
            if end is None:
                if not final and begins_one(self.ends, buf[pos:]):
                    break
                t.pos = self.marked if self.seen else pos
                return FAIL
            pos = self.marked = pos + len(end)
            self.seen = True
            if t.call.confirm_next:
                t.call.confirmed = True  # an end of turn is no punctuation: it ends a bare word as a marker does
        t.pos = pos
        return DONE if final else MORE


def _is_soft(stop: str, node: ir.Text) -> bool:
    """Whether a stop of a value's text may also be part of it: punctuation that values contain
    (`,` in `Paris, France` before the value's own end marker, `]` in `[a, b]`)."""
    return is_weak(stop) and stop != (node.end or "").strip()
