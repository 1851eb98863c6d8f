"""Finding structural markers in streamed text without ever emitting part of one.

A marker is matched by its *core*, the marker without surrounding whitespace: templates put
newlines around markers that models sometimes drop or double, and the whitespace next to a
marker is handled by the state that follows (skipped, or kept as content). Whitespace *inside*
a core (GLM's `</arg_key>\\n<arg_value>`) matches any whitespace run of up to 64 characters,
including none, and so does the boundary between two tags (`</arg_key><arg_value>` also matches
with a newline between, as models trained on either spelling write both). A marker that is only whitespace has no core;
states that expect one skip whitespace instead.

`MarkerSet.find` looks for the earliest core of a set with one regular-expression search, and
`MarkerSet.safe_end` says how much text can be released because no marker can start in it: only
a suffix that could still grow into a marker is held back, which is at most the longest core
(plus a bounded whitespace allowance for cores with inner whitespace).
"""

from __future__ import annotations

import re
from functools import lru_cache

FULL = 1  # the text at the position is the whole expected marker
PARTIAL = 2  # the text ends inside the expected marker: wait for more
NONE = 0  # something else is there

_WS_ALLOWANCE = 64  # how much inner whitespace a marker may contain
# a bounded gap: a held partial marker stays short, and a whole parse and a stream (which releases
# text once no marker can start in it) agree on where a gap is too long to be part of a marker
_GAP = rf"\s{{0,{_WS_ALLOWANCE}}}"


def leading_ws(marker: str | None) -> str:
    marker = marker or ""
    return marker[: len(marker) - len(marker.lstrip())]


def trailing_ws(marker: str | None) -> str:
    marker = marker or ""
    return marker[len(marker.rstrip()) :]


_TAG_BOUNDARY = re.compile(r"(?<=>)(?=<)")


def _parts(marker: str) -> list[str]:
    """A core cut where whitespace may appear: at its whitespace runs and between two tags (`><`)."""
    return [piece for part in marker.split() for piece in _TAG_BOUNDARY.split(part) if piece]


def is_flexible(marker: str) -> bool:
    return len(_parts(marker)) > 1


def flexible_pattern(marker: str) -> str:
    """Regex for a core whose inner whitespace runs (or tag boundaries) match any whitespace."""
    return _GAP.join(re.escape(part) for part in _parts(marker))


def _prefix_alternatives(marker: str) -> list[str]:
    """Regexes matching every proper prefix of a marker (with flexible inner whitespace)."""
    parts = _parts(marker)
    alternatives = []
    for index, part in enumerate(parts):
        head = _GAP.join(re.escape(p) for p in parts[:index])
        if index:
            head += _GAP
            alternatives.append(head)
        nested = ""
        for char in reversed(part[1:]):
            nested = f"(?:{re.escape(char)}{nested})?"
        alternatives.append(head + re.escape(part[0]) + nested)
    return alternatives


def ending_pattern(markers: tuple[str, ...]) -> str:
    """Regex for a text that ends with what may yet be one of `markers` (or is one, whole), their
    inner whitespace any whitespace: search it to find where the earliest such end begins."""
    return "(?:" + "|".join(alt for marker in markers for alt in _prefix_alternatives(marker)) + r")\Z"


class Literal:
    """One expected marker at a known position."""

    __slots__ = ("text", "flexible", "full", "partial")

    def __init__(self, marker: str) -> None:
        self.text = marker
        self.flexible = is_flexible(marker)
        self.full = re.compile(flexible_pattern(marker)) if self.flexible else None
        self.partial = re.compile("(?:" + "|".join(_prefix_alternatives(marker)) + r")\Z") if self.flexible else None

    def match(self, text: str, pos: int, final: bool) -> tuple[int, int]:
        """(FULL, end) / (PARTIAL, pos) / (NONE, pos) for the marker at text[pos:]."""
        marker = self.text
        if not self.flexible:
            if text.startswith(marker, pos):
                return FULL, pos + len(marker)
            rest = text[pos : pos + len(marker)]
            if not final and len(rest) < len(marker) and marker.startswith(rest):
                return PARTIAL, pos
            return NONE, pos
        found = self.full.match(text, pos)
        if found:
            return FULL, found.end()
        if not final and self.partial.match(text, pos):
            return PARTIAL, pos
        return NONE, pos


@lru_cache(maxsize=512)
def literal(marker: str) -> Literal:
    return Literal(marker)


def match_at(text: str, pos: int, marker: str, final: bool) -> tuple[int, int]:
    """Whether `marker` is at text[pos:]: (FULL, end), (PARTIAL, pos) or (NONE, pos)."""
    if not marker:
        return NONE, pos
    return literal(marker).match(text, pos, final)


def exact_at(markers: tuple[str, ...], text: str, pos: int) -> str | None:
    """The first of `markers` written exactly at text[pos:] (no whitespace leniency), None where none is."""
    return next((m for m in markers if text.startswith(m, pos)), None)


def begins_one(markers: tuple[str, ...], rest: str) -> bool:
    """Whether `rest` is the beginning of one of `markers`, short of all of it."""
    return any(len(rest) < len(m) and m.startswith(rest) for m in markers)


class MarkerSet:
    """A set of marker cores, each tagged with what it means in the state that uses the set."""

    __slots__ = ("kinds", "pattern", "prefixes", "prefix_pattern", "first_chars", "firsts", "longest")

    def __init__(self, kinds: dict[str, str]) -> None:
        cores = sorted((c for c in kinds if c), key=len, reverse=True)
        self.kinds = [kinds[c] for c in cores]
        flexible = any(is_flexible(c) for c in cores)
        self.pattern = re.compile("|".join(f"({flexible_pattern(c)})" for c in cores)) if cores else None
        self.prefixes = {c[:n] for c in cores for n in range(1, len(c))}
        self.prefix_pattern = None
        if flexible:
            alternatives = [alt for c in cores for alt in _prefix_alternatives(c)]
            self.prefix_pattern = re.compile("(?:" + "|".join(alternatives) + r")\Z")
        firsts = sorted({c[0] for c in cores})
        self.firsts = "".join(firsts)  # the characters a marker of the set can begin with
        self.first_chars = re.compile("[" + "".join(re.escape(c) for c in firsts) + "]") if firsts else None
        self.longest = max((len(c) + (len(_parts(c)) - 1) * _WS_ALLOWANCE for c in cores), default=0)

    def find(self, text: str, pos: int, end: int | None = None, final: bool = True):
        """The earliest marker in text[pos:end]: (start, matched text, kind) or None.

        Unless `final`, a marker that the text may still grow into a longer one of the set
        (`<|close|>` of `<|close|>think<|sep|>`) is no hit yet: `safe_end` holds it back."""
        if self.pattern is None:
            return None
        match = self.pattern.search(text, pos) if end is None else self.pattern.search(text, pos, end)
        if match is None:
            return None
        if not final and (end is None or end >= len(text)) and self._may_grow(text, match.start()):
            return None
        return match.start(), match.group(), self.kinds[match.lastindex - 1]

    def find_from(self, text: str, pos: int, final: bool) -> tuple[tuple[int, str, str] | None, int]:
        """`find(text, pos, final=final)`, and the last place a search may begin and find the
        same: where the marker it found begins (or one held back), else the end of the text."""
        if self.pattern is None:
            return None, len(text)
        match = self.pattern.search(text, pos)
        if match is None:
            return None, len(text)
        if not final and self._may_grow(text, match.start()):
            return None, match.start()
        return (match.start(), match.group(), self.kinds[match.lastindex - 1]), match.start()

    def _may_grow(self, text: str, start: int) -> bool:
        """Whether the text from `start` to its end may still grow into a longer marker of the set."""
        return len(text) - start < self.longest and text[start:] in self.prefixes

    def find_at(self, text: str, pos: int):
        """The marker starting exactly at pos: (matched text, kind) or None."""
        if self.pattern is None:
            return None
        match = self.pattern.match(text, pos)
        if match is None:
            return None
        return match.group(), self.kinds[match.lastindex - 1]

    def undecided(self, text: str, pos: int, hit, final: bool) -> bool:
        """Whether more text could still change what `find_at` found at pos (`hit`): the text
        from pos is still the beginning of a marker, maybe a longer one than was found (`<`
        found, `</invoke>` may follow)."""
        return not final and self.is_prefix(text, pos)

    def is_prefix(self, text: str, pos: int) -> bool:
        """Whether text[pos:] (non-empty) could still grow into one of the markers."""
        if self.prefix_pattern is not None:
            return pos < len(text) and self.prefix_pattern.match(text, pos) is not None
        # a proper prefix is shorter than the longest marker: never slice a long rest of the text
        return len(text) - pos < self.longest and text[pos:] in self.prefixes

    def safe_end(self, text: str, pos: int) -> int:
        """The end of the text that may be released: a possible marker start at the end is held."""
        end = len(text)
        if self.first_chars is None or self.longest <= 1:
            return end
        start = max(pos, end - self.longest + 1)
        if self.prefix_pattern is not None:
            # one search: a run of a marker's first character (`[[[[` where a marker may have
            # whitespace inside) is not tried in the reader, one `is_prefix` a place
            match = self.prefix_pattern.search(text, start)
            return end if match is None else match.start()
        search = self.first_chars.search
        while True:
            match = search(text, start)
            if match is None:
                return end
            index = match.start()
            if self.is_prefix(text, index):
                return index
            start = index + 1


def hold_for(text: str, pos: int, marker: str) -> int:
    """Like `MarkerSet.safe_end` for one exact marker that may start with whitespace."""
    end = len(text)
    if not marker:
        return end
    start = max(pos, end - len(marker) + 1)
    first = marker[0]
    while True:
        index = text.find(first, start)
        if index < 0:
            return end
        if marker.startswith(text[index:]):
            return index
        start = index + 1
