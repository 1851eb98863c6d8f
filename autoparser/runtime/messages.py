"""Replies written as a sequence of messages, each with a header saying what its body holds.

``HEADER body_start BODY separator HEADER body_start BODY ...`` (see `MessagesAnalysis`). Models
vary the header the template writes: channel and recipient in either order, extra words before
the body marker, a channel the template uses for something else. So a header is read whole (up
to the body marker, on one line, bounded in length) and classified by its words:

* a call: the call header's recipient prefix (`to=functions.`) followed by a name that is not
  one of the reasoning or answer header's own words;
* reasoning: the header holds the words that tell the reasoning header from the answer's;
* otherwise the answer.

A reasoning body goes to `reasoning_content`, an answer body to `content`; a call body is parsed
by the ordinary engine, given the call's canonical header when the body holds only the
arguments. Text with no header in front of it is content. Decisions depend only on the text
(the header bound is fixed), so every chunking of a stream gives the same message.
"""

from __future__ import annotations

import re

from autoparser.language.request import NAME_FORBIDDEN, core
from autoparser.runtime.channels import Output
from autoparser.runtime.markers import MarkerSet

MAX_HEADER = 128
_WORD = re.compile(r"[A-Za-z_]\w*")
_BLANK = re.compile(r"\s*")
_NAME = re.compile(f"[^{NAME_FORBIDDEN}]+")
_LEAD = re.compile(r"<[^<>]*>|\w+=?|\S")  # how a header begins: a tag, a word (`to=`), a symbol
HEADER, REASONING, CONTENT, CALL, STOPPED = "header", "reasoning", "content", "call", "stopped"


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text))


class MessageFormat:
    """The per-parser facts of a message format, computed once."""

    def __init__(self, messages: dict, stops: list[str], content_end: str, call_end: str) -> None:
        self.body_start = core(messages.get("body_start"))
        self.opener = core(messages.get("opener"))
        reasoning_words = _words(messages.get("reasoning_header") or "")
        content_words = _words(messages.get("content_header") or "")
        self.reasoning_words = reasoning_words - content_words
        self.content_words = content_words - reasoning_words
        self.call_header = messages.get("call_header") or ""
        self.call_prefix = core(self.call_header.partition("{name}")[0])
        self.call_body_named = bool(messages.get("call_body_named"))
        # a header starts the way one of the template's headers does (`<|channel|>`, `to=`) and holds
        # some word they use; other text before a body marker is text
        headers = (messages.get("reasoning_header"), messages.get("content_header"), self.call_header)
        self.header_words = reasoning_words | content_words | _words(self.call_header.replace("{name}", ""))
        self.header_leads = tuple({lead.group() for h in headers if (lead := _LEAD.match(core(h)))})
        separator = core(messages.get("separator"))
        kinds = {separator: "sep"}
        for stop in stops:
            kinds.setdefault(stop, "stop")
        if content_end:
            kinds.setdefault(content_end, "end")
        self.enders = MarkerSet({k: v for k, v in kinds.items() if k})
        # a call's message also ends with the call's own end marker (`<|call|>`)
        call_kinds = dict(kinds)
        if call_end:
            call_kinds.setdefault(call_end, "call_end")
        self.call_enders = MarkerSet({k: v for k, v in call_kinds.items() if k})
        # what may stand between two messages: a message's end, the turn re-opened
        between = {**call_kinds, self.opener: "open"}
        self.between = MarkerSet({k: v for k, v in between.items() if k and v != "stop"})

    def classify(self, header: str) -> tuple[str, str]:
        """(kind, tool name) of a message header."""
        words = _words(header)
        if self.call_prefix:
            at = header.find(self.call_prefix)
            if at >= 0:
                name = _NAME.match(header, at + len(self.call_prefix))
                if name and name.group() not in self.reasoning_words | self.content_words:
                    return CALL, name.group()
        if self.reasoning_words and self.reasoning_words <= words:
            return REASONING, ""
        return CONTENT, ""


class MessageStream:
    """Incremental parser of a message-format output; `feed`, `finish`, `message` as `StreamParser`."""

    def __init__(self, spec, sets, call_parser) -> None:
        self._spec = spec
        self._format: MessageFormat = spec.message_format
        self._call_parser = call_parser  # makes the engine that parses one call body
        self.out = Output()
        self._text = ""
        self._pos = 0  # where the unread text begins
        self._blank: list[str] = []  # blank chunks held unscanned while a header may follow
        self._blank_rest = False  # whether all unread text is blank, before a header
        self._finished = False
        self._inner = None  # the engine parsing the current call body
        self._deltas: list[dict] = []
        if spec.continued or spec.start_in_reasoning:
            self._state = REASONING if spec.start_in_reasoning else CONTENT
            channel = self.out.reasoning if spec.start_in_reasoning else self.out.content
            channel.started = spec.continued
        else:
            self._state = HEADER

    def feed(self, chunk: str) -> list[dict]:
        if self._finished:
            raise RuntimeError("feed() after finish()")
        if not chunk:
            return self._take()
        if self._blank_rest and chunk.isspace():
            # blank text before the next header decides nothing: keep it aside, unscanned, so that
            # a long run of it costs linear time
            self._blank.append(chunk)
            return self._take()
        if self._blank:
            chunk = "".join(self._blank) + chunk
            self._blank = []
        self._text = self._text[self._pos:] + chunk if self._pos < len(self._text) else chunk
        self._pos = 0
        self._run(False)
        rest = self._text[self._pos:] if self._state == HEADER else "x"
        self._blank_rest = not rest or rest.isspace()
        return self._take()

    def finish(self) -> list[dict]:
        if not self._finished:
            self._text = self._text[self._pos:] + "".join(self._blank)
            self._pos = 0
            self._blank = []
            self._run(True)
            self._finished = True
        return self._take()

    def message(self) -> dict:
        return self.out.message()

    def _take(self) -> list[dict]:
        deltas = self._deltas + self.out.take()
        self._deltas = []
        return deltas

    # -- the loop ------------------------------------------------------------------------------

    def _run(self, final: bool) -> None:
        text = self._text
        while self._pos < len(text):
            state = self._state
            end = self._header(final) if state == HEADER else self._body(final)
            if end == self._pos and self._state == state:
                break
            self._pos = end
        if final:
            if self._inner is not None:
                self._close_call()
            if self._pos < len(text):
                self.out.add_content(text[self._pos:])
                self._pos = len(text)

    def _header(self, final: bool) -> int:
        """Where the header starting at `_pos` ends (with its body marker), or `_pos` to wait."""
        text, pos, fmt = self._text, self._pos, self._format
        start = _BLANK.match(text, pos).end()
        if start == len(text) and not final:
            return pos
        hit = fmt.between.find_at(text, start)
        if fmt.between.undecided(text, start, hit, final):
            return pos
        if hit is not None:
            return start + len(hit[0])
        window = text[pos:pos + MAX_HEADER + len(fmt.body_start)]
        at = window.find(fmt.body_start)
        ender = fmt.enders.find(window, 0)
        header = window[:at]
        if (at < 0 or (ender is not None and ender[0] < at) or "\n" in header.strip()
                or not _words(header) & fmt.header_words or not header.lstrip().startswith(fmt.header_leads)):
            if at < 0 and len(text) - pos < MAX_HEADER and not final:
                return pos  # the header may still be arriving
            self._state = CONTENT  # no header: plain text
            return pos
        kind, name = fmt.classify(header)
        if kind == CALL and not (self._spec.tools_on and self._spec.name_allowed(name)):
            self.out.add_content(header + fmt.body_start)
            kind = CONTENT
        elif kind == CALL:
            self._inner = self._call_parser(self.out)
            if not fmt.call_body_named:
                canonical = fmt.call_header.replace("{name}", name) + fmt.body_start
                self._deltas += self._inner.feed(canonical)
        self._state = kind
        return pos + at + len(fmt.body_start)

    def _body(self, final: bool) -> int:
        """Where the body text from `_pos` is read up to: its end marker, or what is safe to emit."""
        text, pos = self._text, self._pos
        if self._state == STOPPED:
            self.out.add_content(text[pos:])
            return len(text)
        enders = self._format.call_enders if self._state == CALL else self._format.enders
        hit = enders.find(text, pos, final=final)
        end = len(text) if final or hit is not None else enders.safe_end(text, pos)
        self._emit(text[pos:hit[0]] if hit is not None else text[pos:end])
        if hit is None:
            return end
        start, found, kind = hit
        if self._inner is not None:
            if kind == "call_end":
                self._deltas += self._inner.feed(found)
            self._close_call()
        self._state = STOPPED if kind == "stop" else HEADER
        return max(start + len(found), pos + 1)

    def _emit(self, body: str) -> None:
        if not body:
            return
        if self._state == REASONING:
            self.out.add_reasoning(body)
        elif self._state == CALL and self._inner is not None:
            self._deltas += self._inner.feed(body)
        else:
            self.out.add_content(body)

    def _close_call(self) -> None:
        self._deltas += self._inner.finish()
        self._inner = None
