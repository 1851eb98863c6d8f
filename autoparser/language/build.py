"""One builder from an analysis and a request to the output language (`ir.Language`).

This is the one place that knows formats: where reasoning and content go, what a tool call
looks like in each format, which markers end free text, what `tool_choice` makes of the calls.
The shape it builds:

* ``"none"``: reasoning, then content that never contains a call marker;
* ``"required"`` / a named tool: reasoning, then at least one call (exactly one when parallel
  calls are off), no content;
* a prompt that already opened a call (`tools.opened_by_prompt`): the rest of a call, or the
  recipient that introduces content;
* ``"auto"``: lazy (`ir.Lazy`): free output until a trigger starts the call section, triggers
  not counting inside reasoning; with `lazy` off, reasoning, then content or content and calls;
* `Request.reading`: the wider language the parser reads (`_Reading`), which Lark parses with.

Free text stops at the first marker the parser would react to (`ir.Text`). Tagged values are
typed by the tool's schema; where keys have no marker before them (`name(key=value)`), a comma
ends a raw value only before the next `key=` (`ir.Weak`).

The analysis is read in its `to_dict()` form. Standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

from autoparser.language.ir import (
    ARGUMENTS,
    CALL,
    CALL_ID,
    CONTENT,
    EMPTY,
    MEMBER,
    NEXT_CALL,
    REASONING,
    SECTION,
    TOOL_NAME,
    Bracketed,
    Capture,
    Chars,
    Gap,
    Guard,
    Json,
    Language,
    Lazy,
    Lit,
    Members,
    Node,
    PyValue,
    RawString,
    Repeat,
    Rule,
    Seq,
    Text,
    Weak,
    choice,
    optional,
    seq,
)
from autoparser.language.request import (
    CLOSED,
    FREE,
    IMPLIED,
    KEY_HOLE,
    NAME_FORBIDDEN,
    OPEN,
    args_keys,
    bare_fence,
    core,
    is_weak,
    start_state,
)
from autoparser.language.request import thinking_enabled as _thinking_enabled
from autoparser.tool_calls import INDEX_HOLE

GAP_MAX = 4  # whitespace allowed around structural markers (the parser ignores it)
JSON_SPACE = 20  # whitespace inside JSON; bounded, as a small model could pad forever
ID_CHARS = Chars("a-zA-Z0-9_.:\\-", 1, 64)
KEY_CHARS = Chars("a-zA-Z0-9_.\\-", 1, 64)
MAX_KEY = 256  # the longest key or name the parser reads
INDEX_DIGITS = Chars("0-9", 1, 4)
CALL_FORMATS = ("json", "tag_json", "tag_tagged")

_TOOL_DEFAULTS: dict[str, Any] = {
    "supported": False, "format": "none", "parallel": False, "name_field": "name", "args_field": "arguments",
    "id_field": None, "function_field": None, "array": False, "args_as_string": False, "arg_string_raw": True,
    "arg_end_keyed": False, "arg_python": False, "id_before_name": False, "content_allowed": True,
    "opened_by_prompt": False, "call_index": "",
}


@dataclass(frozen=True)
class Request:
    """What one request asks of the output (the OpenAI fields, and where the output starts).

    `special_tokens`: marker texts that are single tokens of the vocabulary. `lazy`: for
    ``"auto"``, free output until a trigger. `free_text_limit` caps every free text.
    `end_tokens`: texts of end-of-generation tokens; a closing marker is cut before one.
    `reading`: the language the parser reads (lenient policy), wider than the one generation
    writes: any tool name when no tools are given, JSON arguments of any shape, text between
    and after the calls as content, a reasoning block whatever `thinking` says (`_Reading`).
    """

    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: Any = "auto"
    thinking: bool | None = None
    parallel_tool_calls: bool = True
    prompt: str | None = None
    special_tokens: tuple[str, ...] = ()
    lazy: bool = True
    free_text_limit: int | None = None
    end_tokens: tuple[str, ...] = ()
    policy: str = "lenient"
    reading: bool = False


def build_language(analysis: Mapping[str, Any], request: Request) -> Language:
    """The output language of `request` for the format `analysis` describes.

    Raises ValueError for a `tool_choice` naming a tool not in `tools`."""
    return (_Reading if request.reading else _Builder)(analysis, request).build()


@dataclass(frozen=True)
class ReasoningCut:
    """Where the parser's reading separates reasoning from the answer (marker cores), for a
    stage that cuts reasoning off before another parser reads the rest with no reasoning at all
    (a serving engine's reasoning parser).

    `start_state`: where the output starts (`request.OPEN`, `FREE`, `IMPLIED`; `CLOSED`: no
    reasoning is read). `interrupts`: what ends reasoning that no end marker closed; they begin
    the answer. `implied`: text the output did not open as reasoning is reasoning when an end
    marker follows it, unless one of `answer_openers` comes first."""

    start_state: str
    start: str = ""
    end: str = ""
    interrupts: tuple[str, ...] = ()
    implied: bool = False
    answer_openers: tuple[str, ...] = ()


def reasoning_cut(analysis: Mapping[str, Any], request: Request) -> ReasoningCut:
    """How the parser reading `request`'s output separates its reasoning from the answer."""
    reading = _Reading(analysis, replace(request, reading=True))
    start, end = reading.r.start.strip(), reading.r.end.strip()
    if reading.opened or reading.r.mode == "none" or not end:
        return ReasoningCut(CLOSED)
    if reading.in_messages() and reading.header_leads():
        # a reply written as messages: its reasoning is a message of its own, however the
        # prompt ended (cut here where it comes first)
        return ReasoningCut(OPEN if reading.forced else FREE, start, end)
    if not reading.reads_reasoning():
        return ReasoningCut(CLOSED)
    implied = reading.implies_reasoning()
    openers = tuple(reading.call_openers()) if implied else ()
    return ReasoningCut(reading.start, start, end, reading.interrupts(), implied, openers)


# -- tools and tool_choice ---------------------------------------------------------------------


def tool_function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = tool.get("function", tool)
    return fn if isinstance(fn, Mapping) else {}


def tool_name(tool: Mapping[str, Any]) -> str:
    return str(tool_function(tool).get("name", ""))


def chosen_tools(tools: list[Mapping[str, Any]], tool_choice: Any) -> tuple[str, list[Mapping[str, Any]]]:
    """Normalize `tool_choice` to ("none"|"auto"|"required", tools it allows)."""
    if isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function", tool_choice)
        name = fn.get("name") if isinstance(fn, Mapping) else None
        chosen = [t for t in tools if tool_name(t) == name]
        if not chosen:
            raise ValueError(f"tool_choice names {name!r}, which is not among the tools")
        return "required", chosen
    choice_ = tool_choice or "auto"
    if choice_ not in ("none", "auto", "required"):
        raise ValueError(f"tool_choice must be 'none', 'auto', 'required' or a named tool, not {choice_!r}")
    return choice_, list(tools)


# -- schemas, as far as the layout of tagged arguments needs them -------------------------------


def is_plain_string(schema: Any) -> bool:
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


def resolve_ref(root: Any, ref: Any) -> Any:
    """The target of a local ``$ref`` (``#/$defs/x``) in `root`; None when it does not resolve."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node = root
    for part in (p for p in ref[1:].split("/") if p):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def object_shape(root: Any) -> dict[str, Any]:
    """An object schema with a root ``$ref`` followed and ``allOf`` parts folded in, for its
    properties, required keys and `additionalProperties` (the values keep their own schemas)."""
    schema = root if isinstance(root, dict) else {}
    if "$ref" in schema:
        target = resolve_ref(root, schema["$ref"])
        schema = target if isinstance(target, dict) else {}
    return _fold_all_of(root, schema, [])


def _fold_all_of(root: Any, schema: dict[str, Any], seen: list[str]) -> dict[str, Any]:
    if not isinstance(schema.get("allOf"), list):
        return schema
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        if isinstance(part, dict) and "$ref" in part:
            if part["$ref"] in seen:
                continue
            seen.append(part["$ref"])
            target = resolve_ref(root, part["$ref"])
            part = {**(target if isinstance(target, dict) else {}), **{k: v for k, v in part.items() if k != "$ref"}}
        if not isinstance(part, dict):
            continue
        part = _fold_all_of(root, part, seen)
        for key, value in part.items():
            if key not in merged:
                merged[key] = value
            elif key == "properties" and isinstance(value, dict):
                props = dict(merged[key])
                for name, sub in value.items():
                    props[name] = sub if name not in props or props[name] == sub else {"allOf": [props[name], sub]}
                merged[key] = props
            elif key == "required" and isinstance(value, list):
                merged[key] = list(dict.fromkeys(list(merged[key]) + value))
    return merged


# -- the builder ----------------------------------------------------------------------------------


class _Builder:
    def __init__(self, analysis: Mapping[str, Any], request: Request):
        self.a = analysis
        self.r = SimpleNamespace(**{"mode": "none", "start": "", "end": "", "forced_open": False,
                                    **(analysis.get("reasoning") or {})})
        self.c = SimpleNamespace(**{"mode": "plain", "start": "", "end": "", **(analysis.get("content") or {})})
        tools = {k: v for k, v in (analysis.get("tools") or {}).items() if v is not None or k not in _STRING_FIELDS}
        self.t = SimpleNamespace(**{**_TOOL_DEFAULTS, **dict.fromkeys(_STRING_FIELDS, ""), **tools})
        self.stop = [s for s in analysis.get("stop") or []]
        self.req = request
        self.warnings: list[str] = []
        self.bare_calls = False  # set where the language reads a call's bracket as content too
        self.specials = sorted({s for s in request.special_tokens if s}, key=len, reverse=True)
        self.choice, self.tools = chosen_tools(list(request.tools or []), request.tool_choice)
        self.thinking = _thinking_enabled(dict(analysis), request.thinking)
        self.start, continued = start_state(dict(analysis), request.thinking, request.prompt)
        self.forced = self.start == OPEN
        self.continues = (REASONING if self.forced else CONTENT) if continued else ""
        self.parallel = request.parallel_tool_calls and bool(self.t.parallel)
        self.limit = request.free_text_limit
        t = self.t
        # tagged values written as literals (`name(key='text', n=3)`), keys with no marker before them
        self.literal = t.format == "tag_tagged" and (t.arg_python or not t.arg_string_raw)
        self.bare_keys = t.format == "tag_tagged" and not t.arg_start.strip()
        self.opened = t.opened_by_prompt and t.format in CALL_FORMATS and self.start != CLOSED
        if self.choice != "none" and not self.tools:
            self.choice = "none"
        self.check_call_format()

    def check_call_format(self) -> None:
        t = self.t
        if self.choice != "none" and not (t.supported and t.format in CALL_FORMATS):
            self.warnings.append(f"the template has no tool-call format the grammar knows ({t.format!r}); "
                                 "tool calls are not constrained")
            self.choice = "none"

    def language(self, root: Node) -> Language:
        reasoning_end = self.r.end.strip() if self.r.mode != "none" else ""
        return Language(root, tuple(self.warnings), self.continues, reasoning_end, self.bare_calls, CDATA)

    # -- top level ----------------------------------------------------------------------

    def build(self) -> Language:
        if self.opened:
            return self.build_opened()
        if self.choice == "none":
            return self.language(seq(self.reasoning(), self.content(None)))
        if self.choice == "required":
            section = self.section()
            return self.language(self.reasoning_then(seq(self.gap(), section), section))
        triggers = self.triggers()
        if self.req.lazy and triggers:
            guard = self.guard()
            anywhere = tuple(t for t in triggers if guard and t.strip() in self.specials
                             and t.strip() == self.calls_opener())
            return self.language(Lazy(tuple(triggers), guard, self.section(lazy_start=True), anywhere))
        if self.req.lazy:
            self.warnings.append("no trigger marks the start of a tool call; the grammar is not lazy")
        section = self.section()
        lead = self.section_lead() or None
        before = self.content(lead)
        if self.named_call_messages():  # the answer is a message of its own, ended by the separator
            before = optional(seq(before, self.marker(core((self.a.get("messages") or {}).get("separator")))))
        calls = seq(before, section) if self.t.content_allowed else section
        return self.language(self.reasoning_then(choice(self.content(None), calls), section))

    def build_opened(self) -> Language:
        """The prompt ended with the call opener: the output starts with a call's name, or (when
        content is allowed) with the recipient that introduces content (`all`)."""
        t = self.t
        recipient = Lit(self.c.start) if self.c.start.strip() else EMPTY
        content = seq(recipient, self.content(None))
        if self.choice == "none":
            return self.language(content)
        call = Rule("call", choice(*[self.call(tool, opened=True) for tool in self.tools]), CALL)
        call_end = self.call_closing()
        calls = seq(call, call_end)
        if self.parallel:
            opener = seq(self.marker(t.call_start), self.marker(t.name_start))
            sep = self.marker(t.call_separator) if t.call_separator.strip() else EMPTY
            calls = seq(calls, Repeat(Rule("call-next", seq(sep, self.gap(), opener, call, call_end), NEXT_CALL)))
        calls = Rule("tool-calls", calls, SECTION)
        if self.choice == "auto" and recipient != EMPTY:
            return self.language(choice(content, calls))
        return self.language(calls)

    # -- markers ------------------------------------------------------------------------

    def marker(self, text: str, spelled: bool = False) -> Node:
        """A marker: its special tokens (leftmost-longest) as tokens, the rest as text.
        `spelled`: its special tokens are also accepted written out as text."""
        parts: list[Node] = []
        i, plain = 0, ""
        while i < len(text):
            hit = next((s for s in self.specials if text.startswith(s, i)), None)
            if hit is None:
                plain += text[i]
                i += 1
                continue
            if plain:
                parts.append(Lit(plain))
                plain = ""
            parts.append(Lit(hit, special=True, spelled=spelled))
            i += len(hit)
        if plain:
            parts.append(Lit(plain))
        return seq(*parts)

    def gap(self) -> Node:
        return Gap(GAP_MAX)

    def until_stop(self, marker: str) -> str:
        """`marker` cut before any end-of-turn text in it: generation ends with such a token only
        once the language is complete, so it may not require it, nor anything after it."""
        for stop in [*self.stop, *self.req.end_tokens]:
            if stop.strip() and stop.strip() in marker:
                marker = marker[:marker.index(stop.strip())]
        return marker

    def closing(self, marker: str) -> Node:
        """A marker that closes a call or the section, with flexible (bounded) whitespace before
        it: the parser finds markers by their core, and templates differ in newlines."""
        core = self.until_stop(marker).strip()
        return seq(self.gap(), self.marker(core)) if core else self.gap()

    def section_closing(self) -> Node:
        return self.closing(self.t.section_end)

    def call_closing(self) -> Node:
        """The call's end marker; right after a raw value (`name(key=value)`) no whitespace
        comes between, as the parser would read it as part of the value."""
        if self.bare_keys and not self.literal:
            core = self.until_stop(self.t.call_end).strip()
            return self.marker(core) if core else EMPTY
        return self.closing(self.t.call_end)

    # -- reasoning and content ----------------------------------------------------------

    def reasoning_active(self) -> bool:
        if self.r.mode == "none" or not self.r.end.strip() or self.start == CLOSED:
            return False
        return self.forced or self.thinking

    def reasoning(self) -> Node:
        if not self.reasoning_active():
            return EMPTY
        # reasoning ends at the first end marker; an end-of-turn string would stop the parser too
        end = self.r.end.strip()  # whitespace around it belongs to the texts on either side
        text = Capture(REASONING, Text((end, *self.stop), end, self.limit, hint="reasoning"))
        closed = seq(text, self.marker(end))
        if self.forced or not self.r.start.strip():
            return closed
        # some templates write the end marker alone for an empty reasoning block
        return optional(seq(self.gap(), choice(seq(self.marker(self.r.start.strip()), closed), self.marker(end))))

    def calls_opener(self) -> str:
        """What opens the tool calls (its core); "" where calls have no marker of their own."""
        t = self.t
        opener = t.section_start or t.call_start
        if not opener.strip() and t.format in ("tag_json", "tag_tagged"):
            opener = t.name_start
        return opener.strip()

    def in_messages(self) -> bool:
        """Whether the reply is written as messages with headers (`analysis.messages`): each
        message, reasoning included, ends with its own end marker, and a call header inside the
        reasoning message is its text."""
        return bool(core((self.a.get("messages") or {}).get("body_start"))) and not self.opened

    def reasoning_then(self, rest: Node, section: Node) -> Node:
        """Reasoning, then `rest`; or reasoning with no end marker, then the call `section`.

        The parser's rule: tool calls that begin inside reasoning, with no reasoning end marker
        after them, end the reasoning there. The language holds it where the reasoning before
        the calls is not empty (an output that starts with the calls opened no reasoning). In a
        lazy language the calls opener counts inside reasoning only as its special token
        (`Lazy.anywhere`): a model writes that token to call, not to mention it."""
        closed = seq(self.reasoning(), rest)
        opener = self.calls_opener()
        if not self.reasoning_active() or not opener or self.in_messages():
            return closed
        end = self.r.end.strip()
        text = Text((end, *self.stop, opener), opener, self.limit, hint="reasoning-before-calls", nonempty=True)
        unclosed = seq(Capture(REASONING, text), section)
        if not self.forced and self.r.start.strip():
            unclosed = seq(self.gap(), self.marker(self.r.start.strip()), unclosed)
        return choice(closed, unclosed)

    def call_markers(self) -> list[str]:
        """Texts content may not contain: what opens a tool call, and every other marker the
        parser reacts to in content (reasoning and content markers, end-of-turn strings)."""
        found = [self.t.section_start or self.t.call_start, *(self.a.get("triggers") or []), *self.stop]
        if self.r.mode != "none":
            found += [self.r.start, self.r.end]
        # a recipient (`all`, the content start of a prompt-opened call) is no marker inside content
        found += [self.c.end] if self.opened else [self.c.start, self.c.end]
        return sorted({m.strip() for m in found if m and m.strip()})

    def content(self, before: str | None) -> Node:
        """Content text; `before` is the marker that follows it (None: the end of output)."""
        c = self.c
        wrapped = c.mode == "wrapped" or (c.mode == "wrapped_with_reasoning" and self.reasoning_active())
        if wrapped and c.start.strip() and c.end.strip():
            inner = Capture(CONTENT, Text(tuple(self.call_markers()), c.end, self.limit, hint="content"))
            return optional(seq(self.marker(c.start), inner, self.marker(c.end)))
        markers = self.call_markers()
        if before and before.strip() and before.strip() not in markers:
            markers.append(before.strip())
        hint = "content" if before is None else "content-before-calls"
        return Capture(CONTENT, Text(tuple(markers), before, self.limit, hint=hint))

    # -- the call section ---------------------------------------------------------------

    def section_lead(self) -> str:
        return self.t.section_start + self.t.call_start

    def triggers(self) -> list[str]:
        """The analysis's triggers that start the section (a lazy language begins at one)."""
        lead = self.section_lead().lstrip()
        # calls with no marker before them (a bare JSON object) start at the object itself
        bare_json = self.t.format == "json" and not lead
        kept = []
        for trig in self.a.get("triggers") or []:
            if trig and (lead.startswith(trig) or (lead and trig.startswith(lead))
                         or (bare_json and trig.lstrip()[:1] in ("{", "["))):
                kept.append(trig)
            elif trig:
                self.warnings.append(f"trigger {trig!r} does not start the tool-call section {lead!r}; not used")
        if not kept and lead.strip():
            kept = [lead]
        return kept

    def guard(self) -> Guard | None:
        """Where triggers must not count: inside reasoning (None: no reasoning this turn)."""
        if not self.reasoning_active():
            return None
        return Guard(self.r.start.strip(), self.r.end.strip(), self.forced)

    def section(self, lazy_start: bool = False) -> Node:
        """The tool-call section. `lazy_start`: the language begins where a trigger matched, so
        whitespace before the first marker is not part of it, and that marker also accepts its
        special tokens spelled as text (the trigger fires on text that is replayed)."""
        t = self.t
        if self.named_call_messages():
            return self.call_messages_section(lazy_start)
        call = Rule("call", choice(*[self.call(tool) for tool in self.tools]), CALL)
        section_text, first_call_text = t.section_start, t.call_start
        if lazy_start:
            if section_text:
                section_text = section_text.lstrip()
            else:
                first_call_text = first_call_text.lstrip()
        section_start = seq(self.marker(section_text, spelled=lazy_start), self.text_in_section())
        first_call_start = self.marker(first_call_text, spelled=lazy_start and not t.section_start)
        if t.format == "json" and t.array:
            calls = self.json_array(call, first_call_start)
        else:
            call_start = self.marker(t.call_start)
            call_end = self.call_closing()
            one = Rule("call-wrapped", seq(call_start, call, call_end))
            first = one if first_call_start == call_start else seq(first_call_start, call, call_end)
            calls = first
            if self.parallel:
                sep = self.call_separator()
                leading = self.gap() if not t.call_start[:1].isspace() else EMPTY
                calls = seq(first, Repeat(Rule("call-next", seq(sep, leading, one), NEXT_CALL)))
        return Rule("tool-calls", seq(section_start, calls, self.section_closing()), SECTION)

    def text_in_section(self) -> Node:
        """Text between the section's start and its first call (none as generated)."""
        return EMPTY

    def named_call_messages(self) -> bool:
        """Whether each call is a message of its own whose header names the tool and whose body
        holds the whole call (`messages.call_body_named`)."""
        m = self.a.get("messages") or {}
        return self.in_messages() and bool(m.get("call_body_named")) and "{name}" in (m.get("call_header") or "") \
            and bool(core(m.get("body_start")))

    def call_messages_section(self, lazy_start: bool) -> Node:
        """Calls written as messages: `HEADER(name) body_start call`, the messages separated by the
        message separator. A lazy language begins at the first call's own start marker (the
        trigger): the model wrote that call's header as free text."""
        t = self.t
        m = self.a.get("messages") or {}
        head, _, tail = (m.get("call_header") or "").partition("{name}")

        def message(tool: Mapping[str, Any], header: bool, start: Node) -> Node:
            call = seq(start, self.call(tool), self.call_closing())
            if not header:
                return call
            return seq(self.gap(), self.marker(head.strip()), Lit(tool_name(tool)), self.marker(tail.strip()),
                       self.marker(core(m.get("body_start"))), call)

        start = self.marker(t.call_start)
        first_start = self.marker(t.call_start.lstrip(), spelled=True) if lazy_start else start
        first = choice(*[message(tool, not lazy_start, first_start) for tool in self.tools])
        calls = first
        if self.parallel:
            nxt = choice(*[message(tool, True, start) for tool in self.tools])
            calls = seq(first, Repeat(Rule("call-next", seq(self.marker(core(m.get("separator"))), nxt), NEXT_CALL)))
        return Rule("tool-calls", seq(self.marker(t.section_start), calls, self.section_closing()), SECTION)

    def call_separator(self) -> Node:
        """What goes between two calls of one section."""
        return self.marker(self.t.call_separator) if self.t.call_separator.strip() else EMPTY

    def json_array(self, call: Node, call_start: Node) -> Node:
        """Calls as the elements of one JSON array; the brackets are added when the markers
        do not carry them (the parser treats the array punctuation as implied by `array`)."""
        t = self.t
        w = Gap(JSON_SPACE)
        opens = (t.section_start + t.call_start).rstrip().endswith("[")
        closes = (t.call_end + t.section_end).lstrip().startswith("]")
        sep = seq(w, Lit(","), w) if t.call_separator.strip() in (",", "") else self.marker(t.call_separator)
        nxt = Rule("call-next", seq(sep, call), NEXT_CALL)
        opener = seq(call_start, seq(w, Lit("[")) if not opens else EMPTY, w)
        closer = seq(w, Lit("]") if not closes else EMPTY, self.call_closing())
        return seq(opener, call, Repeat(nxt) if self.parallel else EMPTY, closer)

    def call(self, tool: Mapping[str, Any], opened: bool = False) -> Node:
        """One call of `tool`; `opened`: without its name start, which the prompt wrote."""
        t = self.t
        name = tool_name(tool)
        params = tool_function(tool).get("parameters") or {"type": "object", "properties": {}}
        hint = f"{name}-call"
        if t.format == "json":
            return Rule(hint, self.json_call(name, params))
        head = self.call_head(Capture(TOOL_NAME, self.name_node(name, quoted=False)), opened)
        if t.id_start or t.id_end:
            call_id = seq(self.marker(t.id_start), Capture(CALL_ID, ID_CHARS), self.marker(t.id_end))
            head = seq(call_id, head) if t.id_before_name else seq(head, call_id)
        if t.format == "tag_json":
            args = self.json_arguments(name, params)
            return Rule(hint, seq(head, self.args_opener(), Capture(ARGUMENTS, args), self.args_closer()))
        return Rule(hint, seq(head, self.tagged_body(name, params)))

    def tagged_body(self, name: str, params: Any) -> Node:
        """A tagged call's arguments, captured."""
        return Capture(ARGUMENTS, self.tagged_args(name, params))

    def call_head(self, name: Node, opened: bool) -> Node:
        """A tagged call's name with the markers around it (`opened`: the prompt wrote its start)."""
        return seq(EMPTY if opened else self.marker(self.t.name_start), name, self.name_end())

    def name_node(self, name: str, quoted: bool) -> Node:
        """A tool's name as written in a call: `quoted` as a JSON string."""
        return Lit(json.dumps(name, ensure_ascii=False) if quoted else name)

    def json_arguments(self, name: str, params: Any) -> Node:
        return Json("schema", name, params, params)

    def args_opener(self) -> Node:
        return self.marker(self.t.args_start)

    def args_closer(self) -> Node:
        return self.marker(self.t.args_end)

    def indexed_name_end(self) -> tuple[str, str] | None:
        """`name_end` cut around the call index the template numbers (``:0`` then ``:1``), as the
        analysis confirmed it (`tools.call_index`), or None: a number it did not confirm is part
        of the marker, written as it is."""
        head, hole, tail = (self.t.call_index or "").partition(INDEX_HOLE)
        return (head, tail) if hole else None

    def name_end(self) -> Node:
        """`name_end`; the call index the template numbers in it is read as any number."""
        indexed = self.indexed_name_end()
        if indexed is None:
            return self.marker(self.t.name_end)
        return seq(self.marker(indexed[0]), INDEX_DIGITS, self.marker(indexed[1]))

    def json_call(self, name: str, params: Any) -> Node:
        t = self.t
        w = Gap(JSON_SPACE)

        def member(key: str, value: Node) -> Node:
            return seq(Lit(json.dumps(key, ensure_ascii=False)), w, Lit(":"), w, value)

        if t.args_as_string:
            args = Json("string", note=f"tool {name}: arguments are a JSON-encoded string; "
                                       "their schema is not enforced")
        else:
            args = self.json_arguments(name, params)
        name_member = member(t.name_field, Capture(TOOL_NAME, self.name_node(name, quoted=True)))
        # the keys the parser accepts for the arguments (`arguments`, `parameters`), typed alike
        keys = choice(*[Lit(json.dumps(k, ensure_ascii=False)) for k in args_keys(t.args_field)])
        args_member = seq(keys, w, Lit(":"), w, Capture(ARGUMENTS, args))
        comma = seq(w, Lit(","), w)
        fields = choice(seq(name_member, comma, args_member, w),  # templates use either order
                        seq(args_member, comma, name_member, w))
        if not t.id_field:
            id_first = id_last = EMPTY
        else:  # templates put the id first or last
            id_member = member(t.id_field, seq(Lit('"'), Capture(CALL_ID, ID_CHARS), Lit('"')))
            id_first, id_last = seq(id_member, comma), seq(Lit(","), w, id_member, w)
        if not t.function_field:
            if not t.id_field:
                return seq(Lit("{"), w, fields, Lit("}"))
            return seq(Lit("{"), w, choice(seq(id_first, fields), seq(fields, optional(id_last))), Lit("}"))
        inner = seq(Lit("{"), w, fields, Lit("}"))
        kind = optional(seq(member("type", Lit('"function"')), comma))
        return seq(Lit("{"), w, optional(id_first), kind, member(t.function_field, inner), w, Lit("}"))

    # -- tagged arguments ---------------------------------------------------------------

    def tagged_args(self, name: str, params: Any) -> Node:
        """``arg_start KEY arg_key_end VALUE arg_end`` per argument, in schema order."""
        t = self.t
        schema = object_shape(params)
        props = schema.get("properties") or {}
        required = [r for r in schema.get("required") or [] if isinstance(r, str)]
        json_key_end = t.arg_key_end_json or t.arg_key_end
        # where keys have no marker before them, a short end marker (`, `) goes between values only:
        # the parser lets the last value's end marker be left out before the call's end
        between = self.values_between()
        separator = seq(self.marker(t.arg_end), self.marker(t.arg_separator)) if between \
            else self.marker(t.arg_separator)
        members = []
        for key in list(props) + [r for r in required if r not in props]:
            value, raw = self.tagged_value(name, params, key, props.get(key, True))
            member = Rule(f"{name}-arg-{key}",
                          seq(self.marker(t.arg_start), Lit(key), self.marker(t.arg_key_end if raw else json_key_end),
                              value, EMPTY if between else self.member_end(key, raw)), MEMBER, key)
            members.append((member, key in required))
        extra = None
        if "properties" not in schema and schema.get("additionalProperties", True) is not False:
            value = PyValue(name, params, None, "$", f"{name}-extra") if self.literal else self.raw_text()
            extra = Rule(f"{name}-arg-extra",
                         seq(self.marker(t.arg_start), self.key_chars(), self.marker(t.arg_key_end), value,
                             EMPTY if between else self.extra_end()), MEMBER)
        return Members(tuple(members), separator, extra, f"{name}-args", name, params, self.any_order)

    any_order = False  # generation writes the arguments in the schema's order

    def key_chars(self) -> Node:
        """A key the schema does not name."""
        return KEY_CHARS

    def member_end(self, key: str, raw: bool) -> Node:
        """The end marker after an argument's value (`raw`: text, else JSON)."""
        return self.marker(self.arg_end(key))

    def extra_end(self) -> Node:
        """The end marker of an argument the schema does not name (none where it names the key)."""
        return EMPTY if self.t.arg_end_keyed else self.marker(self.t.arg_end)

    def arg_end(self, key: str) -> str:
        """The argument's end marker; a closing tag may name the key (`</{key}>`)."""
        t = self.t
        return t.arg_end.replace(KEY_HOLE, key) if t.arg_end_keyed else t.arg_end

    def tagged_value(self, name: str, params: Any, key: str, sub: Any) -> tuple[Node, bool]:
        """The value of one tagged argument, and whether it is raw text (else JSON)."""
        resolved = sub
        if isinstance(sub, dict) and "$ref" in sub and len(sub) == 1:
            resolved = resolve_ref(params, sub["$ref"])
        if self.literal:
            hint = f"{name}-{key}"
            return PyValue(name, params, resolved, f"$/properties/{hint}", f"{hint}-value"), \
                not self.t.arg_key_end_json
        if self.t.arg_string_raw and is_plain_string(resolved):
            text = self.comma_text() if self.comma_values() else self.raw_text(key)
            return RawString(name, params, resolved, f"$/properties/{key}", f"{name}-{key}", self.arg_end(key),
                             text, bounded=not self.comma_values()), True
        return Json("schema", name, params, sub, f"$/properties/{key}", f"{name}-args-{key}"), False

    def values_between(self) -> bool:
        """Whether a short end marker (`, `) goes between values only: keys have no marker
        before them, and values no separator of their own (else the marker closes a value,
        `key:§text§,`)."""
        t = self.t
        return self.bare_keys and is_weak(t.arg_end.strip()) and not t.arg_separator.strip()

    def comma_values(self) -> bool:
        """Whether a raw value ends at a comma (`name(key=value, key=value)`)."""
        t = self.t
        return self.bare_keys and self.limit is None and (t.arg_end.strip() or t.arg_separator.strip()) == ","

    def raw_text(self, key: str = "") -> Node:
        """Raw argument text: up to `arg_end`, containing nothing the parser would stop at."""
        t = self.t
        if self.comma_values():
            return self.comma_text()
        end = self.arg_end(key) if key else t.arg_end
        stops = (end, t.arg_start, t.call_end, t.section_end, *self.stop)
        return Text(stops, end, self.limit, hint="raw-text")

    def comma_text(self) -> Node:
        """Raw text in `name(key=value, key=value)`: a comma ends it only before a key and `=`."""
        t = self.t
        stops = (t.call_end, t.section_end, *self.stop)
        return Text(stops, weak=Weak(",", t.arg_key_end.strip() or "="), hint="comma-text")


# -- the language the parser reads ---------------------------------------------------------------

CDATA = ("<![CDATA[", "]]>")
_NOT_IN_ID = re.compile(r"[\s\"'<>]")  # markup around a call number that makes it no id

# a call of any tool, where the request gives no tools (the parser reads any name)
ANY_TOOL: Mapping[str, Any] = {"type": "function", "function": {"name": "", "parameters": {"type": "object"}}}


def _named_without_tools(request: Request) -> Request:
    """A request naming a tool in `tool_choice` but giving no tools: the parser reads calls of
    that name only, with any arguments."""
    choice = request.tool_choice
    if request.tools or not isinstance(choice, Mapping):
        return request
    fn = choice.get("function", choice)
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str) or not name:
        return request
    tool = {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    return replace(request, tools=(tool,))


class _Reading(_Builder):
    """The language the parser reads, which holds the generation language and more: what the
    lenient parser accepts from a model that writes outside the grammar.

    * any tool name when the request gives no tools, and JSON arguments of any shape;
    * text before, between and after the calls as content; content markers dropped from it;
    * a reasoning block whatever `thinking` says (templates show closed blocks), its start
      marker repeated where the prompt opened it, and reasoning with no end marker running to
      the end of the output, or to the calls when no end marker follows them;
    * where the prompt opened a call: the call, the recipient that introduces content, or
      content, then later calls and content in turn;
    * a code fence opening JSON arguments without its language tag."""

    any_order = True  # the parser reads the arguments in any order

    def __init__(self, analysis: Mapping[str, Any], request: Request):
        request = _named_without_tools(request)
        super().__init__(analysis, request)
        # the parser reads several calls whenever the request allows them, whatever the template shows
        self.parallel = request.parallel_tool_calls
        wanted, _ = chosen_tools(list(request.tools or []), request.tool_choice)
        if wanted != "none" and not request.tools:
            self.choice, self.tools = wanted, [ANY_TOOL]
            self.check_call_format()

    def build(self) -> Language:
        if self.opened:
            return self.language(self.opened_calls())
        if self.in_messages() and self.header_leads():
            return self.language(self.messages())
        # a reasoning marker first opens reasoning, or is an empty reasoning block: not text
        lead = (self.r.start, self.r.end) if self.reads_reasoning() else ()
        # where reasoning is implied, the first end marker ends it: the answer before one holds none;
        # where the output began as the answer, its first end marker is markup (`stray`)
        implied = (self.r.end.strip(),) if self.implies_reasoning() or self.stray_end() else ()
        if self.choice == "none":
            first = self.text(*implied, calls=False, not_first=lead)
            return self.language(self.with_reasoning(self.text(calls=False, not_first=lead), None, first, first))
        section = self.section(lazy_start=True)
        stray = None
        if self.req.policy == "strict":
            body = unended = self.strict_body(section, lead)
        else:
            body = seq(self.text(not_first=lead), self.calls_then_text(section))
            stray = self.text(*implied, not_first=lead)
            unended = seq(stray, self.calls_then_text(section))
        return self.language(self.with_reasoning(body, section, unended, stray))

    def strict_body(self, section: Node, lead: tuple[str, ...]) -> Node:
        """The strict policy: calls only before any content (whitespace aside); from the first
        text on, call markup is content. A text that breaks off the calls ends them: the reader
        reads what follows again from here, where it is content."""
        calls = Repeat(section, 1 if self.choice == "required" else 0, None if self.parallel else 1)
        return choice(seq(calls, self.text(calls=False)), self.text(calls=False, not_first=lead))

    # -- calls ----------------------------------------------------------------------------

    def calls_then_text(self, section: Node, *also_stop: str) -> Node:
        """Call sections, each followed by content (several where calls are parallel)."""
        most = None if self.parallel else 1
        # right after calls, what closes a call or the section, or (where calls may follow) a
        # call's opener, is markup
        t = self.t
        after = self.text(*also_stop, not_first=(t.section_end, t.call_end, t.args_end,
                                                 t.call_start if self.parallel else "",
                                                 t.call_separator if self.parallel else ""))
        return Repeat(seq(section, after), 1 if self.choice == "required" else 0, most)

    def opened_calls(self) -> Node:
        """The output starts inside a call header the prompt wrote: the rest of a call, the
        recipient that introduces content, or content; later calls and content in turn."""
        t = self.t
        recipient = seq(self.marker(self.c.start.strip()), self.gap()) if self.c.start.strip() else EMPTY
        if self.choice == "none":
            return seq(optional(recipient), self.text(calls=False))
        call = Rule("call", choice(*[self.call(tool, opened=True) for tool in self.tools]), CALL)
        called = seq(call, self.call_closing())
        heads = [called, recipient] if recipient != EMPTY else [called]
        first = seq(choice(*heads, EMPTY), self.text())
        sep = self.marker(t.call_separator) if t.call_separator.strip() else EMPTY
        opener = seq(sep, self.gap(), self.marker(t.call_start), self.marker(t.name_start))
        later = Rule("call-next", seq(opener, choice(*heads), self.text()), NEXT_CALL)
        return seq(first, Repeat(later)) if self.parallel else first

    def call_head(self, name: Node, opened: bool) -> Node:
        """As generated; where the template numbers its calls and writes no id, the header up to
        the number is the call's own id (`functions.NAME:0`), which the parser returns."""
        t = self.t
        indexed = self.indexed_name_end()
        if opened or indexed is None or t.id_start or t.id_end or _NOT_IN_ID.search(t.name_start + indexed[0]):
            return super().call_head(name, opened)
        own = Capture(CALL_ID, seq(self.marker(t.name_start), name, self.marker(indexed[0]), INDEX_DIGITS))
        return seq(own, self.marker(indexed[1]))

    def name_node(self, name: str, quoted: bool) -> Node:
        if name:
            return super().name_node(name, quoted)
        if quoted:
            return Json("string")
        t = self.t
        indexed = self.indexed_name_end()
        name_end = indexed[0] if indexed else t.name_end
        ends = [m.strip() for m in (name_end, t.id_start, t.args_start, t.arg_start, t.call_end) if m.strip()]
        # a name ends at the first character of what may follow it, as the parser reads it
        return Chars("^" + NAME_FORBIDDEN + "".join(sorted({re.escape(m[0]) for m in ends})))

    def json_arguments(self, name: str, params: Any) -> Node:
        return Json("object")  # a call's arguments are an object, whatever the tool

    def call_separator(self) -> Node:
        """As generated; calls written as bare JSON objects may also be separated by `;` or `,`,
        as the parser reads them."""
        separator = super().call_separator()
        if not self.markerless_opener() or self.t.array:
            return seq(separator, self.text_between_calls())
        return choice(separator, Lit(";"), Lit(","))

    def text_in_section(self) -> Node:
        """As between two calls: text after the section's start marker, before its first call,
        is content (inside reasoning, such markup stays undecided until the reasoning's end)."""
        return self.text_between_calls() if self.t.section_start.strip() else EMPTY

    def text_between_calls(self) -> Node:
        """Under the lenient policy, text between two calls of a section whose calls have their
        own start marker is content (the strict policy ends the calls there)."""
        t = self.t
        opener = t.call_start.strip()
        if self.req.policy == "strict" or not opener or not t.section_start.strip() or t.array:
            return EMPTY  # (calls as the elements of one JSON array have no start marker of their own)
        stops = (opener, t.section_end, *self.stop, self.r.end if self.r.mode != "none" else "")
        # a call's closing markers are no text of their own: where they may be left out, they end their call
        not_first = tuple(m for m in (opener, t.args_end.strip(), t.call_end.strip()) if m)
        text = Text(tuple(s for s in stops if s.strip()), hint="content", nonempty=True, not_first=not_first)
        return optional(seq(self.gap(), Capture(CONTENT, text)))

    def closing(self, marker: str) -> Node:
        """As generated, but with no whitespace where the marker is empty: text after the
        calls is content, its whitespace included."""
        return super().closing(marker) if self.until_stop(marker).strip() else EMPTY

    def call_closing(self) -> Node:
        """As generated; after JSON arguments, which end by their own syntax, the call's end
        marker may be left out (Kimi-K2 writes the next call's opener right after them)."""
        closing = super().call_closing()
        return optional(closing) if self.t.format == "tag_json" else closing

    def section_closing(self) -> Node:
        closing = super().section_closing()
        core = self.until_stop(self.t.section_end).strip()
        if core and core[0] in ")]}":
            return closing  # calls written as a list end with its bracket, which their syntax needs
        return optional(closing)  # the output may end before it

    def key_chars(self) -> Node:
        """A key the schema does not name, as the parser reads it: any name up to the marker that
        ends it, as long as the longest name the parser reads."""
        t = self.t
        ends = {m.strip()[0] for m in (t.arg_key_end, t.arg_key_end_json) if m.strip()}
        # no slash: after a tag's `<`, `/` begins a closing tag (`</invoke>`), not a key
        return Chars("^/" + NAME_FORBIDDEN + "".join(sorted(re.escape(c) for c in ends)), 1, MAX_KEY)

    def extra_end(self) -> Node:
        """An end marker that names the key (`</{key}>`) as any key: a value the schema does not
        name ends at the first such marker."""
        head, hole, tail = self.t.arg_end.partition(KEY_HOLE)
        return seq(self.marker(head), self.key_chars(), self.marker(tail)) if hole else super().extra_end()

    def raw_text(self, key: str = "") -> Node:
        """Raw argument text up to its end marker or an end of turn, as the parser reads it; a
        value's end marker may be left out before the call's end or the next argument where keys
        have no marker before them."""
        t = self.t
        if self.comma_values():
            return self.comma_text()
        end = self.arg_end(key) if key else t.arg_end.partition(KEY_HOLE)[0]
        enders = (t.call_end, t.arg_separator) if self.bare_keys else ()
        # a weak end marker (`, `) ends the value only where the next key follows it
        weak = Weak(end.strip(), t.arg_key_end.strip() or "=") if self.values_between() else None
        return Text((end, *self.stop, *enders), end, hint="raw-text", weak=weak)

    def cdata_text(self) -> Node:
        """A raw string wrapped in an XML CDATA section (`<![CDATA[a </b> c]]>`): the section's
        text is the value, whatever markers it holds."""
        opening, closing = CDATA
        return seq(Lit(opening), Text((closing, *self.stop), closing, hint="cdata-text"), Lit(closing))

    def member_end(self, key: str, raw: bool) -> Node:
        """As generated; after a JSON value, which ends by its own syntax, the end marker may be
        left out."""
        end = super().member_end(key, raw)
        return end if raw else optional(end)

    def tagged_value(self, name: str, params: Any, key: str, sub: Any) -> tuple[Node, bool]:
        """As generated; a JSON value as raw text, which the parser converts (a Python literal
        such as `{'a': None}` included)."""
        value, raw = super().tagged_value(name, params, key, sub)
        if isinstance(value, RawString) and not self.comma_values():
            return replace(value, text=choice(self.cdata_text(), value.text)), raw
        if not isinstance(value, Json):
            return (replace(value, nested=self.nested()) if isinstance(value, RawString) else value), raw
        text = self.raw_text(key)
        if isinstance(text, Text):
            text = replace(text, nonempty=True)  # no JSON value is written as no text
        nested = self.nested()
        if nested[:1] == ("quoted",) and self.bare_keys and isinstance(text, Text):
            # an object or array in the template's own syntax holds the quote and the separator:
            # one that opens with a bracket is read to its closing bracket
            text = choice(Bracketed(nested[1]), replace(text, not_first=(*text.not_first, "{", "[")))
        return RawString(name, params, sub, value.path, value.hint, self.arg_end(key), text, bounded=False,
                         nested=nested), raw

    def nested(self) -> tuple[str, ...]:
        """How the template writes an object or array value (`ir.RawString.nested`)."""
        t = self.t
        style = getattr(t, "arg_nested", "") or ""
        if style == "quoted" and getattr(t, "arg_nested_quote", ""):
            return ("quoted", t.arg_nested_quote)
        if style == "tags" and t.arg_start.strip():
            item = getattr(t, "arg_nested_item", "") or ""
            return ("tags", t.arg_start.strip(), t.arg_key_end.strip(), t.arg_end.strip(), item)
        return ()

    def tagged_body(self, name: str, params: Any) -> Node:
        """As generated; where each argument opens with its own marker, the body may also be one
        JSON object (`<invoke name="f">{"a": 1}</invoke>`), which the parser reads as the arguments."""
        body = super().tagged_body(name, params)
        if self.bare_keys or self.literal or not self.t.arg_start.strip():
            return body
        return choice(body, seq(Gap(JSON_SPACE), Capture(ARGUMENTS, Json("object"))))

    def tagged_args(self, name: str, params: Any) -> Node:
        """As generated; where the marker after a key says how its value is written (raw text, or
        JSON: `string="true"` / `string="false"`), any key may have either marker, and a value
        after the JSON one is read as JSON text whatever the schema says."""
        members = super().tagged_args(name, params)
        t = self.t
        json_end = t.arg_key_end_json
        if not isinstance(members, Members) or self.literal or self.bare_keys or not json_end.strip() \
                or json_end.strip() == t.arg_key_end.strip():
            return members
        schema = object_shape(params)
        props = schema.get("properties") or {}
        variants = []
        for key in props:
            value, raw = self.tagged_value(name, params, key, props[key])
            if raw and isinstance(value, RawString):  # a string written as JSON
                text = replace(value.text, nonempty=True) if isinstance(value.text, Text) else value.text
                value = replace(value, text=text, bounded=False, as_json=True)
            member = Rule(f"{name}-arg-{key}", seq(self.marker(t.arg_start), Lit(key),
                                                    self.marker(json_end if raw else t.arg_key_end), value,
                                                    self.member_end(key, raw)), MEMBER, key)
            variants.append((member, False))
        extra = members.extra
        if extra is not None:
            text = self.raw_text()
            text = replace(text, nonempty=True) if isinstance(text, Text) else text
            value = RawString(name, params, None, "$", f"{name}-extra", t.arg_end, text, bounded=False, as_json=True)
            extra = choice(extra, Rule(f"{name}-arg-extra-json", seq(self.marker(t.arg_start), KEY_CHARS,
                                                                      self.marker(json_end), value, self.extra_end()),
                                       MEMBER))
        return replace(members, items=members.items + tuple(variants), extra=extra)

    def args_opener(self) -> Node:
        """As generated, or the code fence without its language tag, or no fence at all (JSON
        arguments are read by their own syntax)."""
        fence = bare_fence(self.t.args_start)
        opener = self.marker(self.t.args_start)
        return choice(opener, seq(self.marker(fence), self.gap()), EMPTY) if fence else opener

    def args_closer(self) -> Node:
        """As generated; a closing code fence may be left out, as its opener may."""
        closer = super().args_closer()
        return optional(closer) if bare_fence(self.t.args_start) else closer

    # -- reasoning and content ------------------------------------------------------------

    def with_reasoning(self, body: Node, section: Node | None, unended: Node | None = None,
                       stray: Node | None = None) -> Node:
        """An optional reasoning block, then `body`; or reasoning with no end marker, to the
        end of the output, or to the calls (`section`) when no end marker follows them.
        `unended`: `body` as read where reasoning is implied and no marker has ended it yet;
        `stray`: the answer the output began with, up to an end marker of reasoning never opened."""
        r = self.r
        if not self.reads_reasoning():
            return body
        start, end = r.start.strip(), r.end.strip()
        inside = self.reasoning_to_answer(body, section, end)
        if self.forced:
            if not start:
                return choice(*inside)
            # the prompt opened reasoning: a start marker the model writes again first is markup,
            # and one more after it is the reasoning's text
            repeated = self.reasoning_to_answer(body, section, end, repeated=True)
            return choice(seq(self.gap(), self.marker(start), choice(*repeated)), choice(*inside))
        ends_answer = stray is not None and self.stray_end()
        options = [unended if unended is not None and (self.implies_reasoning() or ends_answer) else body,
                   seq(self.gap(), self.marker(end), body)]
        if start:
            options.append(seq(self.gap(), self.marker(start), choice(*inside)))
        if self.implies_reasoning():
            # reasoning the output did not open ends at its end marker only: call markup before
            # one makes it the answer
            stops = () if self.in_messages() else self.call_openers()
            options.append(seq(self.reasoning_text(*stops), self.marker(end), body))
        elif ends_answer:
            options.append(seq(stray, self.marker(end), body))
        return choice(*options)

    def reasoning_to_answer(self, body: Node, section: Node | None, end: str, repeated: bool = False) -> list[Node]:
        """Reasoning, then what ends it: its end marker and `body`; an interrupt and the answer;
        the end of the output; a call whose section opener was left out. `repeated`: the reasoning
        follows a start marker the model wrote again after the prompt's (one more is its text)."""
        interrupts = self.interrupts()
        inside = [seq(self.reasoning_text(repeated=repeated), self.marker(end), body)]
        if self.forced:
            inside += self.answer_ends_reasoning(body, repeated)
        if interrupts:
            inside.append(seq(self.reasoning_text(*interrupts, repeated=repeated), self.after_interrupt(section, end)))
        else:
            inside.append(self.reasoning_text(repeated=repeated))
        unopened = self.call_opener_alone()
        if unopened and section is not None and not self.in_messages():
            # a call whose section opener was left out ends the reasoning only where a call follows
            inside.append(seq(self.reasoning_text(*interrupts, unopened, repeated=repeated),
                              self.calls_then_text(section, end)))
        return inside

    def interrupts(self) -> tuple[str, ...]:
        """What ends reasoning that no end marker closes: the opener of the tool calls and the
        content's start marker. Whatever follows is the answer, read as such: calls where the
        request has them, else text (none where no reasoning is interrupted)."""
        if self.in_messages():
            return ()  # a reply written as messages: reasoning is a message, calls do not end it
        t = self.t
        found = [self.calls_opener()] if t.supported and t.format in CALL_FORMATS else []
        found.append(self.c.start.strip())
        return tuple(m for m in dict.fromkeys(found) if m and m not in (self.r.start.strip(), self.r.end.strip()))

    def after_interrupt(self, section: Node | None, end: str) -> Node:
        """The answer after reasoning an interrupt ended, from the interrupt on (nothing where
        the output ended first): the calls where the request has them, else the calls' opener
        and what follows as content; or the content's start marker and the content. An end
        marker of reasoning after it would have closed the reasoning instead."""
        options = [EMPTY]
        opener, content_start = self.calls_opener(), self.c.start.strip()
        if section is not None:
            options.append(self.calls_then_text(section, end))
        elif opener in self.interrupts():
            options.append(seq(Capture(CONTENT, self.marker(opener)), self.text(end, calls=False)))
        if content_start in self.interrupts():
            options.append(seq(self.marker(content_start), self.text(end, calls=section is not None),
                               self.calls_then_text(section, end) if section is not None else EMPTY))
        return choice(*options)

    def answer_ends_reasoning(self, body: Node, repeated: bool = False) -> list[Node]:
        """Where the prompt opened reasoning, an answer opened by its own start marker ends that
        reasoning (the reasoning's own end marker, if it follows after all, wins: first option)."""
        opener, end = self.c.start.strip(), self.r.end.strip()
        if not opener or opener == end:
            return []
        return [seq(self.reasoning_text(opener, repeated=repeated), self.marker(opener), body)]

    def message_markers(self) -> tuple[str, Node, str]:
        """In a reply written as messages, what the parser drops from the text: the separator
        between messages, and a call message's header (`to=NAME<|message|>`), with how that
        header begins ("", EMPTY, "": the reply is not written as messages)."""
        messages = self.a.get("messages") or {}
        head, hole, tail = (messages.get("call_header") or "").partition("{name}")
        if not self.in_messages() or not hole or not head.strip():
            return "", EMPTY, ""
        header = seq(self.marker(head.strip()), self.recipient(), self.marker(tail.strip()),
                     self.marker(core(messages.get("body_start"))))
        return core(messages.get("separator")), header, head.strip()

    def recipient(self) -> Node:
        """The tool a call message's header names: one of the tools where they are known (the
        reasoning and content messages' headers name a recipient too, `to=self`), else any name."""
        names = [tool_name(tool) for tool in self.tools]
        if names and all(names) and self.choice != "none":
            return choice(*[Lit(name) for name in names])
        return Chars("^" + NAME_FORBIDDEN)

    def implies_reasoning(self) -> bool:
        """Whether the output may hold reasoning it did not open: an end marker with no start
        before the answer closes it (the template expects reasoning the model opens itself)."""
        return self.reads_reasoning() and self.thinking and not self.r.start.strip()

    def stray_end(self) -> bool:
        """Whether an output that does not open with the reasoning's start marker is the answer,
        though reasoning is expected (the model writes the start marker itself): the role of
        its text is decided at once (policy.py), and an end marker in it is markup."""
        return self.reads_reasoning() and self.start == IMPLIED and bool(self.r.start.strip())

    def reads_reasoning(self) -> bool:
        return self.r.mode != "none" and bool(self.r.end.strip()) and self.start != CLOSED

    def reasoning_text(self, *also_stop: str, repeated: bool = False) -> Node:
        """Reasoning up to its end marker or `also_stop`. Where the prompt opened reasoning, a
        start marker the model repeats first is markup, unless it already did (`repeated`)."""
        stops = (self.r.end.strip(), *self.stop, *also_stop)
        first = (self.r.start,) if self.forced and not repeated else ()
        return Capture(REASONING, Text(stops, hint="reasoning", not_first=first))

    def text(self, *also_stop: str, calls: bool = True, not_first: tuple[str, ...] = ()) -> Node:
        """Content as the parser reads it: text up to what opens a call, the content markers
        dropped from it; where calls have no marker (a bare JSON object), a bracket that opens
        no call is text."""
        dropped = [m.strip() for m in ([self.c.end] if self.opened else [self.c.start, self.c.end])
                   if m.strip() and m.strip() != self.r.end.strip()]
        openers = self.call_openers() if calls else []
        separator, header, header_start = self.message_markers()
        empty = self.empty_reasoning()
        reopen = [self.r.start.strip()] if empty != EMPTY else []
        stops = tuple(s for s in dict.fromkeys([*self.stop, *also_stop, *openers, *dropped, separator, *reopen]) if s)
        bracket = self.markerless_opener() if calls else ""
        # a bracket opens a call only before what a call begins with (a key's quote, an object);
        # one that opens none is text
        weak = Weak(bracket, '"' if bracket == "{" else "{", word=False, leads=True) if bracket else None
        self.bare_calls = self.bare_calls or bool(bracket)
        text = Text(stops, weak=weak, hint="content", nonempty=True,
                    not_first=tuple(m for m in (*not_first, header_start) if m))
        parts = [Capture(CONTENT, text), *[self.marker(m) for m in dropped + [separator] if m]]
        if header != EMPTY:
            parts.append(header)  # an empty part would only repeat nothing
        if calls and self.name_opener():
            parts.append(Capture(CONTENT, Lit(self.name_opener())))  # a tag that opens no call is text
        if empty != EMPTY:
            parts.append(empty)
        return Repeat(choice(*parts))

    def empty_reasoning(self) -> Node:
        """An empty reasoning block inside the answer (a model re-opening its thought channel
        and closing it at once): markup, not text (EMPTY: reasoning has no start marker)."""
        start, end = self.r.start.strip(), self.r.end.strip()
        if not self.reads_reasoning() or not start or self.in_messages():
            return EMPTY
        return seq(self.marker(start), self.gap(), self.marker(end))

    def call_openers(self) -> list[str]:
        """What makes the parser read a call in content."""
        return [m for m in (self.calls_opener(), self.markerless_opener(), self.call_opener_alone(),
                            self.name_opener()) if m]

    def call_opener_alone(self) -> str:
        """A call's own opener where the section has an opener of its own: a model that leaves
        the section's opener out starts its calls with it ("": no such marker)."""
        t = self.t
        section, call = t.section_start.strip(), t.call_start.strip()
        if self.choice == "none" or not self.parallel or not section or not call or (t.format == "json" and t.array):
            return ""  # (with one call only, a call after the calls is text)
        # a marker that text may also hold (`:S`, `, `) would make text before the calls ambiguous
        return "" if is_weak(section) or is_weak(call) else call

    def name_opener(self) -> str:
        """A name marker that is a tag of its own (`<function=`), which also opens a call whose
        opener the model left out ("": none)."""
        t = self.t
        name = t.name_start.strip()
        if t.format not in ("tag_json", "tag_tagged") or not t.call_start.strip() or t.section_start.strip():
            return ""
        return name if name.startswith("<") and not is_weak(name) else ""

    def section(self, lazy_start: bool = False) -> Node:
        """As generated; or its calls without the section's opener (`call_opener_alone`); or,
        where a name marker is a tag of its own, a call without its opener (`name_opener`)."""
        full = super().section(lazy_start)
        options = [full]
        body = full.body if isinstance(full, Rule) else None
        if self.call_opener_alone() and isinstance(body, Seq) and len(body.items) >= 2:
            options.append(Rule("tool-calls-unopened", seq(*body.items[1:]), SECTION))
        if self.name_opener():
            call = Rule("call", choice(*[self.call(tool) for tool in self.tools]), CALL)
            options.append(Rule("call-unopened", seq(call, self.call_closing())))
        return choice(*options)

    def markerless_opener(self) -> str:
        """The bracket that opens JSON calls written with no marker before them ("": none)."""
        t = self.t
        if t.format != "json" or t.section_start.strip() or t.call_start.strip():
            return ""
        return "[" if t.array else "{"


    # -- a reply written as messages ----------------------------------------------------------

    def messages(self) -> Node:
        """A reply written as messages (`analysis.messages`), each read by its header, the text
        before the body marker: a header holding the reasoning header's own words opens
        reasoning; one naming a tool after the call header's prefix (`to=functions.NAME`), a call;
        any other header, the answer. Models vary headers (channel and recipient in either order,
        more words), so only those words decide. Text with no header is content, whatever markup
        it holds; so is a message whose header is none of these (a tool not asked for). Between
        messages: the separator, the turn re-opened, a call's or the answer's end marker."""
        m = self.a.get("messages") or {}
        enders = self.message_enders()
        betweens = [core(m.get("separator")), core(m.get("opener")), core(self.until_stop(self.t.call_end)),
                    core(self.c.end)]
        betweens = [b for b in dict.fromkeys(betweens) if b and b not in [core(s) for s in self.stop]]
        messages = [self.reasoning_message(), *self.call_messages(), self.answer_message(),
                    Capture(CONTENT, Text(enders[1:], hint="content", nonempty=True, not_first=self.header_leads()))]
        reply = Repeat(choice(*[self.marker(b) for b in betweens], *[m for m in messages if m != EMPTY]))
        if self.continues == CONTENT or self.forced:  # the prompt opened a message's body
            role = REASONING if self.forced else CONTENT
            return seq(Capture(role, Text(enders[1:], hint=role)), reply)
        return reply

    def message_enders(self) -> tuple[str, ...]:
        """The body marker, then what ends a message's body: the separator, an end of turn, the
        answer's end marker."""
        m = self.a.get("messages") or {}
        found = [core(m.get("body_start")), core(m.get("separator")), *[core(s) for s in self.stop], core(self.c.end)]
        return tuple(dict.fromkeys(f for f in found if f))

    def header_leads(self) -> tuple[str, ...]:
        """How the template's message headers begin: a tag, a word (`to=`), or a symbol."""
        m = self.a.get("messages") or {}
        headers = (m.get("reasoning_header"), m.get("content_header"), (m.get("call_header") or "").replace("{name}", ""))
        leads = [_HEADER_LEAD.match(core(h)) for h in headers if core(h)]
        return tuple(dict.fromkeys(lead.group() for lead in leads if lead))

    def call_prefix(self) -> str:
        """What names a call's recipient in a header (`to=functions.`); "" where calls are off."""
        m = self.a.get("messages") or {}
        head, hole, _ = (m.get("call_header") or "").partition("{name}")
        return core(head) if hole and self.choice != "none" else ""

    def header_words(self, which: str, other: str) -> list[str]:
        """The words of one header (`which`) that the other does not hold, in order."""
        m = self.a.get("messages") or {}
        others = set(_HEADER_WORD.findall(m.get(other) or ""))
        return [w for w in dict.fromkeys(_HEADER_WORD.findall(m.get(which) or "")) if w not in others]

    def header_text(self, *also_stop: str, lead: str = "") -> Node:
        """Header text up to the body marker (or a word that decides the header); after `lead`,
        it does not begin with the rest of the call prefix (that header is a call's)."""
        prefix = self.call_prefix()
        rest = prefix[len(lead):] if lead and prefix.startswith(lead) and prefix != lead else ""
        stops = (*self.message_enders(), *also_stop)
        return Text(tuple(s for s in dict.fromkeys(stops) if s), hint="header", not_first=(rest,) if rest else ())

    def reasoning_message(self) -> Node:
        if self.r.mode == "none":
            return EMPTY
        words = self.header_words("reasoning_header", "content_header")
        if not words:
            return EMPTY
        m = self.a.get("messages") or {}
        prefix = self.call_prefix()
        # a call prefix in a header ends the reasoning (that header is a call's), unless the
        # reasoning header is itself written with it (`to=self`)
        cut = (prefix,) if prefix and prefix not in core(m.get("reasoning_header")) else ()
        body = Capture(REASONING, Text(self.message_enders()[1:], hint="reasoning"))
        options = []
        for lead in self.header_leads():
            parts: list[Node] = [self.marker(lead)]
            for index, word in enumerate(words):
                parts += [self.header_text(word, *cut, lead=lead if index == 0 else ""), Lit(word)]
            parts += [self.header_text(*cut), self.marker(self.message_enders()[0]), body]
            options.append(seq(*parts))
        return choice(*options)

    def answer_message(self) -> Node:
        words = self.header_words("reasoning_header", "content_header") if self.r.mode != "none" else []
        prefix = self.call_prefix()
        body = Capture(CONTENT, Text(self.message_enders()[1:], hint="content"))
        stops = (*words, prefix) if prefix else tuple(words)
        return choice(*[seq(self.marker(lead), self.header_text(*stops, lead=lead),
                            self.marker(self.message_enders()[0]), body) for lead in self.header_leads()])

    def call_messages(self) -> list[Node]:
        """A call's message: the header naming the tool, then the call's arguments (or, where
        the body names the tool itself, the whole call)."""
        prefix = self.call_prefix()
        if not prefix:
            return []
        m = self.a.get("messages") or {}
        body_start = self.marker(self.message_enders()[0])
        others = [lead for lead in self.header_leads() if not prefix.startswith(lead)]
        before = choice(EMPTY, *[seq(self.marker(lead), self.header_text(prefix)) for lead in others])
        if m.get("call_body_named"):
            t = self.t
            call = Rule("call", choice(*[self.call(tool) for tool in self.tools]), CALL)
            body = seq(self.gap(), self.marker(t.call_start), call, self.call_closing())
            return [seq(before, self.marker(prefix), self.recipient(), self.header_text(), body_start, body)]
        calls = []
        for tool in self.tools:
            name = tool_name(tool)
            params = tool_function(tool).get("parameters") or {"type": "object", "properties": {}}
            if self.t.format == "tag_tagged":
                args = seq(Capture(ARGUMENTS, self.tagged_args(name, params)))
            else:
                args = seq(self.args_opener(), Capture(ARGUMENTS, self.json_arguments(name, params)),
                           self.marker(self.t.args_end))
            head = seq(before, self.marker(prefix), Capture(TOOL_NAME, self.name_node(name, quoted=False)))
            calls.append(Rule(f"{name}-message", seq(head, self.header_text(), body_start, self.gap(), args)))
        return calls


_HEADER_LEAD = re.compile(r"<[^<>]*>|\w+=?|\S")  # how a header begins: a tag, a word (`to=`), a symbol
_HEADER_WORD = re.compile(r"[A-Za-z_]\w*")

_STRING_FIELDS = ("section_start", "section_end", "call_start", "call_end", "call_separator", "name_start",
                  "name_end", "args_start", "args_end", "arg_start", "arg_key_end", "arg_end", "arg_separator",
                  "arg_key_end_json", "id_start", "id_end")

__all__ = ["ReasoningCut", "Request", "build_language", "chosen_tools", "is_plain_string", "object_shape",
           "reasoning_cut", "resolve_ref"]
