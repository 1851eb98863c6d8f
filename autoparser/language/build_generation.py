"""The language generation writes (`_Builder`): reasoning, content and each call format as the
template shows them, typed by the tools' schemas; GBNF is written from it. The parser reads a
wider language built on this one (`build_reading`). Standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from functools import cached_property
from typing import Any

from autoparser.analysis_data import AnalysisData
from autoparser.language.build_tools import (
    chosen_tools,
    is_plain_string,
    object_shape,
    resolve_ref,
    tool_function,
    tool_name,
)
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
    Capture,
    Chars,
    Choice,
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
    Spelling,
    Text,
    Weak,
    choice,
    optional,
    seq,
    walk,
)
from autoparser.language.request import (
    CLOSED,
    KEY_HOLE,
    OPEN,
    Request,
    args_keys,
    core,
    is_weak,
    start_state,
)
from autoparser.tool_calls import ID_HOLE, INDEX_HOLE, JSON_TYPES, NAME_HOLE, TYPE_HOLE, TagCalls

GAP_MAX = 4  # whitespace allowed around structural markers (the parser ignores it)
JSON_SPACE = 20  # whitespace inside JSON; bounded, as a small model could pad forever
ID_CHARS = Chars("a-zA-Z0-9_.:\\-", 1, 64)
# values written as Python literals (`'text'`, `"a\\"b"`, `[1, (2, 3)]`, `None`), as the readers read them
PYTHON_LITERALS = Spelling(quotes="'\"", opens="[({", closes="])}", escape="\\", separators=",", null="None",
                           true="True", false="False")
# a nullable string written as raw text is null where its whole text is JSON's word for null
JSON_NULL = "null"
KEY_CHARS = Chars("a-zA-Z0-9_.\\-", 1, 64)
MAX_KEY = 256  # the longest key or name the parser reads
INDEX_DIGITS = Chars("0-9", 1, 4)
# An id that holds the tool's name (`tools.name_in_id`): the name between identifier boundaries,
# with words and runs of boundary characters before and after it, in turn (`call.NAME.0`). Name
# characters are ASCII letters, digits, `_` and `-`; a boundary is ASCII punctuation that is no
# quote, bracket or separator. The two never meet in one run, so a reader that takes each run
# whole splits an id as generation wrote it.
NAME_CHARS = "a-zA-Z0-9_\\-"
ID_BOUNDARIES = "!#$%&*+./:?@^~"
ID_WORD = Chars(NAME_CHARS, 1, 64)
ID_SEGMENTS = 8  # the most words before the name, and after it


def class_chars(chars: str) -> str:
    """`chars` written in a character class, as regular expressions and GBNF both read it (not
    first in the class: a `^` there is itself)."""
    return "".join("\\" + c if c in "\\]-[" else c for c in chars)


CALL_FORMATS = ("json", "tag_json", "tag_tagged")

CDATA = ("<![CDATA[", "]]>")  # the section a raw value may be wrapped in (`ir.Language.value_section`)


# -- the builder ----------------------------------------------------------------------------------


class _Builder:
    def __init__(self, analysis: AnalysisData, request: Request):
        self.a = analysis
        self.r = analysis.reasoning
        self.c = analysis.content
        self.m = analysis.messages
        # the call layout read by its serialized names (`tools.section_start`, `tools.arg_end`),
        # with the values and defaults of its typed parts, flattened once
        self.t = analysis.tools.flat_view()
        self.stop = list(analysis.stop)
        self.req = request
        self.warnings: list[str] = []
        self.bare_calls = False  # set where the language reads a call's bracket as content too
        self.specials = sorted({s for s in request.special_tokens if s}, key=len, reverse=True)
        self.choice, self.tools = chosen_tools(list(request.tools or []), request.tool_choice)
        self.thinking = analysis.thinking_enabled(request.thinking)
        self.start, continued = start_state(analysis, request.thinking, request.prompt)
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
        if t.name_in_id:
            # where two names are in one id, the longest is the call's: its reading comes first
            self.tools = sorted(self.tools, key=lambda tool: -len(tool_name(tool)))
        self.check_call_format()

    @cached_property
    def bare_opener(self) -> str:
        """Where the reasoning's start marker is a token-like tag and one word (`<|channel>thought`)
        and no other marker of the reply, nor the generation prompt, writes that tag (no other word
        after it names another part: an answer's or a call's channel), the tag alone: a model may
        leave the word (and the line break after it) out ("" otherwise)."""
        start = self.r.start.strip()
        tag = FIRST_TAG.match(start)
        if tag is None or not _CHANNEL_WORD.fullmatch(start[tag.end():]):
            return ""
        others = [*_strings(self.a.content), *_strings(self.a.tools.to_dict()), *_strings(self.a.messages),
                  *self.a.stop, self.r.end, self.a.generation_prompt.replace(start, "")]
        return "" if any(tag.group() in other for other in others) else tag.group()

    def check_call_format(self) -> None:
        t = self.t
        if self.choice != "none" and not (t.supported and t.format in CALL_FORMATS):
            self.warnings.append(f"the template has no tool-call format the grammar knows ({t.format!r}); "
                                 "tool calls are not constrained")
            self.choice = "none"

    def language(self, root: Node) -> Language:
        reasoning_end = self.r.end.strip() if self.r.mode != "none" else ""
        return Language(root, tuple(self.warnings), self.continues, reasoning_end, self.bare_calls, CDATA,
                        later_call_openers(root))

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
            before = optional(seq(before, self.marker(core(self.m.separator))))
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
        comes between, as the parser would read it as part of the value. Where it writes the
        call's id (` AS {id}`), the id is read there."""
        if ID_HOLE in self.t.call_end:
            before, _, after = self.t.call_end.partition(ID_HOLE)
            written_id = seq(self.gap(), Capture(CALL_ID, ID_CHARS))
            return seq(self.closing(before), written_id, self.closing(after))
        if self.bare_keys and not self.literal:
            core = self.until_stop(self.t.call_end).strip()
            return self.marker(core) if core else EMPTY
        return self.closing(self.t.call_end)

    def call_end_text(self) -> str:
        """The call's end as text the output holds: where it writes the call's id, what comes before it."""
        return self.t.call_end.partition(ID_HOLE)[0]

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
        return optional(seq(self.gap(), choice(seq(self.reasoning_opener(), closed), self.marker(end))))

    def reasoning_opener(self) -> Node:
        """The reasoning's start marker, or its tag alone where that opens reasoning too
        (`bare_opener`), as the parser reads it."""
        start = self.r.start.strip()
        return choice(self.marker(start), self.marker(self.bare_opener)) if self.bare_opener else self.marker(start)

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
        return bool(core(self.m.body_start)) and not self.opened

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
            unclosed = seq(self.gap(), self.reasoning_opener(), unclosed)
        return choice(closed, unclosed)

    def call_markers(self) -> list[str]:
        """Texts content may not contain: what opens a tool call, and every other marker the
        parser reacts to in content (reasoning and content markers, end-of-turn strings)."""
        found = [self.t.section_start or self.t.call_start, *self.a.triggers, *self.stop]
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
        for trig in self.a.triggers:
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
        return Guard(self.r.start.strip(), self.r.end.strip(), self.forced, self.bare_opener)

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
        section_start = seq(self.section_opener(section_text, spelled=lazy_start), self.text_in_section())
        first_call_start = self.marker(first_call_text, spelled=lazy_start and not t.section_start)
        if t.format == "json" and t.array:
            calls = self.json_array(call, first_call_start)
        else:
            call_start = self.marker(t.call_start)
            call_end = self.call_closing()

            def wrapped(start: Node) -> Node:
                closed = self.self_closed_call(start)
                return seq(start, call, call_end) if closed is None else choice(seq(start, call, call_end), closed)

            one = Rule("call-wrapped", wrapped(call_start))
            first = one if first_call_start == call_start else wrapped(first_call_start)
            calls = first
            if self.parallel:
                sep = self.call_separator()
                leading = self.gap() if not t.call_start[:1].isspace() else EMPTY
                calls = seq(first, Repeat(Rule("call-next", seq(sep, leading, one), NEXT_CALL)))
        return Rule("tool-calls", seq(section_start, calls, self.section_closing()), SECTION)

    def section_opener(self, text: str, spelled: bool) -> Node:
        """The section's start marker `text` (as generated: as written)."""
        return self.marker(text, spelled)

    def text_in_section(self) -> Node:
        """Text between the section's start and its first call (none as generated)."""
        return EMPTY

    def self_closed_call(self, start: Node) -> Node | None:
        """A call with no arguments written as one empty element, after `start` (None as generated:
        the template writes every call with its closing marker)."""
        return None

    def named_call_messages(self) -> bool:
        """Whether each call is a message of its own whose header names the tool and whose body
        holds the whole call (`messages.call_body_named`)."""
        m = self.m
        return self.in_messages() and m.call_body_named and "{name}" in m.call_header and bool(core(m.body_start))

    def call_messages_section(self, lazy_start: bool) -> Node:
        """Calls written as messages: `HEADER(name) body_start call`, the messages separated by the
        message separator. A lazy language begins at the first call's own start marker (the
        trigger): the model wrote that call's header as free text."""
        t = self.t
        m = self.m
        head, _, tail = m.call_header.partition("{name}")

        def message(tool: Mapping[str, Any], header: bool, start: Node) -> Node:
            call = seq(start, self.call(tool), self.call_closing())
            if not header:
                return call
            return seq(self.gap(), self.marker(head.strip()), Lit(tool_name(tool)), self.marker(tail.strip()),
                       self.marker(core(m.body_start)), call)

        start = self.marker(t.call_start)
        first_start = self.marker(t.call_start.lstrip(), spelled=True) if lazy_start else start
        first = choice(*[message(tool, not lazy_start, first_start) for tool in self.tools])
        calls = first
        if self.parallel:
            nxt = choice(*[message(tool, True, start) for tool in self.tools])
            calls = seq(first, Repeat(Rule("call-next", seq(self.marker(core(m.separator)), nxt), NEXT_CALL)))
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
        closes = (self.call_end_text() + t.section_end).lstrip().startswith("]")
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
        named = self.id_holding(name) if t.name_in_id else Capture(TOOL_NAME, self.name_node(name, quoted=False))
        head = self.call_head(named, opened)
        if t.id_start or t.id_end:
            head = seq(self.call_id(), head) if t.id_before_name else seq(head, self.call_id())
        if t.format == "tag_json":
            args = self.json_arguments(name, params)
            return Rule(hint, seq(head, self.args_opener(), Capture(ARGUMENTS, args), self.args_closer(name)))
        return Rule(hint, seq(head, self.tagged_body(name, params)))

    def call_id(self) -> Node:
        """A tagged call's id with its markers."""
        t = self.t
        return seq(self.marker(t.id_start), Capture(CALL_ID, ID_CHARS), self.marker(t.id_end))

    def id_holding(self, name: str) -> Node:
        """The call's id written where its name would be, holding the tool's name between
        identifier boundaries; the rest of the id stops before the marker that follows it."""
        named = Capture(TOOL_NAME, self.name_node(name, quoted=False))
        return self.id_around(named, ID_WORD)

    def id_around(self, named: Node, word_after: Node) -> Node:
        """An id: words and runs of boundary characters in turn, `named` one of its words, each
        word after it a `word_after`."""
        follows = core(self.indexed_name_end()[0] if self.indexed_name_end() else self.t.name_end)
        # a boundary that begins the marker after the id would be read into the id
        boundary = Chars(class_chars(ID_BOUNDARIES.replace(follows[:1], "") if follows else ID_BOUNDARIES), 1, 4)
        before = seq(optional(boundary), Repeat(seq(ID_WORD, boundary), 0, ID_SEGMENTS))
        after = seq(Repeat(seq(boundary, word_after), 0, ID_SEGMENTS), optional(boundary))
        # whitespace before the id is the marker's, as before a name written as it is
        return seq(self.gap(), Capture(CALL_ID, seq(before, named, after)))

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

    def args_closer(self, name: str = "") -> Node:
        """The arguments' end; a closing tag may name the tool (`</{name}>`)."""
        return self.marker(self.t.args_end.replace(NAME_HOLE, name))

    def indexed_name_end(self) -> tuple[str, str] | None:
        """`name_end` cut around the call index the template numbers (``:0`` then ``:1``), as the
        analysis confirmed it (`tool_calls.CallIndex`), or None: a number it did not confirm is
        part of the marker, written as it is."""
        calls = self.t.calls
        index = calls.name.index if isinstance(calls, TagCalls) else None
        head, hole, tail = index.marker.partition(INDEX_HOLE) if index else ("", "", "")
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
        # where keys have no marker before them, a short end marker (`, `) goes between values only:
        # the parser lets the last value's end marker be left out before the call's end
        between = self.values_between()
        separator = seq(self.marker(t.arg_end), self.marker(t.arg_separator)) if between \
            else self.marker(t.arg_separator)
        members = []
        for key in list(props) + [r for r in required if r not in props]:
            value, raw = self.tagged_value(name, params, key, props.get(key, True))
            member = Rule(f"{name}-arg-{key}",
                          seq(self.arg_marker(), Lit(key),
                              self.marker(t.arg_key_end) if raw else self.json_key_end(props.get(key, True)),
                              value, EMPTY if between else self.member_end(key, raw)), MEMBER, key)
            members.append((member, key in required))
        extra = None
        if "properties" not in schema and schema.get("additionalProperties", True) is not False:
            extra = self.extra_member(name, params, self.key_chars())
        return Members(tuple(members), separator, extra, f"{name}-args", name, params, self.any_order)

    def extra_member(self, name: str, params: Any, key: Node) -> Node:
        """An argument the schema does not name, its key read by `key`."""
        t = self.t
        return Rule(f"{name}-arg-extra",
                    seq(self.arg_marker(), key, self.marker(t.arg_key_end), self.extra_value(name, params),
                        EMPTY if self.values_between() else self.extra_end()), MEMBER)

    any_order = False  # generation writes the arguments in the schema's order

    def json_key_end(self, sub: Any) -> Node:
        """The marker after a key whose value is JSON; where it names the value's JSON type
        (`TYPE_HOLE`), the types the schema allows (integers are numbers), or any type."""
        text = self.t.arg_key_end_json or self.t.arg_key_end
        if TYPE_HOLE not in text:
            return self.marker(text)
        return choice(*[self.marker(text.replace(TYPE_HOLE, kind)) for kind in schema_json_types(sub)])

    def extra_value(self, name: str, params: Any) -> Node:
        """The value of an argument the schema does not name."""
        return PyValue(name, params, None, "$", f"{name}-extra", PYTHON_LITERALS) if self.literal else self.raw_text()

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
            return PyValue(name, params, resolved, f"$/properties/{hint}", f"{hint}-value", PYTHON_LITERALS), \
                not self.t.arg_key_end_json
        if self.t.arg_string_raw and is_plain_string(resolved):
            text = self.comma_text() if self.comma_values() else self.raw_text(key)
            return RawString(name, params, resolved, f"$/properties/{key}", f"{name}-{key}", self.arg_end(key),
                             text, bounded=not self.comma_values(), null=JSON_NULL), True
        return Json("schema", name, params, sub, f"$/properties/{key}", f"{name}-args-{key}"), False

    def values_between(self) -> bool:
        """Whether a short end marker (`, `) goes between values only: keys have no marker
        before them, and values no separator of their own (else the marker closes a value,
        `key:§text§,`)."""
        t = self.t
        return self.bare_keys and is_weak(t.arg_end.strip()) and not t.arg_separator.strip()

    def arg_marker(self) -> Node:
        """The marker before each argument. Where each argument is a line of its own, its line
        break and indentation are read whole: a line indented less (the next call's) is no
        argument of this call."""
        if self.line_indent() is not None:
            return Lit(self.t.arg_start, exact=True)
        return self.marker(self.t.arg_start)

    def line_indent(self) -> int | None:
        """Where each argument is a line of its own (keys have only a line break and indentation
        before them, values no end marker): the indentation of an argument's line, after which
        a value ends at the next line no deeper than it (a deeper one is the value's nested
        block); None for any other layout."""
        t = self.t
        lead = t.arg_start
        if not self.bare_keys or "\n" not in lead or t.arg_end.strip() or t.arg_separator.strip() \
                or not t.arg_key_end.strip():
            return None
        indent = lead[lead.rindex("\n") + 1:]
        return len(indent) if indent.strip(" ") == "" else None

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
        stops = (end, t.arg_start, self.call_end_text(), t.section_end, *self.stop)
        if self.line_indent() is not None:
            return one_line_text(stops)
        return Text((*stops, *self.value_cutters()), end, self.limit, hint="raw-text")

    def value_cutters(self) -> tuple[str, ...]:
        """The markers that open the calls or one call, punctuation aside. The reader may take
        one written in a raw value for a call begun again (`_Reading.call_begun_again`): the
        grammar writes none there."""
        markers = (self.t.section_start.strip(), self.own_call_opener())
        return tuple(m for m in dict.fromkeys(markers) if m and not is_weak(m))

    def own_call_opener(self) -> str:
        """The core of the marker each call begins with: its opener, or in tagged formats its
        name marker where it has no opener ("": none)."""
        t = self.t
        call = t.call_start.strip()
        if not call and t.format in ("tag_json", "tag_tagged"):
            call = t.name_start.strip()
        return call

    def comma_text(self) -> Node:
        """Raw text in `name(key=value, key=value)`: a comma ends it only before a key and `=`."""
        t = self.t
        stops = (self.call_end_text(), t.section_end, *self.stop)
        return Text(stops, weak=Weak(",", t.arg_key_end.strip() or "=", cut=True), hint="comma-text")


def one_line_text(stops: tuple[str, ...]) -> Node:
    """Raw text where each argument is a line of its own: one line, neither beginning nor ending
    with whitespace (the parser reads a value from its first character on, up to the line break
    before the next key), holding no character a marker in `stops` begins with."""
    found = {core(s)[0] for s in stops if core(s)}
    # a class body both a regex and GBNF read alike: `\` and `]` escaped, `-` last
    firsts = "".join("\\" + c if c in "\\]" else c for c in sorted(found - {"-"})) + "-" * ("-" in found)
    edge = Chars(f"^ \\t\\n\\r{firsts}", 1, 1)
    return seq(edge, optional(seq(Chars(f"^\\n\\r{firsts}", 0, None), edge)))


def schema_json_types(sub: Any) -> tuple[str, ...]:
    """The JSON types a schema allows, by JSON's names; all of them when it does not say."""
    declared = sub.get("type") if isinstance(sub, Mapping) else None
    names = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
    kinds = {"number" if name == "integer" else name for name in names if isinstance(name, str)}
    return tuple(kind for kind in JSON_TYPES if kind in kinds) or JSON_TYPES



def later_call_openers(root: Node) -> tuple[str, ...]:
    """Where a later call begins (`Language.resync`): each `NEXT_CALL` rule's markers from its
    separator, and each `SECTION` rule's from its opener (a section written again after one
    that broke off), up to the first that holds a word, whitespace between them any whitespace."""
    found: set[str] = set()
    for node in walk(root):
        if isinstance(node, Rule) and node.kind in (NEXT_CALL, SECTION):
            found |= _openers((node.body,), "", 24)
    return tuple(sorted(found))


def _openers(items: tuple[Node, ...], prefix: str, depth: int) -> set[str]:
    """The marker runs `items` may begin with, from `prefix` on, each up to a marker holding a
    word; none where a value or text comes first."""
    if depth == 0 or not items:
        return set()
    node, rest = items[0], items[1:]
    if isinstance(node, Gap):
        return _openers(rest, prefix, depth)
    if isinstance(node, Lit):
        text = node.text.strip()
        run = f"{prefix} {text}".strip()
        if any(c.isalnum() for c in text):
            return {run}
        return _openers(rest, run, depth - 1)
    if isinstance(node, Seq):
        return _openers(node.items + rest, prefix, depth - 1)
    if isinstance(node, Choice):
        return set().union(*(_openers((option, *rest), prefix, depth - 1) for option in node.options))
    if isinstance(node, Rule | Capture):
        return _openers((node.body, *rest), prefix, depth - 1)
    if isinstance(node, Repeat):
        taken = _openers((node.item, *rest), prefix, depth - 1)
        return taken | _openers(rest, prefix, depth - 1) if node.min == 0 else taken
    return set()


_CHANNEL_WORD = re.compile(r"\s*[A-Za-z][\w-]*")  # the one word after a tag that names a channel
FIRST_TAG = re.compile(r"<[^<>\s]+>|\[[^\[\]\s]+\]")  # a marker's first part, written as a token is


def _strings(part: Any) -> list[str]:
    """Every string in an analysis part (a dataclass, dict or list, nested)."""
    if isinstance(part, str):
        return [part]
    if is_dataclass(part) and not isinstance(part, type):
        part = asdict(part)
    if isinstance(part, Mapping):
        return [s for value in part.values() for s in _strings(value)]
    if isinstance(part, list | tuple):
        return [s for value in part for s in _strings(value)]
    return []
