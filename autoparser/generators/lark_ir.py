"""The output language (`language.ir`) written as a Lark grammar, and read back into a message.

`write_lark` gives Lark text for the Earley parser with the dynamic lexer: free text is one
terminal up to the first marker that ends it, as the parser reads it (Earley takes its longest
match at once, so long texts cost one regular-expression scan); markers match the whitespace the
parser skips around them. JSON and Python-literal values are read by small generic grammars
(the schema constrains generation, not reading). `read_message` walks the parse tree by the IR's
capture roles: reasoning and content texts, and per call its name, id and arguments, tagged
arguments by member.
"""

from __future__ import annotations

import gc
import json
import re
from dataclasses import dataclass, field
from typing import Any

from autoparser.caching import BoundedCache
from autoparser.language import ir
from autoparser.language.jsonscan import DEEPEST_DECODED, nesting_depth
from autoparser.language.mapper import member_json
from autoparser.language.message import Output, new_call_id
from autoparser.language.request import is_weak

VALUE_RULES = r"""
_json: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" _jws (pair (_jws "," _jws pair)* _jws)? "}"
pair: STRING _jws ":" _jws _json
array: "[" _jws (_json (_jws "," _jws _json)* _jws)? "]"
_jws: JWS?
_space: /[ \t\n\r]/
JWS: /[ \t\n\r]+/
STRING: /"(?:[^"\\]|\\[\s\S])*"/
NUMBER: /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/
"""


_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "/": "\\/", '"': "\\x22"}


def literal_rules(spelling: ir.Spelling, name: str) -> str:
    """Lark rules `name` for a value written as a literal of `spelling`, as the parser reads one
    (`language.terminals._PyValue`): a quoted string (and one holding a quote the value does not
    end at), a nested value from an opening to a closing bracket with quoted text whole, a number
    or a constant's word, JSON's spelling of these beside it."""
    escape = _regex_escape(spelling.escape)
    upper = name.lstrip("_").upper()
    strings, loose, chunks = [], [], []
    for i, quote in enumerate(spelling.quotes):
        q = _regex_escape(quote)
        char = f"(?:[^{q}{escape}]|{escape}[\\s\\S])" if escape else f"[^{q}]"
        strings.append(f"{q}{char}*{q}")
        loose.append(f"/{q}/ (_{upper}_CHUNK{i} | /{q}/)* /{q}/")
        chunks.append(f"_{upper}_CHUNK{i}: /{char}+/")
    words = "|".join(dict.fromkeys(_regex_escape(w) for w in ("true", "false", "null", spelling.true,
                                                               spelling.false, spelling.null) if w))
    others = _regex_escape(spelling.quotes + spelling.opens + spelling.closes)
    string = f"{upper}_STRING"
    json_string = "" if '"' in spelling.quotes else " | STRING"
    rules = [f"{name}: {name}_nested | {string} | {name}_loose{json_string} | NUMBER | /{words}/",
             f"{string}: /{'|'.join(strings)}/" if strings else f"{string}: /(?!)/",
             f"{name}_loose: {' | '.join(loose) or '/(?!)/'}", *chunks,
             f"{name}_nested: /[{_regex_escape(spelling.opens)}]/ ({name}_nested | {string} | /[^{others}]+/)* "
             f"/[{_regex_escape(spelling.closes)}]/"]
    return "\n".join(rules) + "\n"


def _regex_escape(text: str) -> str:
    """Text as a regex inside a Lark `/.../` literal. Lark unescapes `\\xNN` before `re` reads
    the pattern, so punctuation is escaped with a backslash and only a quote (which Lark's
    unescaping mishandles) as hex."""
    return "".join(_CONTROL.get(c) or (c if c.isalnum() or c == "_" or ord(c) > 127 else "\\" + c)
                   for c in text)


@dataclass
class _Writer:
    rules: dict[str, str] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)  # capture rule -> role
    values: dict[str, ir.Node] = field(default_factory=dict)  # argument value rule -> its node
    members: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # member rule -> (owner, key)
    priorities: dict[str, int] = field(default_factory=dict)  # rule -> its Earley priority
    terminals: dict[str, str] = field(default_factory=dict)  # pattern -> name
    spellings: dict[ir.Spelling, str] = field(default_factory=dict)  # literal spelling -> its value rule
    _names: dict[int, str] = field(default_factory=dict)
    _keep: list[ir.Node] = field(default_factory=list)

    def new(self, prefix: str, body: str) -> str:
        name = f"{prefix}_{len(self.rules)}"
        self.rules[name] = body
        return name

    def write(self, node: ir.Node) -> str:  # noqa: C901 - one case per node kind
        """A node as one symbol or a sequence of symbols. Alternatives and optional parts get
        rules of their own (`_` rules: spliced into the parse tree): Lark expands a group inside a
        rule into alternatives of that rule, which doubles with every optional part."""
        if isinstance(node, ir.Lit):
            if node.exact:
                return self.terminal(f"/{_regex_escape(node.text)}/")
            return self.literal(node.text, node.bounded, node.not_before)
        if isinstance(node, ir.Chars):
            hi = "" if node.max is None else str(node.max)
            allowed = node.allowed.replace("/", "\\/")  # a slash would end Lark's regex literal
            rx = f"/{_not_excluded(node.excluded, allowed)}[{allowed}]{{{max(node.min, 1)},{hi}}}/"
            return rx if node.min else self.optional(rx)
        if isinstance(node, ir.Text):
            return self.text(node)
        if isinstance(node, ir.Seq):
            return " ".join(p for p in (self.write(i) for i in node.items) if p)
        if isinstance(node, ir.Choice):
            return self.shared(node, lambda: self.new("_alt", " | ".join(self.write(o) or "_empty"
                                                                          for o in node.options)))
        if isinstance(node, ir.Repeat):
            return self.repeat(node)
        if isinstance(node, ir.Gap):
            return self.gap(node.max)
        if isinstance(node, ir.Json):
            return "STRING" if node.kind == "string" else "_json"
        if isinstance(node, ir.PyValue):
            return self.spellings.setdefault(node.spelling, f"_py{len(self.spellings) or ''}")
        if isinstance(node, ir.RawString):
            return self.write(node.text)
        if isinstance(node, ir.Bracketed):
            return self.bracketed(node.quote)
        if isinstance(node, ir.Members):
            return self.shared(node, lambda: self.members_of(node))
        if isinstance(node, ir.Capture):
            name = self.shared(node, lambda: self.new(f"cap_{node.role}", self.write(node.body) or "_empty"))
            self.roles[name] = node.role
            if node.role in (ir.TOOL_NAME, ir.REASONING):
                # where a text could be read as content or as a call (a bare JSON object), the
                # parser reads the call, and reasoning where the markers imply it: the reading
                # with more calls and reasoning wins
                self.priorities[name] = 2
            return name
        if isinstance(node, ir.Rule):
            name = self.shared(node, lambda: self.new("r", self.write(node.body) or "_empty"))
            if node.kind in (ir.NEXT_CALL, ir.MARKUP):
                self.priorities[name] = 1  # a separator between calls, or a marker, as markup, not as content
            elif node.kind == ir.AS_TEXT:
                # markers read as text where the reading of them as structure broke: ranked below
                # the reading of them as a call (whose text this one captures as reasoning twice)
                self.priorities[name] = -4
            return name
        raise TypeError(f"no Lark form for {type(node).__name__}")

    def bracketed(self, quote: str) -> str:
        """An object or array in the template's own syntax: brackets nested, quoted text whole."""
        q = _regex_escape(quote)
        name = "_nested_" + "_".join(str(ord(c)) for c in quote)  # one rule per quote marker
        if name not in self.rules:
            self.rules[name] = ""
            quoted = self.terminal(f"/{q}(?:(?!{q})[\\s\\S])*{q}/")
            other = self.terminal(f"/(?:(?!{q})[^\\[\\]{{}}])+/")
            inner = f"({name} | {quoted} | {other})*"
            opens, closes = (self.terminal(p) for p in ("/\\{/", "/\\[/")), (self.terminal(p) for p in ("/\\}/", "/\\]/"))
            self.rules[name] = " | ".join(f"{o} {inner} {c}" for o, c in zip(opens, closes, strict=True))
        return name

    def literal(self, text: str, bounded: bool = False, not_before: str = "") -> str:
        """A marker as the parser finds it: whitespace inside it any whitespace, whitespace
        around it optional (the parser skips whitespace between structural parts, and takes
        it once from a raw value next to the marker); `bounded`: not before a word character
        where it ends in one; `not_before`: not before that marker (`ir.Lit`)."""
        if not text.strip():
            return self.optional(self.terminal(f"/{_regex_escape(text)}/")) if text else ""
        return self.terminal(f"/{_marker_regex(text)}{_word_end(text, bounded)}{_not_before(not_before)}/")

    def optional(self, body: str) -> str:
        return self.new("_opt", f"({body})?") if body else ""

    def gap(self, most: int) -> str:
        if not most:
            return ""
        name = f"_gap{most}"
        if name not in self.rules:
            self.rules[name] = f"(_space {self.gap(most - 1)})?"
        return name

    def repeat(self, node: ir.Repeat) -> str:
        body = self.write(node.item)
        if not body:
            return ""
        if (node.min, node.max) == (0, 1):
            return self.optional(body)
        if node.max is None:
            return self.new("_rep", " ".join([f"({body})"] * node.min + [f"({body})*"]))
        return " ".join([body] * node.min + [self.optional(body)] * (node.max - node.min))

    def shared(self, node: ir.Node, make: Any) -> str:
        """One rule per node object (nodes are shared in the IR; writing them once keeps the
        grammar small)."""
        name = self._names.get(id(node))
        if name is None:
            self._keep.append(node)
            name = self._names[id(node)] = make()
        return name

    def text(self, node: ir.Text) -> str:
        """Free text as one terminal, which the dynamic lexer reads at once (its longest match):
        up to the first marker that ends it, or, where the marker that follows begins with
        whitespace (`\n</parameter>`), up to that whitespace, which the marker takes once.
        A weak marker (`)`, `, `: punctuation values also hold) may also be text: there the
        parse decides, as the parser decides by what follows the marker."""
        strong, weak_pattern, weak = _text_stops(node)
        excluded = strong + ([weak_pattern] if weak_pattern else [])
        guard = f"(?!{'|'.join(excluded)})" if excluded else ""
        firsts = [_regex_escape(m.strip()) + _word_end(m, node.bounded) for m in node.not_first if m.strip()]
        first = f"(?!\\s*(?:{'|'.join(firsts)}))" if firsts else ""
        lead = node.end[: len(node.end) - len(node.end.lstrip())] if node.end and node.end.strip() else ""
        run = f"(?:{guard}[\\s\\S])+"
        if node.weak is not None and node.weak.leads:  # its first character may begin the weak marker
            lead_guard = f"(?!{'|'.join(strong)})" if strong else ""
            run = f"{lead_guard}[\\s\\S](?:{guard}[\\s\\S])*"
        if weak:
            marks = [self.terminal(f"/{_regex_escape(w)}/") for w in weak]
            rest = self.new("_text", f"({' | '.join([self.terminal(f'/{run}/'), *marks])})*")
            text = self.new("_text", f"({' | '.join([self.terminal(f'/{first}{run}/'), *marks])}) {rest}")
        elif lead:
            ahead = "|".join([f"(?:{_regex_escape(lead)})?{_regex_escape(node.end.strip())}", *excluded, r"\Z"])
            text = self.terminal(f"/{first}{run}?(?={ahead})/")
        else:
            text = self.terminal(f"/{first}{run}/")
        if node.nonempty:
            return text
        if node.weak is not None and node.weak.indent is not None:
            # a value that ends at a line break takes the rest of its line, as the parser reads
            # it, not none of it where text could follow (its last line, the end of the output)
            text = self.new("_line", text)
            self.priorities[text] = 1
        return self.optional(text)

    def terminal(self, pattern: str) -> str:
        """A named terminal per pattern (Earley reads a named terminal as one token kind)."""
        name = self.terminals.setdefault(pattern, f"T{len(self.terminals)}")
        return name

    def members_of(self, node: ir.Members) -> str:
        """Members in order, the required ones present, a separator between two present ones."""
        sep = self.separator(node.separator)
        items = []
        for member, required in node.items:
            key = member.key if isinstance(member, ir.Rule) else None
            items.append((self.member(node.owner, member, key), required))
        if node.extra is not None:
            extra = self.member(node.owner, node.extra, None)
            if node.any_order:
                items.append((extra, False))
            else:
                items.append((f"{extra} ({sep} {extra})*".strip(), False))
        if node.any_order:
            one = self.new("_member", " | ".join(i for i, _ in items)) if items else ""
            return self.optional(f"{one} ({sep} {one})*".strip()) if one else "_empty"

        made: dict[tuple[int, bool], str] = {}

        def rest(i: int, first: bool) -> str:
            """Members from `i` on; `first`: none was written before (a rule per case)."""
            if (i, first) in made:
                return made[(i, first)]
            name = made[(i, first)] = self.new("members", "")
            options = []
            for j in range(i, len(items)):
                lead = "" if first else sep
                options.append(f"{lead} {items[j][0]} {rest(j + 1, False)}".strip())
                if items[j][1]:
                    break
            else:
                options.append("_empty")
            self.rules[name] = " | ".join(options)
            return name

        return rest(0, True) if items else "_empty"

    def separator(self, node: ir.Node) -> str:
        """The separator between members. Where it is a soft stop (`,`), a raw value before it may
        hold it or end at it; the parser keeps the reading that ended the value where both read on
        to the end (it forks that one first), so each separator read as one ranks the parse higher:
        `days:3,hours:4` is two members, not `days` = `3,hours:4`."""
        sep = self.write(node)
        if not (sep and isinstance(node, ir.Lit) and is_weak(node.text.strip())):
            return sep
        name = f"_sep_{sep.lower()}"
        if name not in self.rules:
            self.rules[name] = sep
            self.priorities[name] = 1
        return name

    def member(self, owner: str, member: ir.Node, key: str | None) -> str:
        """One tagged argument, its value in a rule of its own (the message reads it by key)."""
        if isinstance(member, ir.Choice):  # ways of writing one argument
            return self.new("_alt", " | ".join(self.member(owner, option, key) for option in member.options))
        body = member.body if isinstance(member, ir.Rule) else member
        parts = body.items if isinstance(body, ir.Seq) else (body,)
        written = []
        raw = False
        for part in parts:
            text = self.write(part)
            if raw and isinstance(part, ir.Lit) and part.text.strip():
                # the marker after a raw value takes only its own whitespace: the rest is the value's
                text = self.terminal(f"/{_marker_regex(part.text, exact_lead=True)}/")
            raw = isinstance(part, ir.RawString | ir.Text)
            if isinstance(part, ir.Json | ir.PyValue | ir.RawString | ir.Text):
                text = self.new("val", text or "_empty")
                self.values[text] = part
            elif key is None and isinstance(part, ir.Chars):
                text = self.new("key", text)
            written.append(text)
        name = self.new("arg", " ".join(p for p in written if p) or "_empty")
        self.members[name] = (owner, key)
        return name


def _not_excluded(excluded: tuple[str, ...], allowed: str) -> str:
    """A lookahead that keeps a run of `allowed` characters from being one of `excluded`."""
    if not excluded:
        return ""
    words = "|".join(re.escape(k).replace("/", "\\/") for k in sorted(excluded))
    return f"(?!(?:{words})(?![{allowed}]))"


def _text_stops(node: ir.Text) -> tuple[list[str], str, list[str]]:
    """Where a text ends: the regexes of the markers it may not contain, the regex of its `Weak`
    marker where what follows makes it one ("": none), and the weak markers (`)`, `, `) that
    may also be part of it."""
    stops = sorted({s.strip() for s in (*node.stops, node.end or "") if s.strip()})
    strong = [s for s in stops if not (node.weak and s == node.weak.marker)]
    weak_pattern = ""
    if node.weak is not None:
        weak_pattern = _regex_escape(node.weak.marker) + node.weak.follows(_regex_escape)
    soft = [s for s in strong if is_weak(s) and s != (node.end or "").strip()]  # as `terminals._is_soft`
    return [_regex_escape(s) for s in strong], weak_pattern, soft


def _marker_regex(text: str, exact_lead: bool = False) -> str:
    """`text` as a regex: any whitespace before it and inside it, the whitespace it ends with
    as written or not at all (a raw value after it keeps the rest); `exact_lead`: the whitespace
    it begins with also only as written or not at all."""
    lead = text[: len(text) - len(text.lstrip())]
    pieces = [p for p in re.split(r"(\s+)", text.lstrip()) if p]
    out = [(f"(?:{_regex_escape(lead)})?" if lead else "") if exact_lead else r"\s*"]
    for i, piece in enumerate(pieces):
        if not piece.isspace():
            out.append(_regex_escape(piece))
        elif i < len(pieces) - 1:
            out.append(r"\s*")
        else:
            out.append(f"(?:{_regex_escape(piece)})?")
    return "".join(out)


@dataclass(frozen=True)
class LarkLanguage:
    """A language written for Lark: the grammar text, and what its rules mean in the message."""

    grammar: str
    roles: dict[str, str]
    values: dict[str, ir.Node]
    members: dict[str, tuple[str, str | None]]
    section: tuple[str, ...] = ()  # the section a raw value may be wrapped in (`ir.Language.value_section`)


def write_lark(language: ir.Language, end_of_turn: tuple[str, ...] = ()) -> LarkLanguage:
    """The Lark grammar (Earley, dynamic lexer) of `language`; the output may end with
    any of the `end_of_turn` strings (the parser stops at them, generation ends with them)."""
    root = language.root
    if isinstance(root, ir.Lazy):
        raise TypeError("a lazy language has no Lark form; build the full language (lazy=False)")
    w = _Writer()
    start = w.write(root) or "_empty"
    lines = ["// Output language of a chat model, generated by autoparser from its chat template.",
             '// Load with: Lark(grammar, parser="earley", lexer="dynamic")',
             f"start: {start}", "_empty:"]
    ends = sorted({e.strip() for e in end_of_turn if e.strip()})
    if ends:
        lines[-2] += " _end_of_turn*"
        lines.append(f"_end_of_turn: /[ \\t\\n\\r]*(?:{'|'.join(_regex_escape(e) for e in ends)})[ \\t\\n\\r]*/")
    lines += [f"{name}{f'.{w.priorities[name]}' if name in w.priorities else ''}: {body}" for name, body in w.rules.items()]
    lines += [f"{name}: {pattern}" for pattern, name in w.terminals.items()]
    grammar = "\n".join(lines) + "\n" + VALUE_RULES + "".join(literal_rules(s, n) for s, n in w.spellings.items())
    return LarkLanguage(grammar, dict(w.roles), dict(w.values), dict(w.members), language.value_section)


# An Earley parser holds about 3.7 MB for a 1 KB grammar (tracemalloc), mostly fixed cost.
_EARLEY_PARSERS = BoundedCache(max_items=64, max_bytes=256 << 20,
                               weigh=lambda grammar, parser: (4 << 20) + 2048 * len(grammar))


def earley_parser(grammar: str):  # type: ignore[no-untyped-def]
    from lark import Lark

    return _EARLEY_PARSERS.get(grammar, lambda: Lark(grammar, parser="earley", lexer="dynamic",
                                                     propagate_positions=True, ambiguity="resolve"))


def read_message(written: LarkLanguage, text: str) -> dict[str, Any]:
    """Parse `text` and build the assistant message from the captures, as the streaming reader
    builds it. Raises `lark.exceptions.UnexpectedInput` when `text` is not in the language."""
    tree = _parse_without_gc(earley_parser(written.grammar), text)
    reader = _Reader(written, text)
    reader.visit(tree)
    return reader.message()


def _parse_without_gc(parser: Any, text: str) -> Any:
    """Earley allocates a few small objects per character of the input, and the garbage
    collector would walk them all again and again while the parse runs (almost half the time on
    long outputs); what the parse leaves is collected after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return parser.parse(text)
    finally:
        if enabled:
            gc.enable()


@dataclass
class _Reader:
    """The message of one parse tree, fed to `message.Output` as the streaming reader feeds it,
    with argument values converted by the same mapper (`language.mapper`)."""

    written: LarkLanguage
    text: str
    out: Output = field(default_factory=lambda: Output(deltas=False))

    def span(self, tree: Any) -> str:
        if getattr(tree.meta, "empty", True):
            return ""
        return self.text[tree.meta.start_pos:tree.meta.end_pos]

    def visit(self, tree: Any) -> None:
        """Texts by their roles, in output order; a call is the largest part that holds one tool
        name and nothing but the call's own captures (its id or arguments may come first)."""
        from lark import Tree

        for child in tree.children:
            if not isinstance(child, Tree):
                continue
            role = self.written.roles.get(child.data)
            if role == ir.REASONING:
                self.out.add_reasoning(self.span(child))
            elif role == ir.CONTENT:
                self.out.add_content(self.span(child))
            elif role is None and self.is_call(child):
                self.call(child)
            else:
                self.visit(child)

    def captures(self, tree: Any) -> list[Any]:
        from lark import Tree

        found = []
        for child in tree.children:
            if isinstance(child, Tree):
                role = self.written.roles.get(child.data)
                found += [child] if role is not None else self.captures(child)
                if role == ir.CALL_ID:  # the format's own id (`functions.NAME:0`) holds the name
                    found += self.captures(child)
        return found

    def is_call(self, tree: Any) -> bool:
        roles = [self.written.roles[c.data] for c in self.captures(tree)]
        return roles.count(ir.TOOL_NAME) == 1 and set(roles) <= {ir.TOOL_NAME, ir.ARGUMENTS, ir.CALL_ID}

    def call(self, tree: Any) -> None:
        name, call_id, arguments = "", None, "{}"
        for capture in self.captures(tree):
            role = self.written.roles[capture.data]
            if role == ir.TOOL_NAME:
                name = self.span(capture).strip()
                name = json.loads(name) if name.startswith('"') else name
            elif role == ir.CALL_ID:
                call_id = self.span(capture).strip()  # an id holds no whitespace: what is there is a gap's
            else:
                arguments = self.arguments(capture)
        self.out.start_call(call_id or new_call_id(), name)
        self.out.add_arguments(arguments)

    def arguments(self, tree: Any) -> str:
        """The arguments' JSON text: a JSON object as written (one written as a JSON string
        unwrapped), or tagged members, each value converted by its node."""
        from lark import Tree

        members = [t for t in tree.iter_subtrees_topdown() if t.data in self.written.members]
        if not members:
            if not self.span(tree).strip():  # a call written without arguments
                return "{}"
            written = self.span(tree).strip()
            if nesting_depth(written) > DEEPEST_DECODED:
                return written  # valid JSON by the grammar, kept as written
            value = json.loads(written, strict=False)
            if isinstance(value, str):
                if nesting_depth(value) > DEEPEST_DECODED:
                    return value
                value = json.loads(value, strict=False)
            return json.dumps(value, ensure_ascii=False)
        parts: dict[str, str] = {}  # a key written twice: the last value
        for member in members:
            _, key = self.written.members[member.data]
            raw, node = "", None
            for part in member.children:
                if not isinstance(part, Tree):
                    continue
                if part.data.startswith("key_"):
                    key = self.span(part)
                elif part.data in self.written.values:
                    raw, node = self.span(part), self.written.values[part.data]
            if node is not None:  # a member with a key and no value adds nothing
                parts[key or ""] = member_json(key, raw, node, self.written.section)
        return "{" + ", ".join(parts.values()) + "}"

    def message(self) -> dict[str, Any]:
        return self.out.message()


__all__ = ["LarkLanguage", "read_message", "write_lark"]


def _not_before(marker: str) -> str:
    """The lookahead that keeps a marker from being read before `marker`, whitespace aside, or
    before the end of the output or a part of `marker` there (`ir.Lit.not_before`)."""
    core = marker.strip()
    if not core:
        return ""
    cut = "|".join(_regex_escape(core[:i]) + r"\Z" for i in range(len(core)))
    return rf"(?!\s*(?:{_marker_regex(core)[3:]}|{cut}))"


def _word_end(marker: str, bounded: bool) -> str:
    """The lookahead that keeps a bounded marker ending in a word character from being read
    before another word character."""
    last = marker.strip()[-1:]
    return r"(?!\w)" if bounded and (last.isalnum() or last == "_") else ""
