"""An incremental, validating JSON scanner that streams a value's text while it arrives.

Why our own and not `jiter` or `partial-json-parser`: the parser must also run inside the
standalone module that `autoparser generate` writes, which may import only the standard library;
and streaming needs more than a partial parse of the whole buffer. It needs to consume each
character once (linear time), say exactly where the value ends or first goes wrong, and only ever
emit a prefix that a fixed closing suffix turns into valid JSON. Re-parsing the growing buffer
with a partial parser on every chunk would be quadratic.

The scanner passes the model's text through unchanged with two repairs that keep the result
valid JSON: raw control characters inside strings are escaped, and a backslash that starts no
valid escape is doubled. Text that cannot yet be judged (a number or literal still growing, a
comma whose next element has not started, an escape cut in half) is left unconsumed, so the
caller keeps it until more text arrives.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

MORE = 0  # everything given was consumed or held back; the value is not finished
DONE = 1  # the value ended at the returned position
ERROR = 2  # the character at the returned position cannot continue the value

# in-string text: anything but quote, backslash and control characters, or a complete escape
# possessive: a failed `fullmatch` must not retry every way of splitting a run (exponential time)
_STRING_BODY = re.compile(r'(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+')
_PARTIAL_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?\Z")
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_CHARS = re.compile(r"[-+0-9.eE]*")
_CONTROL_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_LITERALS = ("true", "false", "null")
_LONGEST_HELD_TOKEN = 512
_VALUE_STARTS = '{["-0123456789tfn'

# scanner states
_VALUE = 0  # a value must start here (after ':' or at the top)
_OBJECT_FIRST = 1  # just after '{': a key or '}'
_ARRAY_FIRST = 2  # just after '[': a value or ']'
_COLON = 3  # after a key
_AFTER = 4  # after a value inside a container: ',' or the closer
_STRING = 5  # inside a string value
_KEY = 6  # inside a key string
_END = 7  # the top-level value is complete
_NEXT = 8  # after ',' in a container: the next key or element (the comma held until it starts)
# inside a long number that may go on: its integer digits, its fraction, its exponent (what went out
# so far is a whole number; the rest goes out as it comes, never cut where a chunk ends)
_INTEGER, _FRACTION, _EXPONENT = 9, 10, 11
# what may follow each part of a number: whole, and cut short by the end of the text so far
_NUMBER_REST = {_INTEGER: re.compile(r"[0-9]*(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"),
                _FRACTION: re.compile(r"[0-9]*(?:[eE][+-]?[0-9]+)?"),
                _EXPONENT: re.compile(r"[0-9]*")}
_NUMBER_REST_PREFIX = {_INTEGER: re.compile(r"[0-9]*(?:\.(?:[0-9]+(?:[eE][+-]?[0-9]*)?)?|[eE][+-]?[0-9]*)?"),
                       _FRACTION: re.compile(r"[0-9]*(?:[eE][+-]?[0-9]*)?"),
                       _EXPONENT: re.compile(r"[0-9]*")}


_NUMBER_PREFIX = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.(?:[0-9]+(?:[eE][+-]?[0-9]*)?)?|[eE][+-]?[0-9]*)?")


def _number_part(number: str) -> int:
    """The part of a number its last character belongs to."""
    if "e" in number or "E" in number:
        return _EXPONENT
    return _FRACTION if "." in number else _INTEGER


def escape_control(char: str) -> str:
    """The JSON escape for a control character found raw inside a string."""
    return _CONTROL_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def json_string_body(text: str) -> str:
    """`text` escaped for the inside of a JSON string (no quotes), non-ASCII kept as is."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


class JsonScanner:
    """Scans one JSON value incrementally; `scan` returns what may be emitted so far.

    `first` restricts the kind of value: "{" accepts only an object. The emitted pieces joined
    together plus `closing()` always form valid JSON once the value has started.

    Nothing is invented: an object member (its comma, key and colon) or an array element's comma
    is held back until the value after it has validly started, so a cut or an error before that
    drops the member whole (`held_raw()` gives its text back) instead of closing it with `null`.
    Whitespace inside a container is held the same way until what follows it is read, so a value
    breaking off after it gives the whitespace back with the text that broke it.
    """

    __slots__ = ("state", "stack", "nesting", "first", "started", "holding", "pending", "pending_raw", "markers")

    def __init__(self, first: str = "", markers: tuple[str, ...] = ()) -> None:
        self.state = _VALUE
        # markers no JSON value begins with, though their first character may (`value_markers`):
        # where one begins at the place of a value, the value breaks off there
        self.markers = markers
        self.stack: list[str] = []
        # per level, a hash of the openers up to it: the nesting compares in constant time (`key`)
        self.nesting: list[int] = []
        self.first = first
        self.started = False
        self.holding = False  # a member or element is held until its value starts
        self.pending: list[str] | tuple = ()  # its emitted text from earlier calls of `scan`
        self.pending_raw: list[str] | tuple = ()  # and its source text (lists once there is any)

    @property
    def done(self) -> bool:
        return self.state == _END

    @property
    def in_string(self) -> bool:
        """Inside a string value: text without quotes, backslashes or control characters passes."""
        return self.state == _STRING

    @property
    def in_text(self) -> bool:
        """Inside a string, a value or a key."""
        return self.state == _STRING or self.state == _KEY

    def copy(self) -> JsonScanner:
        """A scanner in this one's state that scans on by itself."""
        twin = JsonScanner(self.first, self.markers)
        twin.state, twin.stack, twin.nesting = self.state, list(self.stack), list(self.nesting)
        twin.started, twin.holding = self.started, self.holding
        if self.pending_raw:
            twin.pending, twin.pending_raw = list(self.pending), list(self.pending_raw)
        return twin

    def scan(self, text: str, pos: int, final: bool = False) -> tuple[int, int, str]:
        """Consume `text[pos:]`; return (new position, MORE/DONE/ERROR, text to emit).

        With `final`, nothing more will come: a held number or literal is judged as it is.
        """
        out: list[str] = []
        hold = [0, pos]  # where held text starts in `out` and in `text`
        end = len(text)
        while pos < end:
            state = self.state
            if state >= _INTEGER:
                pos = self._number_rest(text, pos, out)
                if pos < 0:
                    return self._result(text, -pos - 1, MORE, out, hold)
                if self.state >= _INTEGER:
                    return self._result(text, pos, ERROR, out, hold)
                continue
            if state == _STRING or state == _KEY:
                pos = self._string(text, pos, out, final)
                if pos < 0:
                    return self._result(text, -pos - 1, MORE, out, hold)
                continue
            if state == _END:
                return self._result(text, pos, DONE, out, hold)
            match = _WHITESPACE.match(text, pos)
            if match.end() > pos:
                if self.stack and not self.holding:
                    # inside a container, whitespace is held until what follows it is read: where
                    # the value breaks off there, it is the model's text after the arguments
                    self._hold(out, pos, hold)
                out.append(match.group())
                pos = match.end()
                if pos >= end:
                    break
            char = text[pos]
            if state == _AFTER:
                if char == ",":
                    # the comma is held until the next element starts, so a cut here needs no repair
                    if not self.holding:
                        self._hold(out, pos, hold)
                    out.append(char)
                    pos += 1
                    self.state = _NEXT
                    continue
                closer = "}" if self.stack[-1] == "{" else "]"
                if char != closer:
                    return self._result(text, pos, ERROR, out, hold)
                self._release(out, hold)
                out.append(char)
                pos += 1
                self._close_container()
                continue
            if state == _NEXT:
                top = self.stack[-1]
                if char not in ('"' if top == "{" else _VALUE_STARTS):
                    return self._result(text, pos, ERROR, out, hold)
                self.state = _VALUE if top == "[" else _OBJECT_FIRST
                continue
            if state == _COLON:
                if char != ":":
                    return self._result(text, pos, ERROR, out, hold)
                out.append(char)
                pos += 1
                self.state = _VALUE
                continue
            if state == _OBJECT_FIRST:
                if char == '"':
                    if not self.holding:
                        self._hold(out, pos, hold)
                    out.append(char)
                    pos += 1
                    self.state = _KEY
                    continue
                if char == "}":
                    self._release(out, hold)
                    out.append(char)
                    pos += 1
                    self._close_container()
                    continue
                return self._result(text, pos, ERROR, out, hold)
            if state == _ARRAY_FIRST and char == "]":
                self._release(out, hold)
                out.append(char)
                pos += 1
                self._close_container()
                continue
            # a value starts here
            if self.first and not self.started and char != self.first:
                return self._result(text, pos, ERROR, out, hold)
            if self.markers and char in "{[":
                marker = self._marker_at(text, pos, final)
                if marker is not None:  # a marker (ERROR), or what may yet be one (held)
                    return self._result(text, pos, ERROR if marker else MORE, out, hold)
            if char in '{["':
                self._release(out, hold)
            self.started = True
            if char == "{":
                self._open("{")
                self.state = _OBJECT_FIRST
                out.append(char)
                pos += 1
            elif char == "[":
                self._open("[")
                self.state = _ARRAY_FIRST
                out.append(char)
                pos += 1
            elif char == '"':
                self.state = _STRING
                out.append(char)
                pos += 1
            else:
                # a member's scalar cut off by the end of output may have been longer: not final
                scalar_final = final and not self.stack
                taken = self._scalar(text, pos, scalar_final)
                if taken is None:
                    return self._result(text, pos, ERROR, out, hold)
                if taken == "":
                    return self._result(text, pos, MORE, out, hold)
                self._release(out, hold)
                out.append(taken)
                if not scalar_final and char != "t" and char != "f" and char != "n" and \
                        _NUMBER_CHARS.match(text, pos).end() >= end:
                    self.state = _number_part(taken)  # a long number reaching the end may go on
                else:
                    self._close_value()
                pos += len(taken)
        return self._result(text, pos, DONE if self.state == _END else MORE, out, hold)

    def _marker_at(self, text: str, pos: int, final: bool) -> bool | None:
        """Whether one of the scanner's markers begins at `pos` (True), or the text ends inside
        what may yet be one (False), or neither (None)."""
        rest = len(text) - pos
        for marker in self.markers:
            if text.startswith(marker, pos):
                return True
            if not final and rest < len(marker) and marker.startswith(text[pos:]):
                return False
        return None

    def _hold(self, out: list[str], pos: int, hold: list[int]) -> None:
        """A member or element begins at text[pos]: hold it until its value starts."""
        self.holding = True
        hold[0], hold[1] = len(out), pos

    def _release(self, out: list[str], hold: list[int]) -> None:
        """The held member's value started validly: its text may go out."""
        if self.holding:
            if self.pending:
                out[0:0] = self.pending
            self.holding = False
            self.pending, self.pending_raw = (), ()

    def _result(self, text: str, pos: int, status: int, out: list[str], hold: list[int]):
        if not self.holding:
            return pos, status, "".join(out)
        if not self.pending_raw:
            self.pending, self.pending_raw = [], []
        self.pending.extend(out[hold[0]:])
        self.pending_raw.append(text[hold[1]:pos])
        return pos, status, "".join(out[: hold[0]])

    def held_raw(self) -> str:
        """The source text of a member held back when the value broke off (it stays the model's)."""
        return "".join(self.pending_raw) if self.holding else ""

    def _string(self, text: str, pos: int, out: list[str], final: bool) -> int:
        """Scan inside a string; return the new position, or -(pos+1) to hold text[pos:]."""
        end = _STRING_BODY.match(text, pos).end()
        if end > pos:
            out.append(text[pos:end])
        if end >= len(text):
            return end
        char = text[end]
        if char == '"':
            out.append(char)
            if self.state == _KEY:
                self.state = _COLON
            else:
                self._close_value()
            return end + 1
        if char == "\\":
            if not final and _PARTIAL_ESCAPE.match(text, end):
                return -(end + 1)
            out.append("\\\\")  # a lone backslash: keep it as a literal backslash
            return end + 1
        out.append(escape_control(char))
        return end + 1

    def _number_rest(self, text: str, pos: int, out: list[str]) -> int:
        """Go on with a long number; return the new position, or -(pos+1) to hold text[pos:] (a
        `.` or an exponent's `e+` that is not a number yet). The state stays a number part where
        what follows cannot continue it (an error)."""
        run = _NUMBER_CHARS.match(text, pos).end()
        if run >= len(text):
            rest = _NUMBER_REST_PREFIX[self.state].match(text, pos, run)
            if rest.end() != run:
                return pos
            whole = _NUMBER_REST[self.state].match(text, pos, run)
            if whole.end() > pos:
                out.append(whole.group())
                self.state = max(self.state, _number_part(whole.group()))
            return -(whole.end() + 1)
        rest = _NUMBER_REST[self.state].match(text, pos, run)
        if rest.end() != run:
            return pos
        out.append(rest.group())
        self._close_value()
        return run

    def _scalar(self, text: str, pos: int, final: bool) -> str | None:
        """A complete number or literal at pos; "" when it may still grow; None when invalid. A
        number longer than a held token that reaches the end of the text goes out as far as it
        is a whole number (`scan` then reads the rest as it comes)."""
        char = text[pos]
        if char in "-0123456789":
            run = _NUMBER_CHARS.match(text, pos).end()
            if run >= len(text) and not final and run - pos < _LONGEST_HELD_TOKEN:
                return ""
            number = _NUMBER.match(text, pos, run)
            if number is None:
                return None
            if number.end() != run:
                prefix = run >= len(text) and not final and _NUMBER_PREFIX.fullmatch(text, pos, run)
                return number.group() if prefix else None
            return number.group()
        for literal in _LITERALS:
            if literal[0] == char:
                piece = text[pos : pos + len(literal)]
                if piece == literal:
                    return literal
                if len(piece) < len(literal) and literal.startswith(piece) and not final:
                    return ""
                return None
        return None

    def key(self) -> tuple:
        """All that decides how the scan goes on, as plain data that hashes and compares in time
        independent of the nesting depth (a reading's state is taken at every chunk)."""
        nesting = (len(self.nesting), self.nesting[-1]) if self.nesting else ()
        return (self.state, nesting, self.first, self.started, self.holding, tuple(self.pending),
                tuple(self.pending_raw))

    def _open(self, opener: str) -> None:
        self.nesting.append(hash((self.nesting[-1] if self.nesting else 0, opener)))
        self.stack.append(opener)

    def _close_container(self) -> None:
        self.stack.pop()
        self.nesting.pop()
        self._close_value()

    def _close_value(self) -> None:
        """A value just ended: move to the state after it."""
        self.state = _AFTER if self.stack else _END

    def closing(self, held: str = "") -> str:
        """The text that turns what was emitted (plus a held scalar `held`) into valid JSON."""
        parts: list[str] = []
        state = self.state
        if self.holding:
            pass  # the held member is dropped: only values that started are kept
        elif state == _STRING:
            parts.append('"')
        elif not self.started:
            return "{}" if self.first == "{" else (_complete_scalar(held) if held.strip() else "null")
        for opener in reversed(self.stack):
            parts.append("}" if opener == "{" else "]")
        return "".join(parts)


def value_markers(markers: Iterable[str]) -> tuple[str, ...]:
    """Of a language's markers, those that begin with a bracket but are no JSON: where one stands
    at the place of a value, it is the marker, not a value (`[TOOL_CALLS]`, not an array)."""
    found = set()
    for marker in markers:
        if marker[:1] in ("{", "[") and JsonScanner().scan(marker, 0)[1] == ERROR:
            found.add(marker)
    return tuple(sorted(found, key=len, reverse=True))


def is_whole_json(text: str) -> bool:
    """Whether `text` is one complete JSON value (whitespace around it allowed), checked without
    recursion: `json.loads` raises RecursionError on a thousand nested brackets."""
    pos, status, _ = JsonScanner().scan(text, 0, final=True)
    return status == DONE and not text[pos:].strip()


# `json.loads` and `json.dumps` recurse once per level: text nested deeper is not handed to them
DEEPEST_DECODED = 400
_NESTING = re.compile(r'"(?:[^"\\]++|\\[\s\S])*+"?|[\[\]{}]')


def nesting_depth(text: str) -> int:
    """The deepest `[`/`{` nesting in JSON-like `text` (brackets inside strings aside), in one
    scan without recursion."""
    depth = deepest = 0
    for match in _NESTING.finditer(text):
        char = match.group()[0]
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
    return deepest


def _complete_scalar(held: str) -> str:
    """Best-effort completion of a number or literal cut short."""
    held = held.strip()
    for literal in _LITERALS:
        if literal.startswith(held):
            return literal
    match = _NUMBER.match(held)
    if match and match.end() == len(held):
        return held
    for suffix in ("0", ".0", "e0"):
        candidate = held.rstrip(".eE+-") + suffix if suffix != "0" else held + suffix
        if _NUMBER.fullmatch(candidate):
            return candidate
    return "null"


_STRING_TOKEN = re.compile(r'"(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+"')
_STRING_TOKEN_PREFIX = re.compile(r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{0,4}|\\)*\Z')


def read_string_token(text: str, pos: int, final: bool, limit: int = _LONGEST_HELD_TOKEN):
    """Decode a complete JSON string token at pos: (value, end), "" if cut short, None if invalid.

    A token longer than `limit` is invalid, whether the text is whole or streamed."""
    match = _STRING_TOKEN.match(text, pos, pos + limit)
    if match:
        return json.loads(match.group()), match.end()
    if not final and len(text) - pos < limit and _STRING_TOKEN_PREFIX.match(text, pos):
        return ""
    return None


# whether a whole text is plain string content (complete escapes included)
is_string_body = _STRING_BODY.fullmatch

# Short chunks known to be whole string text, each as one shared string. A stream's chunks are mostly
# tokens, and tokens repeat, so one lookup decides most chunks for less than testing them costs, and
# a stream keeps the shared string rather than its own copy of the chunk. Cleared when full.
string_texts: dict[str, str] = {}
# ... and short chunks known to be whole string text and one backslash cut from its escape: that text
cut_texts: dict[str, str] = {}
_REMEMBERED_LENGTH = 32
_REMEMBERED_COUNT = 1 << 14


def is_string_text(chunk: str) -> bool:
    """Whether a chunk is whole string text: characters that need no escape and complete escapes
    (a short one that is, is remembered in `string_texts`). Most chunks hold no quote, backslash
    or unprintable character, a test cheaper than a regular expression."""
    if not chunk or not ('"' not in chunk and "\\" not in chunk and chunk.isprintable() or is_string_body(chunk)):
        return False
    remember(string_texts, chunk, chunk)
    return True


def remember(table: dict[str, Any], chunk: str, known: Any) -> None:
    """Remember what is known of a chunk in `table`, where the chunk is short (cleared when full)."""
    if len(chunk) <= _REMEMBERED_LENGTH:
        if len(table) >= _REMEMBERED_COUNT:
            table.clear()
        table[chunk] = known


def text_before_cut(chunk: str) -> str | None:
    """The whole string text before the backslash a chunk ends with, where that backslash begins
    an escape the chunk cuts in two; None where it does not (a short chunk where it does is
    remembered in `cut_texts`)."""
    if chunk[-1:] != "\\":
        return None
    text = chunk[:-1]
    if text and text not in string_texts and not is_string_text(text):
        return None  # the backslash ends an escape, or the text is no string text
    if len(chunk) <= _REMEMBERED_LENGTH:
        if len(cut_texts) >= _REMEMBERED_COUNT:
            cut_texts.clear()
        cut_texts[chunk] = text
    return text


def skip_whitespace(text: str, pos: int) -> int:
    return _WHITESPACE.match(text, pos).end()
