"""The language the parser reads (`_Reading`): the generation language and what a lenient parser
accepts beyond it from a model that writes outside the grammar. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from autoparser.analysis_data import AnalysisData
from autoparser.language.build_generation import (
    CDATA,
    INDEX_DIGITS,
    JSON_NULL,
    JSON_SPACE,
    MAX_KEY,
    NAME_CHARS,
    PYTHON_LITERALS,
    _Builder,
)
from autoparser.language.build_messages import _Messages
from autoparser.language.build_reasoning import _Reasoning
from autoparser.language.build_tools import (
    chosen_tools,
    object_shape,
    tool_function,
    tool_name,
)
from autoparser.language.ir import (
    ARGUMENTS,
    CALL,
    CALL_ID,
    CONTENT,
    EMPTY,
    MARKUP,
    MEMBER,
    NEXT_CALL,
    SECTION,
    TOOL_NAME,
    Bracketed,
    Capture,
    Chars,
    Gap,
    Json,
    Language,
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
from autoparser.language.mapper import member_key
from autoparser.language.request import (
    KEY_HOLE,
    NAME_FORBIDDEN,
    Request,
    asks_for_json,
    assistant_header,
    bare_fence,
    core,
    is_weak,
    schema_type,
)
from autoparser.tool_calls import JSON_TYPES, NAME_HOLE, TagCalls, TaggedArguments

# -- the language the parser reads ---------------------------------------------------------------

FENCE, JSON_FENCE = "```", "```json"  # the code fence a JSON answer may be wrapped in
# a start tag left open for its first attribute, which holds the call's name (`<invoke name="`)
_ATTRIBUTE_TAG = re.compile(r"<([^\s<>/=\"']+)\s+[^\s<>/=\"']+=[\"']?\Z")
# a closing tag that ends a key's element, then the value's own opening marker: `</arg_key>\n<arg_value>`
_KEY_CLOSER = re.compile(r"(</[^<>\s/]+>)\s*\S")
_NOT_IN_ID = re.compile(r"[\s\"'<>]")  # markup around a call number that makes it no id

# a call of any tool, where the request gives no tools (the parser reads any name)
ANY_TOOL: Mapping[str, Any] = {"type": "function", "function": {"name": "", "parameters": {"type": "object"}}}
# where a call's id stands for its name (`tools.name_in_id`) and any name is read, the name is the
# id's last word that is not all digits (`functions.get_weather:0`): a word of digits, then of name
# characters that begins with no digit, then of any, each run read whole; the words after it are numbers
ID_NAME_WORD = seq(Chars("0-9", 0, 64), Chars(NAME_CHARS.replace("0-9", ""), 1, 64), Chars(NAME_CHARS, 0, 64))
ID_NUMBER = Chars("0-9", 1, 64)


def _is_word(char: str) -> bool:
    """Whether a character may be a word's (a letter, digit or underscore)."""
    return char.isalnum() or char == "_"


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


_LAST_TAG = re.compile(r"(?:<[^<>\s]+>|\[[^\[\]\s]+\])\Z")  # a header's last marker, written as a token is

# a value written as JSON text where a string would be raw: any JSON type but a string
NOT_STRING: Mapping[str, Any] = {"type": [kind for kind in JSON_TYPES if kind != "string"]}


class _Reading(_Reasoning, _Messages, _Builder):
    """The language the parser reads, which holds the generation language and more: what the
    lenient parser accepts from a model that writes outside the grammar.

    * any tool name when the request gives no tools (a name the id holds is then the id's last
      word that is not all digits), and JSON arguments of any shape;
    * text before, between and after the calls as content; content markers dropped from it;
    * a reasoning block whatever `thinking` says (templates show closed blocks), its start
      marker repeated where the prompt opened it, and reasoning with no end marker running to
      the end of the output, or to the calls when no end marker follows them;
    * where the prompt opened a call: the call, the recipient that introduces content, or
      content, then later calls and content in turn;
    * a code fence opening JSON arguments without its language tag."""

    any_order = True  # the parser reads the arguments in any order

    def __init__(self, analysis: AnalysisData, request: Request):
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
            language = self.language(self.messages())
            # where reasoning's end marker is one read between any two messages, it stays markup
            # when the language is read again after reasoning is over (a broken call's message)
            between = core(self.r.end) in self.message_betweens()
            return replace(language, reasoning_end="") if between else language
        # a reasoning marker first opens reasoning, or is an empty reasoning block: not text
        lead = (self.r.start, self.r.end, self.bare_opener) if self.reads_reasoning() else ()
        # where reasoning is implied, the first end marker ends it: the answer before one holds none;
        # where the output began as the answer, its first end marker is markup (`stray`)
        implied = (self.r.end.strip(),) if self.implies_reasoning() or self.stray_end() else ()
        # the answer the output begins with (`leading`), and the answer after a closed reasoning
        # block (`closed`), which may begin with another block
        if self.choice == "none":
            first = self.text(*implied, calls=False, not_first=lead, leading=True)
            body = self.text(calls=False, not_first=lead, leading=True)
            closed = self.closed_answer(lambda: self.text(calls=False, not_first=lead))
            return self.language(self.with_reasoning(self.fenced(body), None, self.fenced(first), first,
                                                     self.fenced(closed)))
        section = self.section(lazy_start=True)
        stray = closed = None
        if self.req.policy == "strict":
            body = unended = self.strict_body(section, lead, leading=True)
            closed = self.strict_body(section, lead) if self.reads_reasoning() else None
        else:
            body = seq(self.text(not_first=lead, leading=True), self.calls_then_text(section))
            stray = self.text(*implied, not_first=lead, leading=True)
            unended = seq(stray, self.calls_then_text(section))
            closed = self.closed_answer(lambda: seq(self.text(not_first=lead), self.calls_then_text(section)))
        return self.language(self.with_reasoning(self.fenced(body), section, self.fenced(unended), stray,
                                                 self.fenced(closed)))

    def fenced(self, answer: Node | None) -> Node | None:
        """Where the request asks for a JSON answer (`response_format`), `answer`, or the JSON
        wrapped in a code fence (```` ```json ````, or ```` ``` ```` alone): the fence is markup,
        which every reader prefers to the text that could hold it, and the content is the JSON."""
        if answer is None or not asks_for_json(self.req.response_format):
            return answer
        opening = Rule("answer-fence", choice(Lit(JSON_FENCE), Lit(FENCE)), kind=MARKUP)
        closing = Rule("answer-fence-end", Lit(FENCE), kind=MARKUP)
        fenced = seq(self.gap(), opening, self.gap(), Capture(CONTENT, Json()), self.gap(), closing, self.gap())
        return choice(answer, fenced)

    def language(self, root: Node) -> Language:
        """As generated, after the assistant header's last marker where the output may write it
        again first (`header_again`)."""
        again = self.header_again()
        return super().language(seq(optional(Rule("header-again", self.marker(again), kind=MARKUP)), root)
                                if again else root)

    def header_again(self) -> str:
        """The assistant header's last marker, which a model may write again at the very start of
        its output (`<|assistant|>` after a prompt ending with it): markup there. Only a marker
        written like a special token (a tag with no whitespace in it, or one of the request's
        special tokens), only where the prompt ends with that header (not inside reasoning or a call
        the prompt opened, nor after a reasoning block, nor continuing a message), and never one
        that opens a part of the reply ("": none)."""
        header = assistant_header(self.a)
        prompt = self.a.generation_prompt if self.req.prompt is None else self.req.prompt
        if not header or self.opened or self.forced or self.continues or not core(prompt).endswith(header):
            return ""  # (a prompt ending in a reasoning block after the header: its end marker is handled so)
        special = next((s for s in self.specials if header.endswith(s.strip()) and s.strip()), "")
        tag = _LAST_TAG.search(header)
        last = special.strip() or (tag.group() if tag else "")
        openers = (self.r.start, self.r.end, self.c.start, self.calls_opener(), *self.stop)
        return "" if not last or any(last == core(m) for m in openers) else last

    end_dropped = False  # while `closed_answer` builds: the reasoning's end marker stops the text

    def closed_answer(self, make: Callable[[], Node]) -> Node | None:
        """The answer after a reasoning block opened (by the model or the prompt) and closed:
        what `make` builds, or what it builds with the end marker stopping its text, then that marker
        last in the output (a model closing its thought channel twice), a `MARKUP` rule every
        reader prefers to the text that could hold it; anywhere before the end it stays text.
        The first comes first: where both fail at one place (a call that broke), recovery goes on
        from it, not from a reading that still waits for that marker at the end."""
        if not self.reads_reasoning():
            return None
        body = make()
        self.end_dropped = True
        try:
            again = make()
        finally:
            self.end_dropped = False
        return choice(body, seq(again, Rule("closed-again", self.marker(self.r.end.strip()), kind=MARKUP)))

    def strict_body(self, section: Node, lead: tuple[str, ...], leading: bool = False) -> Node:
        """The strict policy: calls only before any content (whitespace aside); from the first
        text on, call markup is content. A text that breaks off the calls ends them: the reader
        reads what follows again from here, where it is content."""
        calls = Repeat(section, 1 if self.choice == "required" else 0, None if self.parallel else 1)
        return choice(seq(calls, self.text(calls=False)), self.text(calls=False, not_first=lead, leading=leading))

    # -- calls ----------------------------------------------------------------------------

    def calls_then_text(self, section: Node, *also_stop: str) -> Node:
        """Call sections, each followed by content (several where calls are parallel)."""
        most = None if self.parallel else 1
        # right after calls, what closes a call or the section, or (where calls may follow) a
        # call's opener, is markup
        t = self.t
        after = self.text(*also_stop, not_first=(t.section_end, self.call_end_text(), t.args_end,
                                                 t.call_start if self.parallel else "",
                                                 t.call_separator if self.parallel else ""))
        return Repeat(seq(section, after), 1 if self.choice == "required" else 0, most)

    def opened_calls(self) -> Node:
        """The output starts inside a call header the prompt wrote: the rest of a call, the
        recipient that introduces content, or content; later calls and content in turn."""
        t = self.t
        word = self.c.start.strip()
        # the recipient's word is not there where a word character follows it (`allow`)
        recipient = seq(Lit(word, bounded=True) if word.isidentifier() else self.marker(word),
                        self.gap()) if word else EMPTY
        # content written without a head does not begin with one (the recipient's word or a tool's
        # name), so the readings part at once and the text streams (`bounded-hold-back`)
        own = (word,) if word else ()
        if self.choice == "none":
            return self.headed_or_bare(recipient, own, calls=False)
        leads = own + tuple(m for m in (tool_name(tool) for tool in self.tools) if m)
        call = Rule("call", choice(*[self.call(tool, opened=True) for tool in self.tools]), CALL)
        called = seq(call, self.call_closing())
        heads = [called, recipient] if recipient != EMPTY else [called]
        first = self.headed_or_bare(choice(*heads), leads, calls=True)
        sep = self.marker(t.call_separator) if t.call_separator.strip() else EMPTY
        opener = seq(sep, self.gap(), self.marker(t.call_start), self.marker(t.name_start))
        later = Rule("call-next", seq(opener, choice(*heads), self.text()), NEXT_CALL)
        return seq(first, Repeat(later)) if self.parallel else first

    def headed_or_bare(self, head: Node, leads: tuple[str, ...], calls: bool) -> Node:
        """`head` then content, or content alone that does not begin with one of `leads` (words,
        bounded: `allow` does not begin with `all`) nor with a reasoning block: the output's
        first text is the answer the output begins with (`text(leading=True)`)."""
        if head == EMPTY:
            return self.text(calls=calls, leading=True)
        return choice(seq(head, self.text(calls=calls)),
                      self.text(calls=calls, not_first=leads, bounded=True, leading=True))

    def call_head(self, name: Node, opened: bool) -> Node:
        """As generated; where the template numbers its calls and writes no id, the header up to
        the number is the call's own id (`functions.NAME:0`), which the parser returns."""
        t = self.t
        indexed = self.indexed_name_end()
        if opened or indexed is None or t.id_start or t.id_end or _NOT_IN_ID.search(t.name_start + indexed[0]):
            if not opened and self.any_name() and (t.section_start + t.call_start + t.name_start).strip():
                # whitespace after the marker before a name is that marker's, as a written name
                # (`ir.Lit`) skips it: a name read as characters (no tools given) skips it too
                return super().call_head(seq(self.gap(), name), opened)
            return super().call_head(name, opened)
        own = Capture(CALL_ID, seq(self.marker(t.name_start), name, self.marker(indexed[0]), INDEX_DIGITS))
        return seq(own, self.marker(indexed[1]))

    def any_name(self) -> bool:
        """Whether calls may name any tool (no tools given): names are read as characters."""
        return self.tools == [ANY_TOOL]

    def name_node(self, name: str, quoted: bool) -> Node:
        if name:
            return super().name_node(name, quoted)
        if quoted:
            return Json("string")
        t = self.t
        indexed = self.indexed_name_end()
        name_end = indexed[0] if indexed else t.name_end
        ends = [m for m in (name_end, t.id_start, t.args_start, t.arg_start, self.call_end_text()) if m.strip()]
        # a name ends at the first character of what may follow it, as the parser reads it; where
        # that is whitespace (which ends a name) and then a word (`\n  arguments:`), the word's
        # first letter may be the name's own (`search`)
        return Chars("^" + NAME_FORBIDDEN + "".join(sorted({re.escape(m.strip()[0]) for m in ends
                                                             if not (m[0].isspace() and _is_word(m.strip()[0]))})))

    def id_holding(self, name: str) -> Node:
        """As generated; for any name (no tools given), the id's last word that is not all digits
        is the name: an id with no such word is no call."""
        if name:
            return super().id_holding(name)
        return self.id_around(Capture(TOOL_NAME, ID_NAME_WORD), ID_NUMBER)

    def json_arguments(self, name: str, params: Any) -> Node:
        return Json("object")  # a call's arguments are an object, whatever the tool

    def call_separator(self) -> Node:
        """As generated; calls written as bare JSON objects may also be separated by `;` or `,`,
        as the parser reads them."""
        separator = super().call_separator()
        if not self.markerless_opener() or self.t.array:
            return seq(separator, self.text_between_calls())
        return choice(separator, Lit(";"), Lit(","))

    def self_closed_call(self, start: Node) -> Node | None:
        """Where a call is an XML element whose start tag holds the name as an attribute
        (`<invoke name="f">` ... `</invoke>`), the call with no arguments also as that element
        self-closed (`<invoke name="f"/>`), its arguments an empty object, then what closes the
        call after the element's end tag (`call-self-closed`); None for any other format."""
        t = self.t
        tag = _ATTRIBUTE_TAG.search((t.call_start + t.name_start).strip())
        name_end, call_end = t.name_end.strip(), self.until_stop(self.call_end_text()).strip()
        end_tag = f"</{tag.group(1)}>" if tag else ""
        if not end_tag or not name_end.endswith(">") or name_end.endswith("/>") or not call_end.startswith(end_tag):
            return None
        closed_end = name_end[:-1] + "/>"
        empty = [Capture(ARGUMENTS, Members((), EMPTY, None, f"{tool_name(tool)}-args", tool_name(tool),
                                            tool_function(tool).get("parameters"), True)) for tool in self.tools]
        calls = [seq(self.marker(t.name_start), Capture(TOOL_NAME, self.name_node(tool_name(tool), quoted=False)),
                     self.marker(closed_end), args) for tool, args in zip(self.tools, empty, strict=True)]
        after = call_end[len(end_tag):]
        return seq(start, Rule("call-self-closed", choice(*calls), CALL), self.closing(after) if after else EMPTY)

    def text_in_section(self) -> Node:
        """As between two calls: text after the section's start marker, before its first call,
        is content (inside reasoning, such markup stays undecided until the reasoning's end)."""
        return self.text_between_calls(after_call=False) if self.t.section_start.strip() else EMPTY

    def text_between_calls(self, after_call: bool = True) -> Node:
        """Under the lenient policy, text between two calls of a section whose calls have their
        own start marker is content (the strict policy ends the calls there). After a call, a
        reasoning block ends that text and the calls: it is read after them (`reasoning_in_answer`);
        before the first, the section holds no call to end, and the block is text of the section."""
        t = self.t
        opener = t.call_start.strip()
        if self.req.policy == "strict" or not opener or not t.section_start.strip() or t.array:
            return EMPTY  # (calls as the elements of one JSON array have no start marker of their own)
        stops = (opener, t.section_end, *self.stop, self.r.end if self.r.mode != "none" else "",
                 self.reopens() if after_call else "")
        # a call's closing markers are no text of their own: where they may be left out, they end their call
        not_first = tuple(m for m in (opener, t.args_end.strip(), self.call_end_text().strip()) if m)
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

    def call_id(self) -> Node:
        """As generated; an id after the name that has a marker of its own may be left out, its
        end marker kept (`name[ARGS]{…}` for `name[CALL_ID]id[ARGS]{…}`)."""
        t = self.t
        written = super().call_id()
        if t.id_before_name or not t.id_start.strip() or not t.id_end.strip():
            return written
        return choice(written, self.marker(t.id_end))

    def key_chars(self) -> Node:
        """A key the schema does not name, as the parser reads it: any name up to the marker that
        ends it, as long as the longest name the parser reads."""
        t = self.t
        # the marker's first character, and its first after space unless that is a letter: the
        # key end ` as string]]` must not make `a` unreadable as a key
        markers = [m for m in (t.arg_key_end, t.arg_key_end_json) if m.strip()]
        ends = {m[0] for m in markers} | {m.strip()[0] for m in markers if not m.strip()[0].isalnum()}
        # no slash: after a tag's `<`, `/` begins a closing tag (`</invoke>`), not a key
        return Chars("^/" + NAME_FORBIDDEN + "".join(sorted(re.escape(c) for c in ends)), 1, MAX_KEY)

    def unnamed_key(self, members: Members) -> Chars:
        """A key that none of `members` names, as the parser reads it (`key_chars`)."""
        named = {key for member, _ in members.items if (key := member_key(member)) is not None}
        named = tuple(sorted(named | self.calls_begun_as_arguments()))
        return replace(self.key_chars(), excluded=named) if named else self.key_chars()

    def calls_begun_as_arguments(self) -> set[str]:
        """The tools' names, where an argument begins with the very marker a call begins with
        (`(` of `(calls (get_weather (city "Oslo")) ...)`): there a key the schema does not name
        that names a tool is a call begun again, the call before it left open (its end marker
        left out), not an argument of that call; its reading fails there, and recovery reads the
        later call from its opener (`Language.resync`). None elsewhere."""
        opener = self.t.arg_start.strip()
        if not opener or opener != self.own_call_opener():
            return set()
        return {name for name in (tool_name(tool) for tool in self.tools) if name}

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
        enders = (self.call_end_text(), t.arg_separator) if self.bare_keys else ()
        # a weak end marker (`, `) ends the value only where the next key follows it
        weak = Weak(end.strip(), t.arg_key_end.strip() or "=", cut=True) if self.values_between() else None
        indent = self.line_indent()
        if indent is not None:  # a value ends at the line break before the next key (or call)
            weak = Weak("\n", t.arg_key_end.strip(), indent=indent, header=self.own_call_opener())
        return Text((end, *self.stop, *enders), end, hint="raw-text", weak=weak or self.call_begun_again())

    def call_begun_again(self) -> Weak | None:
        """A call's opener written where a raw value runs, followed by what follows it in a call
        (the name marker, or a name and the marker after it: `<tool_call>get_weather\n<arg_key>`):
        the model began the next call, so the value ends there and its call is cut (policy rule
        `nothing-lost`), the next call read whole. The opener alone, as text a value mentions
        (`use <tool_call> tags`), is the value's text. None where a call has no such opener."""
        t = self.t
        opener = self.own_call_opener()
        if not opener or is_weak(opener) or self.comma_values():
            return None
        if t.call_start.strip() and t.name_start.strip():
            return Weak(opener, t.name_start.strip(), word=False)
        after_name = t.name_end.strip() or t.arg_start.strip()
        return Weak(opener, after_name) if after_name else None

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

    def extra_value(self, name: str, params: Any) -> Node:
        """As generated; in `name(key=value)` calls, a value of any key may be a Python literal;
        where each argument is a line of its own, a value runs to its line's end (`line_value`)."""
        value = super().extra_value(name, params)
        if isinstance(value, PyValue) and self.nested()[:1] == ("indented",) and self.line_indent() is not None:
            return self.line_value(name, params, "", None, value)
        if self.literal or not self.comma_values():
            return value
        return RawString(name, params, None, "$", f"{name}-extra", self.t.arg_end, value, bounded=False,
                         literals=PYTHON_LITERALS, null=JSON_NULL)

    def tagged_value(self, name: str, params: Any, key: str, sub: Any) -> tuple[Node, bool]:
        """As generated; a JSON value as raw text, which the parser converts (a Python literal
        such as `{'a': None}` included)."""
        value, raw = super().tagged_value(name, params, key, sub)
        if isinstance(value, RawString) and not self.comma_values():
            return replace(value, text=choice(self.cdata_text(), value.text)), raw
        if not isinstance(value, Json):
            if isinstance(value, PyValue) and self.nested()[:1] == ("indented",) and self.line_indent() is not None:
                return self.line_value(name, params, key, sub, value), raw
            if isinstance(value, PyValue) and self.nested():
                return replace(value, nested=self.nested()), raw
            if isinstance(value, RawString):  # in `name(key=value)` calls a value may be a literal
                return replace(value, nested=self.nested(), literals=PYTHON_LITERALS), raw
            return value, raw
        text, empty = self.raw_value_text(key, value.schema)
        nested = self.nested()
        if nested[:1] == ("quoted",) and self.bare_keys and isinstance(text, Text):
            # an object or array in the template's own syntax holds the quote and the separator:
            # one that opens with a bracket is read to its closing bracket
            text = choice(Bracketed(nested[1]), replace(text, not_first=(*text.not_first, "{", "[")))
        return RawString(name, params, sub, value.path, value.hint, self.arg_end(key), text, bounded=False,
                         nested=nested, null=JSON_NULL, empty=empty), raw

    def line_value(self, name: str, params: Any, key: str, sub: Any, value: PyValue) -> RawString:
        """A literal where each argument is a line of its own and objects and arrays are blocks
        below their key: its text runs up to the next line no deeper than the keys (the next key)
        or one that begins a call, as in YAML (`ir.Weak.indent`), whatever it holds (a quote left
        open, a stray bracket, nothing at all), so that no later key or call is taken in. An
        object or array (or an untyped value, which may be one) is that text read as a JSON value
        or as the block; any other value is that text read as a literal of the value's spelling."""
        text, empty = self.raw_value_text(key, value.schema)
        if schema_type(value.schema) in ("object", "array", None):
            read = {"as_json": True, "nested": self.nested(), "null": JSON_NULL, "empty": empty}
        else:
            read = {"literals": value.spelling}
        return RawString(name, params, sub, value.path, value.hint, self.arg_end(key), text, bounded=False, **read)

    def raw_value_text(self, key: str, schema: Any) -> tuple[Node, str | None]:
        """A value's raw text up to its end, and the JSON value no text is (`empty_collection`):
        the text may be empty only where no text is a value."""
        text = self.raw_text(key)
        empty = self.empty_collection(schema)
        if isinstance(text, Text):
            text = replace(text, nonempty=empty is None)  # no other JSON value is written as no text
        return text, empty

    def empty_collection(self, schema: Any) -> str | None:
        """The JSON value an argument written as no text is (`ir.RawString.empty`), None where no
        text is no value. Where the template writes an object or array as its members' or
        elements' markup alone ("tags", "indented"), an empty one is written as nothing: `{}` or
        `[]` as the schema types the argument. An untyped argument (no schema, or one without a
        type) written as nothing is the empty string `""`: the text cannot tell an empty string,
        object or array apart, and the empty string is what a raw value of no text is elsewhere."""
        kind = schema_type(schema)
        if self.nested()[:1] not in (("tags",), ("indented",)) or kind not in ("object", "array", None):
            return None
        return {"object": "{}", "array": "[]"}.get(kind, '""')

    def nested(self) -> tuple[str, ...]:
        """How the template writes an object or array value (`ir.RawString.nested`)."""
        t = self.t
        arguments = t.calls.arguments if isinstance(t.calls, TagCalls) else None
        nested = arguments.nested if isinstance(arguments, TaggedArguments) else None
        if nested is None:
            return ()
        if nested.style == "quoted" and nested.quote:
            return ("quoted", nested.quote)
        if nested.style == "bracketed":
            own = (*nested.brackets, nested.member_end) if nested.brackets else ()
            return ("bracketed", nested.start, nested.key_end, nested.end, nested.quote, *own)
        if nested.style == "indented":
            indent = self.line_indent()  # the argument's own: its block lies deeper
            if indent is None:
                return ("indented", nested.key_end, nested.item)
            return ("indented", nested.key_end, nested.item, " " * indent, *([nested.quote] if nested.quote else []))
        if nested.style == "tags" and nested.start:  # markup of its own around each member
            return ("tags", nested.start, nested.key_end, nested.end, nested.item)
        if nested.style == "tags" and t.arg_start.strip():
            return ("tags", t.arg_start.strip(), t.arg_key_end.strip(), t.arg_end.strip(), nested.item)
        return ()

    def key_alone(self, name: str) -> Node | None:
        """Where a key is an element of its own and the value's opening marker follows its closing
        tag (`<arg_key>k</arg_key>\n<arg_value>`), a key whose element is closed with no value after
        it (`<arg_key>k</arg_key></tool_call>`, or the next key's element): a member with no value,
        which adds nothing to the arguments, as the peers read it. Its closing tag is no such key's
        before the value's opener, nor where the output ends after it (the value may still come:
        the key is cut off there, as any key whose value has not begun). None for any other format."""
        t = self.t
        closer = _KEY_CLOSER.match(core(t.arg_key_end))
        if closer is None or not t.arg_start.strip() or self.values_between() or self.line_indent() is not None:
            return None
        tag = self.marker(closer.group(1))
        if not isinstance(tag, Lit):
            return None
        tag = replace(tag, not_before=core(t.arg_key_end)[closer.end(1):])
        return Rule(f"{name}-arg-key-alone", seq(self.arg_marker(), self.key_chars(), tag), MEMBER)

    def extra_json_member(self, name: str, params: Any, key: Node, extra: Node | None) -> Node | None:
        """Where keys are bare and the marker after a key says whether a string follows
        (`k:<|"|>text<|"|>`, else `k:42`), an argument the schema does not name may also be a
        JSON value, or an object or array in the template's own syntax, up to the next argument
        or the call's end."""
        if extra is None:
            return None
        text = self.raw_text()
        if isinstance(text, Text):
            text = replace(text, nonempty=True)
        nested = self.nested()
        if nested[:1] == ("quoted",) and isinstance(text, Text):
            text = choice(Bracketed(nested[1]), replace(text, not_first=(*text.not_first, "{", "[")))
        value = RawString(name, params, None, "$", f"{name}-extra", self.t.arg_end, text, bounded=False,
                          as_json=True, nested=nested, null=JSON_NULL)
        json_member = Rule(f"{name}-arg-extra-json", seq(self.arg_marker(), key,
                                                         self.json_key_end(NOT_STRING), value), MEMBER)
        return choice(extra, json_member)

    def tagged_body(self, name: str, params: Any) -> Node:
        """As generated; where each argument opens with its own marker, the body may also be one
        JSON object (`<invoke name="f">{"a": 1}</invoke>`), which the parser reads as the arguments.
        Where each argument is a line of its own, the call does not end before a line as deep as
        its arguments' (as in YAML, that line is the call's: its next argument, or text that
        breaks it, never the text after the call; cut off inside it, the call is cut off)."""
        body = super().tagged_body(name, params)
        indent = self.line_indent()
        if indent is not None:
            return seq(body, Gap(0, not_line=indent))
        if self.bare_keys or self.literal or not self.t.arg_start.strip():
            return body
        return choice(body, seq(Gap(JSON_SPACE), Capture(ARGUMENTS, Json("object"))))

    def tagged_args(self, name: str, params: Any) -> Node:
        """As generated, and arguments the schema does not name among them, as JSON arguments
        are read whatever their schema says (the value as the format writes a value of no
        schema); where the marker after a key says how its value is written (raw text, or
        JSON: `string="true"` / `string="false"`), any key may have either marker, and a value
        after the JSON one is read as JSON text whatever the schema says."""
        members = super().tagged_args(name, params)
        if not isinstance(members, Members):
            return members
        unnamed = self.unnamed_key(members)
        members = replace(members, extra=self.extra_member(name, params, unnamed))
        alone = self.key_alone(name)
        if alone is not None:
            members = replace(members, extra=choice(members.extra, alone))
        t = self.t
        json_end = t.arg_key_end_json
        if self.literal or not json_end.strip() or json_end.strip() == t.arg_key_end.strip():
            return members
        if self.bare_keys:
            return replace(members, extra=self.extra_json_member(name, params, unnamed, members.extra))
        schema = object_shape(params)
        props = schema.get("properties") or {}
        variants = []
        for key in props:
            value, raw = self.tagged_value(name, params, key, props[key])
            if raw and isinstance(value, RawString):  # a string written as JSON
                text = replace(value.text, nonempty=True) if isinstance(value.text, Text) else value.text
                value = replace(value, text=text, bounded=False, as_json=True)
            member = Rule(f"{name}-arg-{key}", seq(self.arg_marker(), Lit(key),
                                                    self.json_key_end(NOT_STRING) if raw else self.marker(t.arg_key_end),
                                                    value, self.member_end(key, raw)), MEMBER, key)
            variants.append((member, False))
        extra = members.extra
        if extra is not None:
            text = self.raw_text()
            text = replace(text, nonempty=True) if isinstance(text, Text) else text
            value = RawString(name, params, None, "$", f"{name}-extra", t.arg_end, text, bounded=False, as_json=True,
                              null=JSON_NULL)
            extra = choice(extra, Rule(f"{name}-arg-extra-json", seq(self.arg_marker(), unnamed,
                                                                      self.json_key_end(NOT_STRING), value,
                                                                      self.extra_end()),
                                       MEMBER))
        return replace(members, items=members.items + tuple(variants), extra=extra)

    def args_opener(self) -> Node:
        """As generated, or the code fence without its language tag, or no fence at all (JSON
        arguments are read by their own syntax)."""
        fence = bare_fence(self.t.args_start)
        opener = self.marker(self.t.args_start)
        return choice(opener, seq(self.marker(fence), self.gap()), EMPTY) if fence else opener

    def args_closer(self, name: str = "") -> Node:
        """As generated; a closing code fence may be left out, as its opener may. A closing tag
        named after the tool, where no tools are given, names any tool."""
        head, hole, tail = self.t.args_end.partition(NAME_HOLE)
        if hole and not name:
            closer = seq(self.marker(head), self.name_node("", False), self.marker(tail))
        else:
            closer = super().args_closer(name)
        return optional(closer) if bare_fence(self.t.args_start) else closer

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
        if self.opener_before_list():
            options.append(self.listed_calls(lazy_start))
        if self.section_lists_calls():
            options.append(self.json_listed_calls(lazy_start))
        return choice(*options)

    def section_lists_calls(self) -> bool:
        """Whether the template writes its calls, not as JSON, as the elements of one list whose
        brackets end the section's opener and begin its closer (`<|x|>[f(a=1), g()]<|/x|>`): a
        model may then write those elements as JSON call objects."""
        t = self.t
        return (t.format != "json" and not t.call_start.strip() and core(t.section_start).endswith("[")
                and core(t.section_end).startswith("]") and not is_weak(core(t.section_start)))

    def list_opener(self) -> tuple[str, str] | None:
        """Where the section's opener is a tag followed by the bracket that opens the list of its
        calls (`<|tool_call_start|>[`): the tag and the bracket, between which a model may write
        whitespace, as the list's own syntax allows; None for any other opener."""
        opener = core(self.t.section_start)
        tag = opener[:-1]
        if opener[-1:] != "[" or not tag or is_weak(tag) or tag[-1].isspace() or self.choice == "none":
            return None
        return tag, opener[-1]

    def bare_list_opener(self) -> tuple[str, str] | None:
        """Where calls are the elements of a list that its bracket alone opens, each beginning
        with its name (`[get_weather(city='Paris')]`): the bracket and what follows a call's
        name; None for any other opener."""
        t = self.t
        opener, after_name = core(t.section_start), core(t.name_end)
        if not is_weak(opener) or t.call_start.strip() or t.name_start.strip() or not after_name or \
                t.format == "json" or self.choice == "none":
            return None
        return opener, after_name

    def section_opener(self, text: str, spelled: bool) -> Node:
        """As generated; a tag and its list's bracket (`list_opener`) with whitespace between."""
        listed = self.list_opener()
        if listed is None or core(text) != "".join(listed):
            return super().section_opener(text, spelled)
        lead = text[:text.index(listed[0])]
        return seq(super().section_opener(lead + listed[0], spelled), self.gap(), self.marker(listed[1]))

    def json_listed_calls(self, lazy_start: bool) -> Node:
        """The section with its list's elements written as JSON call objects
        (`<|x|>[{"name": "f", "arguments": {…}}, …]<|/x|>`), the arguments under either key a
        JSON call's arguments are read by."""
        t = self.t
        w = Gap(JSON_SPACE)
        call = Rule("call", choice(*[Rule(f"{tool_name(tool)}-call-json",
                                          self.json_call(tool_name(tool), tool_function(tool).get("parameters")))
                                     for tool in self.tools]), CALL)
        opener = self.section_opener(t.section_start.lstrip() if lazy_start else t.section_start, spelled=lazy_start)
        more = Repeat(Rule("call-next", seq(w, Lit(","), w, call), NEXT_CALL)) if self.parallel else EMPTY
        return Rule("tool-calls-json", seq(opener, w, call, more, w, self.section_closing()), SECTION)

    def opener_before_list(self) -> bool:
        """Whether each JSON call has an opener of its own and no section holds them: a model may
        then write that opener once, followed by its calls as the elements of one JSON array."""
        t = self.t
        opener = t.call_start.strip()
        return (t.format == "json" and not t.array and bool(opener) and not t.section_start.strip()
                and not opener.endswith("[") and not is_weak(opener))

    def listed_calls(self, lazy_start: bool) -> Node:
        """The calls as one JSON array after a single call opener (`<|tool_call|>[{…}, {…}]`),
        closed as one call is."""
        t = self.t
        w = Gap(JSON_SPACE)
        call = Rule("call", choice(*[self.call(tool) for tool in self.tools]), CALL)
        opener = self.marker(t.call_start.lstrip() if lazy_start else t.call_start, spelled=lazy_start)
        more = Repeat(Rule("call-next", seq(w, Lit(","), w, call), NEXT_CALL)) if self.parallel else EMPTY
        calls = seq(opener, w, Lit("["), w, call, more, w, Lit("]"), self.call_closing())
        return Rule("tool-calls-listed", seq(calls, self.section_closing()), SECTION)

    def markerless_opener(self) -> str:
        """The bracket that opens JSON calls written with no marker before them ("": none)."""
        t = self.t
        if t.format != "json" or t.section_start.strip() or t.call_start.strip():
            return ""
        return "[" if t.array else "{"
