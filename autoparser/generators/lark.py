r"""Lark grammar of a model's output language, generated from an `Analysis`, and a parser built on it.

The grammar is data: `generate_lark` returns plain Lark text that a user can print, diff, store
and load with ``Lark(text, parser="lalr", lexer="contextual")``. It follows the layout in the
`autoparser.analysis` module docstring::

    start      reasoning (as the thinking mode says), then the body
    body       content?, then tool calls each followed by optional text, then end-of-turn markers

Why LALR with the contextual lexer: it runs in time linear in the output (100 KB parse in
tens of milliseconds), where Earley's dynamic lexer tries every terminal at every position.
LALR cannot look ahead over free text, so the grammar is written so that the next marker makes
each decision:

* Free text (reasoning, content, tagged argument values, names when no tools are given) is one
  regex terminal that stops before the markers that may follow it:
  ``(?:[^<]|(?!</think>)<)+`` reads "any text not containing ``</think>``", and a leading
  ``(?!\s*(?:...))`` keeps text from starting with whitespace before such a marker.
* Markers are matched without their surrounding whitespace, and whitespace inside them matches
  any whitespace (``</function>\n</tool_call>`` becomes ``/<\/function>\s*<\/tool_call>/``).
  Whitespace between structural parts is ignored; reasoning and content are returned with
  surrounding whitespace stripped.
* Raw argument values keep their text exactly; the whitespace that the analysis puts in the
  markers around them (``>\n`` ... ``\n</parameter>``) is removed once by `parse_with_lark`, so
  ``<parameter=a>\nx\n</parameter>`` and ``<parameter=a>x</parameter>`` both give ``"x"``.
* Terminal priorities: known JSON keys and tool names 3, markers and JSON 2, free text 1,
  ignored whitespace 0. LALR merges parser states, so one state may accept text and also a
  marker or JSON punctuation from another context; the marker must win there.

The language is what the runtime (`autoparser.runtime`, lenient policy) reads as structure:

* reasoning mode ``none``: no reasoning. Thinking enabled with `forced_open`: the output starts
  inside reasoning (a repeated start marker is allowed). Otherwise an optional
  ``start REASONING end`` block comes first (with thinking switched off too: templates still
  show closed blocks). Reasoning without its end marker runs to the end of the output, or to a
  tool-call section when no end marker follows anywhere. An end marker inside content is text.
* text before, between and after calls is content;
* tool names are an alternative over the given tools' names (or the `tool_choice` function),
  any name when no tools are given; arguments are any JSON object, or tagged key/value pairs
  converted with each tool's JSON schema (strings stay strings, other types are parsed as JSON).
  Values written as literals (Python call syntax) are JSON values with Python's spellings
  allowed, read by the runtime's own conversion. Where keys have no marker before them, the
  weak markers after a value (``, `` ``)``) and a closing quote count only where the call
  continues after them: look-aheads that mirror the runtime's checks (`_Follows`).
* a prompt that opened a call: the output starts with that call's rest, with the recipient
  that introduces content, or with content.

Output outside the language makes `parse_with_lark` raise, where the runtime recovers (invalid
JSON, unknown tool names, truncated calls): on everything inside it the two build the same
message, which ``tests/test_lark_agreement.py`` checks on round trips of real templates.

`parse_with_lark` reads first by the request's output language (`language.build`, written
for Lark by `lark_ir.write_lark` and read by its capture roles), which is what the GBNF
generates; this grammar reads what that language does not hold: no tools given (any name),
calls opened by the prompt, text after the calls, a reasoning start marker the prompt wrote.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from autoparser.analysis import Analysis
from autoparser.generators.lark_ir import read_message, write_lark
from autoparser.language import ir
from autoparser.language.build import Request, build_language
from autoparser.language.request import (
    KEY_HOLE,
    NAME_FORBIDDEN,
    OPEN,
    is_weak,
    split_call_index,
    start_state,
    value_kind,
)
from autoparser.language.values import convert_literal_value, convert_tagged_value, decode_string_body

__all__ = ["generate_lark", "parse_with_lark", "lark_parser"]

# Priorities decide between terminals that match at the same place. LALR merges states, so a
# state may accept free text and also a marker or JSON punctuation from another context: the
# marker or punctuation must win there (text never starts at its own followers anyway), while
# free text must win over ignored whitespace, so that raw values keep their leading whitespace.
MARKER_PRIORITY = 2
TEXT_PRIORITY = 1
KEY_PRIORITY = 3  # a call object's known keys and tool names, over JSON strings in general

JSON_RULES = r"""
// JSON (RFC 8259); strings may hold raw control characters, as models sometimes write them
?value: object | array | STRING | NUMBER | TRUE | FALSE | NULL
object: _LBRACE (pair (_COMMA pair)*)? _RBRACE
pair: STRING _COLON value
array: _LSQB (value (_COMMA value)*)? _RSQB
""".strip()

JSON_TERMINALS = r"""
STRING.2: /"(?:[^"\\]|\\[\s\S])*"/
NUMBER.2: /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/
TRUE.2: "true"
FALSE.2: "false"
NULL.2: "null"
_LBRACE.2: "{"
_RBRACE.2: "}"
_LSQB.2: "["
_RSQB.2: "]"
_COMMA.2: ","
_COLON.2: ":"
""".strip()

# Python literals as tool calls written in Python call syntax spell them: JSON, plus single-quoted
# strings and Python's names for the constants
PYTHON_TERMINALS = (JSON_TERMINALS
                    .replace('STRING.2: /"(?:[^"\\\\]|\\\\[\\s\\S])*"/',
                             'STRING.2: /"(?:[^"\\\\]|\\\\[\\s\\S])*"|\'(?:[^\'\\\\]|\\\\[\\s\\S])*\'/')
                    .replace('TRUE.2: "true"', 'TRUE.2: "true" | "True"')
                    .replace('FALSE.2: "false"', 'FALSE.2: "false" | "False"')
                    .replace('NULL.2: "null"', 'NULL.2: "null" | "None"'))

# JSON punctuation that analyses name as markers (array calls) is the JSON terminal itself:
# two terminals for one string in one parser state would make the lexer pick arbitrarily.
_JSON_PUNCTUATION = {"{": "_LBRACE", "}": "_RBRACE", "[": "_LSQB", "]": "_RSQB", ",": "_COMMA", ":": "_COLON"}


# -- escaping -------------------------------------------------------------------------------------


def _regex_escape(text: str) -> str:
    """`re.escape` for a Lark regex literal.

    Lark reads a regex literal through its own unescaping: ``/`` must be escaped, raw newlines
    are not allowed, and a ``"`` right after an escaped backslash loses that backslash, so
    quotes are written as ``\x22``.
    """
    escaped = re.escape(text).replace("/", r"\/").replace('"', r"\x22")
    return escaped.replace("\n", r"\n").replace("\r", r"\r").replace("\t", r"\t")


def _class_escape(char: str) -> str:
    """One character inside a regex character class."""
    if char in "\\]^-[":
        return "\\" + char
    return _regex_escape(char)


def _lark_string(text: str) -> str:
    """A Lark literal matching exactly `text`: a string literal, or a regex for text with a backslash.

    Lark reads string literals with Python-style escapes and then folds a double backslash to
    one, so text holding a backslash cannot be written as a string literal.
    """
    if "\\" in text:
        return "/" + _regex_escape(text) + "/"
    body = text.replace('"', '\\"')
    return '"' + body.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") + '"'


# -- markers --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    """A structural marker, matched without its surrounding whitespace.

    `pieces` are the marker's whitespace-separated parts; any whitespace may sit between them.
    A marker made only of whitespace has no pieces and is left out of the grammar: whitespace
    between structural parts is ignored anyway. With `indexed`, the first run of digits is a
    call index the template numbers (``:0<|x|>``, ``:1<|x|>``) and matches any number.
    """

    text: str
    indexed: bool = False
    suffix: str = ""  # regex appended to the pattern, e.g. a lookahead
    keyed: bool = False  # `{key}` in the text stands for an argument's key (`</{key}>`)

    @property
    def pieces(self) -> tuple[str, ...]:
        return tuple(self.text.split())

    @property
    def present(self) -> bool:
        return bool(self.pieces)

    @property
    def leading_ws(self) -> str:
        return self.text[: len(self.text) - len(self.text.lstrip())]

    @property
    def trailing_ws(self) -> str:
        return self.text[len(self.text.rstrip()):]

    @property
    def index_match(self) -> re.Match[str] | None:
        if not self.indexed:
            return None
        joined = " ".join(self.pieces)
        indexed = split_call_index(joined)  # never inside a special token (`<|tool_sep_2|>`)
        return _INDEX_DIGITS.match(joined, len(indexed[0])) if indexed else None

    @property
    def first_chars(self) -> str:
        """The characters the marker can start with."""
        index = self.index_match
        return "0123456789" if index is not None and index.start() == 0 else self.pieces[0][0]

    def pattern(self) -> str:
        """Regex source matching the marker."""
        index = self.index_match
        if self.keyed:
            hole = _regex_escape(KEY_HOLE)
            return r"\s*".join(_regex_escape(piece).replace(hole, _KEY_REGEX) for piece in self.pieces) + self.suffix
        if index is None:
            return r"\s*".join(_regex_escape(piece) for piece in self.pieces) + self.suffix
        joined = " ".join(self.pieces)
        head, tail = Marker(joined[: index.start()]), Marker(joined[index.end():])
        return (head.pattern() + (r"\s*" if joined[index.start() - 1: index.start()] == " " else "") + "[0-9]+"
                + (r"\s*" if joined[index.end(): index.end() + 1] == " " else "") + tail.pattern() + self.suffix)

    def definition(self) -> str:
        """The right-hand side of the marker's terminal definition."""
        if len(self.pieces) == 1 and self.index_match is None and not self.keyed and not self.suffix:
            return _lark_string(self.pieces[0])
        return "/" + self.pattern() + "/"


_INDEX_DIGITS = re.compile(r"[0-9]+")
_KEY_REGEX = r"[^\W\d][\w.\-]*"  # a key with no marker before it, as the runtime reads one
_NAME_REGEX = "[^" + NAME_FORBIDDEN.replace('"', r"\x22") + "]+"  # a name with no marker before it


def _unique(markers: list[Marker]) -> list[Marker]:
    """Markers without repeats (same pattern), in their first order."""
    seen: set[str] = set()
    out = []
    for marker in markers:
        if marker.pattern() not in seen:
            seen.add(marker.pattern())
            out.append(marker)
    return out


def _text_regex(stop_before: list[Marker], *, forbid_chars: str = "",
                not_at_start: list[Marker] | None = None, not_at_start_chars: str = "",
                not_at_start_regex: str = "",
                unless_later: tuple[Marker, Marker] | None = None) -> str:
    """Regex for a run of text that contains none of `stop_before` and none of `forbid_chars`.

    Written as ``(?:[^F]|(?!M1|M2)[F])+`` where F are the markers' first characters, so that
    most characters are taken by a plain character class: this keeps 100 KB texts fast.
    `not_at_start` are markers, `not_at_start_chars` characters, that the text may not begin
    with (after optional whitespace): there the parser must see the marker instead.
    `forbid_chars` is regex character-class source. `unless_later` is a pair (M, E): the text
    also stops before M, but only where no E follows anywhere later.
    """
    markers = _unique([m for m in stop_before if m.present])
    if unless_later and unless_later[0].present:
        later, closer = unless_later
        markers.append(Marker(later.text, later.indexed, rf"(?![\s\S]*{closer.pattern()})"))
    excluded = "".join(_class_escape(c) for c in sorted({c for m in markers for c in m.first_chars}))
    plain = excluded + forbid_chars
    alternatives = [f"[^{plain}]" if plain else r"[\s\S]"]
    # a one-character marker is excluded by the class alone, and so is every marker it starts
    singles = {m.pieces[0] for m in markers
               if m.pieces == (m.pieces[0][:1],) and m.index_match is None and not m.suffix}
    guarded = [m for m in markers if not set(m.first_chars) <= singles]
    if guarded:
        firsts = "".join(_class_escape(c) for c in sorted({c for m in guarded for c in m.first_chars}))
        guard = "|".join(m.pattern() for m in guarded)
        first = firsts if len(firsts) == 1 else f"[{firsts}]"
        alternatives.append(f"(?!{guard}){first}")
    body = "(?:" + "|".join(alternatives) + ")+"
    starts = [m.pattern() for m in _unique([m for m in (not_at_start or []) if m.present])]
    starts += [_regex_escape(c) for c in not_at_start_chars]
    if not_at_start_regex:
        starts.append(not_at_start_regex)
    if starts:
        body = r"(?!\s*(?:" + "|".join(starts) + "))" + body
    return "/" + body + "/"


# -- grammar builder ------------------------------------------------------------------------------


@dataclass
class _Grammar:
    """A grammar being written: header comments, rules and terminals, each in definition order."""

    header: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    terminals: list[str] = field(default_factory=list)
    json_needed: bool = False
    python_literals: bool = False  # JSON values may be spelled the Python way ('text', True, None)

    def rule(self, text: str) -> None:
        self.rules.append(text)

    def terminal(self, name: str, definition: str, priority: int = MARKER_PRIORITY) -> None:
        suffix = f".{priority}" if priority else ""
        self.terminals.append(f"{name}{suffix}: {definition}")

    def reference(self, name: str, marker: Marker) -> str:
        """The terminal that `marker(name, marker)` defines or reuses; "" for an absent marker.

        A tool-call marker that is a JSON punctuation character, in a grammar with JSON, is the
        JSON terminal itself: LALR merges the states after a nested and a whole JSON object,
        and two terminals for one string in one state would leave the choice to their order.
        """
        if not marker.present:
            return ""
        if self.json_needed and len(marker.pieces) == 1 and marker.pieces[0] in _JSON_PUNCTUATION:
            return _JSON_PUNCTUATION[marker.pieces[0]]
        return name

    def marker(self, name: str, marker: Marker) -> str:
        """Define `name` for a present marker (see `reference`); return the terminal's name."""
        reference = self.reference(name, marker)
        if reference == name:
            self.terminal(name, marker.definition())
        return reference

    def own_marker(self, name: str, marker: Marker) -> str:
        """Define `name` for a present reasoning or content marker, never shared with JSON."""
        if not marker.present:
            return ""
        self.terminal(name, marker.definition())
        return name

    def text(self) -> str:
        parts = ["\n".join(self.header), "\n".join(self.rules)]
        if self.json_needed:
            parts.append(JSON_RULES)
        parts.append("\n".join(self.terminals))
        if self.json_needed:
            parts.append(PYTHON_TERMINALS if self.python_literals else JSON_TERMINALS)
        parts.append("WS: /\\s+/\n%ignore WS")
        return "\n\n".join(parts) + "\n"


def _seq(*items: str) -> str:
    return " ".join(item for item in items if item)


def _allowed_names(tools: list[dict[str, Any]] | None, tool_choice: Any) -> list[str] | None:
    """Names a call may use; None for any name (no tools given, as the runtime reads an empty list)."""
    if isinstance(tool_choice, dict):
        chosen = (tool_choice.get("function") or {}).get("name")
        if isinstance(chosen, str) and chosen:
            return [chosen]
    names: list[str] = []
    for tool in tools or []:
        function = tool.get("function", tool) if isinstance(tool, dict) else {}
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and name and name not in names:
            names.append(name)
    return names or None


def _calls_enabled(analysis: Analysis, tool_choice: Any) -> bool:
    t = analysis.tools
    return t.supported and t.format in ("json", "tag_json", "tag_tagged") and tool_choice != "none"


def _section_opener(analysis: Analysis) -> Marker:
    """The marker that starts the tool-call section: the section start, else the first call's."""
    t = analysis.tools
    for text in (t.section_start, t.call_start if not t.array else ""):
        if Marker(text).present:
            return Marker(text)
    if t.format != "json":
        return Marker(t.name_start)
    return Marker("")


def _stop_markers(analysis: Analysis) -> list[Marker]:
    seen, markers = set(), []
    for stop in analysis.stop:
        marker = Marker(stop)
        if marker.present and marker.pieces not in seen:
            seen.add(marker.pieces)
            markers.append(marker)
    return markers


def generate_lark(analysis: Analysis, tools: list[dict[str, Any]] | None = None,
                  thinking: bool | None = None, parallel_tool_calls: bool = True,
                  tool_choice: Any = "auto") -> str:
    """Lark grammar (LALR, contextual lexer) of the output language `analysis` describes.

    `tools` restricts tool names to the given tools (None or empty: any name); `thinking`
    selects the thinking mode as in `Analysis.thinking_enabled`; `tool_choice` is the OpenAI
    request field: "none" leaves calls out, "required" makes one necessary, a named function
    is the only name allowed.
    """
    g = _Grammar()
    r, c, t = analysis.reasoning, analysis.content, analysis.tools
    calls = _calls_enabled(analysis, tool_choice)
    g.json_needed = calls and t.format in ("json", "tag_json")
    names = _allowed_names(tools, tool_choice)
    reasoning_case = _reasoning_case(analysis, thinking)
    stops = _stop_markers(analysis)
    end = "END_OF_TURN*" if stops else ""

    g.header += [
        "// Output language of a chat model, generated by autoparser from its chat template.",
        '// Load with: Lark(grammar, parser="lalr", lexer="contextual")',
        f"// reasoning: {r.mode}{' (output starts inside reasoning)' if reasoning_case == 'forced' else ''}"
        f"; content: {c.mode}; tool calls: {t.format if calls else 'none'}",
    ]
    if names is not None and calls:
        g.header.append("// tools: " + " ".join(", ".join(names).split()))

    opener = _section_opener(analysis) if calls else Marker("")
    bare_json = calls and not opener.present  # calls are bare JSON: the body is either content or calls
    opened = t.opened_by_prompt and t.supported and t.format in ("json", "tag_json", "tag_tagged")
    recipient = Marker(c.start) if opened else Marker("")
    if opened:
        bare_json = False
        reasoning_case = "none"  # the output starts inside a call header, after any reasoning
    calls_then_text = _calls_then_text(g, analysis, "auto" if opened else tool_choice,
                                       parallel_tool_calls) if calls else ""
    if bare_json:
        calls_then_text = "tool_calls" if tool_choice == "required" else ""
    if opened:
        calls_then_text = _opened_rules(g, analysis, calls, recipient, calls_then_text, end)
    else:
        _start_rules(g, analysis, reasoning_case, end, stops, calls_then_text, opener)
    opened_calls = opened and calls  # `start` has its own layout (`_opened_rules`)
    if bare_json:
        g.rule(_seq("body:", calls_then_text or "(content | tool_calls)?", end))
    elif not opened_calls:
        g.rule(_seq("body: content?", calls_then_text, end))
    if not (bare_json and tool_choice == "required"):
        _content_rules(g, analysis, reasoning_case, stops, calls, bare_json, recipient.present, names)
    if calls:
        _tool_rules(g, analysis, names, parallel_tool_calls, _grouped(analysis, bare_json))
    if stops:
        g.terminal("END_OF_TURN", " | ".join(m.definition() for m in stops))
    return g.text()


def _opened_rules(g: _Grammar, analysis: Analysis, calls: bool, recipient: Marker, calls_then_text: str,
                  end: str) -> str:
    """`start` when the generation prompt ends with the call opener (`>>>`, `<tool_call>`).

    The output starts inside a call header: the rest of a call (`opened_call`), or the recipient
    (`all`) that introduces content instead. Later calls have their opener; where the opener is
    followed by the recipient, content follows. Returns the calls part of `body`, with that
    alternative added.
    """
    t = analysis.tools
    if recipient.present:
        # the whitespace after the recipient belongs to it, as the runtime reads it (`all\n`)
        g.own_marker("RECIPIENT", Marker(recipient.text, suffix=r"\s*"))
    if not calls:
        g.rule(_seq("start:", "RECIPIENT?" if recipient.present else "", "body"))
        return calls_then_text
    # the header may also hold no call at all: then it is content
    heads = ["opened_call trailing?", "content"]
    if recipient.present:
        heads.append("RECIPIENT content?")
        opener = _seq(g.reference("CALL_START", Marker(t.call_start)), g.reference("NAME_START", Marker(t.name_start)))
        if opener and calls_then_text.endswith("*"):
            # `>>>all` + text after calls: content again
            calls_then_text = f"({calls_then_text[:-1]} | {opener} RECIPIENT trailing?)*"
    g.rule(_seq("start:", "(" + " | ".join(heads) + ")", "body_rest"))
    g.rule(_seq("body_rest:", calls_then_text, end) if _seq(calls_then_text, end) else "body_rest:")
    if t.format == "json":
        g.rule(_seq("opened_call: call_object", g.reference("CALL_END", Marker(t.call_end))))
    return calls_then_text


def _grouped(analysis: Analysis, bare_json: bool) -> bool:
    """Whether calls come in a group (`tool_calls`: a section, a JSON array, bare JSON objects)."""
    t = analysis.tools
    return bare_json or (t.format == "json" and t.array) or Marker(t.section_start).present


def _calls_then_text(g: _Grammar, analysis: Analysis, tool_choice: Any, parallel: bool) -> str:
    """Calls (or call groups), each possibly followed by text: the lenient policy keeps text
    between and after calls as content. Several only when `parallel`, one at least when required."""
    t = analysis.tools
    if _grouped(analysis, False):
        unit = "tool_calls trailing?"
    else:
        separator = g.reference("CALL_SEPARATOR", Marker(t.call_separator)) if parallel else ""
        section_end = g.reference("SECTION_END", Marker(t.section_end))
        unit = _seq("tool_call", separator + "?" if separator else "", section_end + "?" if section_end else "",
                    "trailing?")
    required = tool_choice == "required"
    repeat = ("+" if required else "*") if parallel else ("" if required else "?")
    return f"({unit}){repeat}"


def _reasoning_case(analysis: Analysis, thinking: bool | None) -> str:
    """'none', 'forced' (output starts inside reasoning) or 'optional' (a start-end block)."""
    r = analysis.reasoning
    if r.mode == "none" or not Marker(r.end).present:
        return "none"
    if analysis.thinking_enabled(thinking) and (r.forced_open or not Marker(r.start).present):
        return "forced"
    if not Marker(r.start).present:
        return "none"
    return "optional"


def _start_rules(g: _Grammar, analysis: Analysis, case: str, end: str, stops: list[Marker],
                 calls_then_text: str, opener: Marker) -> None:
    """`start`: reasoning (per `case`) then the body.

    Reasoning without its end marker runs to the end of the output, or to a tool-call section
    when no end marker follows anywhere: then the calls come right after the reasoning.
    """
    r = analysis.reasoning
    if case == "none":
        g.rule("start: body")
        return
    start, finish = Marker(r.start), Marker(r.end)
    if any(stop.pieces == finish.pieces for stop in stops):
        end = ""  # the marker that ends reasoning also ends turns: after reasoning it ends reasoning
    unclosed = _seq(calls_then_text if opener.present else "", end)
    rest = f"(REASONING_END body | {unclosed})" if unclosed else "(REASONING_END body)?"
    if case == "forced":
        repeated_start = "REASONING_START?" if start.present else ""
        g.rule(_seq("start:", repeated_start, "reasoning?", rest))
    else:
        g.rule(_seq("start: REASONING_START reasoning?", rest, "| body"))
    g.rule("reasoning: REASONING_TEXT")
    g.own_marker("REASONING_START", start)
    g.own_marker("REASONING_END", finish)
    not_at_start = [start] if case == "forced" else []
    text = _text_regex([finish, *stops], not_at_start=not_at_start,
                       unless_later=(opener, finish) if calls_then_text and opener.present else None)
    g.terminal("REASONING_TEXT", text, TEXT_PRIORITY)


def _content_rules(g: _Grammar, analysis: Analysis, reasoning_case: str, stops: list[Marker],
                   calls: bool, bare_json: bool, recipient: bool = False,
                   names: list[str] | None = None) -> None:
    """`content`: free text, or text wrapped in the content markers; `trailing`: text after a call.

    Text stops before every marker that may follow it, and never begins with whitespace before
    such a marker: that whitespace is structural. A reasoning end marker found in content is
    text, as the runtime reads it. Text after a call may not begin with what continues the
    calls (a call opener, a separator, the section end), which is why it has its own terminal.
    """
    r, c, t = analysis.reasoning, analysis.content, analysis.tools
    wrapped = c.mode != "plain"
    # a recipient (`all`) stands only where a call's name would, not around content
    content_start = Marker(c.start) if wrapped and not recipient else Marker("")
    content_end = Marker(c.end) if wrapped else Marker("")
    stray = reasoning_case != "none"
    text = "_text" if stray else "CONTENT_TEXT"
    if stray:
        g.rule("_text: CONTENT_TEXT | REASONING_END")
    closing = " CONTENT_END?" if content_end.present else ""
    if content_start.present:
        g.rule(f"content: CONTENT_START {text}*{closing} | {text}+{closing}")
    elif content_end.present:
        g.rule(f"content: {text}+{closing} | CONTENT_END")
    else:
        g.rule(f"content: {text}+")
    trailing = calls and not bare_json
    if trailing:
        g.rule("trailing: (TRAILING_TEXT | REASONING_END)+" if stray else "trailing: TRAILING_TEXT+")
    g.own_marker("CONTENT_START", content_start)
    g.own_marker("CONTENT_END", content_end)
    followers = [*stops, content_end, Marker(r.end) if stray else Marker("")]
    if trailing:
        followers.append(_section_opener(analysis))
    leading = [Marker(r.start) if reasoning_case == "optional" else Marker(""), content_start]
    text_regex = _text_regex(followers, not_at_start=[*leading, *followers],
                             not_at_start_chars=("[" if t.array else "{") if bare_json else "",
                             not_at_start_regex=_opened_call_start(analysis, names) if calls else "")
    g.terminal("CONTENT_TEXT", text_regex, TEXT_PRIORITY)
    if trailing:
        call_opener = next((m for m in (Marker(t.call_start), Marker(t.name_start)) if m.present), Marker(""))
        continuing = [Marker(t.section_end), Marker(t.call_separator), call_opener]
        json_opener = "{" if t.format == "json" and not call_opener.present else ""
        g.terminal("TRAILING_TEXT", _text_regex(followers, not_at_start=[*followers, *continuing],
                                                not_at_start_chars=json_opener,
                                                not_at_start_regex=_bare_name_start(analysis, names)),
                   TEXT_PRIORITY)


def _opened_call_start(analysis: Analysis, names: list[str] | None) -> str:
    """When the prompt opened a call, content may not begin like that call's rest (a name, then
    what follows names): the runtime reads that as the call."""
    t = analysis.tools
    if not t.opened_by_prompt:
        return ""
    name = "(?:" + "|".join(_regex_escape(n) for n in _longest_first(names)) + ")" if names else _NAME_REGEX
    name_end = Marker(t.name_end, indexed=True)
    if t.format == "json":
        return r"\{"
    if name_end.present:
        after = name_end.pattern()
    elif t.format == "tag_json":
        after = Marker(t.args_start).pattern() if Marker(t.args_start).present else r"\{"
    else:
        after = "|".join(m.pattern() for m in (Marker(t.arg_start), Marker(t.call_end)) if m.present) or r"\Z"
    return name + r"\s*(?:" + after + ")"


def _bare_name_start(analysis: Analysis, names: list[str] | None) -> str:
    """Where calls have no marker of their own, text after a call may not begin like the next
    call (its name and name end): the runtime reads that as a call."""
    t = analysis.tools
    if t.format not in ("tag_json", "tag_tagged") or Marker(t.call_start).present or Marker(t.name_start).present:
        return ""
    name = "(?:" + "|".join(_regex_escape(n) for n in _longest_first(names)) + ")" if names else _NAME_REGEX
    name_end = Marker(t.name_end, indexed=True)
    return name + (r"\s*" + name_end.pattern() if name_end.present else "")


def _tool_rules(g: _Grammar, analysis: Analysis, names: list[str] | None, parallel: bool,
                grouped: bool) -> None:
    t = analysis.tools
    section_end = Marker(t.section_end)
    closing = g.marker("SECTION_END", section_end) + "?" if section_end.present else ""  # also when ungrouped
    if t.format == "json" and t.array:
        open_ = t.call_start.strip() or ("" if t.section_start.rstrip().endswith("[") else "[")
        close = t.call_end.strip() or ("" if t.section_end.lstrip().startswith("]") else "]")
        sep = t.call_separator.strip() or ","
        more = f" ({_punctuation(g, 'ARRAY_SEPARATOR', sep)} tool_call)*" if parallel else ""
        g.rule(_seq("tool_calls:", g.marker("SECTION_START", Marker(t.section_start)),
                    _punctuation(g, "ARRAY_OPEN", open_), "tool_call" + more,
                    _punctuation(g, "ARRAY_CLOSE", close), closing))
        g.rule("tool_call: call_object")
    else:
        separator = g.marker("CALL_SEPARATOR", Marker(t.call_separator)) if parallel else ""
        if grouped:
            more = (f" ({separator}? tool_call)*" if separator else " tool_call*") if parallel else ""
            g.rule(_seq("tool_calls:", g.marker("SECTION_START", Marker(t.section_start)),
                        "tool_call" + more, closing))
        body = {"json": "call_object", "tag_json": "tagged_call", "tag_tagged": "tagged_call"}[t.format]
        g.rule(_seq("tool_call:", g.marker("CALL_START", Marker(t.call_start)), body,
                    g.marker("CALL_END", Marker(t.call_end))))
    if t.format == "json":
        _json_call_rules(g, analysis, names)
    else:
        _tagged_call_rules(g, analysis, names)


def _punctuation(g: _Grammar, name: str, text: str) -> str:
    """The terminal for JSON punctuation around array calls ("" for none)."""
    return g.marker(name, Marker(text)) if text else ""


def _json_call_rules(g: _Grammar, analysis: Analysis, names: list[str] | None) -> None:
    """A call as one JSON object; its name, arguments and id members are told apart by key."""
    t = analysis.tools
    g.json_needed = True
    members = ["name_member", "arguments_member"]
    if t.id_field:
        members.append("id_member")
    if t.function_field:
        members.append("function_member")
    members.append("other_member")
    g.rule("call_object: _LBRACE call_member (_COMMA call_member)* _RBRACE")
    g.rule("?call_member: " + " | ".join(members))
    g.rule("name_member: NAME_KEY _COLON TOOL_NAME")
    g.rule("arguments_member: ARGUMENTS_KEY _COLON " + ("(object | STRING)" if t.args_as_string else "object"))
    g.terminal("NAME_KEY", _json_key(t.name_field), KEY_PRIORITY)
    args_fields = [t.args_field] + [k for k in ("arguments", "parameters") if k != t.args_field]
    g.terminal("ARGUMENTS_KEY", " | ".join(_json_key(k) for k in args_fields), KEY_PRIORITY)
    if t.id_field:
        g.rule("id_member: ID_KEY _COLON (STRING | NUMBER | NULL)")
        g.terminal("ID_KEY", _json_key(t.id_field), KEY_PRIORITY)
    if t.function_field:
        g.rule("function_member: FUNCTION_KEY _COLON call_object")
        g.terminal("FUNCTION_KEY", _json_key(t.function_field), KEY_PRIORITY)
    g.rule("other_member: STRING _COLON value")
    if names is None:
        g.terminal("TOOL_NAME", r'/"(?:[^"\\]|\\[\s\S])*"/')
    else:
        literals = [json.dumps(n, ensure_ascii=False) for n in _longest_first(names)]
        g.terminal("TOOL_NAME", " | ".join(_lark_string(lit) for lit in literals), KEY_PRIORITY)


def _json_key(name: str) -> str:
    return _lark_string(json.dumps(name, ensure_ascii=False))


def _longest_first(names: list[str]) -> list[str]:
    """Alternatives in the order a regex must try them: a name before any of its prefixes."""
    return sorted(names, key=lambda n: (-len(n), n))


class _Follows:
    """Look-ahead regexes for where a value ends when keys have no marker before them.

    The runtime (`autoparser.runtime.calls_tagged`) lets a weak end marker (``, ``, ``)``) end a
    value only where the call continues after it (``, days=``, ``)`` then ``]``), and a quote end
    a string only where the value ends after it; these are the same checks written as regexes.
    A strong marker (tags, special tokens) needs no check.
    """

    def __init__(self, analysis: Analysis, stops: list[Marker]) -> None:
        t = analysis.tools
        self.arg_end = Marker(t.arg_end, keyed=t.arg_end_keyed)
        self.call_end = Marker(t.call_end)
        self.separator = Marker(t.arg_separator)
        self.section_end = Marker(t.section_end)
        self.call_separator = Marker(t.call_separator)
        self.call_start = Marker(t.call_start)
        self.arg_start = Marker(t.arg_start)
        self.key_ends = [m for m in (Marker(t.arg_key_end), Marker(t.arg_key_end_json)) if m.present]
        self.name_end = Marker(split_call_index(t.name_end)[0] if split_call_index(t.name_end) else t.name_end)
        self.bare_names = t.format in ("tag_json", "tag_tagged") and not Marker(t.call_start).present \
            and not Marker(t.name_start).present
        self.stops = stops

    @staticmethod
    def _any(patterns: list[str]) -> str:
        return "(?:" + "|".join(p for p in patterns if p) + ")"

    def after(self, marker: Marker, follow: str) -> str:
        """`marker`, and when it is weak, what must follow it."""
        if not marker.present:
            return ""
        if follow and is_weak(" ".join(marker.pieces)):
            return marker.pattern() + f"(?={follow})"
        return marker.pattern()

    def ends(self) -> list[str]:
        """What ends the text: the section's end, an end of turn, the end of the output."""
        return [m.pattern() for m in (self.section_end, *self.stops) if m.present] + [r"\Z"]

    def key(self) -> str:
        return r"\s*" + _KEY_REGEX + r"\s*" + self._any([m.pattern() for m in self.key_ends])

    def name(self) -> str:
        tail = r"\s*" + self.name_end.pattern() if self.name_end.present else ""
        return r"\s*" + _NAME_REGEX + tail

    def next_argument(self) -> str:
        return r"\s*" + self.arg_start.pattern() if self.arg_start.present else self.key()

    def after_call(self) -> str:
        if not self.section_end.present:
            return ""
        options = [self.after(self.call_separator, self.name() if self.bare_names else ""),
                   self.call_start.pattern() if self.call_start.present else "", *self.ends()]
        if self.bare_names and not self.call_separator.present:
            options.append(self.name()[3:])
        return r"\s*" + self._any(options)

    def after_arg_end(self) -> str:
        options = [self.after(self.call_end, self.after_call()), *self.ends()]
        if self.separator.present:
            options.append(self.after(self.separator, self.next_argument()))
        else:
            options.append(self.next_argument()[3:] if not self.arg_start.present else self.arg_start.pattern())
        return r"\s*" + self._any(options)

    def after_value(self) -> str:
        return r"\s*" + self._any([self.after(self.arg_end, self.after_arg_end()),
                                   self.after(self.call_end, self.after_call()),
                                   self.after(self.separator, self.next_argument()), *self.ends()])

    def value_stops(self) -> list[Marker]:
        """The markers that end a raw value (text), each with its check as a look-ahead suffix."""
        stops = [self._checked(self.arg_end, self.after_arg_end()),
                 self._checked(self.call_end, self.after_call())]
        if not self.arg_end.present:
            stops.append(self._checked(self.separator, self.next_argument()))
        return [m for m in stops if m.present] + self.stops

    def _checked(self, marker: Marker, follow: str) -> Marker:
        if marker.present and follow and is_weak(" ".join(marker.pieces)):
            return Marker(marker.text, keyed=marker.keyed, suffix=f"(?={follow})")
        return marker

    def quoted_string(self) -> str:
        """A quoted literal string at a value's place: a quote ends it only where the value ends."""
        follow = self.after_value()
        bodies = [f"{q}(?:[^{q}\\\\]|\\\\[\\s\\S]|{q}(?!{follow}))*{q}(?={follow})" for q in ("'", r"\x22")]
        return "/" + "|".join(bodies) + "/"


def _tagged_call_rules(g: _Grammar, analysis: Analysis, names: list[str] | None) -> None:
    """``[id] name_start NAME name_end [id] ARGS``: ARGS is a JSON object or tagged arguments."""
    t = analysis.tools
    name_start, name_end = Marker(t.name_start), Marker(t.name_end, indexed=True)
    args_start, args_end = Marker(t.args_start), Marker(t.args_end)
    arg_start, arg_key_end = Marker(t.arg_start), Marker(t.arg_key_end)
    arg_end = Marker(t.arg_end, keyed=t.arg_end_keyed)
    call_id = _call_id_rule(g, analysis)
    head = [g.marker("NAME_START", name_start), "TOOL_NAME", g.marker("NAME_END", name_end)]
    head = [call_id, *head] if t.id_before_name else [*head, call_id]
    if t.opened_by_prompt:
        # the prompt wrote the opener: the output's first call starts with its name
        opened_head = [item for item in head if item not in ("NAME_START", "CALL_START")]
        call_end = g.reference("CALL_END", Marker(t.call_end))
    if t.format == "tag_json":
        g.json_needed = True
        args = [g.marker("ARGS_START", args_start), "object", g.marker("ARGS_END", args_end)]
        g.rule(_seq("tagged_call:", *head, *args))
        if t.opened_by_prompt:
            g.rule(_seq("opened_call:", *opened_head, *args, call_end))
        after_name = [args_start]
        name_forbid = "{"
    else:
        bare_keys = not arg_start.present
        literal = t.arg_python or not t.arg_string_raw
        follows = _Follows(analysis, _stop_markers(analysis))
        if literal:
            g.json_needed = True
            g.python_literals = True
        separator = g.marker("ARG_SEPARATOR", Marker(t.arg_separator))
        arguments = f"(argument ({separator}? argument)*)?" if separator else "argument*"
        g.rule(_seq("tagged_call:", *head, arguments))
        if t.opened_by_prompt:
            g.rule(_seq("opened_call:", *opened_head, arguments, call_end))
        json_key_end = Marker(t.arg_key_end_json)
        opening = g.marker("ARG_START", arg_start)
        key_end = plain_key_end = g.marker("ARG_KEY_END", arg_key_end)
        if json_key_end.present:  # the marker after the key says whether the value is a string or JSON
            json_key_end_ref = g.marker("ARG_KEY_END_JSON", json_key_end)
            key_end = f"({key_end} | {json_key_end_ref})"
        closing = g.marker("ARG_END", arg_end)
        if closing and (bare_keys or literal):
            closing += "?"  # the end marker may be left out before the call's end
        if literal:
            g.rule(_seq("argument:", opening, "ARG_KEY", key_end, "arg_value", closing))
            g.rule("?arg_value: ARG_STRING | object | array | NUMBER | TRUE | FALSE | NULL")
            g.terminal("ARG_STRING", follows.quoted_string())
        elif json_key_end.present:
            # the marker after the key tells a string, which runs to its end marker, from a JSON
            # value, which ends at the separator or the call's end (`days:3,location:<|"|>…<|"|>`)
            string_arg = _seq(opening, "ARG_KEY", plain_key_end, "ARG_VALUE?", closing)
            json_arg = _seq(opening, "ARG_KEY", json_key_end_ref, "ARG_JSON_VALUE?",
                            closing + ("" if closing.endswith("?") or not closing else "?"))
            g.rule(f"argument: {string_arg} | {json_arg}")
        else:
            g.rule(_seq("argument:", opening, "ARG_KEY", key_end, "ARG_VALUE?", closing))
        key_stops = [m for m in (arg_key_end, json_key_end) if m.present]
        if bare_keys:
            g.terminal("ARG_KEY", "/" + _KEY_REGEX + "/", TEXT_PRIORITY)
        else:
            g.terminal("ARG_KEY", _text_regex(key_stops, forbid_chars=r"\n"), TEXT_PRIORITY)
        if not literal:
            if bare_keys:
                value_stops = follows.value_stops()
            elif arg_end.present:
                value_stops = [arg_end]
            else:
                value_stops = [Marker(t.arg_separator), arg_start, Marker(t.call_end)]
            if json_key_end.present:
                # a JSON value here is a number, boolean or null in practice: it ends at the separator
                json_stops = [m for m in (arg_end, Marker(t.arg_separator), arg_start, Marker(t.call_end))
                              if m.present]
                g.terminal("ARG_JSON_VALUE", _text_regex(json_stops), TEXT_PRIORITY)
                if arg_end.present:
                    value_stops = [arg_end]
            g.terminal("ARG_VALUE", _text_regex(value_stops), TEXT_PRIORITY)
        after_name = [arg_start, Marker(t.call_end)]
        name_forbid = ""
    if names is None:
        if name_end.present:
            stops = [name_end]
        else:
            stops = [*after_name, Marker(t.id_start if not t.id_before_name else "")]
        g.terminal("TOOL_NAME", _text_regex(stops, forbid_chars=r"\s" + re.escape(name_forbid)), TEXT_PRIORITY)
    else:
        g.terminal("TOOL_NAME", " | ".join(_lark_string(n) for n in _longest_first(names)))


def _call_id_rule(g: _Grammar, analysis: Analysis) -> str:
    """The call id part of a tagged call, "" when the format carries none.

    With an opening marker the id is optional; without one it is required, because only the
    closing marker tells the id from the name that follows or precedes it.
    """
    t = analysis.tools
    id_start, id_end = Marker(t.id_start), Marker(t.id_end)
    if not id_end.present:
        return ""
    opening, closing = g.marker("ID_START", id_start), g.marker("ID_END", id_end)
    g.terminal("CALL_ID", _text_regex([id_end], forbid_chars=r"\s"), TEXT_PRIORITY)
    if opening:
        return f"({opening} CALL_ID {closing})?"
    return f"CALL_ID {closing}"


# -- parsing --------------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def lark_parser(grammar: str):  # type: ignore[no-untyped-def]
    """A compiled Lark parser for `grammar` (cached: building the LALR tables costs milliseconds)."""
    from lark import Lark

    return Lark(grammar, parser="lalr", lexer="contextual", maybe_placeholders=False, propagate_positions=True)


def parse_with_lark(analysis: Analysis, text: str, tools: list[dict[str, Any]] | None = None,
                    thinking: bool | None = None, parallel_tool_calls: bool = True,
                    tool_choice: Any = "auto") -> dict[str, Any]:
    """Parse model output with the Lark grammar and build the OpenAI assistant message.

    Raises `lark.exceptions.UnexpectedInput` when `text` is not in the grammar's language.
    Reasoning and content are returned with surrounding whitespace removed, None when empty.
    """
    message = _read_by_language(analysis, text, tools, thinking, parallel_tool_calls, tool_choice)
    if message is not None:
        return message
    grammar = generate_lark(analysis, tools=tools, thinking=thinking, parallel_tool_calls=parallel_tool_calls,
                            tool_choice=tool_choice)
    tree = lark_parser(grammar).parse(text)
    builder = _MessageBuilder(analysis, _schemas(tools), text)
    builder.visit(tree)
    return builder.message()


def _read_by_language(analysis: Analysis, text: str, tools: list[dict[str, Any]] | None,
                      thinking: bool | None, parallel_tool_calls: bool, tool_choice: Any) -> dict[str, Any] | None:
    """The message read with the request's output language (`build_language`, written by
    `lark_ir.write_lark`); None where that language does not hold `text` or the request: no
    tools (any name is a call), a named tool that is not given, text the runtime reads but
    generation does not write (content after the calls, or around prompt-opened calls)."""
    from lark.exceptions import UnexpectedInput

    if not tools or analysis.tools.opened_by_prompt:
        # a prompt-opened call: the language has content or calls, the runtime reads both in turn
        return None
    opener = analysis.reasoning.start.strip()
    if opener and text.lstrip().startswith(opener) and start_state(analysis.to_dict(), thinking, None)[0] == OPEN:
        return None  # reasoning the prompt opened, opened once more: the runtime reads the marker, the language text
    request = Request(tools=tuple(tools), tool_choice=tool_choice, thinking=thinking,
                      parallel_tool_calls=parallel_tool_calls, lazy=False,
                      end_tokens=(analysis.eos_token,) if analysis.eos_token else ())
    try:
        written = write_lark(build_language(analysis.to_dict(), request), end_of_turn=tuple(analysis.stop))
    except ValueError:
        return None
    try:
        return read_message(written, text, lambda owner, key, raw, node: _raw_argument(analysis, raw, node))
    except UnexpectedInput:
        return None


def _raw_argument(analysis: Analysis, raw: str, node: Any) -> Any:
    """A tagged argument's value from its text, read as the runtime reads it."""
    schema = getattr(node, "schema", None)
    if isinstance(node, ir.PyValue):
        kind, text = value_kind(schema), raw.strip()
        if kind != "json" and len(text) > 1 and text[0] in "'\"" and text[-1] == text[0]:
            return decode_string_body(text[1:-1])  # a quoted string is its decoded text
        return json.loads(convert_literal_value(raw, kind, schema))
    if isinstance(node, ir.Json):
        return json.loads(convert_tagged_value(raw, "json", schema))
    return _tagged_value(_without_cdata(raw), schema, analysis.tools.arg_string_raw)


def _schemas(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
    """Each tool's parameter properties by tool name, None when tools were not given."""
    if tools is None:
        return None
    schemas: dict[str, dict[str, Any]] = {}
    for tool in tools:
        function = tool.get("function", tool)
        parameters = function.get("parameters") or {}
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        schemas[function.get("name", "")] = properties if isinstance(properties, dict) else {}
    return schemas


def _json_of(node: Any) -> Any:
    """The Python value of a JSON subtree or token."""
    from lark import Token, Tree

    if isinstance(node, Token):
        if node.type in ("STRING", "NUMBER", "TRUE", "FALSE", "NULL", "TOOL_NAME"):
            return json.loads(str(node), strict=False)
        return str(node)
    assert isinstance(node, Tree)
    if node.data == "object":
        return {_json_of(pair.children[0]): _json_of(pair.children[1]) for pair in node.children}
    if node.data == "array":
        return [_json_of(child) for child in node.children]
    raise ValueError(f"not a JSON node: {node.data}")


class _MessageBuilder:
    """Walks a parse tree in output order and collects the message's parts."""

    def __init__(self, analysis: Analysis, schemas: dict[str, dict[str, Any]] | None, text: str = "") -> None:
        self.analysis = analysis
        self.schemas = schemas
        self.text = text
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.calls: list[dict[str, Any]] = []

    def visit(self, tree: Any) -> None:
        from lark import Tree

        for child in tree.children:
            if not isinstance(child, Tree):
                continue
            if child.data == "reasoning":
                self.reasoning.append(str(child.children[0]))
            elif child.data in ("content", "trailing"):
                # a reasoning end marker inside the answer is text, as the runtime reads it; one
                # before anything else closes an empty reasoning block
                for tok in child.children:
                    if tok.type == "REASONING_END" and not (self.reasoning or self.content or self.calls):
                        continue
                    if tok.type in ("CONTENT_TEXT", "TRAILING_TEXT", "REASONING_END"):
                        self.content.append(str(tok))
            elif child.data == "tool_call":
                self.calls.append(self._call(child))
            elif child.data == "opened_call":
                self.calls.append(self._call(child, opened=True))
            else:
                self.visit(child)

    def _call(self, tree: Any, opened: bool = False) -> dict[str, Any]:
        from lark import Tree

        body = next(child for child in tree.children if isinstance(child, Tree))
        if opened and body.data != "call_object":
            body = tree  # the rest of a tagged call: its name and arguments are the tree's own
        if body.data == "call_object":
            name, arguments, call_id = self._json_call(body)
        else:
            name, arguments, call_id = self._tagged_call(body)
        return {"id": call_id or f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}

    def _json_call(self, tree: Any) -> tuple[str, Any, str | None]:
        name, arguments, call_id = "", {}, None
        for member in tree.children:
            value = member.children[-1]
            if member.data == "name_member":
                name = _json_of(value)
            elif member.data == "arguments_member":
                arguments = _json_of(value)
                if isinstance(arguments, str):
                    arguments = json.loads(arguments, strict=False)
            elif member.data == "id_member":
                found = _json_of(value)
                call_id = str(found) if found is not None else None
            elif member.data == "function_member":
                inner_name, inner_args, inner_id = self._json_call(value)
                name, arguments, call_id = inner_name or name, inner_args or arguments, inner_id or call_id
        return name, arguments, call_id

    def _tagged_call(self, tree: Any) -> tuple[str, Any, str | None]:
        from lark import Token

        name, call_id, arguments = "", None, {}
        for child in tree.children:
            if isinstance(child, Token):
                if child.type == "TOOL_NAME":
                    name = str(child).strip()
                elif child.type == "CALL_ID":
                    call_id = str(child)
            elif child.data == "object":
                arguments = _json_of(child)
            elif child.data == "argument":
                key, value = self._argument(name, child)
                arguments[key] = value
        return name, arguments, call_id

    def _argument(self, tool: str, tree: Any) -> tuple[str, Any]:
        from lark import Token

        t = self.analysis.tools
        key, raw, key_end, json_value, literal = "", "", t.arg_key_end, False, None
        for child in tree.children:
            if not isinstance(child, Token):
                literal = child
            elif child.type == "ARG_KEY":
                key = str(child).strip()
            elif child.type in ("ARG_VALUE", "ARG_JSON_VALUE"):
                raw = str(child)
            elif child.type == "ARG_KEY_END_JSON":
                key_end, json_value = t.arg_key_end_json, True
            elif child.type in ("ARG_STRING", "NUMBER", "TRUE", "FALSE", "NULL"):
                literal = child
        if t.arg_python or not t.arg_string_raw:
            return key, self._literal_argument(tool, key, literal, json_value)
        raw = _trim_once(raw, Marker(key_end).trailing_ws, Marker(t.arg_end).leading_ws)
        if Marker(t.arg_key_end_json).present:  # the key's end marker told the value's kind
            schema = {"type": "object" if json_value else "string"}
        else:
            schema = None if self.schemas is None else self.schemas.get(tool, {}).get(key)
        return key, _tagged_value(_without_cdata(raw), schema, t.arg_string_raw)

    def _literal_argument(self, tool: str, key: str, node: Any, json_value: bool) -> Any:
        """A value written as a literal, read as the runtime reads it: a quoted string is its
        decoded text, anything else is converted by the runtime's own function."""
        from lark import Token

        schema = None if self.schemas is None else self.schemas.get(tool, {}).get(key)
        kind = "json" if json_value else value_kind(schema)
        if isinstance(node, Token) and node.type == "ARG_STRING" and kind != "json":
            return decode_string_body(str(node)[1:-1])
        if isinstance(node, Token):
            raw = str(node)
        else:
            raw = self.text[node.meta.start_pos:node.meta.end_pos]
        return json.loads(convert_literal_value(raw, kind, schema))

    def message(self) -> dict[str, Any]:
        reasoning = "".join(self.reasoning).strip() or None
        content = "".join(self.content).strip() or None
        return {"role": "assistant", "reasoning_content": reasoning, "content": content,
                "tool_calls": self.calls}


def _without_cdata(value: str) -> str:
    """A raw value wrapped in an XML CDATA section, as the runtime reads it: the section's text."""
    opening, closing = "<![CDATA[", "]]>"
    if value.startswith(opening) and closing in value:
        inner, _, rest = value[len(opening):].partition(closing)
        return inner + rest
    return value


def _trim_once(value: str, leading: str, trailing: str) -> str:
    """Remove the whitespace the markers around a raw value carry, once, if it is there."""
    if leading and value.startswith(leading):
        value = value[len(leading):]
    if trailing and value.endswith(trailing):
        value = value[: len(value) - len(trailing)]
    return value


def _schema_types(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    types = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key) or []:
            types |= _schema_types(option)
    if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
        types.add("string")
    return types


def _tagged_value(raw: str, schema: Any, string_raw: bool) -> Any:
    """Convert a tagged argument's text: strings stay strings, other types are parsed as JSON.

    Without a schema (no tools given, or an unknown key) the text is JSON when it parses as
    JSON and a string otherwise. For a parameter whose schema is not a string, text that is
    not JSON is tried as a Python literal, because Jinja prints values the Python way
    (``True``, ``None``, ``{'a': 1}``) when a template writes ``{{ value }}``.
    """
    types = _schema_types(schema)
    if string_raw and "string" in types:
        return raw
    text = raw.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    if types:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return raw
        if _is_json_value(value):
            return value
    return raw


def _is_json_value(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list | tuple):
        return all(_is_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v) for k, v in value.items())
    return False
