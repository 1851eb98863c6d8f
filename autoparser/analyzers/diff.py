"""Comparing rendered variants at the level of markup segments rather than characters.

A plain character diff of `<｜tool▁call▁end｜><｜tool▁call▁begin｜>` against
`<｜tool▁call▁end｜><｜tool▁calls▁end｜>` would share `<｜tool▁call` and cut a marker in half.
Cutting the text into segments first (special tokens, tags, bracket tags, words, whitespace
runs, single punctuation) keeps every boundary on a place where a marker can start or end.
This is general knowledge of tag syntax, not knowledge of any model: beside `<|x|>`, `<x>` and
`[X]`, a marker is any short word between runs of symbols (`@@call@@`, `((think))`, `{|end|}`),
between a pair of typographic brackets (`«think»`, `⟦/call⟧`, `【调用】`: a word of any script),
an upper-case word joined by underscores (`BEGIN_THOUGHT`), two to four upper-case words
making up a whole line (`BEGIN REASONING`), or a word with a colon and a tab (`think:<TAB>`). Quotes, and the single brackets of JSON and Python, never
delimit a marker, so `{"name": ...}` and `f(x=1)` stay punctuation.
"""

from __future__ import annotations

import re

_WORD = r"/?[^\W\d_][\w.:\-]{0,30}(?:\ [\w.:=\-]{1,30})?"  # `/call`, `call name=x`, `调用` (any script)
_BRACKET_RUNS = (("((", "))"), ("<<", ">>"), ("{{", "}}"), ("[[", "]]"), ("{|", "|}"), ("(|", "|)"),
                 ("{:", ":}"), ("(:", ":)"), ("«", "»"), ("‹", "›"), ("⟦", "⟧"), ("⟨", "⟩"), ("⟪", "⟫"),
                 ("【", "】"), ("〔", "〕"), ("〖", "〗"), ("『", "』"), ("「", "」"), ("《", "》"), ("〈", "〉"))
_WORD_MARKER = "|".join(
    [r"(?P<run>[~@$%^&=+!?|:]{2,3})" + _WORD + r"(?P=run)"]  # the same symbols both sides: @@call@@
    + [re.escape(a) + _WORD + re.escape(b) for a, b in _BRACKET_RUNS])  # mirrored brackets: ((think))
_CAPS_WORD = r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+"  # BEGIN_THOUGHT
_CAPS_LINE = r"[A-Z][A-Z0-9]+(?:\ [A-Z][A-Z0-9]+){1,3}"  # BEGIN REASONING, alone on its line
_LINE_LABEL = r"[^\W\d_]\w{0,15}:\t"  # `think:<TAB>`: a label before a line's text

_SEGMENT = re.compile(
    r"""
      <[|｜][^<>\n]{0,80}?[|｜]>          # special tokens: <|im_start|>, <｜User｜>
    | </?[A-Za-z_|｜][\w:.\-|｜]*(?:\s[^<>\n]{0,120})?/?>   # xml-ish tags, with attributes
    | \[/?[A-Z][A-Z_]*(?:\ [A-Z][A-Z_]*)*\]   # bracket tags: [TOOL_CALLS], [/INST], [END OF TEXT]
    | [\[\]](?=\w*[~!@#$%^&*|])[\w~!@#$%^&*|]{1,16}[\[\]]   # symbol-bracket tokens: ]~b], [|endofturn|]
    | (?:""" + _WORD_MARKER + r""")      # a word between symbol runs or typographic brackets
    | (?<![^\n])""" + _CAPS_LINE + r"""(?![^\n])   # upper-case words making up a whole line
    | (?<!\w)""" + _LINE_LABEL + r"""   # a word, a colon and a tab: a label
    | <[^<>\s]{0,60}                      # an open tag cut short: <function=, <invoke
    | \s+
    | \w+
    | .
    """,
    re.VERBOSE | re.DOTALL,
)

_MARKER = re.compile(
    r"^(?:<[|｜][^<>\n]*[|｜]>|</?[A-Za-z_|｜][\w:.\-|｜]*(?:\s[^<>\n]*)?/?>|\[/?[A-Z][A-Z_]*(?: [A-Z][A-Z_]*)*\]"
    r"|[\[\]](?=\w*[~!@#$%^&*|])[\w~!@#$%^&*|]{1,16}[\[\]]"
    r"|" + _WORD_MARKER + "|" + _CAPS_WORD + "|" + _CAPS_LINE + "|" + _LINE_LABEL + ")$"
)


def segments(text: str) -> list[str]:
    return [m.group() for m in _SEGMENT.finditer(text)]


def is_marker(segment: str) -> bool:
    """A complete special token, tag or bracket tag."""
    return bool(_MARKER.match(segment))


_BARE_WORD = re.compile(r"[A-Za-z_]\w*")


def units(text: str) -> list[str]:
    """Segments, with compound markers joined: a word written between two markers with nothing
    around it (`<|open|>think<|sep|>`, `<|close|>message<|sep|>`) is one marker with them. Read
    from the end, so that in `<|start|>assistant<|channel|>final<|message|>` the word belongs to
    the marker pair that closes it (`<|channel|>final<|message|>`)."""
    segs = segments(text)
    out: list[str] = []
    at = len(segs) - 1
    while at >= 0:
        if (at >= 2 and is_marker(segs[at]) and _BARE_WORD.fullmatch(segs[at - 1])
                and is_marker(segs[at - 2])):
            out.append(segs[at - 2] + segs[at - 1] + segs[at])
            at -= 3
        else:
            out.append(segs[at])
            at -= 1
    return out[::-1]


def is_compound(unit: str) -> bool:
    """A marker joined from two markers and the word between them."""
    segs = segments(unit)
    return len(segs) == 3 and is_marker(segs[0]) and is_marker(segs[2]) and bool(_BARE_WORD.fullmatch(segs[1]))


def is_unit_marker(unit: str) -> bool:
    return is_marker(unit) or is_compound(unit)


def common_prefix(a: str, b: str) -> str:
    """Longest common prefix of `a` and `b` that ends on a segment boundary of both."""
    out = []
    for x, y in zip(segments(a), segments(b), strict=False):
        if x != y:
            break
        out.append(x)
    return "".join(out)


def matched_ignoring_space(prefix: str, text: str) -> int:
    """How far into `text` the segments of `prefix` match, whitespace segments skipped on both sides."""
    wanted = [s for s in segments(prefix) if not s.isspace()]
    at = matched = 0
    for seg in segments(text):
        if matched == len(wanted):
            break
        if not seg.isspace():
            if seg != wanted[matched]:
                break
            matched += 1
        at += len(seg)
    return at


def common_suffix(a: str, b: str) -> str:
    out = []
    for x, y in zip(reversed(segments(a)), reversed(segments(b)), strict=False):
        if x != y:
            break
        out.append(x)
    return "".join(reversed(out))


def char_common_prefix(a: str, b: str) -> str:
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return a[:n]


def strip_prefix(text: str, prefix: str) -> str:
    return text[len(prefix):] if prefix and text.startswith(prefix) else text


def strip_suffix(text: str, suffix: str) -> str:
    return text[: len(text) - len(suffix)] if suffix and text.endswith(suffix) else text


def cut_at_stop(text: str, stop: list[str]) -> str:
    """`text` up to the first end-of-turn marker in it."""
    cut = min((text.find(s) for s in stop if s and s in text), default=len(text))
    return text[:cut]


def markers_in(text: str) -> list[str]:
    """Every complete marker segment in `text`, in order, without repeats."""
    seen: list[str] = []
    for seg in segments(text):
        if is_marker(seg) and seg not in seen:
            seen.append(seg)
    return seen


def first_marker_split(text: str) -> tuple[str, str]:
    """Split `text` after its leading marker segment (with the whitespace that follows it).

    Used to tell a per-call opener (`<tool_call>`) from the text that introduces the name
    (`\\n<function=`); when `text` does not start with a marker, everything is the second part.
    """
    segs = segments(text)
    lead = 1 if segs and segs[0].isspace() else 0
    if len(segs) <= lead or not is_marker(segs[lead]):
        return "", text
    return "".join(segs[: lead + 1]), "".join(segs[lead + 1:])


def longest_marker(text: str) -> str:
    """The most distinctive marker in `text`: its first complete marker, else the stripped text."""
    for seg in segments(text):
        if is_marker(seg):
            return seg
    return text.strip()
