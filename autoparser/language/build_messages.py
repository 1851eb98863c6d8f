"""A reply written as messages (`analysis.messages`, channels such as gpt-oss's): each message
read by its header, the text before its body marker. A part of the language the parser reads
(`build_reading._Reading`). Standard library only.
"""

from __future__ import annotations

import re
from typing import Any

from autoparser.language.build_tools import tool_function, tool_name
from autoparser.language.ir import (
    ARGUMENTS,
    CALL,
    CONTENT,
    EMPTY,
    REASONING,
    TOOL_NAME,
    Capture,
    Chars,
    Lit,
    Node,
    Repeat,
    Rule,
    Text,
    choice,
    seq,
)
from autoparser.language.request import core

_HEADER_LEAD = re.compile(r"<[^<>]*>|\w+=?|\S")  # how a header begins: a tag, a word (`to=`), a symbol
_HEADER_WORD = re.compile(r"[A-Za-z_]\w*")
_TAG_LEAD = re.compile(r"<[^<>]+>")
_SPACE = Chars(" \\t\\r\\n", 1, 16)
_WORD = Chars("a-zA-Z0-9_.\\-", 1, 64)
# a tag the template does not write (`<|constrain|>`), read up to its `>`
_TAG = seq(Chars("<", 1, 1), Chars("|a-zA-Z0-9_", 1, 30), Chars(">", 1, 1))


class _Messages:
    """The nodes of a reply written as messages; a mixin of `build_reading._Reading`."""

    m: Any
    t: Any
    r: Any
    c: Any
    stop: Any
    tools: Any
    choice: str
    continues: Any
    forced: Any

    def messages(self) -> Node:
        """A reply written as messages (`analysis.messages`), each read by its header, the text
        before the body marker: a header holding the reasoning header's own words opens
        reasoning; one naming a tool after the call header's prefix (`to=functions.NAME`), a call;
        any other header, the answer. Models vary headers (channel and recipient in either order,
        more words), so only those words decide; after a tag, the channel's word must be one the
        template writes there, whole, or the message is the answer kept whole with its header
        (`unknown_channel_message`). Text with no header is content, whatever markup it holds; so
        is a message whose header is none of these (a tool not asked for). Between
        messages: the separator, the turn re-opened, a call's or the answer's end marker."""
        enders = self.message_enders()
        betweens = self.message_betweens()
        messages = [self.reasoning_message(), *self.call_messages(), self.answer_message(),
                    self.unknown_channel_message(),
                    Capture(CONTENT, Text(enders[1:], hint="content", nonempty=True, not_first=self.header_leads()))]
        reply = Repeat(choice(*[self.marker(b) for b in betweens], *[m for m in messages if m != EMPTY]))
        if self.continues == CONTENT or self.forced:  # the prompt opened a message's body
            role = REASONING if self.forced else CONTENT
            return seq(Capture(role, Text(enders[1:], hint=role)), reply)
        return reply

    def message_betweens(self) -> list[str]:
        """The markers read between messages: the separator, the turn re-opened, a call's or the
        answer's end marker (an end of turn aside: it ends the reply)."""
        m = self.m
        betweens = [core(m.separator), core(m.opener), core(self.until_stop(self.call_end_text())),
                    core(self.c.end)]
        return [b for b in dict.fromkeys(betweens) if b and b not in [core(s) for s in self.stop]]

    def message_enders(self) -> tuple[str, ...]:
        """The body marker, then what ends a message's body: the separator, an end of turn, the
        answer's end marker."""
        m = self.m
        found = [core(m.body_start), core(m.separator), *[core(s) for s in self.stop], core(self.c.end)]
        return tuple(dict.fromkeys(f for f in found if f))

    def header_leads(self) -> tuple[str, ...]:
        """How the template's message headers begin: a tag, a word (`to=`), or a symbol."""
        m = self.m
        headers = (m.reasoning_header, m.content_header, m.call_header.replace("{name}", ""))
        leads = [_HEADER_LEAD.match(core(h)) for h in headers if core(h)]
        return tuple(dict.fromkeys(lead.group() for lead in leads if lead))

    def call_prefix(self) -> str:
        """What names a call's recipient in a header (`to=functions.`); "" where calls are off."""
        head, hole, _ = self.m.call_header.partition("{name}")
        return core(head) if hole and self.choice != "none" else ""

    def recipient_lead(self) -> str:
        """How a header naming a recipient begins, where that is all of the call header before the
        tool's name and one of the headers' leads (`to=` of `to={name}`); "" where it is not."""
        head, hole, _ = self.m.call_header.partition("{name}")
        lead = core(head)
        return lead if hole and lead and lead in self.header_leads() else ""

    def header_words(self, which: str, other: str) -> list[str]:
        """The words of one header (`which`) that the other does not hold, in order."""
        others = set(_HEADER_WORD.findall(getattr(self.m, other)))
        return [w for w in dict.fromkeys(_HEADER_WORD.findall(getattr(self.m, which))) if w not in others]

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
        prefix = self.call_prefix()
        # a call prefix in a header ends the reasoning (that header is a call's), unless the
        # reasoning header is itself written with it (`to=self`)
        cut = (prefix,) if prefix and prefix not in core(self.m.reasoning_header) else ()
        body = Capture(REASONING, Text(self.message_enders()[1:], hint="reasoning"))
        options = []
        for lead in self.header_leads():
            parts: list[Node] = [self.marker(lead)]
            for index, word in enumerate(words):
                # a word of the header is whole (`analysisE` is another channel's word)
                parts += [self.header_text(word, *cut, lead=lead if index == 0 else ""), Lit(word, bounded=True)]
            parts += [self.header_text(*cut), self.marker(self.message_enders()[0]), body]
            options.append(seq(*parts))
        return choice(*options)

    def answer_message(self) -> Node:
        """The answer's message: after a tag, a channel the template writes (its first word: the
        answer's, or a call's channel written with no recipient); after another lead, any header
        that is neither reasoning's nor a call's."""
        words = self.header_words("reasoning_header", "content_header") if self.r.mode != "none" else []
        prefix = self.call_prefix()
        body = Capture(CONTENT, Text(self.message_enders()[1:], hint="content"))
        stops = (*words, prefix) if prefix else tuple(words)
        options = []
        for lead in self.header_leads():
            channels = [w for w in self.channel_words(lead) if w not in words]
            head = [Lit(word, bounded=True) for word in channels]
            options.append(seq(self.marker(lead), choice(*head) if head else EMPTY,
                               self.header_text(*stops, lead=lead), self.marker(self.message_enders()[0]), body))
        return choice(*options)

    def channel_words(self, lead: str) -> list[str]:
        """The words the template writes right after `lead` where it is a tag (a channel's name:
        `<|channel|>final`), or where it is all of the call header before the tool's name (a
        recipient: `to=user`, `to=self`), in its headers; none after any other lead."""
        m = self.m
        if not _TAG_LEAD.fullmatch(lead) and lead != self.recipient_lead():
            return []
        headers = (m.reasoning_header, m.content_header, m.call_header.replace("{name}", ""))
        found = [_HEADER_WORD.match(core(h)[core(h).index(lead) + len(lead):]) for h in headers if lead in core(h)]
        return list(dict.fromkeys(word.group() for word in found if word))

    def unknown_channel_message(self) -> Node:
        """A message whose channel (the word after a tag lead) the template never writes, or
        whose recipient (the word after a lead that is the call header's head, `to=`) is neither
        the answer's, the reasoning's nor a tool offered (a call to a tool not offered stays
        content, as in every format): the answer, kept whole (its header and body marker as
        written, then its body), so no word of it is lost; a user sees what the model addressed
        to a channel or a recipient nobody reads."""
        enders = self.message_enders()
        options = []
        for lead in self.header_leads():
            known = self.channel_words(lead)
            if not known:
                continue
            stops = enders
            if lead == self.recipient_lead():  # the tools offered are recipients too: their calls'
                known = [*known, *(tool_name(tool) for tool in self.tools if tool_name(tool))]
            else:  # a channel's word ends the header
                stops = (*enders, *known)
            header = Text(tuple(dict.fromkeys(stops)), hint="header", nonempty=True,
                          not_first=tuple(known), bounded=True)
            options.append(seq(Capture(CONTENT, seq(self.marker(lead), header, self.marker(enders[0]))),
                               Capture(CONTENT, Text(enders[1:], hint="content"))))
        return choice(*options) if options else EMPTY

    def call_header_rest(self) -> Node:
        """A call's header after the tool's name: the template's header there with its words free
        (`<|channel|>commentary json`): a tag lead the template writes and a channel word it writes
        after it, then, after whitespace, a word, which a tag may precede (the content type:
        ` <|constrain|>json`). Any other text there (`get_weather<|chaXnnel|>commentary`) is no
        call's header: the message is no call and stays content, as a call to a tool not offered
        does, so none of it is lost (read as a header, it was dropped). Options, not repeats (a
        repeat marks where recovery keeps text from): the message's text from its start is content."""
        channels = [seq(self.marker(lead), choice(*[Lit(word, bounded=True) for word in words]))
                    for lead in self.header_leads() if _TAG_LEAD.fullmatch(lead)
                    for words in [self.channel_words(lead)] if words]
        return seq(choice(EMPTY, *channels), choice(EMPTY, seq(_SPACE, choice(EMPTY, _TAG), _WORD)),
                   choice(EMPTY, _SPACE))

    def call_messages(self) -> list[Node]:
        """A call's message: the header naming the tool, then the call's arguments (or, where
        the body names the tool itself, the whole call)."""
        prefix = self.call_prefix()
        if not prefix:
            return []
        body_start = self.marker(self.message_enders()[0])
        others = [lead for lead in self.header_leads() if not prefix.startswith(lead)]
        before = choice(EMPTY, *[seq(self.marker(lead), self.header_text(prefix)) for lead in others])
        if self.m.call_body_named:
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
            calls.append(Rule(f"{name}-message", seq(head, self.call_header_rest(), body_start, self.gap(), args)))
        return calls
