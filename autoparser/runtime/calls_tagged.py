"""Calls in tag formats: `NAME` between markers, then JSON or tagged arguments.

A mixin of `StreamParser` (see `autoparser.runtime.engine` for the modes and the rules every
mode follows). Header: `name_start NAME name_end [id_start ID id_end] [args_start]`, in that
order or with the id first. Arguments: a JSON object (`tag_json`, also accepted in a tagged
format) or `arg_start KEY arg_key_end VALUE arg_end` pairs (`tag_tagged`), whose values are
turned into JSON by the tool's schema and streamed as they arrive when they are strings.

Values written as literals (Python call syntax ``name(key='text', n=3)``, or JSON values) are
read by their own syntax: a quoted string streams, escapes decoded, until its closing quote;
other literals are collected until they end and converted (`pyliteral.literal_to_json`).
Where keys have no marker before them, the markers after a value are short punctuation
(``, `` ``)``) that a value may contain too, so an end marker counts only where what follows it
continues the call (the `_follows_*` checks): ``, days=`` does, ``, France`` does not. The same
check decides whether a quote ends a string, since some templates write quotes unescaped.
"""

from __future__ import annotations

import json
import re

from autoparser.language.request import KEY_HOLE, NAME_FORBIDDEN, is_weak, value_kind
from autoparser.language.values import (
    QUOTE_OPEN,
    allows_null,
    convert_literal_value,
    convert_tagged_value,
    decode_escape,
)
from autoparser.runtime.jsonscan import JsonScanner, json_string_body, skip_whitespace
from autoparser.runtime.markers import FULL, NONE, PARTIAL, hold_for, match_at
from autoparser.runtime.steps import (
    ARGS_BEGIN,
    ARGS_START,
    ID,
    ID_VALUE,
    INDEX,
    INDEX_TAIL,
    NAME,
    NAME_END,
    NAME_START,
    NO,
    T_BETWEEN,
    T_BUFFER,
    T_DECIDE,
    T_KEY,
    T_KEY_TRAIL,
    T_LIT_BUFFER,
    T_LIT_STRING,
    T_STRING,
    WAIT,
    YES,
)

MAX_NAME = 256
_INDEX_RUN = re.compile(r"[0-9]*")
_NOT_IN_ID = re.compile(r"[\s\"'<>]")
_JSON_STARTS = '{["-0123456789tfn'
CDATA = ("<![CDATA[", "]]>")
_NAME_RUN = re.compile(f"[^{NAME_FORBIDDEN}]*")
# a key with no marker before it: an identifier (`location`, `max-results`, `a.b`)
_BARE_KEY = re.compile(r"[^\W\d][\w.\-]*")
# a quoted string's prefix (r, u, b) cut off before its quote
_QUOTE_PREFIX = re.compile(r"[rRuUbB]{1,2}\Z")
_STRING_STOPS = {"'": re.compile(r"[\\']"), '"': re.compile(r'[\\"]')}
_RAW_STRING_STOPS = {"'": re.compile(r"'"), '"': re.compile(r'"')}
class TagCalls:
    """The call modes of tag formats."""

    # -- tag formats: name, id, arguments --------------------------------------------------------

    def _tag_header(self, text: str, pos: int, final: bool) -> int:
        spec = self._spec
        step = self._step
        p = skip_whitespace(text, pos)
        if step == NAME:
            return self._read_name(text, p, final)
        if p >= len(text) and not final:
            return p
        if step == NAME_START:
            return self._expect(text, p, final, spec.name_start, NAME, required=True)
        if step == NAME_END:
            return self._expect(text, p, final, spec.name_end,
                                INDEX if spec.name_end_indexed else self._after_name, required=True)
        if step == INDEX:
            end = _INDEX_RUN.match(text, p).end()
            if end >= len(text) and not final:
                return pos
            self._index_digits = text[p:end]
            own_id = f"{spec.name_start}{self._name}{spec.name_end}{self._index_digits}"
            # the format's own id (`functions.NAME:0`) is passed through; markup with spaces or
            # quotes around the number (`call tool="NAME" index="1`) is no id
            if not _NOT_IN_ID.search(own_id):
                self._call_id = own_id
            self._step = INDEX_TAIL
            return end
        if step == INDEX_TAIL:
            return self._expect(text, p, final, spec.name_end_tail, self._after_name, required=True)
        if step == ID:
            if not spec.id_start:
                # an id ended by its own marker (`ID<|name|>`) needs no start marker
                self._step = ID_VALUE if spec.id_end else self._after_id
                return p
            found, end = match_at(text, p, spec.id_start, final)
            if found == PARTIAL:
                return p
            if found == NONE:
                self._step = self._after_id
                return p
            self._step = ID_VALUE
            return end
        if step == ID_VALUE:
            hit = self._field_end(self._sets["id_end"], text, p, final)
            if hit == WAIT:
                return pos
            if hit is None or hit == NO:
                return self._fail_call()
            start, found, kind = hit
            self._call_id = text[p:start].strip() or self._call_id
            self._step = self._after_id
            return start + len(found) if kind == "id_end" else start
        if step == ARGS_START:
            if not spec.args_start:
                self._step = ARGS_BEGIN
                return p
            found, end = match_at(text, p, spec.args_start, final)
            if found == NONE and spec.args_start_bare:
                found, end = match_at(text, p, spec.args_start_bare, final)
            if found == PARTIAL:
                return p
            self._step = ARGS_BEGIN
            return end
        return self._args_begin(text, pos, p, final)

    def _expect(self, text: str, p: int, final: bool, marker: str, next_step: int, required: bool) -> int:
        if not marker:
            self._step = next_step
            return p
        found, end = match_at(text, p, marker, final)
        if found == PARTIAL:
            return p
        if found == NONE and required:
            return self._fail_call()
        self._step = next_step
        return end

    def _read_name(self, text: str, p: int, final: bool) -> int:
        if self._spec.recipient:
            found = self._recipient_at(text, p, final)
            if found == WAIT:
                return p
            if found == YES:
                return self._recipient_content(text, p)
        # looked for only as far as a name can reach, so a long run of name characters costs no more
        limit = p + MAX_NAME + self._sets["name_stop_longest"]
        match = self._sets["name_stop"].search(text, p, limit)
        if match is None:
            if final or len(text) >= limit:
                return self._fail_call()
            return p
        name = text[p : match.start()]
        if not name or len(name) > MAX_NAME or not self._spec.name_allowed(name):
            return self._fail_call()
        self._name = name
        self._step = NAME_END
        return match.start()

    def _recipient_at(self, text: str, p: int, final: bool) -> int:
        """Whether the content recipient (`all`) stands where a call's name would: YES, NO, WAIT."""
        found, end = match_at(text, p, self._spec.recipient, final)
        if found == PARTIAL:
            return WAIT
        if found == NONE:
            return NO
        if end >= len(text):
            return YES if final else WAIT
        # `all` followed by more name characters (`allocate`) is a name
        if _NAME_RUN.match(text, end).end() > end:
            return NO
        # the whitespace after it belongs to the marker (`all\n`): wait until it is all there
        return YES if final or skip_whitespace(text, end) < len(text) else WAIT

    def _recipient_content(self, text: str, p: int) -> int:
        """The header turned out to introduce content: its opener and the recipient are structure."""
        self._raw = None
        self._reset_call()
        self._step = 0
        self._mode = self._content
        found, end = match_at(text, p, self._spec.recipient, True)
        return skip_whitespace(text, end)

    def _args_begin(self, text: str, pos: int, p: int, final: bool) -> int:
        if p >= len(text):
            return self._fail_call() if final else p
        char = text[p]
        if char == "{":
            q = skip_whitespace(text, p + 1)
            if q >= len(text) and not final:
                return p
            if q >= len(text) or text[q] not in '"}':
                return self._fail_call()
            self._emit_call()
            self._scanner = JsonScanner("{")
            self._after_json = self._after_args
            self._mode = self._json_args
            return p
        closers = self._sets["args_close"]
        hit = closers.find_at(text, p)
        if closers.undecided(text, p, hit, final):
            return p
        if hit is None:
            if self._spec.bare_keys and self._spec.format == "tag_tagged":
                # the first key follows at once (`name(key=...`); the call is emitted once it is read
                self._mode = self._tagged_args
                self._step = T_KEY
                return p
            return self._fail_call()
        found, kind = hit
        self._emit_call()
        if kind == "arg_start":
            self._mode = self._tagged_args
            self._step = T_KEY
            return p + len(found)
        # the call closes without arguments: an empty object
        self.out.add_arguments("{}")
        self._mode = self._after_args
        return p

    def _after_args(self, text: str, pos: int, final: bool) -> int:
        spec = self._spec
        p = skip_whitespace(text, pos)
        if p >= len(text) and not final:
            return p
        if spec.args_end and not self._args_end_seen:
            found, end = match_at(text, p, spec.args_end, final)
            if found == PARTIAL:
                return p
            if found == FULL:
                self._args_end_seen = True
                return end
        incomplete = bool(self.out.calls and self.out.calls[-1].incomplete)
        if not spec.call_end:
            self._end_call(incomplete)
            self._mode = self._section
            return p
        found, end = match_at(text, p, spec.call_end, final)
        if found == PARTIAL:
            return p
        if found == FULL:
            self._end_call(incomplete)
            self._mode = self._section
            return end
        if p >= len(text):
            self._end_call(incomplete)
            self._mode = self._section
            return p
        section = self._sets["section"]
        if section.find_at(text, p) is not None:
            # the end marker is missing but the next call or the end of the section is here
            self._end_call(incomplete)
            self._mode = self._section
            return p
        return self._to_junk(p, incomplete=incomplete)

    # -- tagged arguments ------------------------------------------------------------------------

    def _tagged_args(self, text: str, pos: int, final: bool) -> int:
        step = self._step
        if step == T_STRING:
            return self._value_string(text, pos, final)
        if step == T_BUFFER:
            return self._value_buffer(text, pos, final)
        if step == T_LIT_STRING:
            return self._literal_string(text, pos, final)
        if step == T_LIT_BUFFER:
            return self._literal_buffer(text, pos, final)
        spec = self._spec
        if step == T_KEY_TRAIL:
            found, end = match_at(text, pos, spec.arg_key_trail, final)
            if found == PARTIAL:
                return pos
            self._step = T_DECIDE
            return end
        if step == T_DECIDE:
            return self._value_decide(text, pos, final)
        p = skip_whitespace(text, pos)
        if step == T_KEY:
            return self._read_key(text, pos, p, final)
        # T_BETWEEN: the next argument, or the end of the call
        if p >= len(text):
            if final:
                return self._close_tagged(p, incomplete=False)
            return p
        markers = self._sets["between_args"]
        hit = markers.find_at(text, p)
        if markers.undecided(text, p, hit, final):
            return p
        if hit is None:
            if spec.bare_keys:
                self._step = T_KEY
                return p
            return self._close_tagged(p, incomplete=False, junk=True)
        found, kind = hit
        end = p + len(found)
        if kind == "sep":
            return end
        if kind == "arg":
            self._step = T_KEY
            return end
        # the call ends (or the next call / end of section starts without the end marker)
        self.out.close_arguments(self._args_open)
        self._end_call()
        self._mode = self._section
        return end if kind == "call_end" else p

    def _read_key(self, text: str, pos: int, p: int, final: bool) -> int:
        """An argument's key up to its end marker, which also says how the value is written."""
        spec = self._spec
        markers = self._sets["key_end"]
        if spec.bare_keys:
            hit = self._bare_key(text, p, final)
            if hit == WAIT:
                return pos
        else:
            hit = self._field_end(markers, text, p, final)
            if hit == WAIT:
                return pos
        cut_off = hit is None or (hit == NO and spec.bare_keys and final)
        if cut_off and self._emitted:
            # cut off inside a key: only arguments whose values were written are kept, and the
            # unfinished key stays as text
            return self._close_tagged(p, incomplete=True, junk=True)
        if hit is None or hit == NO:
            return self._key_failed(p)
        start, found, kind = hit
        key = text[p:start].strip()
        if not key:
            return self._key_failed(p)
        if not self._emitted:
            self._emit_call()  # keys without a marker: the first key read is what makes the call
        self._key = key
        schema = spec.argument_schema(self._name, key)
        if kind == "json" or (not spec.arg_string_raw and not spec.literal_values):
            self._kind = "json"
        else:
            self._kind = value_kind(schema)
        # the key goes out with its value's first text: a value never written is never invented
        self.out.key_pending = ("{" if not self._args_open else ", ") + json.dumps(key, ensure_ascii=False) + ": "
        self._args_open = True
        self._value_parts = []
        self._step = T_KEY_TRAIL
        return start + len(found)

    @staticmethod
    def _field_end(markers, text: str, p: int, final: bool):
        """The marker ending a name-like field (a key, an id) that starts at p, as `find` gives it.

        Looked for only within `MAX_NAME` characters (plus the marker), so that a whole parse and
        any chunking decide alike and a long run without the marker costs no more than that:
        NO when the field is longer, None when the output ended inside it, WAIT while the text is
        too short to say."""
        limit = p + MAX_NAME + markers.longest
        hit = markers.find(text, p, min(limit, len(text)), final)
        if hit is not None:
            return hit if hit[0] - p <= MAX_NAME else NO
        if len(text) >= limit:
            return NO
        return None if final else WAIT

    def _bare_key(self, text: str, p: int, final: bool):
        """A key with no marker before it: an identifier, then the key end marker right after."""
        match = _BARE_KEY.match(text, p)
        if match is None:
            return NO
        q = skip_whitespace(text, match.end())
        if q >= len(text):
            return NO if final or q - p > MAX_NAME else WAIT
        markers = self._sets["key_end"]
        hit = markers.find_at(text, q)
        if markers.undecided(text, q, hit, final):
            return WAIT
        if hit is None:
            return NO
        found, kind = hit
        return q, found, kind

    def _key_failed(self, p: int) -> int:
        """No key where one should be: before the call was emitted it is no call at all."""
        if not self._emitted:
            return self._fail_call()
        return self._close_tagged(p, incomplete=True, junk=True)

    def _close_tagged(self, pos: int, incomplete: bool, junk: bool = False) -> int:
        self.out.close_arguments(self._args_open)
        if junk:
            return self._to_junk(pos, incomplete=incomplete)
        self._end_call(incomplete)
        self._mode = self._section
        return pos

    def _value_decide(self, text: str, pos: int, final: bool) -> int:
        """A string-typed value streams at once; others are buffered until their end marker."""
        spec = self._spec
        if spec.literal_values:
            return self._literal_decide(text, pos, final)
        if self._kind != "string":
            p = skip_whitespace(text, pos)
            if p >= len(text) and not final:
                return pos
            if spec.bare_keys and p < len(text) and text[p] in "{[":
                # an object or array between weak markers (`, `): read to its closing bracket, so
                # that `, key=` inside one of its strings does not end it
                return self._literal_collect(p)
            if self._kind == "json":
                self._step = T_BUFFER
                return pos
            if p < len(text) and text[p] in _JSON_STARTS:
                self._step = T_BUFFER
                return pos
            if spec.arg_nested == "tags" and p < len(text):
                # nested argument markup: an object or an array, read whole
                found, _end = match_at(text, p, spec.arg_start, final)
                if found == PARTIAL:
                    return pos
                if found == FULL:
                    self._step = T_BUFFER
                    return pos
        elif allows_null(self._schema()):
            # a nullable string: raw `null` is null, so a value that may be it is read whole
            p = skip_whitespace(text, pos)
            if p >= len(text) and not final:
                return pos
            if p < len(text) and text[p] == "n":
                self._step = T_BUFFER
                return pos
        # an XML CDATA section around the text (`<![CDATA[a < b]]>`) is not part of it
        found, end = match_at(text, pos, CDATA[0], final)
        if found == PARTIAL:
            return pos
        self._cdata = found == FULL
        self.out.add_arguments('"')
        self._step = T_STRING
        return end

    def _value_end(self, text: str, pos: int, final: bool):
        """Where the current value ends, as (value end, marker end, kind); or None and the safe end.

        With keys that have no marker before them, a weak end marker (`, `) ends the value only
        where the call continues after it; the value runs on past one that does not.
        """
        spec = self._spec
        markers = self._value_end_markers()
        search = pos
        while True:
            hit = markers.find(text, search, final=final)
            if hit is None:
                safe = markers.safe_end(text, pos)
                if spec.arg_end_lead:
                    safe = min(safe, hold_for(text, pos, spec.arg_end_lead + self._arg_end()))
                return None, safe
            start, found, kind = hit
            verdict = self._confirm_value_end(text, start + len(found), kind, final)
            if verdict == YES:
                break
            if verdict == WAIT:
                return None, start
            search = start + 1
        value_end = start
        lead = spec.arg_end_lead
        if lead and kind == "end" and start - len(lead) >= pos and text.startswith(lead, start - len(lead)):
            value_end = start - len(lead)
        return (value_end, start + len(found), kind), start

    def _value_end_markers(self):
        if not self._spec.arg_end_keyed:
            return self._sets["value_end"]
        return self._sets["keyed_value_end"](self._key)

    def _confirm_value_end(self, text: str, end: int, kind: str, final: bool) -> int:
        """Whether a raw value really ends at the marker found before `end` (see `_value_end`)."""
        spec = self._spec
        if not spec.bare_keys:
            return YES
        if kind == "end" and is_weak(self._arg_end()):
            return self._follows_arg_end(text, end, final)
        if kind == "call_end" and is_weak(spec.call_end):
            return self._follows_call_end(text, end, final)
        if kind == "sep":
            if spec.arg_end and self._step == T_STRING:
                return NO  # a string with an end marker of its own runs to it
            if is_weak(spec.arg_separator):
                return self._follows_separator(text, end, final)
        return YES

    def _value_string(self, text: str, pos: int, final: bool) -> int:
        if self._cdata:
            close = text.find(CDATA[1], pos)
            if close < 0:
                end = len(text) if final else hold_for(text, pos, CDATA[1])
                self.out.add_arguments(json_string_body(text[pos:end]))
                if final:
                    self.out.add_arguments('"')
                    return self._close_tagged(len(text), incomplete=True)
                return end
            self.out.add_arguments(json_string_body(text[pos:close]))
            self._cdata = False
            return close + len(CDATA[1])
        hit, safe = self._value_end(text, pos, final)
        if hit is None:
            end = len(text) if final else safe
            self.out.add_arguments(json_string_body(text[pos:end]))
            if final:
                self.out.add_arguments('"')
                return self._close_tagged(len(text), incomplete=True)
            return end
        value_end, marker_end, kind = hit
        self.out.add_arguments(json_string_body(text[pos:value_end]) + '"')
        return self._value_finished(marker_end, kind, value_end)

    def _value_buffer(self, text: str, pos: int, final: bool) -> int:
        hit, safe = self._value_end(text, pos, final)
        if hit is None:
            end = len(text) if final else safe
            self._value_parts.append(text[pos:end])
            if final:
                # the output ends in a value: the end of turn after it may have been removed, so
                # a value that was written is kept; an empty one is left out
                raw = "".join(self._value_parts)
                if raw.strip():
                    self.out.add_arguments(self._convert_buffered(raw))
                return self._close_tagged(len(text), incomplete=True)
            return end
        value_end, marker_end, kind = hit
        self._value_parts.append(text[pos:value_end])
        raw = "".join(self._value_parts)
        self.out.add_arguments(self._convert_buffered(raw))
        return self._value_finished(marker_end, kind, value_end)

    def _convert_buffered(self, raw: str) -> str:
        nested = self._spec.nested_value(raw) if self._kind != "string" else None
        return nested if nested is not None else convert_tagged_value(raw, self._kind, self._schema())

    def _schema(self):
        return self._spec.argument_schema(self._name, self._key)

    def _value_finished(self, marker_end: int, kind: str, value_end: int) -> int:
        self._value_parts = []
        if kind == "end":
            self._step = T_BETWEEN
            return marker_end
        if kind != "stop":
            # no end marker: the call's end or the next argument's separator follows the value
            self._step = T_BETWEEN
            return value_end
        # end of turn inside a value: the call was cut off
        self.out.add_arguments("}")
        self._end_call(incomplete=True)
        self._mode = self._stopped
        return marker_end

    # -- literal values (Python call syntax, JSON) ------------------------------------------------

    def _literal_decide(self, text: str, pos: int, final: bool) -> int:
        """A quoted string streams unless the schema wants another type; other literals are collected."""
        p = skip_whitespace(text, pos)
        if p >= len(text):
            if not final:
                return pos
            return self._close_tagged(p, incomplete=True)
        match = QUOTE_OPEN.match(text, p)
        if match is None and not final and _QUOTE_PREFIX.match(text, p):
            return pos  # `r` or `b` at the end: a prefixed string may follow
        if match is not None and self._kind != "json":
            self._quote = match.group(2)
            self._raw_string = "r" in match.group(1).lower()
            opening = match.start(2)
            if len(self._quote) == 1 and not final and text.startswith(self._quote * 2, opening) \
                    and opening + 2 >= len(text):
                return pos  # `''` at the end: an empty string, or a triple quote still coming
            self.out.add_arguments('"')
            self._step = T_LIT_STRING
            return match.end()
        return self._literal_collect(p)

    def _literal_collect(self, p: int) -> int:
        self._lit_depth, self._lit_quote, self._lit_escape = 0, "", False
        self._lit_unbalanced = False
        self._value_parts = []
        self._step = T_LIT_BUFFER
        return p

    def _literal_string(self, text: str, pos: int, final: bool) -> int:
        """A quoted string: decoded and streamed; a quote ends it where the call continues after it."""
        quote = self._quote
        stops = (_RAW_STRING_STOPS if self._raw_string else _STRING_STOPS)[quote[0]]
        out: list[str] = []
        i, n = pos, len(text)
        while True:
            match = stops.search(text, i)
            if match is None:
                out.append(text[i:])
                i = n
                break
            j = match.start()
            out.append(text[i:j])
            if text[j] == "\\":
                decoded = decode_escape(text, j, final)
                if decoded is None:
                    i = j
                    break
                out.append(decoded[0])
                i = decoded[1]
                continue
            if len(quote) == 3 and not text.startswith(quote, j):
                if not final and quote.startswith(text[j:]):
                    i = j
                    break
                out.append(text[j])
                i = j + 1
                continue
            after = j + len(quote)
            verdict = self._follows_value(text, after, final)
            if verdict == WAIT:
                i = j
                break
            if verdict == YES:
                self.out.add_arguments(json_string_body("".join(out)) + '"')
                self._step = T_BETWEEN
                return after
            out.append(text[j:after])  # a quote inside the text, written unescaped
            i = after
        if final and i >= n and self._still_held() and self._closes_inside(text, pos):
            # the string never closed, yet the calls' end came after it: invalid syntax, no call
            return self._to_junk(pos)
        self.out.add_arguments(json_string_body("".join(out)))
        if final and i >= n:
            self.out.add_arguments('"')
            return self._close_tagged(n, incomplete=True)
        return i

    def _closes_inside(self, text: str, pos: int) -> bool:
        """Whether the section's end or an end of turn is inside the held call's unclosed value."""
        spec = self._spec
        written = "".join(self._raw or ()) + text[pos:]
        return any(marker and marker in written for marker in (spec.section_end, *spec.stops))

    def _literal_buffer(self, text: str, pos: int, final: bool) -> int:
        """Any other literal (`3`, `True`, `[1, 'a']`, `{'k': None}`, or bare text): collected until
        a point outside brackets and quotes where the call continues, then converted."""
        boundary = self._sets["value_boundary"]
        depth, quote, escape = self._lit_depth, self._lit_quote, self._lit_escape
        i, n = pos, len(text)
        ended = False
        while i < n:
            char = text[i]
            if quote:
                if escape:
                    escape = False
                elif char == "\\":
                    escape = True
                elif char == quote[0]:
                    if len(quote) == 1:
                        quote = ""
                    elif text.startswith(quote, i):
                        quote = ""
                        i += 3
                        continue
                    elif not final and quote.startswith(text[i:]):
                        break
                i += 1
                continue
            if char in "'\"":
                if text.startswith(char * 3, i):
                    quote = char * 3
                    i += 3
                    continue
                if not final and n - i < 3 and (char * 3).startswith(text[i:]):
                    break
                quote = char
            elif char in "([{":
                depth += 1
            elif depth and char in ")]}":
                depth -= 1
            elif not depth and (char in boundary or char.isspace()):
                verdict = self._follows_value(text, i, final)
                if verdict == WAIT:
                    break
                if verdict == YES:
                    ended = True
                    break
                self._lit_unbalanced = self._lit_unbalanced or char in ")]}"
            elif char in ")]}":
                self._lit_unbalanced = True
            i += 1
        self._lit_depth, self._lit_quote, self._lit_escape = depth, quote, escape
        self._value_parts.append(text[pos:i])
        if not ended and not (final and i >= n):
            return i
        raw = "".join(self._value_parts)
        self._value_parts = []
        if ended and (self._lit_unbalanced or not raw.strip()) and self._still_held():
            # `f(x=1])`, `f(city=)`: invalid syntax, so no call; its text is content
            return self._to_junk(pos)
        if self._spec.literal_values:
            self.out.add_arguments(convert_literal_value(raw, self._kind, self._schema()))
        else:
            self.out.add_arguments(self._convert_buffered(raw))
        if not ended:  # the output ended inside the value
            return self._close_tagged(n, incomplete=True)
        self._step = T_BETWEEN
        return i

    # -- does the call continue here? ------------------------------------------------------------

    def _after_marker(self, text: str, p: int, final: bool, marker: str, then) -> int:
        """YES/NO/WAIT: `marker` is at `p`, and (when it is weak) what follows it passes `then`."""
        found, end = match_at(text, p, marker, final)
        if found == PARTIAL:
            return WAIT
        if found == NONE:
            return NO
        if then is None or not is_weak(marker):
            return YES
        return then(text, end, final)

    def _follows_value(self, text: str, p: int, final: bool) -> int:
        """After a value: its end marker, the call's end, the next argument or the end of output."""
        spec = self._spec
        p = skip_whitespace(text, p)
        if p >= len(text):
            return YES if final else WAIT
        # a literal value's end marker may be left out: the separator or the call's end follow it
        verdicts = [self._after_marker(text, p, final, self._arg_end(), self._follows_arg_end),
                    self._after_marker(text, p, final, spec.call_end, self._follows_call_end),
                    self._after_marker(text, p, final, spec.arg_separator, self._follows_separator)]
        verdicts += [self._after_marker(text, p, final, m, None) for m in (spec.section_end, *spec.stops)]
        return _best(verdicts)

    def _arg_end(self) -> str:
        """The current argument's end marker (a closing tag may name the key: `</city>`)."""
        spec = self._spec
        return spec.arg_end.replace(KEY_HOLE, self._key) if spec.arg_end_keyed else spec.arg_end

    def _follows_arg_end(self, text: str, q: int, final: bool) -> int:
        spec = self._spec
        q = skip_whitespace(text, q)
        if q >= len(text):
            return YES if final else WAIT
        verdicts = [self._after_marker(text, q, final, spec.call_end, self._follows_call_end)]
        verdicts += [self._after_marker(text, q, final, m, None) for m in (spec.section_end, *spec.stops)]
        if spec.arg_separator:
            verdicts.append(self._after_marker(text, q, final, spec.arg_separator, self._follows_separator))
        elif spec.arg_start:
            verdicts.append(self._after_marker(text, q, final, spec.arg_start, None))
        else:
            verdicts.append(self._follows_key(text, q, final))
        return _best(verdicts)

    def _follows_separator(self, text: str, q: int, final: bool) -> int:
        spec = self._spec
        q = skip_whitespace(text, q)
        if q >= len(text):
            return YES if final else WAIT
        if spec.arg_start:
            return self._after_marker(text, q, final, spec.arg_start, None)
        return self._follows_key(text, q, final)

    def _follows_key(self, text: str, q: int, final: bool) -> int:
        """A key and its end marker (`days=`)."""
        hit = self._bare_key(text, q, final)
        if hit == WAIT or hit == NO:
            return hit
        return YES

    def _follows_call_end(self, text: str, q: int, final: bool) -> int:
        """After a call: the next call, the end of the section or of the turn, or (no section) text."""
        spec = self._spec
        q = skip_whitespace(text, q)
        if q >= len(text):
            return YES if final else WAIT
        if not spec.section_end:
            return YES
        then = self._follows_name if spec.bare_names else None
        verdicts = [self._after_marker(text, q, final, spec.call_separator, then)]
        verdicts += [self._after_marker(text, q, final, m, None)
                     for m in (spec.section_end, spec.call_start, *spec.stops)]
        if spec.bare_names and not spec.call_separator:
            verdicts.append(self._follows_name(text, q, final))
        return _best(verdicts)

    def _follows_name(self, text: str, q: int, final: bool) -> int:
        """A call with no marker of its own: a name and its end marker (`search(`)."""
        spec = self._spec
        q = skip_whitespace(text, q)
        if q >= len(text):
            return YES if final else WAIT
        end = _NAME_RUN.match(text, q).end()
        if end == q:
            return NO
        if end >= len(text):
            return NO if final or end - q > MAX_NAME else WAIT
        if not spec.name_end:
            return YES
        return self._after_marker(text, skip_whitespace(text, end), final, spec.name_end, None)


def _best(verdicts: list[int]) -> int:
    """YES if any check passed, else WAIT if one may still pass, else NO."""
    if YES in verdicts:
        return YES
    return WAIT if WAIT in verdicts else NO
