"""The streaming engine: one state machine for every output format, driven by a `Spec`.

Text arrives in chunks. The engine keeps a short buffer and a *mode* (a bound method) that
consumes a prefix of the buffer and emits into `Output`; a mode that cannot decide yet consumes
nothing and the text waits for the next chunk. Decisions depend only on the text, never on where
the chunks were cut, and `finish()` turns every "wait" into a decision, so joining the deltas of
any chunking gives the same message as one `parse`. Each character is examined a bounded number
of times: the buffer only ever holds a possible marker prefix, a JSON token, a tool name or a
whitespace run, so time is linear in the output.

Modes, in the order the output is laid out (see `autoparser.analysis`):

* `_begin`: leading whitespace and an optional reasoning start marker; or, when the generation
  prompt ended with the call opener (`tools.opened_by_prompt`), `_opened`: the output starts
  inside a call header, where the recipient marker (`all`) introduces content instead.
* `_reasoning`: until the reasoning end marker. Tool markup inside reasoning is held back
  (`_deferred_reasoning`): if the end marker follows it stays reasoning; if the output ends
  first, the reasoning ended where the tool markup began and the rest is parsed again as
  content (peers split unclosed reasoning there, and nothing is lost either way).
* `_content`: visible text; a tool section/call opener switches to the tool modes.
* `_section`: between calls. Where calls have no marker of their own, a name starts one. The
  section's opener is held until a call in it is certain: a section holding no call is content,
  its markers included (`[` in `see [1]`). The calls themselves are parsed by two mixins:
  `calls_tagged.TagCalls` (`_tag_header`, `_tagged_args`, `_after_args`) for tag formats and
  `calls_json.JsonCalls` (`_wrapper`, `_array`, `_between_bare`, and `_json_args`, which
  streams JSON arguments for both).
* `_raw_mode`: after a call that failed to parse; its text stays content up to the call's end
  marker, then calls are looked for again.
* `_stopped`: after an end-of-turn marker; any further text is content.

A call's name is emitted (with its id) only once its arguments have visibly started well
(`{` followed by a key or `}`, or the first tagged argument); until then its raw text is held
so that a malformed call can still go to content whole. After that the call is kept: invalid or
truncated arguments are closed by the JSON scanner's repair and the call is marked incomplete.
"""

from __future__ import annotations

from collections.abc import Callable

from autoparser.language.request import CLOSED, IMPLIED, core
from autoparser.runtime.calls_json import JsonCalls
from autoparser.runtime.calls_tagged import TagCalls
from autoparser.runtime.channels import Output, ToolCall
from autoparser.runtime.jsonscan import JsonScanner, is_string_body, skip_whitespace
from autoparser.runtime.markers import FULL, PARTIAL, MarkerSet, match_at
from autoparser.runtime.spec import Spec
from autoparser.runtime.steps import (
    A_AFTER,
    A_ITEM,
    A_OPEN,
    ARGS_START,
    ID,
    NAME,
    NAME_START,
    T_LIT_STRING,
    T_STRING,
    W_OPEN,
)

# held text this long is only there when a whitespace run (or other text that decides nothing)
# follows a point where the next token decides; the bounded waits (a partial marker, a JSON token,
# a name or key) are much shorter
_LONG_HOLD = 4096


class StreamParser(TagCalls, JsonCalls):
    """Incremental parser of one model output; create it with `Parser.stream()`."""

    def __init__(self, spec: Spec, sets: dict[str, MarkerSet], deltas: bool = True) -> None:
        self._spec = spec
        self._sets = sets
        self.out = Output(deltas)
        self._text = ""
        self._pos = 0
        self._waiting: list[str] = []  # chunks not parsed yet while a long text is held
        self._waiting_size = 0
        self._stalled_at = 0  # the held text's length when it was last parsed, when that was long
        self._mode = self._begin
        self._step = 0
        self._finished = False
        self._plain = not spec.tools_on
        self._in_section = False
        self._deferred: list[str] = []
        self._raw: list[str] | None = None
        self._bracketed = False
        self._array_raw = ""
        self._entry = 0
        # the call whose JSON string argument all parsed text ends inside, for the hot path of `feed`
        self._string_call: ToolCall | None = None
        self._raw_call_end_is_content = True
        self._held = False  # the current call's deltas are held until it is valid (call syntax)
        self._had_call = False
        # the text that opened the current section, held until a call in it is certain: a section
        # holding no call (`[1, 2]` where `[` opens Python-style calls) is content, markers and all
        self._opener: list[str] | None = None
        self._section_has_call = False
        # a call header is name then id, or id then name when the template writes the id first
        self._header_first = ID if spec.id_before_name else NAME_START
        self._after_name = ARGS_START if spec.id_before_name else ID
        self._after_id = NAME_START if spec.id_before_name else ARGS_START
        self._value_parts: list[str] = []
        self._reset_call()

    # -- public surface ------------------------------------------------------------------------

    def feed(self, chunk: str) -> list[dict]:
        """Parse the next piece of output; return the deltas it completes (possibly none)."""
        if self._finished:
            raise RuntimeError("feed() after finish()")
        call = self._string_call
        if call is not None and chunk and self.out.held is None and is_string_body(chunk):
            # the hot path: more characters of a JSON string inside streamed arguments
            call.append(chunk)
            return [{"tool_calls": [{"index": call.index, "function": {"arguments": chunk}}]}]
        if not chunk:
            return self.out.take()
        if self._stalled_at:
            # a long text is held (a whitespace run where the next token decides): parse again only
            # once it has doubled, so that holding it costs linear time (the result is the same for
            # every chunking, so a coarser one changes nothing but when deltas go out)
            self._waiting.append(chunk)
            self._waiting_size += len(chunk)
            if len(self._text) - self._pos + self._waiting_size < 2 * self._stalled_at:
                return []
            chunk = "".join(self._waiting)
            self._waiting, self._waiting_size = [], 0
        self._text = self._text[self._pos :] + chunk if self._pos < len(self._text) else chunk
        self._pos = 0
        self._run(False)
        held = len(self._text) - self._pos
        if held >= _LONG_HOLD:
            self._stalled_at = held
        elif self._stalled_at:
            self._stalled_at = 0
        return self.out.take()

    def finish(self) -> list[dict]:
        """The output is complete: release held-back text, close an open call."""
        if not self._finished:
            self._text = self._text[self._pos :] + "".join(self._waiting)
            self._waiting, self._waiting_size, self._stalled_at = [], 0, 0
            self._pos = 0
            self._run(True)
            self._finalize()
            self._finished = True
        return self.out.take()

    def message(self) -> dict:
        """The assistant message parsed so far (final after `finish()`)."""
        return self.out.message()

    # -- the loop ------------------------------------------------------------------------------

    def _run(self, final: bool) -> None:
        text, pos = self._text, self._pos
        budget = 4 * len(text) + 64
        while True:
            mode, step, raw = self._mode, self._step, self._raw
            self._entry = pos
            newpos = mode(text, pos, final)
            if self._text is not text:  # the mode replaced the text (re-parse of deferred reasoning)
                text, pos = self._text, newpos
                budget += 4 * len(text)
                continue
            if raw is not None and raw is self._raw and newpos > pos:
                raw.append(text[pos:newpos])
                if self._held:
                    self._still_held()  # a call confirmed by its first argument text needs no raw text
            if newpos == pos and self._mode == mode and self._step == step:
                break
            pos = newpos
            if pos >= len(text) and not final:
                break
            budget -= 1
            if budget < 0:  # a safety net: never loop forever on a bug, keep the text as content
                self.out.add_content(text[pos:])
                pos = len(text)
                break
        self._text, self._pos = text, pos
        scanner = self._scanner
        in_string = (scanner is not None and scanner.in_string and self._args_buffer is None
                     and self._mode == self._json_args and pos >= len(text))
        self._string_call = self.out.calls[-1] if in_string else None
        if final and pos < len(text):
            self.out.add_content(text[pos:])
            self._pos = len(text)

    # -- helpers -------------------------------------------------------------------------------

    def _tools_allowed(self) -> bool:
        spec = self._spec
        if self._plain:
            return False
        if spec.strict and self.out.content.started:
            return False
        return spec.parallel or not self.out.calls

    def _reset_call(self) -> None:
        self._name = ""
        self._call_id = ""
        self._emitted = False
        self._scanner: JsonScanner | None = None
        self._after_json = self._after_args
        self._args_open = False
        self._args_end_seen = False
        self._key = ""
        self._kind = ""
        if self._value_parts:
            self._value_parts: list[str] = []
        self._level = 0
        self._args_buffer: list[str] | None = None
        self._has_args = False
        self._index_digits = ""
        self._cdata = False  # inside a raw string value's CDATA section
        self._quote = ""  # a literal string value's quote, and whether it is a raw (r'') string
        self._raw_string = False
        self._lit_depth = 0  # inside a collected literal value: bracket depth, open quote, escape
        self._lit_quote = ""
        self._lit_escape = False
        self._lit_unbalanced = False

    def _begin_call(self, raw_text: str, mode, step: int) -> None:
        self._reset_call()
        if self._opener is not None:
            raw_text = "".join(self._opener) + raw_text
            self._opener = None
        self._raw = [raw_text]
        self._mode = mode
        self._step = step

    def _emit_call(self) -> None:
        """The call is certain: emit its name and id; its raw text is no longer needed.

        In call syntax (`name(key=value)`) the first key makes the call, but its first value may
        still be invalid (`f(x=1])`, `f(city=)`): the call's deltas are held, and its raw text
        kept, until that value's first text; invalid syntax before then withdraws it."""
        spec = self._spec
        call_id = self._call_id or spec.call_id()
        self._held = spec.bare_keys
        if self._held:
            self.out.hold()
        self.out.start_call(call_id, self._name)
        self._emitted = True
        if not self._held:
            self._raw = None
        self._opener = None
        self._had_call = self._section_has_call
        if self._in_section:
            self._section_has_call = True

    def _fail_call(self, pos: int | None = None) -> int:
        """The call is malformed before its name was emitted: its raw text becomes content.

        Parsing resumes where the current step began, so text the step skipped over is kept;
        `pos` is only used when the step consumed text of its own (a closed JSON object).
        """
        pos = self._entry if pos is None else pos
        raw = "".join(self._raw or ())
        self._raw = None
        self.out.add_content(raw)
        self._reset_call()
        spec = self._spec
        if spec.markerless:
            self._mode = self._content
        elif spec.strict:
            self._plain = True
            self._mode = self._content
        else:
            self._mode = self._raw_mode
            self._raw_call_end_is_content = True
        self._step = 0
        return pos

    def _end_call(self, incomplete: bool = False) -> None:
        if incomplete and self.out.calls:
            self.out.calls[-1].incomplete = True
        if self._still_held():
            self.out.confirm()
            self._held = False
        self._reset_call()
        self._raw = None
        self._step = 0

    def _call_done(self, pos: int) -> int:
        """A call ended normally; look for the next one."""
        self._end_call()
        spec = self._spec
        if spec.array:
            self._mode = self._array
            self._step = A_AFTER
        elif spec.markerless:
            self._mode = self._between_bare
        else:
            self._mode = self._section
        return pos

    def _to_junk(self, pos: int, incomplete: bool = False) -> int:
        """Text inside an already emitted call that does not fit: close the call, keep the text.
        A call still held (call syntax) is no call at all: all its text is content."""
        if self._still_held():
            return self._withdraw_call(pos)
        self._end_call(incomplete)
        if self._spec.strict:
            self._plain = True
            self._mode = self._content
        else:
            self._mode = self._raw_mode
            self._raw_call_end_is_content = False
        return pos

    def _still_held(self) -> bool:
        """Whether the current call is still held (its first argument text not yet written)."""
        if self._held and self.out.held is None:
            self._held = False
            self._raw = None
        return self._held

    def _withdraw_call(self, pos: int) -> int:
        self.out.withdraw()
        self._held = False
        raw = "".join(self._raw or ()) + self._text[self._entry:pos]
        self._raw = None
        self.out.add_content(raw)
        self._section_has_call = self._had_call
        self._reset_call()
        self._step = 0
        if self._spec.strict:
            self._plain = True
            self._mode = self._content
        else:
            self._mode = self._raw_mode
            self._raw_call_end_is_content = True
        return pos

    @staticmethod
    def _unmarked(markers: MarkerSet, text: str, pos: int, final: bool, emit: Callable[[str], None]) -> int:
        """No marker ahead: emit the text up to where one could still begin (all of it when
        `final`), and return where the emitted text stops."""
        end = len(text) if final else markers.safe_end(text, pos)
        emit(text[pos:end])
        return end

    # -- reasoning -----------------------------------------------------------------------------

    def _begin(self, text: str, pos: int, final: bool) -> int:
        spec = self._spec
        if spec.continued:
            # the prompt ended inside the assistant's own text: this output goes on with it
            channel = self.out.reasoning if spec.start_in_reasoning else self.out.content
            channel.started = True
            self._mode = self._reasoning if spec.start_in_reasoning else self._content
            return pos
        p = skip_whitespace(text, pos)
        if p >= len(text) and not final:
            return p
        if spec.opened_by_prompt and spec.start != CLOSED:
            return self._opened(text, p, final)
        # an explicit start (repeated, when the prompt opened reasoning), or an end marker alone
        # (an empty reasoning block)
        enders = () if spec.start_in_reasoning else ((spec.reasoning_end, self._content),)
        for marker, mode in ((spec.reasoning_start, self._reasoning), *enders):
            if marker and spec.start != CLOSED:
                found, end = match_at(text, p, marker, final)
                if found == PARTIAL:
                    return p
                if found == FULL:
                    self._mode = mode
                    return end
        if spec.start_in_reasoning:
            self._mode = self._reasoning
            return p
        if spec.start == IMPLIED:
            self._deferred = []
            self._mode = self._implied
            return p
        self._mode = self._content
        return p

    def _implied(self, text: str, pos: int, final: bool) -> int:
        """Reasoning the template implies but the output did not open: text is held until an end
        marker makes it reasoning, or an end of turn, tool markup or the end of output makes it
        content (parsed again from its start)."""
        markers = self._sets["reasoning"]
        hit = markers.find(text, pos, final=final)
        if hit is not None and hit[2] == "end":
            start, found, _kind = hit
            self.out.add_reasoning("".join(self._deferred) + text[pos:start])
            self._deferred = []
            self._mode = self._content
            return start + len(found)
        if hit is not None or final:
            self._text = "".join(self._deferred) + text[pos:]
            self._deferred = []
            self._mode = self._content
            return 0
        end = markers.safe_end(text, pos)
        self._deferred.append(text[pos:end])
        return end

    def _opened(self, text: str, p: int, final: bool) -> int:
        """The prompt ended with the call opener: the output starts with a call's name, or with
        the recipient (`all`) that introduces content instead."""
        spec = self._spec
        if self._tools_allowed():
            if spec.format == "json":
                self._begin_call("", self._wrapper, W_OPEN)
            else:
                self._begin_call("", self._tag_header, ID if spec.id_before_name else NAME)
            return p
        self._mode = self._content
        if spec.recipient:
            found, end = match_at(text, p, spec.recipient, final)
            if found == PARTIAL:
                self._mode = self._begin
                return p
            if found == FULL:
                return end
        return p

    def _reasoning(self, text: str, pos: int, final: bool) -> int:
        markers = self._sets["reasoning"]
        hit = markers.find(text, pos, final=final)
        if hit is None:
            return self._unmarked(markers, text, pos, final, self.out.add_reasoning)
        start, found, kind = hit
        self.out.add_reasoning(text[pos:start])
        if kind == "end":
            self._mode = self._content
            return start + len(found)
        if kind == "stop":
            self._mode = self._stopped
            return start + len(found)
        self._deferred = []
        self._mode = self._deferred_reasoning
        return start

    def _deferred_reasoning(self, text: str, pos: int, final: bool) -> int:
        markers = self._sets["deferred"]
        hit = markers.find(text, pos, final=final)
        if hit is not None:
            start, found, _kind = hit
            self._deferred.append(text[pos:start])
            self.out.add_reasoning("".join(self._deferred))
            self._deferred = []
            self._mode = self._content
            return start + len(found)
        if final:
            # reasoning was never closed: it ended where the tool markup began
            self._text = "".join(self._deferred) + text[pos:]
            self._deferred = []
            self._mode = self._content
            return 0
        end = markers.safe_end(text, pos)
        self._deferred.append(text[pos:end])
        return end

    # -- content -------------------------------------------------------------------------------

    def _content(self, text: str, pos: int, final: bool) -> int:
        markers = self._sets["plain" if self._plain else "content"]
        hit = markers.find(text, pos, final=final)
        if hit is None:
            return self._unmarked(markers, text, pos, final, self.out.add_content)
        start, found, kind = hit
        self.out.add_content(text[pos:start])
        end = start + len(found)
        if kind == "drop":
            return end
        if kind == "stop":
            self._mode = self._stopped
            return end
        if not self._tools_allowed():
            self.out.add_content(found)
            return end
        if kind == "brace":
            # a bare JSON call starts `{"`: any other brace is text, without trying a call on it
            p = skip_whitespace(text, end)
            if p >= len(text) and not final:
                return start
            if p >= len(text) or text[p] != '"':
                self.out.add_content(found)
                return end
            self._begin_call("", self._wrapper, W_OPEN)
            return start
        if kind == "bracket":
            # a bare JSON array of calls: only when an object follows the bracket
            p = skip_whitespace(text, end)
            if p >= len(text) and not final:
                return start
            if p >= len(text) or text[p] != "{":
                self.out.add_content(found)
                return end
            self._in_section = True
            self._bracketed = True
            self._array_raw = text[start:p]  # content again if the first element is no call
            self._mode = self._array
            self._step = A_ITEM
            return p
        if kind == "section":
            self._open_section(found)
            return end
        if kind == "named":
            # the format has no opener of its own: a call begins with its name marker
            self._begin_call("", self._tag_header, self._header_first)
            return start
        self._start_marked_call(found)
        return end

    def _open_section(self, found: str) -> None:
        self._in_section = True
        self._opener = [found]
        self._section_has_call = False
        if self._spec.array:
            self._mode = self._array
            self._step = A_OPEN
        else:
            self._mode = self._section

    def _release_opener(self) -> None:
        """The section turned out to hold no call: its opener is content (unless content drops it
        anyway, as a content marker that also opens the section)."""
        if self._opener is not None:
            if core(self._opener[0]) not in self._spec.content_markers:
                self.out.add_content("".join(self._opener))
            self._opener = None

    def _start_marked_call(self, marker_text: str) -> None:
        if self._spec.format == "json":
            self._begin_call(marker_text, self._wrapper, W_OPEN)
        else:
            self._begin_call(marker_text, self._tag_header, self._header_first)

    def _stopped(self, text: str, pos: int, final: bool) -> int:
        # more end-of-turn markup right after the end of turn (`<|close|>message<|sep|>` then
        # `<|end_of_msg|>`) is markup too; any other text is content
        p = skip_whitespace(text, pos)
        markers = self._sets["stops"]
        hit = markers.find_at(text, p)
        if markers.undecided(text, p, hit, final) or (p >= len(text) and not final):
            return pos
        if hit is not None:
            return p + len(hit[0])
        self._mode = self._stopped_text
        return pos

    def _stopped_text(self, text: str, pos: int, final: bool) -> int:
        self.out.add_content(text[pos:])
        return len(text)

    # -- between calls -------------------------------------------------------------------------

    def _section(self, text: str, pos: int, final: bool) -> int:
        spec = self._spec
        p = skip_whitespace(text, pos)
        if p > pos:
            if self._opener is not None:
                self._opener.append(text[pos:p])
            else:
                self.out.add_content(text[pos:p])
        if p >= len(text):
            return p
        markers = self._sets["section"]
        hit = markers.find_at(text, p)
        if markers.undecided(text, p, hit, final):
            return p
        if hit is None:
            if spec.bare_names and self._tools_allowed() and self._sets["name_stop"].match(text, p) is None:
                # a call with no marker of its own starts with its name
                self._begin_call("", self._tag_header, self._header_first)
                return p
            return self._section_text(p)
        found, kind = hit
        end = p + len(found)
        if kind == "sep":
            # a separator belongs to the call after it: content again if no call follows
            if self._opener is None:
                self._opener = [found]
            else:
                self._opener.append(found)
            return end
        if kind == "end":
            self._release_opener()
            if self._in_section and not self._section_has_call:
                self.out.add_content(found)  # the end of a section that held no call
            self._in_section = False
            self._mode = self._content
            return end
        if kind == "stop":
            self._release_opener()
            self._mode = self._stopped
            return end
        # a call starts here
        if not self._tools_allowed():
            self._release_opener()
            self._mode = self._raw_mode
            return p
        if kind == "call":
            self._start_marked_call(found)
            return end
        # the call has no opener of its own: it begins with its name marker or a JSON object
        if spec.format == "json":
            self._begin_call("", self._wrapper, W_OPEN)
        else:
            self._begin_call("", self._tag_header, self._header_first)
        return p

    def _section_text(self, pos: int) -> int:
        """Text between calls that starts no call."""
        spec = self._spec
        self._release_opener()
        if spec.strict:
            self._plain = True
            self._mode = self._content
        elif self._in_section and spec.section_end:
            self._mode = self._raw_mode
        else:
            self._in_section = False
            self._mode = self._content
        return pos

    def _raw_mode(self, text: str, pos: int, final: bool) -> int:
        markers = self._sets["raw"]
        hit = markers.find(text, pos, final=final)
        if hit is None:
            return self._unmarked(markers, text, pos, final, self.out.add_content)
        start, found, kind = hit
        end = start + len(found)
        if kind == "call_end":
            # the end of a call whose start went to content too; or, after a call that was
            # returned, its own end marker
            self.out.add_content(text[pos:end] if self._raw_call_end_is_content else text[pos:start])
            self._mode = self._section
            return end
        self.out.add_content(text[pos:start])
        if kind == "stop":
            self._mode = self._stopped
        elif kind == "end":
            if self._in_section and not self._section_has_call:
                self.out.add_content(found)  # the end of a section that held no call
            self._in_section = False
            self._mode = self._content
        elif kind == "section":
            self._open_section(found)
        elif self._tools_allowed():
            self._start_marked_call(found)
        else:
            self.out.add_content(found)
        return end


    # -- end of output --------------------------------------------------------------------------

    def _finalize(self) -> None:
        """Close whatever is still open once all text was consumed."""
        self._release_opener()
        if self._raw is not None and not self._emitted:
            self._fail_call(len(self._text))
            return
        if not self._emitted:
            return
        mode = self._mode
        if mode == self._json_args and self._scanner is not None:
            self._close_json(self._scanner.closing())
            self._end_call(incomplete=True)
        elif mode == self._tagged_args:
            if self._step in (T_STRING, T_LIT_STRING):
                self.out.add_arguments('"')
            self.out.close_arguments(self._args_open)
            self._end_call(incomplete=True)
        elif mode == self._wrapper:
            self._end_call(incomplete=True)
        else:
            self._end_call(incomplete=bool(self.out.calls and self.out.calls[-1].incomplete))
