"""GBNF for llama.cpp: the output language of one request (`language.build`) written as a grammar.

`build_grammar` builds the request's `ir.Language` and `write_gbnf` writes it: each node once,
schema-typed values through the schema converter (`schema_gbnf`), raw string values through the
regex translator (`regex_gbnf`). What the language holds for each `tool_choice` is described in
`autoparser.language.build`. A lazy language (``"auto"``) gives trigger patterns: generation is
free until one matches, then the grammar applies from the trigger onwards (llama.cpp starts it
at the pattern's first capture group). The patterns refuse to match inside reasoning.
``lazy=False`` gives the full language instead, which tests sample from.

Free text ("reasoning up to ``</think>``") has no negative look-ahead in GBNF, so it is written
as the automaton of texts that do not contain the markers that end it (Aho–Corasick states,
one rule each). A text may end only in a state where appending the end marker completes the
marker exactly there, so the parser, which splits at the first marker, agrees.

Special tokens: markers (or parts of markers) listed in `special_tokens` are referenced as
tokens, so the model must emit the real token. `special_tokens` may map text to token id,
giving ``<[id]>``, the only form that works for every token; a plain set gives ``<text>``,
which llama.cpp resolves by tokenizing the text and which only parses for texts of the form
``<...>`` without an inner ``>``; other texts fall back to quoted literals with a warning.
Everything else is a quoted literal. The end-of-turn token is not part of the grammar:
llama.cpp allows end-of-generation exactly when the grammar is complete.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoparser.analysis import Analysis
from autoparser.generators.gbnf_builder import (
    MAX_REPETITION,
    WS_MAX,
    GrammarBuilder,
    Ranges,
    alt,
    char_class,
    complement_ranges,
    json_object,
    json_string,
    json_value,
    literal,
    optional,
    repeat,
    rule_name,
    seq,
    ws,
)
from autoparser.generators.gbnf_members import ordered_members
from autoparser.generators.regex_gbnf import RegexUnsupported, regex_to_gbnf
from autoparser.generators.schema_formats import FORMATS, format_rule
from autoparser.generators.schema_gbnf import SchemaConverter, SchemaWarnings, schema_to_gbnf
from autoparser.language import ir
from autoparser.language.build import Request, build_language, is_plain_string


@dataclass
class GrammarResult:
    """A grammar plus what llama.cpp needs to run it.

    `trigger_patterns` (ECMAScript regexes, for ``llama_sampler_init_grammar_lazy_patterns``)
    are complete on their own. `trigger_words` are the triggers that may fire anywhere: all of
    them where there is no reasoning to protect, else those that are one special token (written
    only to call; inside reasoning the calls end it, as the parser reads it). A caller may turn
    single-token ones into trigger tokens.
    """

    gbnf: str
    root: str = "root"
    lazy: bool = False
    trigger_patterns: list[str] = field(default_factory=list)
    trigger_words: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# -- helpers ------------------------------------------------------------------------------------


def _regex_escape(text: str) -> str:
    """Escape for ECMAScript (std::regex) and Python alike."""
    return "".join("\\" + c if c in "\\^$.|?*+()[]{}/" else c for c in text)


class _Tokens:
    """How marker text is written: special tokens as token references, the rest quoted."""

    def __init__(self, special_tokens: Iterable[str] | Mapping[str, int] | None, warnings: list[str]):
        if isinstance(special_tokens, Mapping):
            self.ids: dict[str, int | None] = {str(k): int(v) for k, v in special_tokens.items()}
        else:
            self.ids = {str(t): None for t in special_tokens or ()}
        self.ids.pop("", None)
        self.warnings = warnings
        self._by_length = sorted(self.ids, key=len, reverse=True)

    def reference(self, token: str) -> str | None:
        token_id = self.ids.get(token)
        if token_id is not None:
            return f"<[{token_id}]>"
        if token.startswith("<") and token.endswith(">") and ">" not in token[1:-1] \
                and not token.startswith("<[") and len(token) > 2:
            return token
        msg = (f"special token {token!r} cannot be referenced by its text in GBNF; "
               "matched as text (pass special_tokens as a text->id mapping)")
        if msg not in self.warnings:
            self.warnings.append(msg)
        return None

    def pieces(self, text: str) -> list[tuple[str, bool]]:
        """`text` cut into (piece, is_special_token), special tokens found leftmost-longest."""
        out: list[tuple[str, bool]] = []
        i, plain = 0, ""
        while i < len(text):
            hit = next((t for t in self._by_length if text.startswith(t, i)), None)
            if hit is None:
                plain += text[i]
                i += 1
                continue
            if plain:
                out.append((plain, False))
                plain = ""
            out.append((hit, True))
            i += len(hit)
        if plain:
            out.append((plain, False))
        return out

    def marker(self, text: str, text_too: bool = False) -> str:
        """GBNF for a marker. `text_too`: also accept a special token spelled as plain text."""
        parts = []
        for piece, special in self.pieces(text):
            ref = self.reference(piece) if special else None
            if ref is None:
                parts.append(literal(piece))
            else:
                parts.append(alt(ref, literal(piece)) if text_too else ref)
        return seq(*parts)


def text_excluding(b: GrammarBuilder, hint: str, forbidden: Iterable[str], terminator: str | None,
                   limit: int | None = None) -> str:
    """A rule for any text that contains none of `forbidden` (compared without surrounding
    whitespace, as the parser finds markers by their core).

    With a `terminator` (the text that follows, normally a marker among the forbidden ones),
    the text may only stop where appending the terminator completes the first forbidden text
    exactly where it completes after an empty text, so "text + terminator" splits back at the
    same place. Without one (the text runs to the end of output), any stop is fine.

    With a `limit`, the text has at most that many characters and, to keep the grammar small,
    never contains the first character of a forbidden text (so it cannot start one at all).
    """
    patterns = sorted({p.strip() for p in forbidden if p.strip()})
    term = (terminator or "").rstrip() if (terminator or "").strip() else ""
    if limit is not None:
        limit = max(0, min(limit, MAX_REPETITION))
        cls = char_class(_complement_of(sorted({p[0] for p in patterns})))
        return b.define(f"{hint}-short", f"{cls}{{0,{limit}}}") if limit else '""'
    if not patterns:
        return b.fixed("any-text", ".*")
    key = ("text-excluding", tuple(patterns), term)
    if key not in b.memo:
        b.memo[key] = _exclusion_automaton(b, hint, patterns, term)
    return b.memo[key]


def _exclusion_automaton(b: GrammarBuilder, hint: str, patterns: list[str], term: str) -> str:
    goto: list[dict[str, int]] = [{}]
    dead = [False]
    for p in patterns:
        s = 0
        for c in p:
            if c not in goto[s]:
                goto.append({})
                dead.append(False)
                goto[s][c] = len(goto) - 1
            s = goto[s][c]
        dead[s] = True
    fail = [0] * len(goto)
    queue = list(goto[0].values())
    while queue:
        s = queue.pop(0)
        for c, t in goto[s].items():
            f = fail[s]
            while f and c not in goto[f]:
                f = fail[f]
            fail[t] = goto[f][c] if c in goto[f] and goto[f][c] != t else 0
            dead[t] = dead[t] or dead[fail[t]]
            queue.append(t)

    def step(s: int, c: str) -> int:
        while s and c not in goto[s]:
            s = fail[s]
        return goto[s].get(c, 0)

    def first_hit(s: int) -> int | None:
        """Where walking the terminator from state `s` first completes a forbidden text."""
        for k, c in enumerate(term):
            s = step(s, c)
            if dead[s]:
                return k
        return None

    natural = first_hit(0) if term else None

    def may_stop(s: int) -> bool:
        return not term or first_hit(s) == natural

    alphabet = sorted({c for p in patterns for c in p})
    live = [s for s in range(len(goto)) if not dead[s]]
    names = {s: b.reserve(f"{hint}-{i}") for i, s in enumerate(live)}
    for s in live:
        by_target: dict[int, list[str]] = {}
        blocked: list[str] = []
        for c in alphabet:
            t = step(s, c)
            if dead[t]:
                blocked.append(c)
            elif t != 0:
                by_target.setdefault(t, []).append(c)
        special = [c for cs in by_target.values() for c in cs] + blocked
        options = []
        back = char_class(_complement_of(special))
        if back:
            options.append(f"{back} {names[0]}")
        for t, chars in by_target.items():
            cls = literal(chars[0]) if len(chars) == 1 else char_class([(ord(c), ord(c)) for c in chars])
            options.append(f"{cls} {names[t]}")
        body = " | ".join(options)
        b.set(names[s], f"( {body} )?" if may_stop(s) else body)
    return names[0]


def _complement_of(chars: list[str]) -> Ranges:
    return complement_ranges([(ord(c), ord(c)) for c in chars])



# -- the IR written as GBNF --------------------------------------------------------------------


class _Writer:
    """Writes an `ir.Language` as GBNF rules. Each node is written once (its rule name or text
    reused wherever the IR shares it); schema-typed values go through one `SchemaConverter`
    per tool, so the rules a tool's schema needs are shared by all its arguments."""

    def __init__(self, special_tokens: Iterable[str] | Mapping[str, int] | None, limit: int | None):
        self.warnings: list[str] = []
        self.tok = _Tokens(special_tokens, self.warnings)
        self.b = GrammarBuilder()
        self.limit = limit
        self._written: dict[int, tuple[ir.Node, str]] = {}
        self._converters: dict[str, tuple[SchemaConverter, SchemaWarnings]] = {}

    def write(self, node: ir.Node) -> str:
        done = self._written.get(id(node))
        if done is None:
            done = self._written[id(node)] = (node, self._write(node))
        return done[1]

    def _write(self, node: ir.Node) -> str:  # noqa: C901 - one case per node kind
        if isinstance(node, ir.Lit):
            return self.lit(node)
        if isinstance(node, ir.Chars):
            return repeat(f"[{node.allowed}]", node.min, node.max)
        if isinstance(node, ir.Text):
            if node.weak is not None:
                return self.weak_text(node) if node.weak.word else self.bracket_text(node)
            rule = text_excluding(self.b, node.hint, node.stops, node.end, node.limit)
            return self.nonempty(rule) if node.nonempty else rule
        if isinstance(node, ir.Seq):
            return seq(*[self.write(item) for item in node.items])
        if isinstance(node, ir.Choice):
            return alt(*[self.write(option) or '""' for option in node.options])
        if isinstance(node, ir.Repeat):
            body = self.write(node.item)
            if (node.min, node.max) == (0, 1):
                return optional(body)
            return repeat(body if _is_name(body) else f"( {body} )", node.min, node.max)
        if isinstance(node, ir.Gap):
            if node.max == WS_MAX:
                return ws(self.b)
            return self.b.fixed("gap", repeat("[ \\t\\n]", 0, node.max))
        if isinstance(node, ir.Json):
            return self.json(node)
        if isinstance(node, ir.PyValue):
            return self.py_value(node)
        if isinstance(node, ir.RawString):
            return self.raw_string(node)
        if isinstance(node, ir.Members):
            self.converter(node.owner, node.root)  # checks the tool's schema
            members = [(self.write(member), required) for member, required in node.items]
            extra = self.write(node.extra) if node.extra is not None else None
            body = ordered_members(self.b, rule_name(node.hint), members, self.write(node.separator), extra)
            self.flush()
            return body
        if isinstance(node, ir.Capture):
            return self.write(node.body)
        if isinstance(node, ir.Rule):
            return self.b.define(node.name, self.write(node.body))
        if isinstance(node, ir.Lazy):
            return self.write(node.body)
        raise TypeError(f"not a language node: {node!r}")

    def nonempty(self, rule: str) -> str:
        """`rule` (a text) without its empty text."""
        body = self.b.rules.get(rule)
        if body is None:
            return rule
        if body.startswith("( ") and body.endswith(" )?"):
            return self.b.define(f"{rule}-nonempty", body[2:-3])
        bounded = re.fullmatch(r"(.*)\{0,(\d+)\}", body)
        if bounded:
            return self.b.define(f"{rule}-nonempty", f"{bounded.group(1)}{{1,{bounded.group(2)}}}")
        return self.b.define(f"{rule}-nonempty", ".+") if body == ".*" else rule

    def lit(self, node: ir.Lit) -> str:
        if not node.special:
            return literal(node.text)
        ref = self.tok.reference(node.text)
        if ref is None:
            return literal(node.text)
        return alt(ref, literal(node.text)) if node.spelled else ref

    # -- values ----------------------------------------------------------------------------

    def converter(self, owner: str, root: Any) -> SchemaConverter:
        if owner not in self._converters:
            warnings = SchemaWarnings(f"tool {owner}")
            converter = SchemaConverter(self.b, f"{owner}-args", root, warnings, string_limit=self.limit)
            self._converters[owner] = (converter, warnings)
        return self._converters[owner][0]

    def flush(self) -> None:
        """Schema warnings so far, in the order they were found."""
        for _, warnings in self._converters.values():
            for msg in warnings.messages:
                if msg not in self.warnings:
                    self.warnings.append(msg)

    def json(self, node: ir.Json) -> str:
        if node.note and node.note not in self.warnings:
            self.warnings.append(node.note)
        if node.kind == "string":
            return json_string(self.b)
        if node.kind == "object":
            return json_object(self.b)
        if node.kind != "schema":
            return json_value(self.b)
        converter = self.converter(node.owner, node.root)
        if node.path == "$":
            rule = converter.convert()
        else:
            rule = converter.convert(node.schema, node.path, rule_name(node.hint))
        self.flush()
        return rule

    def py_value(self, node: ir.PyValue) -> str:
        """A value written as a literal of its `ir.Spelling`: strings in JSON's quotes or the
        spelling's, the constants in either spelling, anything else as JSON (which the parser
        reads as a literal too)."""
        b, sub, spelling = self.b, node.schema, node.spelling
        quoted = self.quoted_strings(spelling)
        strings = alt(json_string(b), *quoted)
        if sub is None:
            return alt(strings, json_value(b))
        if is_plain_string(sub) and not ("const" in sub or "enum" in sub or "pattern" in sub or "format" in sub):
            return strings
        declared = sub.get("type") if isinstance(sub, dict) else None
        if declared == "boolean":
            words = dict.fromkeys(("true", "false", spelling.true, spelling.false))
            return b.define("py-bool", " | ".join(literal(w) for w in words))
        if declared == "null":
            return b.define("py-null", " | ".join(literal(w) for w in dict.fromkeys(("null", spelling.null))))
        return self.converter(node.owner, node.root).convert(sub, node.path, rule_name(node.hint))

    def quoted_strings(self, spelling: ir.Spelling) -> list[str]:
        """A string between two of the spelling's quotes (other than JSON's, which `json_string`
        writes), where its escape makes any printable character after it part of the text."""
        rules = []
        for quote in spelling.quotes.replace('"', ""):
            inner = _cls(_complement_of([quote, spelling.escape] if spelling.escape else [quote]))
            if spelling.escape:
                inner = f"( {inner} | {literal(spelling.escape)} [^\\x00-\\x1F] )"
            rules.append(self.b.define("py-string", f"{literal(quote)} {inner}* {literal(quote)}"))
        return rules

    def raw_string(self, node: ir.RawString) -> str:
        """A string value written as raw text up to its end marker."""
        schema, end = node.schema, node.end
        if "const" in schema:
            return literal(str(schema["const"]))
        if isinstance(schema.get("enum"), list):
            return alt(*[literal(v) for v in schema["enum"] if isinstance(v, str)] or ['""'])
        converter = self.converter(node.owner, node.root)
        exclude: Ranges = [(ord(end[0]), ord(end[0]))] if end else []
        pattern, fmt = schema.get("pattern"), schema.get("format")
        if isinstance(pattern, str):
            try:
                return regex_to_gbnf(self.b, pattern, rule_name(f"{node.hint}-pattern"), json_mode=False,
                                     exclude=exclude)
            except RegexUnsupported as exc:
                converter.w.add(node.path, "pattern", f"{pattern!r} cannot be translated ({exc}); not enforced")
        elif isinstance(fmt, str) and fmt in FORMATS:
            return format_rule(self.b, fmt)
        elif fmt is not None:
            converter.w.add(node.path, "format", f"{fmt!r} is not supported; not enforced")
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        if node.bounded and (lo or hi is not None) and pattern is None:
            lo, hi = converter._length_bounds(lo, hi, node.path, "minLength", "maxLength")
            cls = char_class(_complement_of([end[0]] if end else []))
            assert cls is not None
            return repeat(cls, lo, hi) or '""'
        return self.write(node.text)

    def weak_text(self, node: ir.Text) -> str:
        """Text where the weak marker (a comma) ends it only before a key and its end marker, so
        the text may hold commas, never one followed by a key and `=` (nor the call's end or an
        end of turn). An automaton: plain text, after a comma, in a word after a comma, in
        spaces after that word; every state may end the text. Words are read as the parser
        reads keys (letters of any script, digits, `_.-`)."""
        b = self.b
        if "comma-text" in b.rules:
            return "comma-text"
        assert node.weak is not None
        firsts = _text_firsts(node)
        key_end = _ranges(node.weak.before[0])
        spaces = _ranges(_SPACES)
        starts: Ranges = [(ord("a"), ord("z")), (ord("A"), ord("Z")), (ord("_"), ord("_")), (0x80, 0x10FFFF)]
        word = [*starts, (ord("0"), ord("9")), (ord("."), ord(".")), (ord("-"), ord("-"))]
        mark = literal(node.weak.marker)
        b.set("comma-text", f'( {_other(firsts)} comma-text | {mark} comma-after )?')
        b.set("comma-after", f'( {_cls(spaces)} comma-after | {mark} comma-after | {_cls(starts)} comma-word | '
                             f'{_other(firsts, spaces, starts)} comma-text )?')
        b.set("comma-word", f'( {_cls(word)} comma-word | {_cls(spaces)} comma-space | {mark} comma-after | '
                            f'{_other(firsts, spaces, word, key_end)} comma-text )?')
        b.set("comma-space", f'( {_cls(spaces)} comma-space | {mark} comma-after | '
                             f'{_other(firsts, spaces, key_end)} comma-text )?')
        return "comma-text"

    def bracket_text(self, node: ir.Text) -> str:
        """Text where a bracket ends it only where what follows it (after whitespace) begins a
        bare JSON call (`{` then `"`), so it may hold brackets, never one followed by that. An
        automaton: plain text, and text just after a bracket; both may end the text. Where the
        text may begin with a bracket (`leads`: one that opened no call), that one is free."""
        assert node.weak is not None
        b = self.b
        mark = literal(node.weak.marker)
        firsts = _text_firsts(node)
        spaces = _ranges(_SPACES)
        text, after = b.reserve("bracket-text"), b.reserve("bracket-after")
        b.set(text, f"( {_other(firsts)} {text} | {mark} {after} )?")
        b.set(after, f"( {_cls(spaces)} {after} | {mark} {after} | "
                     f"{_other(firsts, spaces, _ranges(node.weak.before[0]))} {text} )?")
        first = f"{_other(firsts)} {text} | {mark} {text if node.weak.leads else after}"
        if node.nonempty:
            return b.define("bracket-lead", first)
        return b.define("bracket-lead", f"{mark} {text} | {text}") if node.weak.leads else text


_SPACES = " \t\n\r"


def _text_firsts(node: ir.Text) -> Ranges:
    """The characters a weak text's stops begin with, and its weak marker's."""
    assert node.weak is not None
    return _ranges("".join({m.strip()[0] for m in node.stops if m.strip()} | {node.weak.marker}))


def _ranges(chars: str) -> Ranges:
    return [(ord(c), ord(c)) for c in chars]


def _cls(allowed: Ranges) -> str:
    return char_class(allowed) or '""'


def _other(*excluded: Ranges) -> str:
    """A character class of all but the `excluded` characters."""
    return _cls(complement_ranges([r for group in excluded for r in group]))


def _is_name(expr: str) -> bool:
    return bool(expr) and all(c.isalnum() or c == "-" for c in expr)


def trigger_patterns(lazy: ir.Lazy) -> tuple[list[str], list[str]]:
    """The lazy grammar's trigger patterns (ECMAScript), and its trigger words, which may fire
    anywhere. The patterns refuse to match inside reasoning: they require the reasoning end
    marker before the trigger, or (where reasoning is optional) no reasoning start. A trigger
    that is one special token is also a word: inside reasoning, the calls end the reasoning."""
    group = "(" + "|".join(_regex_escape(t) for t in sorted(lazy.triggers, key=len, reverse=True)) + ")"
    guard = lazy.guard
    if guard is None:
        return [group], list(lazy.triggers)
    end = _regex_escape(guard.end)
    if guard.inside or not guard.start:
        return [f"{end}[\\s\\S]*?{group}"], list(lazy.anywhere)
    # an output that opens with the start marker, or with its tag alone, is in reasoning
    no_reasoning = "^(?!\\s*" + _regex_escape(guard.alone or guard.start) + ")[\\s\\S]*?" + group
    return [no_reasoning, f"{end}[\\s\\S]*?{group}"], list(lazy.anywhere)


def write_gbnf(language: ir.Language, special_tokens: Iterable[str] | Mapping[str, int] | None = None,
               free_text_limit: int | None = None) -> GrammarResult:
    """GBNF of an output language, with its triggers when it is lazy."""
    writer = _Writer(special_tokens, free_text_limit)
    writer.b.set("root", writer.write(language.root) or '""')
    warnings = list(language.warnings)
    warnings += [w for w in writer.warnings if w not in warnings]
    patterns: list[str] = []
    words: list[str] = []
    lazy = isinstance(language.root, ir.Lazy)
    if lazy:
        patterns, words = trigger_patterns(language.root)
    return GrammarResult(gbnf=writer.b.text("root"), lazy=lazy, trigger_patterns=patterns, trigger_words=words,
                         warnings=warnings)


# -- public entry points -----------------------------------------------------------------------


def build_grammar(analysis: Analysis, tools: list[Mapping[str, Any]] | None = None, tool_choice: Any = "auto",
                  thinking: bool | None = None, parallel_tool_calls: bool = True,
                  special_tokens: Iterable[str] | Mapping[str, int] | None = None, lazy: bool = True,
                  free_text_limit: int | None = None, end_tokens: Iterable[str] = (), prompt: str | None = None,
                  **_: Any) -> GrammarResult:
    """The grammar of a request, with its lazy triggers and warnings.

    `lazy=False` gives the full language for ``"auto"`` instead of a lazy grammar.
    `free_text_limit` caps every free text (reasoning, content, raw argument values, strings the
    schema leaves unbounded) at that many characters, so even a model that never chooses to stop
    is led to a complete output; with it, free text also avoids the first character of the
    markers that end it. `end_tokens`: texts of the model's end-of-generation tokens (the server
    knows them); a closing marker that contains one is cut before it, as for the analysis's stop
    strings. `prompt`: the rendered prompt the output continues; the grammar starts where it
    leaves the model, as the parser does (`thinking` is the fallback without one). Raises
    ValueError for a `tool_choice` naming a tool not in `tools`.
    """
    specials = [str(t) for t in (special_tokens or ())]
    request = Request(tools=tuple(tools or ()), tool_choice=tool_choice, thinking=thinking,
                      parallel_tool_calls=parallel_tool_calls, prompt=prompt, special_tokens=tuple(specials),
                      lazy=lazy, free_text_limit=free_text_limit,
                      end_tokens=(analysis.eos_token, *[t for t in end_tokens if t]))
    language = build_language(analysis, request)
    return write_gbnf(language, special_tokens, free_text_limit)


def generate_gbnf(analysis: Analysis, tools: list[Mapping[str, Any]] | None = None, tool_choice: Any = "auto",
                  thinking: bool | None = None, parallel_tool_calls: bool = True,
                  special_tokens: Iterable[str] | Mapping[str, int] | None = None, **kw: Any) -> str:
    """GBNF text of the request's output language (see `build_grammar` for the details)."""
    return build_grammar(analysis, tools=tools, tool_choice=tool_choice, thinking=thinking,
                         parallel_tool_calls=parallel_tool_calls, special_tokens=special_tokens, **kw).gbnf


def json_schema_grammar(schema: Any) -> GrammarResult:
    """For ``response_format: {"type": "json_schema"}``: one value of `schema`, whitespace around."""
    result = schema_to_gbnf(schema, owner="response_format", ws_around=True)
    return GrammarResult(gbnf=result.gbnf, warnings=result.warnings)


def json_object_grammar() -> GrammarResult:
    """For ``response_format: {"type": "json_object"}``: any JSON object."""
    b = GrammarBuilder()
    w = ws(b)
    b.set("root", seq(w, json_object(b), w))
    return GrammarResult(gbnf=b.text("root"))


__all__ = [
    "GrammarResult",
    "build_grammar",
    "generate_gbnf",
    "json_object_grammar",
    "json_schema_grammar",
    "text_excluding",
]
