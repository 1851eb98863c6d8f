"""Translate the common subset of JSON-Schema ``pattern`` regexes into GBNF.

Written here because no maintained library turns an ECMAScript regex into a context-free
grammar over *JSON-encoded* text (a ``"`` in the regex must become ``\\"`` in the output).

Supported: literals and escapes, ``.``, classes with ranges and negation, ``\\d \\w \\s`` and
their negations, groups (capturing, ``(?:...)``, named), alternation, the quantifiers
``* + ? {n} {n,} {n,m}`` (lazy forms too: same language), and ``^``/``$`` at the ends of the
top-level alternatives. A pattern without ``^``/``$`` matches anywhere in the string, as JSON
Schema says, so the translation pads it with "any characters". Everything else (look-arounds,
back-references, word boundaries, Unicode properties, inner anchors, bounds above llama.cpp's
repetition limit, nested bounds multiplying past `MAX_NESTED_REPETITION`) raises
`RegexUnsupported`; the caller falls back to a plain string and warns.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from autoparser.generators.gbnf_builder import (
    MAX_CODEPOINT,
    MAX_REPETITION,
    GrammarBuilder,
    Ranges,
    alt,
    char_class,
    complement_ranges,
    json_char,
    literal,
    normalize_ranges,
    optional,
    repeat,
    seq,
    subtract_ranges,
)


class RegexUnsupported(ValueError):
    """The pattern uses a feature this translator does not express."""


MAX_NESTED_REPETITION = MAX_REPETITION
"""The most the repetition bounds of one pattern may multiply to through nesting."""


# -- syntax tree ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CharSet:
    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Seq:
    items: tuple[object, ...]


@dataclass(frozen=True)
class Alt:
    options: tuple[object, ...]


@dataclass(frozen=True)
class Repeat:
    node: object
    lo: int
    hi: int | None


@dataclass(frozen=True)
class Anchor:
    kind: str  # "^" or "$"


def _cs(ranges: Ranges) -> CharSet:
    return CharSet(tuple(normalize_ranges(ranges)))


DIGIT: Ranges = [(0x30, 0x39)]
WORD: Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
SPACE: Ranges = [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                 (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
                 (0xFEFF, 0xFEFF)]
LINE_TERMINATORS: Ranges = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]
CLASS_ESCAPES = {
    "d": DIGIT, "D": complement_ranges(DIGIT),
    "w": WORD, "W": complement_ranges(WORD),
    "s": SPACE, "S": complement_ranges(SPACE),
}
CHAR_ESCAPES = {"t": 0x09, "n": 0x0A, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}
_QUANT = re.compile(r"\{(\d+)(,(\d*))?\}")


class _Parser:
    def __init__(self, pattern: str):
        self.s = pattern
        self.i = 0

    def parse(self) -> object:
        node = self.alternation()
        if self.i != len(self.s):
            raise RegexUnsupported(f"unbalanced ')' at {self.i}")
        return node

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def alternation(self) -> object:
        options = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            options.append(self.sequence())
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def sequence(self) -> Seq:
        items: list[object] = []
        while self.i < len(self.s) and self.peek() not in "|)":
            items.append(self.quantified(self.atom()))
        return Seq(tuple(items))

    def quantified(self, node: object) -> object:
        c = self.peek()
        bounds: tuple[int, int | None] | None = None
        if c and c in "*+?":
            self.i += 1
            bounds = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{" and (m := _QUANT.match(self.s, self.i)):
            self.i = m.end()
            lo = int(m.group(1))
            hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
            bounds = (lo, hi)
        if bounds is None:
            return node
        if isinstance(node, Anchor):
            raise RegexUnsupported("quantified anchor")
        if self.peek() == "?":  # lazy: same language
            self.i += 1
        elif (self.peek() and self.peek() in "*+") or (self.peek() == "{" and _QUANT.match(self.s, self.i)):
            raise RegexUnsupported("possessive or doubled quantifier")
        lo, hi = bounds
        if hi is not None and hi < lo:
            raise RegexUnsupported(f"bad quantifier {{{lo},{hi}}}")
        return Repeat(node, lo, hi)

    def atom(self) -> object:
        c = self.s[self.i]
        self.i += 1
        if c == "(":
            return self.group()
        if c == "[":
            return self.char_class()
        if c == ".":
            return _cs(complement_ranges(LINE_TERMINATORS))
        if c in "^$":
            return Anchor(c)
        if c == "\\":
            return self.escape()
        if c in "*+?":
            raise RegexUnsupported(f"nothing to repeat at {self.i - 1}")
        return _cs([(ord(c), ord(c))])

    def group(self) -> object:
        if self.s.startswith("?:", self.i):
            self.i += 2
        elif self.s.startswith("?P<", self.i) or (
            self.s.startswith("?<", self.i) and self.s[self.i + 2: self.i + 3] not in ("=", "!")
        ):
            end = self.s.find(">", self.i)
            if end < 0:
                raise RegexUnsupported("unterminated group name")
            self.i = end + 1
        elif self.peek() == "?":
            raise RegexUnsupported("look-around or inline flags")
        node = self.alternation()
        if self.peek() != ")":
            raise RegexUnsupported("missing ')'")
        self.i += 1
        return node

    def escape(self) -> object:
        if self.i >= len(self.s):
            raise RegexUnsupported("trailing backslash")
        c = self.s[self.i]
        if c in CLASS_ESCAPES:
            self.i += 1
            return _cs(CLASS_ESCAPES[c])
        if c in "bB":
            raise RegexUnsupported("word boundary")
        if c.isdigit() and c != "0":
            raise RegexUnsupported("back-reference")
        if c in "pPkc":
            raise RegexUnsupported(f"escape \\{c}")
        cp = self.escaped_char()
        return _cs([(cp, cp)])

    def escaped_char(self) -> int:
        c = self.s[self.i]
        self.i += 1
        if c in CHAR_ESCAPES:
            return CHAR_ESCAPES[c]
        if c == "x":
            return self.hex_digits(2)
        if c == "u":
            if self.peek() == "{":
                end = self.s.find("}", self.i)
                if end < 0:
                    raise RegexUnsupported("bad \\u{...}")
                value = int(self.s[self.i + 1: end], 16)
                self.i = end + 1
                return value
            return self.hex_digits(4)
        if c.isalnum():
            raise RegexUnsupported(f"escape \\{c}")
        return ord(c)

    def hex_digits(self, n: int) -> int:
        text = self.s[self.i: self.i + n]
        if len(text) != n or not all(ch in "0123456789abcdefABCDEF" for ch in text):
            raise RegexUnsupported("bad hex escape")
        self.i += n
        return int(text, 16)

    def char_class(self) -> CharSet:
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        ranges: Ranges = []
        while True:  # ECMAScript: "[]" is the empty class and "[^]" any character
            if self.i >= len(self.s):
                raise RegexUnsupported("unterminated class")
            if self.s[self.i] == "]":
                self.i += 1
                break
            lo_set = self.class_atom()
            if lo_set is None:
                continue
            if isinstance(lo_set, list):
                ranges += lo_set
                continue
            lo = lo_set
            if self.peek() == "-" and self.s[self.i + 1: self.i + 2] not in ("]", ""):
                self.i += 1
                hi = self.class_atom()
                if not isinstance(hi, int):
                    raise RegexUnsupported("class range with a class escape")
                if hi < lo:
                    raise RegexUnsupported("reversed class range")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        return _cs(complement_ranges(ranges) if negated else ranges)

    def class_atom(self) -> int | Ranges | None:
        c = self.s[self.i]
        self.i += 1
        if c != "\\":
            if c == "[" and self.peek() and self.peek() in ":=.":
                raise RegexUnsupported("POSIX class")
            return ord(c)
        if self.i >= len(self.s):
            raise RegexUnsupported("trailing backslash")
        e = self.s[self.i]
        if e in CLASS_ESCAPES:
            self.i += 1
            return list(CLASS_ESCAPES[e])
        if e == "b":
            self.i += 1
            return 0x08
        if e == "-":
            self.i += 1
            return ord("-")
        if e.isdigit() and e != "0":
            raise RegexUnsupported("octal/back-reference in class")
        if e in "pPc":
            raise RegexUnsupported(f"escape \\{e}")
        return self.escaped_char()


def parse_regex(pattern: str) -> object:
    return _Parser(pattern).parse()


# -- emission -------------------------------------------------------------------------------

JSON_SPECIAL: Ranges = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
_SHORT_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"}


class RegexEmitter:
    """Turns a parsed regex into GBNF over either JSON-encoded or raw text.

    `json_mode`: the text is the inside of a JSON string, so special characters are emitted as
    their escapes. `exclude`: code points that may never appear (raw mode uses it to keep a
    value from running into the marker that ends it).
    """

    def __init__(self, builder: GrammarBuilder, hint: str, json_mode: bool = True,
                 exclude: Ranges | None = None):
        self.b = builder
        self.hint = hint
        self.json_mode = json_mode
        self.exclude = normalize_ranges(exclude or [])
        self._repetition = 1  # product of the repetition bounds around the node being emitted

    def any_char(self) -> str:
        if self.json_mode and not self.exclude:
            return json_char(self.b)
        return self.charset(CharSet(((0, MAX_CODEPOINT),)))

    def translate(self, pattern: str) -> str:
        """GBNF expression for the text of strings matching `pattern` (search semantics)."""
        node = parse_regex(pattern)
        options = node.options if isinstance(node, Alt) else (node,)
        exprs = []
        for option in options:
            items = list(option.items) if isinstance(option, Seq) else [option]
            start = bool(items) and items[0] == Anchor("^")
            if start:
                items = items[1:]
            end = bool(items) and items[-1] == Anchor("$")
            if end:
                items = items[:-1]
            body = self.emit(Seq(tuple(items)))
            anything = self.any_char()
            if not _is_atom(anything):
                anything = self.b.define(self.hint + "-any", anything)
            pad = f"{anything}*"
            exprs.append(seq("" if start else pad, body, "" if end else pad))
        if any(e == "" for e in exprs):
            non_empty = [e for e in exprs if e]
            return optional(alt(*non_empty)) if non_empty else ""
        return alt(*exprs)

    def emit(self, node: object) -> str:
        if isinstance(node, Anchor):
            raise RegexUnsupported("anchor inside the pattern")
        if isinstance(node, CharSet):
            return self.charset(node)
        if isinstance(node, Seq):
            return self.emit_seq(node)
        if isinstance(node, Alt):
            exprs = [self.emit(o) for o in node.options]
            if any(e == "" for e in exprs):
                non_empty = [e for e in exprs if e]
                return optional(alt(*non_empty)) if non_empty else ""
            return alt(*exprs)
        if isinstance(node, Repeat):
            return self.emit_repeat(node)
        raise RegexUnsupported(f"unknown node {node!r}")

    def emit_seq(self, node: Seq) -> str:
        parts: list[str] = []
        run: list[str] = []
        for item in node.items:
            if isinstance(item, CharSet) and len(item.ranges) == 1 and item.ranges[0][0] == item.ranges[0][1]:
                cp = item.ranges[0][0]
                if self._excluded(cp):
                    raise RegexUnsupported("pattern needs a character that cannot appear here")
                run.append(self.encode(cp))
                continue
            if run:
                parts.append(literal("".join(run)))
                run = []
            parts.append(self.emit(item))
        if run:
            parts.append(literal("".join(run)))
        return seq(*parts)

    def emit_repeat(self, node: Repeat) -> str:
        if node.lo > MAX_REPETITION or (node.hi is not None and node.hi > MAX_REPETITION):
            raise RegexUnsupported(f"repetition bound above {MAX_REPETITION}")
        outer = self._repetition
        nested = outer * (node.hi if node.hi is not None else max(node.lo, 1))
        if nested > MAX_NESTED_REPETITION:
            # `(a{0,2000}){0,2000}`: each bound alone is fine, but the matcher tracks every way
            # of splitting the text between the nested repetitions and wedges for minutes
            raise RegexUnsupported(f"nested repetition bounds multiply to {nested:,}, over the "
                                   f"grammar budget of {MAX_NESTED_REPETITION:,}")
        self._repetition = nested
        try:
            inner = self.emit(node.node)
        finally:
            self._repetition = outer
        if not inner or node.hi == 0:
            return ""
        if not _is_atom(inner):
            inner = self.b.define(self.hint + "-part", inner)
        return repeat(inner, node.lo, node.hi)

    def _excluded(self, cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in self.exclude)

    def encode(self, cp: int) -> str:
        if not self.json_mode:
            return chr(cp)
        return json.dumps(chr(cp), ensure_ascii=False)[1:-1]

    def charset(self, node: CharSet) -> str:
        ranges = subtract_ranges(list(node.ranges), self.exclude)
        if not ranges:
            raise RegexUnsupported("empty character class")
        if not self.json_mode:
            cls = char_class(ranges)
            assert cls is not None
            return cls
        plain = subtract_ranges(ranges, JSON_SPECIAL + [(0xD800, 0xDFFF)])
        options = []
        if plain:
            cls = char_class(plain)
            assert cls is not None
            options.append(cls)
        special = [cp for lo, hi in ranges for cp in range(lo, min(hi, 0x5C) + 1)
                   if any(a <= cp <= b for a, b in JSON_SPECIAL)]
        controls = [cp for cp in special if cp < 0x20]
        if len(controls) == 32:  # every control character: the \u form of each, plus short forms
            options.append('"\\\\u00" [01] [0-9a-fA-F]')
            special = [cp for cp in special if cp >= 0x20 or cp in _SHORT_ESCAPES]
        for cp in special:
            options.append(literal(_SHORT_ESCAPES.get(cp, f"\\u{cp:04x}")))
        if not options:
            raise RegexUnsupported("character class with only surrogates")
        return alt(*options)


def _is_atom(expr: str) -> bool:
    """True when `expr` is one rule name, literal or class (safe to put a quantifier on)."""
    if re.fullmatch(r"[a-zA-Z0-9-]+", expr):
        return True
    if re.fullmatch(r'"(?:[^"\\]|\\.)*"', expr):
        return True
    return bool(re.fullmatch(r"\[(?:[^\]\\]|\\.)*\]", expr))


def regex_to_gbnf(builder: GrammarBuilder, pattern: str, hint: str, json_mode: bool = True,
                  exclude: Ranges | None = None) -> str:
    """GBNF expression for the content of strings matching `pattern`.

    In JSON mode the result excludes the surrounding quotes. Raises `RegexUnsupported`.
    """
    try:
        return RegexEmitter(builder, hint, json_mode=json_mode, exclude=exclude).translate(pattern)
    except RecursionError:
        raise RegexUnsupported("groups nested too deeply") from None
