"""GBNF for llama.cpp: the whole output language of one request, built from an `Analysis`.

The grammar follows the layout in `autoparser.analysis`: optional reasoning, then content
and/or the tool-call section, each call an alternative over the request's tools with arguments
typed by that tool's JSON schema (`schema_gbnf`). What `tool_choice` makes of it:

* ``"none"``: reasoning, then content that never contains a call marker;
* ``"required"`` / a named tool: reasoning, then at least one call (exactly one when
  `parallel_tool_calls` is false); no content, which keeps the grammar simple and the model
  on task;
* a prompt that already opened a call (`tools.opened_by_prompt`): the output starts with the
  rest of a call, or with the recipient that introduces content; never lazy;
* ``"auto"``: a *lazy* grammar. Generation is free until a trigger pattern matches, then the
  grammar applies from the trigger onwards (llama.cpp starts it at the pattern's first capture
  group). The patterns refuse to match inside reasoning: with reasoning on they require the
  reasoning end marker before the trigger. ``lazy=False`` gives the full language instead
  (content, then optionally the calls), which tests sample from.

Tagged values written as literals (Python call syntax) accept JSON and Python quoting and
constants; where keys have no marker before them (`name(key=value, ...)`), a value's end
marker goes between values only, and unquoted text may hold commas except before `key=`.

Free text ("reasoning up to ``</think>``") has no negative look-ahead in GBNF, so it is written
as the automaton of texts that do not contain the markers that end it (Aho–Corasick states,
one rule each). A text may end only in a state where appending the end marker completes the
marker exactly there, so the runtime parser, which splits at the first marker, agrees.

Special tokens: markers (or parts of markers) listed in `special_tokens` are referenced as
tokens, so the model must emit the real token. `special_tokens` may map text to token id,
giving ``<[id]>``, the only form that works for every token; a plain set gives ``<text>``,
which llama.cpp resolves by tokenizing the text and which only parses for texts of the form
``<...>`` without an inner ``>``; other texts fall back to quoted literals with a warning.
Everything else is a quoted literal. The end-of-turn token is not part of the grammar:
llama.cpp allows end-of-generation exactly when the grammar is complete.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoparser.analysis import Analysis
from autoparser.generators.gbnf_builder import (
    MAX_REPETITION,
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
from autoparser.generators.regex_gbnf import RegexUnsupported, regex_to_gbnf
from autoparser.generators.schema_gbnf import (
    FORMATS,
    SchemaConverter,
    SchemaWarnings,
    format_rule,
    ordered_members,
    schema_to_gbnf,
)
from autoparser.language.request import (
    CLOSED,
    KEY_HOLE,
    OPEN,
    args_keys,
    is_weak,
    split_call_index,
    start_state,
)

GAP_MAX = 4  # whitespace allowed around structural markers (the parser ignores it)
ID_TEXT = "[a-zA-Z0-9_.:\\-]{1,64}"


@dataclass
class GrammarResult:
    """A grammar plus what llama.cpp needs to run it.

    `trigger_patterns` (ECMAScript regexes, for ``llama_sampler_init_grammar_lazy_patterns``)
    are complete on their own. `trigger_words` repeats the triggers as plain text only when they
    may fire anywhere (no reasoning to protect), so a caller may turn single-token ones into
    trigger tokens; it is empty otherwise.
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


def _tool_function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = tool.get("function", tool)
    return fn if isinstance(fn, Mapping) else {}


def _tool_name(tool: Mapping[str, Any]) -> str:
    return str(_tool_function(tool).get("name", ""))


def _chosen_tools(tools: list[Mapping[str, Any]], tool_choice: Any) -> tuple[str, list[Mapping[str, Any]]]:
    """Normalize `tool_choice` to ("none"|"auto"|"required", tools it allows)."""
    if isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function", tool_choice)
        name = fn.get("name") if isinstance(fn, Mapping) else None
        chosen = [t for t in tools if _tool_name(t) == name]
        if not chosen:
            raise ValueError(f"tool_choice names {name!r}, which is not among the tools")
        return "required", chosen
    choice = tool_choice or "auto"
    if choice not in ("none", "auto", "required"):
        raise ValueError(f"tool_choice must be 'none', 'auto', 'required' or a named tool, not {choice!r}")
    return choice, list(tools)


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


# -- the grammar of one request ----------------------------------------------------------------


class OutputGrammar:
    """Builds the GBNF of a request; see the module docstring for the shape."""

    def __init__(self, analysis: Analysis, tools: list[Mapping[str, Any]] | None, tool_choice: Any,
                 thinking: bool | None, parallel_tool_calls: bool,
                 special_tokens: Iterable[str] | Mapping[str, int] | None, lazy: bool,
                 free_text_limit: int | None = None, end_tokens: Iterable[str] = (),
                 prompt: str | None = None):
        self.a = analysis
        self.t = analysis.tools
        self.warnings: list[str] = []
        self.tok = _Tokens(special_tokens, self.warnings)
        self.b = GrammarBuilder()
        self.choice, self.tools = _chosen_tools(list(tools or []), tool_choice)
        self.thinking = analysis.thinking_enabled(thinking)
        # where the output starts, as the parser sees it: inside reasoning the prompt opened,
        # in content (reasoning closed or not opened this turn, or a prefilled answer), or free
        self.start, self.continued = start_state(analysis.to_dict(), thinking, prompt)
        self.forced = self.start == OPEN
        self.parallel = parallel_tool_calls and self.t.parallel
        self.lazy = lazy
        self.limit = free_text_limit
        self.end_tokens = [t for t in end_tokens if t]
        self._pending_warnings: list[SchemaWarnings] = []
        # tagged values written as literals (`name(key='text', n=3)`), keys with no marker before them
        self.literal = self.t.format == "tag_tagged" and (self.t.arg_python or not self.t.arg_string_raw)
        self.bare_keys = self.t.format == "tag_tagged" and not self.t.arg_start.strip()
        self.opened = (self.t.opened_by_prompt and self.t.format in ("json", "tag_json", "tag_tagged")
                       and self.start != CLOSED)
        if self.choice != "none" and not self.tools:
            self.choice = "none"
        if self.choice != "none" and not (self.t.supported and self.t.format in ("json", "tag_json", "tag_tagged")):
            self.warnings.append(f"the template has no tool-call format the grammar knows ({self.t.format!r}); "
                                 "tool calls are not constrained")
            self.choice = "none"

    # -- top level ----------------------------------------------------------------------

    def build(self) -> GrammarResult:
        if self.opened:
            return self.build_opened()
        if self.choice == "none":
            self.b.set("root", seq(self.reasoning(), self.content(None)) or '""')
            return self.result(False)
        if self.choice == "required":
            self.b.set("root", seq(self.reasoning(), self.gap(), self.section()))
            return self.result(False)
        triggers = self.triggers()
        if self.lazy and triggers:
            self.b.set("root", self.section(lazy_start=True))
            return self.result(True, triggers)
        if self.lazy:
            self.warnings.append("no trigger marks the start of a tool call; the grammar is not lazy")
        section = self.section()
        start = self.section_lead() or None
        options = [self.content(None)]
        if self.t.content_allowed:
            options.append(seq(self.content(start), section))
        else:
            options.append(section)
        self.b.set("root", seq(self.reasoning(), alt(*[o or '""' for o in options])))
        return self.result(False)

    def build_opened(self) -> GrammarResult:
        """The prompt ended with the call opener: the output starts with a call's name, or (when
        content is allowed) with the recipient that introduces content (`all`). Never lazy:
        the output is inside a call from its first character."""
        t = self.t
        recipient = literal(self.a.content.start) if self.a.content.start.strip() else ""
        content = seq(recipient, self.content(None)) if recipient else self.content(None)
        if self.choice == "none":
            self.b.set("root", content or '""')
            return self.result(False)
        call = self.b.define("call", alt(*[self.call(tool, opened=True) for tool in self.tools]))
        call_end = self.call_closing()
        calls = seq(call, call_end)
        if self.parallel:
            opener = seq(self.tok.marker(t.call_start), self.tok.marker(t.name_start))
            sep = self.tok.marker(t.call_separator) if t.call_separator.strip() else ""
            nxt = self.b.define("call-next", seq(sep, self.gap(), opener, call, call_end))
            calls = seq(calls, f"{nxt}*")
        calls = self.b.define("tool-calls", calls)
        if self.choice == "auto" and recipient:
            self.b.set("root", alt(content, calls))
        else:
            self.b.set("root", calls)
        return self.result(False)

    def result(self, lazy: bool, triggers: list[str] | None = None) -> GrammarResult:
        patterns, words = ([], [])
        if lazy and triggers:
            patterns, words = self.trigger_patterns(triggers)
        return GrammarResult(gbnf=self.b.text("root"), lazy=lazy, trigger_patterns=patterns,
                             trigger_words=words, warnings=self.warnings)

    # -- reasoning and content ------------------------------------------------------------

    def reasoning_active(self) -> bool:
        if self.a.reasoning.mode == "none" or not self.a.reasoning.end.strip() or self.start == CLOSED:
            return False
        return self.forced or self.thinking

    def reasoning(self) -> str:
        r = self.a.reasoning
        if not self.reasoning_active():
            return ""
        # reasoning ends at the first end marker; an end-of-turn string would stop the parser too
        end = r.end.strip()  # whitespace around it belongs to the texts on either side
        text = text_excluding(self.b, "reasoning", [end, *self.a.stop], end, self.limit)
        closed = seq(text, self.tok.marker(end))
        if self.forced or not r.start.strip():
            return closed
        # some templates write the end marker alone for an empty reasoning block
        return optional(seq(self.gap(), alt(seq(self.tok.marker(r.start.strip()), closed), self.tok.marker(end))))

    def call_markers(self) -> list[str]:
        """Texts content may not contain: what opens a tool call, and every other marker the
        parser reacts to in content (reasoning and content markers, end-of-turn strings)."""
        r, c = self.a.reasoning, self.a.content
        found = [self.t.section_start or self.t.call_start, *self.a.triggers, *self.a.stop]
        if r.mode != "none":
            found += [r.start, r.end]
        # a recipient (`all`, the content start of a prompt-opened call) is no marker inside content
        found += [c.end] if self.opened else [c.start, c.end]
        return sorted({m.strip() for m in found if m and m.strip()})

    def content(self, before: str | None) -> str:
        """Content text; `before` is the marker that follows it (None: the end of output)."""
        c = self.a.content
        wrapped = c.mode == "wrapped" or (c.mode == "wrapped_with_reasoning" and self.reasoning_active())
        if wrapped and c.start.strip() and c.end.strip():
            inner = text_excluding(self.b, "content", self.call_markers(), c.end, self.limit)
            return optional(seq(self.tok.marker(c.start), inner, self.tok.marker(c.end)))
        markers = self.call_markers()
        if before and before.strip() and before.strip() not in markers:
            markers.append(before.strip())
        hint = "content" if before is None else "content-before-calls"
        return text_excluding(self.b, hint, markers, before, self.limit)

    # -- tool calls -----------------------------------------------------------------------

    def section_lead(self) -> str:
        return self.t.section_start + self.t.call_start

    def triggers(self) -> list[str]:
        """The analysis's triggers that start the section (a lazy grammar begins at one)."""
        lead = self.section_lead().lstrip()
        # calls with no marker before them (a bare JSON object) start at the object itself
        bare_json = self.t.format == "json" and not lead
        kept = []
        for trig in self.a.triggers:
            if trig and (lead.startswith(trig) or (lead and trig.startswith(lead))
                         or (bare_json and trig.lstrip()[:1] in ("{", "["))):
                kept.append(trig)
            elif trig:
                self.warnings.append(f"trigger {trig!r} does not start the tool-call section {lead!r}; not used")
        if not kept and lead.strip():
            kept = [lead]
        return kept

    def trigger_patterns(self, triggers: list[str]) -> tuple[list[str], list[str]]:
        group = "(" + "|".join(_regex_escape(t) for t in sorted(triggers, key=len, reverse=True)) + ")"
        r = self.a.reasoning
        if not self.reasoning_active():
            return [group], list(triggers)
        end = _regex_escape(r.end.strip())
        if self.forced or not r.start.strip():
            return [f"{end}[\\s\\S]*?{group}"], []
        start = _regex_escape(r.start.strip())
        no_reasoning = "^(?!\\s*" + start + ")[\\s\\S]*?" + group
        return [no_reasoning, f"{end}[\\s\\S]*?{group}"], []

    def gap(self) -> str:
        return self.b.fixed("gap", f"[ \\t\\n]{{0,{GAP_MAX}}}")

    def until_stop(self, marker: str) -> str:
        """`marker` cut before any end-of-turn text in it (the analysis's stops, its EOS token,
        the caller's `end_tokens`): llama.cpp ends generation with such a token only once the
        grammar is complete, so the grammar may not require it, nor anything after it."""
        for stop in [*self.a.stop, self.a.eos_token, *self.end_tokens]:
            if stop.strip() and stop.strip() in marker:
                marker = marker[:marker.index(stop.strip())]
        return marker

    def call_closing(self) -> str:
        """The call's end marker. Right after a raw value (`name(key=value)`) no whitespace comes
        between: the parser would read it as part of the value."""
        if self.bare_keys and not self.literal:
            core = self.until_stop(self.t.call_end).strip()
            return self.tok.marker(core) if core else ""
        return self.closing(self.t.call_end)

    def closing(self, marker: str) -> str:
        """A marker that closes a call or the section. Its surrounding whitespace is flexible
        (bounded), as the parser finds markers by their core and templates differ in newlines."""
        core = self.until_stop(marker).strip()
        return seq(self.gap(), self.tok.marker(core)) if core else self.gap()

    def section(self, lazy_start: bool = False) -> str:
        """The tool-call section.

        `lazy_start`: the grammar begins where a trigger matched. Whitespace before the
        section's first marker is then not part of it, and that marker also accepts its special
        tokens spelled as text: the trigger pattern fires on text, and a grammar that rejected
        the replayed text would abort generation.
        """
        t, b = self.t, self.b
        call = b.define("call", alt(*[self.call(tool) for tool in self.tools]))
        section_text, first_call_text = t.section_start, t.call_start
        if lazy_start:
            if section_text:
                section_text = section_text.lstrip()
            else:
                first_call_text = first_call_text.lstrip()
        section_start = self.tok.marker(section_text, text_too=lazy_start)
        first_call_start = self.tok.marker(first_call_text, text_too=lazy_start and not t.section_start)
        if t.format == "json" and t.array:
            calls = self.json_array(call, first_call_start)
        else:
            call_start = self.tok.marker(t.call_start)
            call_end = self.call_closing()
            one = b.define("call-wrapped", seq(call_start, call, call_end))
            first = one if first_call_start == call_start else seq(first_call_start, call, call_end)
            calls = first
            if self.parallel:
                sep = self.tok.marker(t.call_separator) if t.call_separator.strip() else ""
                leading = self.gap() if not t.call_start[:1].isspace() else ""
                nxt = b.define("call-next", seq(sep, leading, one))
                calls = seq(first, f"{nxt}*")
        return b.define("tool-calls", seq(section_start, calls, self.closing(t.section_end)))

    def json_array(self, call: str, call_start: str) -> str:
        """Calls as the elements of one JSON array. The brackets are added when the markers
        do not carry them (the parser treats the array punctuation as implied by `array`)."""
        t, b = self.t, self.b
        w = ws(b)
        opens = (t.section_start + t.call_start).rstrip().endswith("[")
        closes = (t.call_end + t.section_end).lstrip().startswith("]")
        sep = seq(w, '","', w) if t.call_separator.strip() in (",", "") else self.tok.marker(t.call_separator)
        nxt = b.define("call-next", seq(sep, call))
        opener = seq(call_start, seq(w, '"["') if not opens else "", w)
        closer = seq(w, '"]"' if not closes else "", self.call_closing())
        return seq(opener, call, f"{nxt}*" if self.parallel else "", closer)

    def call(self, tool: Mapping[str, Any], opened: bool = False) -> str:
        """One call of `tool`; `opened`: without its name start, which the prompt wrote."""
        name = _tool_name(tool)
        params = _tool_function(tool).get("parameters") or {"type": "object", "properties": {}}
        fmt = self.t.format
        hint = rule_name(f"{name}-call")
        if fmt == "json":
            return self.b.define(hint, self.json_call(name, params))
        name_start = "" if opened else self.tok.marker(self.t.name_start)
        head = seq(name_start, literal(name), self.name_end())
        if self.t.id_start or self.t.id_end:
            call_id = seq(self.tok.marker(self.t.id_start), ID_TEXT, self.tok.marker(self.t.id_end))
            head = seq(call_id, head) if getattr(self.t, "id_before_name", False) else seq(head, call_id)
        if fmt == "tag_json":
            args = self.json_args(name, params)
            body = seq(head, self.tok.marker(self.t.args_start), args, self.tok.marker(self.t.args_end))
        else:
            body = seq(head, self.tagged_args(name, params))
        return self.b.define(hint, body)

    def name_end(self) -> str:
        """`name_end`; a digit run in it is a call index the template numbers (``:0``), which
        the parser reads as any number, so the grammar allows any small number there too."""
        marker = self.t.name_end
        indexed = split_call_index(marker)  # never inside a special token (`<|tool_sep_2|>`)
        if indexed is None:
            return self.tok.marker(marker)
        return seq(self.tok.marker(indexed[0]), "[0-9]{1,4}", self.tok.marker(indexed[1]))

    def schema_converter(self, name: str, params: Any) -> SchemaConverter:
        warnings = SchemaWarnings(f"tool {name}")
        self._pending_warnings.append(warnings)
        return SchemaConverter(self.b, f"{name}-args", params, warnings, string_limit=self.limit)

    def json_args(self, name: str, params: Any) -> str:
        converter = self.schema_converter(name, params)
        rule = converter.convert()
        self.flush_schema_warnings()
        return rule

    def flush_schema_warnings(self) -> None:
        for w in self._pending_warnings:
            for msg in w.messages:
                if msg not in self.warnings:
                    self.warnings.append(msg)
        self._pending_warnings.clear()

    def json_call(self, name: str, params: Any) -> str:
        t, b = self.t, self.b
        w = ws(b)

        def member(key: str, value: str) -> str:
            return seq(literal(json.dumps(key, ensure_ascii=False)), w, '":"', w, value)

        if t.args_as_string:
            self.warnings.append(f"tool {name}: arguments are a JSON-encoded string; their schema is not enforced")
            args = json_string(b)
        else:
            args = self.json_args(name, params)
        name_member = member(t.name_field, literal(json.dumps(name, ensure_ascii=False)))
        # the keys the parser accepts for the arguments (`arguments`, `parameters`), typed alike
        args_member = seq(alt(*[literal(json.dumps(k, ensure_ascii=False)) for k in args_keys(t.args_field)]),
                          w, '":"', w, args)
        fields = alt(seq(name_member, w, '","', w, args_member, w),  # templates use either order
                     seq(args_member, w, '","', w, name_member, w))
        if not t.id_field:
            id_first = id_last = ""
        else:  # templates put the id first or last
            id_member = member(t.id_field, seq('"\\""', ID_TEXT, '"\\""'))
            id_first, id_last = seq(id_member, w, '","', w), seq('","', w, id_member, w)
        if not t.function_field:
            if not t.id_field:
                return seq('"{"', w, fields, '"}"')
            return seq('"{"', w, alt(seq(id_first, fields), seq(fields, optional(id_last))), '"}"')
        inner = seq('"{"', w, fields, '"}"')
        kind = optional(seq(member("type", '"\\"function\\""'), w, '","', w))
        return seq('"{"', w, optional(id_first) if id_first else "", kind, member(t.function_field, inner), w,
                   '"}"')

    def tagged_args(self, name: str, params: Any) -> str:
        """``arg_start KEY arg_key_end VALUE arg_end`` per argument, in schema order."""
        t, b = self.t, self.b
        converter = self.schema_converter(name, params)
        schema = params if isinstance(params, dict) else {}
        if "$ref" in schema:
            schema = converter.resolve(schema["$ref"], "$") or {}
        schema = converter.merge_all_of(schema, "$") if isinstance(schema, dict) else {}
        props = schema.get("properties") or {}
        required = [r for r in schema.get("required") or [] if isinstance(r, str)]
        members = []
        json_key_end = getattr(t, "arg_key_end_json", "") or t.arg_key_end
        # where keys have no marker before them, a short end marker (`, `) goes between values only:
        # the parser lets the last value's end marker be left out before the call's end
        between = self.bare_keys and is_weak(t.arg_end.strip())
        separator = seq(self.tok.marker(t.arg_end), self.tok.marker(t.arg_separator)) if between \
            else self.tok.marker(t.arg_separator)
        for key in list(props) + [r for r in required if r not in props]:
            sub = props.get(key, True)
            value, raw = self.tagged_value(converter, name, key, sub)
            key_end = t.arg_key_end if raw else json_key_end
            member = b.define(rule_name(f"{name}-arg-{key}"),
                              seq(self.tok.marker(t.arg_start), literal(key), self.tok.marker(key_end),
                                  value, "" if between else self.tok.marker(self.arg_end(key))))
            members.append((member, key in required))
        extra = None
        if "properties" not in schema and schema.get("additionalProperties", True) is not False:
            value = self.literal_value(converter, None, f"{name}-extra") if self.literal \
                else self.raw_text(f"{name}-extra")
            extra = b.define(rule_name(f"{name}-arg-extra"),
                             seq(self.tok.marker(t.arg_start), "[a-zA-Z0-9_.\\-]{1,64}",
                                 self.tok.marker(t.arg_key_end), value,
                                 "" if between or t.arg_end_keyed else self.tok.marker(t.arg_end)))
        self.flush_schema_warnings()
        body = ordered_members(b, rule_name(f"{name}-args"), members, separator, extra)
        return body

    def arg_end(self, key: str) -> str:
        """The argument's end marker; a closing tag may name the key (`</{key}>`)."""
        t = self.t
        return t.arg_end.replace(KEY_HOLE, key) if t.arg_end_keyed else t.arg_end

    def literal_value(self, converter: SchemaConverter, sub: Any, hint: str) -> str:
        """A value written as a literal: strings in JSON or Python quotes, the constants in either
        spelling, anything else as JSON (which the parser reads as a literal too)."""
        b = self.b
        py_string = b.fixed("py-string", "\"'\" ( [^'\\\\] | \"\\\\\" [^\\x00-\\x1F] )* \"'\"")
        if sub is None:
            return alt(json_string(b), py_string, json_value(b))
        if _is_plain_string(sub) and not ("const" in sub or "enum" in sub or "pattern" in sub or "format" in sub):
            return alt(json_string(b), py_string)
        declared = sub.get("type") if isinstance(sub, dict) else None
        if declared == "boolean":
            return b.fixed("py-bool", '"true" | "false" | "True" | "False"')
        if declared == "null":
            return b.fixed("py-null", '"null" | "None"')
        return converter.convert(sub, f"$/properties/{hint}", rule_name(f"{hint}-value"))

    def tagged_value(self, converter: SchemaConverter, name: str, key: str, sub: Any) -> tuple[str, bool]:
        """The value of one tagged argument, and whether it is raw text (else JSON)."""
        resolved = sub
        if isinstance(sub, dict) and "$ref" in sub and len(sub) == 1:
            resolved = converter.resolve(sub["$ref"], f"$/properties/{key}")
        if self.literal:
            return self.literal_value(converter, resolved, f"{name}-{key}"), not self.t.arg_key_end_json
        if self.t.arg_string_raw and _is_plain_string(resolved):
            return self.raw_string(converter, f"{name}-{key}", resolved, f"$/properties/{key}", key), True
        return converter.convert(sub, f"$/properties/{key}", rule_name(f"{name}-args-{key}")), False

    def raw_text(self, hint: str, key: str = "") -> str:
        """Raw argument text: up to `arg_end`, containing nothing the parser would stop at."""
        t = self.t
        end = self.arg_end(key) if key else t.arg_end
        if self.bare_keys and self.limit is None and (t.arg_end.strip() or t.arg_separator.strip()) == ",":
            return self.comma_text()
        stops = [end, t.arg_start, t.call_end, t.section_end, *self.a.stop]
        return text_excluding(self.b, "raw-text", stops, end, self.limit)

    def comma_text(self) -> str:
        """Raw text in `name(key=value, key=value)`: a comma ends a value only before `key=`, so
        the text may hold commas, only never one followed by a key and `=` (nor the call's end
        or an end of turn). An automaton: plain text, after a comma, in a word after a comma,
        in spaces after that word; every state may end the value. Words are read as the parser
        reads keys (letters of any script, digits, `_.-`)."""
        b, t = self.b, self.t
        if "comma-text" in b.rules:
            return "comma-text"

        def ranges(chars: str) -> Ranges:
            return [(ord(c), ord(c)) for c in chars]

        firsts = ranges("".join(sorted({m.strip()[0] for m in [t.call_end, t.section_end, *self.a.stop]
                                        if m.strip()} | {","})))
        key_end = ranges((t.arg_key_end.strip() or "=")[0])
        spaces = ranges(" \t\n\r")
        starts: Ranges = [(ord("a"), ord("z")), (ord("A"), ord("Z")), (ord("_"), ord("_")), (0x80, 0x10FFFF)]
        word = [*starts, (ord("0"), ord("9")), (ord("."), ord(".")), (ord("-"), ord("-"))]

        def cls(allowed: Ranges) -> str:
            return char_class(allowed) or '""'

        def other(*excluded: Ranges) -> str:
            return cls(complement_ranges([r for group in excluded for r in group]))

        b.set("comma-text", f'( {other(firsts)} comma-text | "," comma-after )?')
        b.set("comma-after", f'( {cls(spaces)} comma-after | "," comma-after | {cls(starts)} comma-word | '
                             f'{other(firsts, spaces, starts)} comma-text )?')
        b.set("comma-word", f'( {cls(word)} comma-word | {cls(spaces)} comma-space | "," comma-after | '
                            f'{other(firsts, spaces, word, key_end)} comma-text )?')
        b.set("comma-space", f'( {cls(spaces)} comma-space | "," comma-after | '
                             f'{other(firsts, spaces, key_end)} comma-text )?')
        return "comma-text"

    def raw_string(self, converter: SchemaConverter, hint: str, schema: dict, path: str, key: str = "") -> str:
        """A string value written as raw text up to `arg_end`."""
        if "const" in schema:
            return literal(str(schema["const"]))
        if isinstance(schema.get("enum"), list):
            return alt(*[literal(v) for v in schema["enum"] if isinstance(v, str)] or ['""'])
        end = self.arg_end(key) if key else self.t.arg_end
        exclude: Ranges = [(ord(end[0]), ord(end[0]))] if end else []
        pattern, fmt = schema.get("pattern"), schema.get("format")
        if isinstance(pattern, str):
            try:
                return regex_to_gbnf(self.b, pattern, rule_name(f"{hint}-pattern"), json_mode=False, exclude=exclude)
            except RegexUnsupported as exc:
                converter.w.add(path, "pattern", f"{pattern!r} cannot be translated ({exc}); not enforced")
        elif isinstance(fmt, str) and fmt in FORMATS:
            return format_rule(self.b, fmt)
        elif fmt is not None:
            converter.w.add(path, "format", f"{fmt!r} is not supported; not enforced")
        if self.bare_keys and self.limit is None and (self.t.arg_end.strip() or self.t.arg_separator.strip()) == ",":
            return self.comma_text()
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        if (lo or hi is not None) and pattern is None:
            lo, hi = converter._length_bounds(lo, hi, path, "minLength", "maxLength")
            cls = char_class(_complement_of([end[0]] if end else []))
            assert cls is not None
            return repeat(cls, lo, hi) or '""'
        return self.raw_text(hint, key)


def _is_plain_string(schema: Any) -> bool:
    """A schema whose values the tagged formats write as raw text: only strings (or null,
    which raw text cannot spell and which is therefore left out)."""
    if not isinstance(schema, dict) or any(k in schema for k in ("anyOf", "oneOf", "allOf", "$ref")):
        return False
    declared = schema.get("type")
    if isinstance(declared, list):
        declared = [t for t in declared if t != "null"]
        declared = declared[0] if declared == ["string"] else None
    if declared == "string":
        return True
    if declared is None and isinstance(schema.get("enum"), list) and schema["enum"]:
        return all(isinstance(v, str) for v in schema["enum"])
    return False


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
    return OutputGrammar(analysis, tools, tool_choice, thinking, parallel_tool_calls, special_tokens,
                         lazy, free_text_limit, end_tokens, prompt).build()


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
