"""Reasoning and content in the language the parser reads (`_Reasoning`, a part of `_Reading`):
where reasoning may start and end, what ends it, and the text around the calls.
"""

from __future__ import annotations

from dataclasses import replace

from autoparser.language.build_generation import CALL_FORMATS, FIRST_TAG
from autoparser.language.build_tools import tool_name
from autoparser.language.ir import (
    AS_TEXT,
    CONTENT,
    EMPTY,
    MARKUP,
    REASONING,
    Capture,
    Chars,
    Lit,
    Node,
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
    IMPLIED,
    NAME_FORBIDDEN,
    core,
    is_weak,
)


class _Reasoning:
    """Reasoning and content, as `build_reading._Reading` reads them (a mixin: it uses the
    builder's analysis, request and markers through `self`)."""

    def with_reasoning(self, body: Node, section: Node | None, unended: Node | None = None,
                       stray: Node | None = None, closed: Node | None = None) -> Node:
        """An optional reasoning block, then `body`; or reasoning with no end marker, to the
        end of the output, or to the calls (`section`) when no end marker follows them.
        `unended`: `body` as read where reasoning is implied and no marker has ended it yet;
        `stray`: the answer the output began with, up to an end marker of reasoning never opened;
        `closed`: `body` as read after a reasoning block opened (by the model or the prompt,
        its start marker repeated or not) and closed, where the end marker again, last in the
        output, is markup (a model closing its thought channel twice)."""
        r = self.r
        if not self.reads_reasoning():
            return body
        start, end = r.start.strip(), r.end.strip()
        answer = body if closed is None else closed
        inside = self.reasoning_to_answer(answer, section, end, written=not self.forced)
        if self.forced:
            if not start:
                return choice(*inside)
            # the prompt opened reasoning: a start marker the model writes again first is markup,
            # and one more after it is the reasoning's text
            repeated = self.reasoning_to_answer(answer, section, end, repeated=True, written=True)
            return choice(seq(self.gap(), self.marker(start), choice(*repeated)),
                          *self.bare_opened(answer, section, end, repeated=True), choice(*inside))
        ends_answer = stray is not None and self.stray_end()
        options = [unended if unended is not None and (self.implies_reasoning() or ends_answer) else body,
                   seq(self.gap(), self.marker(end), body)]
        if start:
            options.append(seq(self.gap(), self.opener_again(start), self.marker(start),
                               choice(*inside, seq(self.start_again(start), choice(*inside)))))
            options += self.bare_opened(answer, section, end, repeated=False)
        if self.implies_reasoning():
            # reasoning the output did not open ends at its end marker only: call markup before
            # one makes it the answer
            stops = () if self.in_messages() else self.call_openers()
            options.append(seq(self.reasoning_text(*stops), self.marker(end), body))
        elif ends_answer:
            options.append(seq(stray, self.marker(end), body))
        return choice(*options)

    def opener_again(self, start: str) -> Node:
        """Where the reasoning's start marker is a token-like tag and a word after it
        (`<|channel>thought`), that tag written once more just before the marker
        (`<|channel><|channel>thought`): markup, a channel opened twice (nothing otherwise)."""
        tag = FIRST_TAG.match(start)
        if tag is None or not start[tag.end():].strip():
            return EMPTY
        return optional(Rule("opener-again", self.marker(tag.group()), kind=MARKUP))

    def start_again(self, start: str) -> Node:
        """The start marker written once more right after the model's own (`<think><think>`):
        markup, reasoning opened twice, as where the prompt opened it (`start-again`); one more
        after it is the reasoning's text."""
        return Rule("start-again", seq(self.gap(), self.marker(start)), kind=MARKUP)

    def bare_opened(self, body: Node, section: Node | None, end: str, repeated: bool) -> list[Node]:
        """Reasoning opened by the start marker's tag alone, its word left out (`bare_opener`):
        as after the whole marker, except that the reasoning does not begin with the word (there
        the whole marker was written: one reading, so nothing is held for the other). `repeated`:
        the prompt opened reasoning already and the model writes the tag again (markup)."""
        bare = self.bare_opener
        if not bare:
            return []
        word = self.r.start.strip()[len(bare):].strip()
        inside = self.reasoning_to_answer(body, section, end, repeated=repeated, written=True, word=word)
        return [seq(self.gap(), Rule("bare-opener", self.marker(bare)), choice(*inside))]

    def reasoning_to_answer(self, body: Node, section: Node | None, end: str, repeated: bool = False,
                            written: bool = False, word: str = "") -> list[Node]:
        """Reasoning, then what ends it: its end marker and `body`; an interrupt and the answer;
        the end of the output; a call whose section opener was left out. `repeated`: the reasoning
        follows a start marker the model wrote again after the prompt's (one more is its text);
        `written`: the model wrote a start marker before it; `word`: what the reasoning does not
        begin with (the start marker's word, after its tag alone)."""
        interrupts = self.interrupts()
        # output that opens the calls at once, reasoning unwritten, holds no reasoning even where
        # an end marker comes later: the calls are the answer (so a call in it that breaks is no
        # reasoning); after a start marker the model wrote, the calls' opener is its text
        opener = self.calls_opener() if not written and section is not None and self.calls_opener() in interrupts else ""
        unworded = (word,) if word else ()
        closed = self.reasoning_text(repeated=repeated, not_first=tuple(m for m in (opener, word) if m))
        inside = [seq(closed, self.marker(end), body)]
        if self.forced:
            inside += self.answer_ends_reasoning(body, repeated, word)
        as_text = (self.calls_opener(),)
        if interrupts:
            inside += self.reasoning_then(interrupts, as_text, self.after_interrupt(section, end), section,
                                          repeated, unworded)
        else:
            inside.append(self.reasoning_text(repeated=repeated, not_first=unworded))
        unopened = self.call_opener_alone()
        if unopened and section is not None and not self.in_messages():
            # a call whose section opener was left out ends the reasoning only where a call follows
            calls = self.calls_then_text(section, end)
            inside += self.reasoning_then((*interrupts, unopened), (*as_text, unopened), calls, section,
                                          repeated, unworded)
        return inside

    def reasoning_then(self, stops: tuple[str, ...], openers: tuple[str, ...], then: Node, section: Node | None,
                       repeated: bool, not_first: tuple[str, ...]) -> list[Node]:
        """Reasoning that no end marker closes, up to `stops`, then `then` (what one of them
        begins); and where calls may begin at `openers` (those of `stops` that open calls),
        reasoning that reads on past them as its text, any number of times, before `then`: a
        call that breaks in reasoning no end marker has closed is that reasoning's text (policy
        rule `nothing-lost`), so this reading is left where the reading of the call breaks. Only
        after reasoning text: an output that opens the calls at once holds no reasoning."""
        text = self.reasoning_text(*stops, repeated=repeated, not_first=not_first)
        openers = tuple(m for m in openers if m in stops) if section is not None else ()
        if not openers:
            return [seq(text, then)]
        opened = self.reasoning_text(*stops, repeated=repeated, not_first=not_first, nonempty=True)
        again = self.reasoning_text(*stops, repeated=True)
        markers = choice(*[self.marker(m) for m in openers])
        as_text = Repeat(Rule("call-as-reasoning", seq(Capture(REASONING, markers), again), AS_TEXT), 1)
        # one reading of the text, parting only where it ends (two would read it twice): empty,
        # it is `text` read as nothing
        return [seq(opened, choice(then, seq(as_text, then))), seq(Capture(REASONING, EMPTY), then)]

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

    def answer_ends_reasoning(self, body: Node, repeated: bool = False, word: str = "") -> list[Node]:
        """Where the prompt opened reasoning, an answer opened by its own start marker ends that
        reasoning (the reasoning's own end marker, if it follows after all, wins: first option);
        `word`: what that reasoning does not begin with."""
        opener, end = self.c.start.strip(), self.r.end.strip()
        if not opener or opener == end:
            return []
        return [seq(self.reasoning_text(opener, repeated=repeated, not_first=(word,) if word else ()),
                    self.marker(opener), body)]

    def message_markers(self) -> tuple[str, Node, str]:
        """In a reply written as messages, what the parser drops from the text: the separator
        between messages, and a call message's header (`to=NAME<|message|>`), with how that
        header begins ("", EMPTY, "": the reply is not written as messages)."""
        messages = self.m
        head, hole, tail = messages.call_header.partition("{name}")
        if not self.in_messages() or not hole or not head.strip():
            return "", EMPTY, ""
        header = seq(self.marker(head.strip()), self.recipient(), self.marker(tail.strip()),
                     self.marker(core(messages.body_start)))
        return core(messages.separator), header, head.strip()

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

    def reasoning_text(self, *also_stop: str, repeated: bool = False, not_first: tuple[str, ...] = (),
                       nonempty: bool = False) -> Node:
        """Reasoning up to its end marker or `also_stop`. Where the prompt opened reasoning, a
        start marker the model repeats first is markup, unless it already did (`repeated`);
        `not_first`: markers it does not begin with either; `nonempty`: none that is no text."""
        stops = (self.r.end.strip(), *self.stop, *also_stop)
        first = tuple(m for m in (self.r.start, self.bare_opener) if m) if self.forced and not repeated else ()
        return Capture(REASONING, Text(stops, hint="reasoning", nonempty=nonempty, not_first=(*first, *not_first),
                                       bounded=bool(self.bare_opener)))

    def marker(self, text: str, spelled: bool = False) -> Node:
        """A marker; the reasoning's start marker, where it is a tag and its channel's word
        (`bare_opener`), is not read where a word character follows the word (`<|channel>thoughtful`
        is the tag alone and reasoning that begins with `thoughtful`)."""
        node = super().marker(text, spelled)
        if not self.bare_opener or text.strip() != self.r.start.strip():
            return node
        return _bounded(node)

    def text(self, *also_stop: str, calls: bool = True, not_first: tuple[str, ...] = (),
             leading: bool = False, bounded: bool = False) -> Node:
        """Content as the parser reads it: text up to what opens a call, the content markers
        dropped from it; where calls have no marker (a bare JSON object), a bracket that opens
        no call is text. `leading`: the answer the output begins with, which does not begin with
        a reasoning block (`reasoning_in_answer`): reasoning first in the output is read by the
        rules of leading reasoning alone (what ends it there, a call's opener, is no block's)."""
        dropped = [m.strip() for m in ([self.c.end] if self.opened else [self.c.start, self.c.end])
                   if m.strip() and m.strip() != self.r.end.strip()]
        ended = (self.r.end.strip(),) if self.end_dropped and self.reads_reasoning() else ()
        openers = self.call_openers() if calls else []
        separator, header, header_start = self.message_markers()
        block, unclosed = self.reasoning_in_answer(calls)
        reopen = [self.r.start.strip()] if block != EMPTY else []
        stops = tuple(s for s in dict.fromkeys([*self.stop, *also_stop, *openers, *dropped, separator, *reopen,
                                                *ended]) if s)
        bracket = self.markerless_opener() if calls else ""
        # a bracket opens a call only before what a call begins with (a key's quote, an object);
        # one that opens none is text
        weak = Weak(bracket, '"' if bracket == "{" else "{", word=False, leads=True) if bracket else None
        listed = self.list_opener() if calls and not bracket else None
        if listed is not None:  # the section's tag opens calls only before its list's bracket
            stops = tuple(listed[0] if s == "".join(listed) else s for s in stops)
            weak = Weak(listed[0], listed[1], word=False)
        named = self.bare_list_opener() if calls and weak is None else None
        if named is not None:  # a bare list's bracket opens calls only before a name and what follows it
            weak = Weak(named[0], named[1])
        self.bare_calls = self.bare_calls or bool(bracket)
        text = Text(stops, weak=weak, hint="content", nonempty=True,
                    not_first=tuple(m for m in (*not_first, header_start) if m), bounded=bounded)
        parts = [Capture(CONTENT, text), *[self.marker(m) for m in dropped + [separator] if m]]
        if header != EMPTY:
            parts.append(header)  # an empty part would only repeat nothing
        if calls and self.name_opener():
            parts.append(Capture(CONTENT, Lit(self.name_opener())))  # a tag that opens no call is text
        if block == EMPTY:
            return Repeat(choice(*parts))
        if leading:
            return optional(seq(choice(*parts), Repeat(choice(*parts, block)), unclosed))
        return seq(Repeat(choice(*parts, block)), unclosed)

    def reasoning_in_answer(self, calls: bool) -> tuple[Node, Node]:
        """A reasoning block inside the answer (a model re-opening its thought channel after
        answer text), and one its end marker never closed, which only the end of the text ends
        (the output's, or an end-of-turn marker's; where calls may follow (`calls`), a call's
        opener, as it ends reasoning first in the output): their markers are markup, not text. Where
        both markers are distinctive (`distinctive`), the block is reasoning
        (`reasoning-in-answer`, `reasoning-in-answer-unclosed`), its start marker written twice
        read as once (`start-again`); where either is a word a prose answer may hold, only an
        empty block (`<think></think>`) is markup. EMPTY: reasoning has no start marker."""
        start, end = self.r.start.strip(), self.r.end.strip()
        if not self.reads_reasoning() or not start or self.in_messages():
            return EMPTY, EMPTY
        if not self.reopens():
            return seq(self.marker(start), self.gap(), self.marker(end)), EMPTY
        opened = seq(self.marker(start), optional(self.start_again(start)))
        text = self.reasoning_text(repeated=True, not_first=(start,))
        # (a bracket that opens a bare call is no interrupt: reasoning holds brackets)
        interrupts = tuple(m for m in (self.calls_opener(), self.call_opener_alone()) if m and calls)
        unended = self.reasoning_text(*interrupts, repeated=True, not_first=(start,))
        return (Rule("reasoning-in-answer", seq(opened, text, self.marker(end))),
                optional(Rule("reasoning-in-answer-unclosed", seq(opened, unended))))

    def reopens(self) -> str:
        """The reasoning's start marker where a block it opens after answer text is reasoning
        (`reasoning_in_answer`: both markers distinctive), "" elsewhere."""
        start, end = self.r.start.strip(), self.r.end.strip()
        if not self.reads_reasoning() or not start or self.in_messages():
            return ""
        return start if distinctive(start) and distinctive(end) else ""


def distinctive(marker: str) -> bool:
    """Whether a reasoning marker is written as markup no prose holds: it begins with a symbol,
    not a word (`<think>`, `<|channel>thought`, `((muse))`, not `BEGIN REASONING` or `think:`),
    holds no whitespace, and is not punctuation that values hold (`is_weak`)."""
    if not marker or marker[0].isalnum() or marker[0] == "_":
        return False
    return not any(c.isspace() for c in marker) and not is_weak(marker)


def _bounded(node: Node) -> Node:
    """`node`, a marker, with its last literal `bounded`."""
    if isinstance(node, Lit):
        return replace(node, bounded=True)
    if isinstance(node, Seq) and node.items:
        return Seq((*node.items[:-1], _bounded(node.items[-1])))
    return node
