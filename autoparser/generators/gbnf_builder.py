"""Building blocks for GBNF text: escaping, character classes, rule bookkeeping.

GBNF (llama.cpp's grammar format) has a few sharp edges that every generator here must respect,
so they live in one place:

* rule names are ``[a-zA-Z0-9-]+`` (no underscore);
* a rule is one line; an empty alternative at the end of a line makes the parser swallow the
  next rule, so optional parts are always written ``( ... )?``, never ``a |``;
* literals accept the escapes ``\\x \\u \\U \\t \\r \\n \\\\ \\" \\[ \\] \\-`` and nothing else
  (``^`` inside a class cannot be escaped and is written ``\\x5E``);
* a repetition ``X{m,n}`` unrolls into about ``n`` rules, above 2000 llama.cpp treats the
  upper bound as unbounded and refuses a lower bound, and a repeated *group* multiplies that
  count by the rules the group creates; so repetitions here are applied only to rule names and
  terminals (`repeat`), where the multiplier is one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_REPETITION = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD
MAX_CODEPOINT = 0x10FFFF


def rule_name(hint: str) -> str:
    """A valid GBNF rule name derived from arbitrary text (tool names, property names)."""
    name = re.sub(r"[^a-zA-Z0-9]+", "-", hint).strip("-")
    return name or "r"


def is_rule_name(expr: str) -> bool:
    """Whether a GBNF expression is one rule name (not a sequence, group or literal)."""
    return bool(expr) and all(c.isalnum() or c == "-" for c in expr)


def _escape_char(cp: int, in_class: bool) -> str:
    ch = chr(cp)
    simple = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if ch in simple:
        return simple[ch]
    if in_class and ch in "[]-":
        return "\\" + ch
    if in_class and ch == "^":
        return "\\x5E"
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02X}"
    if cp > 0x7F and not ch.isprintable():
        return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"
    return ch


def class_char(ch: str) -> str:
    """One character written for use inside a GBNF character class."""
    return _escape_char(ord(ch), True)


def literal(text: str) -> str:
    """A quoted GBNF literal matching `text` exactly."""
    return '"' + "".join(_escape_char(ord(c), False) for c in text) + '"'


Ranges = list[tuple[int, int]]


def normalize_ranges(ranges: Ranges) -> Ranges:
    """Sorted, merged, non-overlapping inclusive code point ranges."""
    out: Ranges = []
    for lo, hi in sorted(r for r in ranges if r[0] <= r[1]):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def complement_ranges(ranges: Ranges) -> Ranges:
    out: Ranges = []
    nxt = 0
    for lo, hi in normalize_ranges(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return out


def subtract_ranges(ranges: Ranges, remove: Ranges) -> Ranges:
    return intersect_ranges(ranges, complement_ranges(remove))


def intersect_ranges(a: Ranges, b: Ranges) -> Ranges:
    out: Ranges = []
    for lo1, hi1 in normalize_ranges(a):
        for lo2, hi2 in normalize_ranges(b):
            lo, hi = max(lo1, lo2), min(hi1, hi2)
            if lo <= hi:
                out.append((lo, hi))
    return normalize_ranges(out)


def range_size(ranges: Ranges) -> int:
    return sum(hi - lo + 1 for lo, hi in ranges)


def char_class(ranges: Ranges) -> str | None:
    """A GBNF character class for the code points in `ranges` (None when empty).

    Written negated when the complement is shorter, which keeps "anything but ``<``" readable.
    """
    ranges = normalize_ranges(ranges)
    if not ranges:
        return None
    if ranges == [(0, MAX_CODEPOINT)]:
        return "[\\x00-\\U0010FFFF]"
    comp = complement_ranges(ranges)
    negated = len(comp) < len(ranges)
    body = "".join(_class_item(lo, hi) for lo, hi in (comp if negated else ranges))
    return f"[{'^' if negated else ''}{body}]"


def _class_item(lo: int, hi: int) -> str:
    if lo == hi:
        return _escape_char(lo, True)
    if hi == lo + 1:
        return _escape_char(lo, True) + _escape_char(hi, True)
    return _escape_char(lo, True) + "-" + _escape_char(hi, True)


def repeat(item: str, lo: int, hi: int | None) -> str:
    """`item` repeated lo..hi times (hi None = unbounded); `item` must be a rule name or terminal."""
    if hi is not None and hi < lo:
        raise ValueError(f"bad repetition {lo}..{hi}")
    if hi == 0:
        return ""
    if (lo, hi) == (0, 1):
        return f"{item}?"
    if (lo, hi) == (0, None):
        return f"{item}*"
    if (lo, hi) == (1, None):
        return f"{item}+"
    if (lo, hi) == (1, 1):
        return item
    if hi is None:
        return f"{item}{{{lo},}}"
    if lo == hi:
        return f"{item}{{{lo}}}"
    return f"{item}{{{lo},{hi}}}"


def seq(*parts: str) -> str:
    """Join sequence parts, skipping empty ones."""
    return " ".join(p for p in parts if p)


def alt(*options: str) -> str:
    """A parenthesized alternation (a single option is returned bare)."""
    opts = list(dict.fromkeys(options))
    if len(opts) == 1:
        return opts[0]
    return "( " + " | ".join(opts) + " )"


def optional(expr: str) -> str:
    return f"( {expr} )?" if expr else ""


FIXED_NAMES = frozenset({
    "root", "ws", "gap", "never", "any-text", "json-char", "json-string", "json-int", "json-number", "json-bool",
    "json-null", "json-value", "json-member", "json-member-next", "json-object", "json-element",
    "json-element-next", "json-array", "key-char", "key-any", "key-more", "fmt-date", "fmt-time",
    "fmt-date-time", "fmt-uuid", "fmt-label", "fmt-email", "fmt-octet", "fmt-ipv4", "fmt-hostname", "fmt-uri",
})


@dataclass
class GrammarBuilder:
    """An ordered set of named rules; identical bodies are shared under one name.

    `reserve` hands out a name before its body is known, which is how recursive schemas
    (``$ref`` cycles) and right-recursive text automata are written.
    """

    rules: dict[str, str] = field(default_factory=dict)
    memo: dict[object, str] = field(default_factory=dict)  # generators cache rule families here
    _by_body: dict[str, str] = field(default_factory=dict)
    _reserved: set[str] = field(default_factory=set)

    def unique(self, hint: str) -> str:
        base = rule_name(hint)
        if base in FIXED_NAMES:  # keep the shared primitives' names free
            base += "-1"
        name, n = base, 1
        while name in self.rules or name in self._reserved:
            n += 1
            name = f"{base}-{n}"
        return name

    def reserve(self, hint: str) -> str:
        name = self.unique(hint)
        self._reserved.add(name)
        return name

    def set(self, name: str, body: str) -> str:
        if not body:
            raise ValueError(f"rule {name} would be empty")
        self._reserved.discard(name)
        self.rules[name] = body
        self._by_body.setdefault(body, name)
        return name

    def define(self, hint: str, body: str) -> str:
        """A rule for `body`, reusing an existing rule with the same body."""
        if not body:
            raise ValueError(f"rule {hint} would be empty")
        if body in self._by_body:
            return self._by_body[body]
        return self.set(self.unique(hint), body)

    def fixed(self, name: str, body: str) -> str:
        """A rule under an exact name (shared primitives such as ``ws``); defined once."""
        if name in self.rules and self.rules[name] != body:
            raise ValueError(f"rule name {name} is already used for another rule")
        if name not in self.rules:
            self.rules[name] = body
            self._by_body.setdefault(body, name)
        return name

    def text(self, root: str = "root") -> str:
        missing = sorted(self._reserved)
        if missing:
            raise ValueError(f"rules reserved but never defined: {missing}")
        lines = []
        if root in self.rules:
            lines.append(f"{root} ::= {self.rules[root]}")
        lines += [f"{n} ::= {b}" for n, b in self.rules.items() if n != root]
        return "\n".join(lines) + "\n"


# -- shared JSON primitives -------------------------------------------------------------------

WS_MAX = 20  # bounded: unbounded whitespace lets a small model pad forever
INT_DIGITS = 16  # integer part digits when a schema gives no bound
FRAC_DIGITS = 16

JSON_CHAR = '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" ( ["\\\\/bfnrt] | "u" [0-9a-fA-F]{4} )'


def ws(b: GrammarBuilder) -> str:
    return b.fixed("ws", f"[ \\t\\n]{{0,{WS_MAX}}}")


def json_char(b: GrammarBuilder) -> str:
    return b.fixed("json-char", JSON_CHAR)


def json_string(b: GrammarBuilder) -> str:
    return b.fixed("json-string", f'"\\"" {json_char(b)}* "\\""')


def json_int(b: GrammarBuilder) -> str:
    return b.fixed("json-int", f'"0" | "-"? [1-9] [0-9]{{0,{INT_DIGITS - 1}}}')


def json_number(b: GrammarBuilder) -> str:
    return b.fixed(
        "json-number",
        f'{json_int(b)} ( "." [0-9]{{1,{FRAC_DIGITS}}} )? ( [eE] [-+]? [0-9]{{1,2}} )?',
    )


def json_bool(b: GrammarBuilder) -> str:
    return b.fixed("json-bool", '"true" | "false"')


def json_null(b: GrammarBuilder) -> str:
    return b.fixed("json-null", '"null"')


def json_value(b: GrammarBuilder) -> str:
    """Any JSON value (used for ``{}``/``true`` schemas and untyped parts)."""
    if "json-value" in b.rules:
        return "json-value"
    b.fixed("json-value", "json-object | json-array | json-string | json-number | json-bool | json-null")
    w = ws(b)
    json_string(b), json_number(b), json_bool(b), json_null(b)
    b.fixed("json-member", f'json-string {w} ":" {w} json-value {w}')
    b.fixed("json-member-next", f'"," {w} json-member')
    b.fixed("json-object", f'"{{" {w} ( json-member json-member-next* )? "}}"')
    b.fixed("json-element", f"json-value {w}")
    b.fixed("json-element-next", f'"," {w} json-element')
    b.fixed("json-array", f'"[" {w} ( json-element json-element-next* )? "]"')
    return "json-value"


def json_object(b: GrammarBuilder) -> str:
    json_value(b)
    return "json-object"
