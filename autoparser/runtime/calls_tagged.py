"""Calls in tag formats: `NAME` between markers, then JSON or tagged arguments.

A mixin of `StreamParser` (see `autoparser.runtime.engine` for the modes and the rules every
mode follows). Header: `name_start NAME name_end [id_start ID id_end] [args_start]`, in that
order or with the id first. Arguments: a JSON object (`tag_json`, also accepted in a tagged
format) or `arg_start KEY arg_key_end VALUE arg_end` pairs (`tag_tagged`), whose values are
turned into JSON by the tool's schema and streamed as they arrive when they are strings.
"""

from __future__ import annotations

import json
import re

from autoparser.runtime.jsonscan import JsonScanner, json_string_body, loads_strict, skip_whitespace
from autoparser.runtime.markers import FULL, NONE, PARTIAL, hold_for, match_at
from autoparser.runtime.spec import schema_type, value_kind
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
    T_BETWEEN,
    T_BUFFER,
    T_DECIDE,
    T_KEY,
    T_KEY_TRAIL,
    T_STRING,
)

MAX_NAME = 256
_INDEX_RUN = re.compile(r"[0-9]*")
_JSON_STARTS = '{["-0123456789tfn'
# characters that cannot be part of a tool name written between markers
NAME_FORBIDDEN = "\\s\"'<>{}\\[\\](),;=|`"


def convert_tagged_value(raw: str, kind: str, schema) -> str:
    """The JSON text of a tagged argument value whose raw text was buffered.

    "json": the value must parse as JSON; a JSON string is parsed once more when the schema asks
    for another type (models quote numbers). "auto" (no usable schema): JSON when the text parses
    as a JSON number, boolean, null, array or object; anything else, a quoted string included, is
    the raw text as a string. Text that does not parse is always kept as a string.
    """
    stripped = raw.strip()
    try:
        value = loads_strict(stripped)
    except ValueError:
        return json.dumps(raw, ensure_ascii=False)
    if isinstance(value, str):
        if kind == "auto":
            return json.dumps(raw, ensure_ascii=False)
        wanted = schema_type(schema)
        if wanted and wanted != "string":
            try:
                inner = loads_strict(value)
            except ValueError:
                inner = None
            if inner is not None and not isinstance(inner, str):
                value = inner
    return json.dumps(value, ensure_ascii=False)


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
            self._call_id = f"{spec.name_start}{self._name}{spec.name_end}{self._index_digits}"
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
            markers = self._sets["id_end"]
            hit = markers.find(text, p)
            if hit is None:
                if final or len(text) - p > MAX_NAME:
                    return self._fail_call()
                return pos
            start, found, kind = hit
            self._call_id = text[p:start].strip() or self._call_id
            self._step = self._after_id
            return start + len(found) if kind == "id_end" else start
        if step == ARGS_START:
            if not spec.args_start:
                self._step = ARGS_BEGIN
                return p
            found, end = match_at(text, p, spec.args_start, final)
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
        match = self._sets["name_stop"].search(text, p)
        if match is None:
            if final or len(text) - p > MAX_NAME:
                return self._fail_call()
            return p
        name = text[p : match.start()]
        if not name or len(name) > MAX_NAME or not self._spec.name_allowed(name):
            return self._fail_call()
        self._name = name
        self._step = NAME_END
        return match.start()

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
        if hit is None:
            if not final and closers.is_prefix(text, p):
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
            markers = self._sets["key_end"]
            hit = markers.find(text, p)
            if hit is None:
                if final:
                    # cut off inside a key: keep the partial key (nothing is lost), with no value
                    partial = text[p:].strip()
                    if partial:
                        self.out.add_arguments(("{" if not self._args_open else ", ")
                                               + json.dumps(partial, ensure_ascii=False) + ": null")
                        self._args_open = True
                    return self._close_tagged(len(text), incomplete=True)
                if len(text) - p > MAX_NAME:
                    return self._close_tagged(p, incomplete=True, junk=True)
                return pos
            start, found, kind = hit
            key = text[p:start].strip()
            if not key:
                return self._close_tagged(p, incomplete=True, junk=True)
            self._key = key
            schema = spec.argument_schema(self._name, key)
            if kind == "json" or not spec.arg_string_raw:
                self._kind = "json"
            else:
                self._kind = value_kind(schema)
            self.out.add_arguments(("{" if not self._args_open else ", ") + json.dumps(key, ensure_ascii=False) + ": ")
            self._args_open = True
            self._value_parts = []
            self._step = T_KEY_TRAIL
            return start + len(found)
        # T_BETWEEN: the next argument, or the end of the call
        if p >= len(text):
            if final:
                return self._close_tagged(p, incomplete=False)
            return p
        markers = self._sets["between_args"]
        hit = markers.find_at(text, p)
        if hit is None:
            if not final and markers.is_prefix(text, p):
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
        self.out.add_arguments("}" if self._args_open else "{}")
        self._end_call()
        self._mode = self._section
        return end if kind == "call_end" else p

    def _close_tagged(self, pos: int, incomplete: bool, junk: bool = False) -> int:
        self.out.add_arguments("}" if self._args_open else "{}")
        if junk:
            return self._to_junk(pos, incomplete=incomplete)
        self._end_call(incomplete)
        self._mode = self._section
        return pos

    def _value_decide(self, text: str, pos: int, final: bool) -> int:
        """A string-typed value streams at once; others are buffered until their end marker."""
        if self._kind == "string":
            self.out.add_arguments('"')
            self._step = T_STRING
            return pos
        if self._kind == "json":
            self._step = T_BUFFER
            return pos
        p = skip_whitespace(text, pos)
        if p >= len(text) and not final:
            return pos
        if p < len(text) and text[p] in _JSON_STARTS:
            self._step = T_BUFFER
            return pos
        self.out.add_arguments('"')
        self._step = T_STRING
        return pos

    def _value_end(self, text: str, pos: int):
        """Where the current value ends, as (value end, marker end, kind); or None and the safe end."""
        spec = self._spec
        markers = self._sets["value_end"]
        hit = markers.find(text, pos)
        if hit is None:
            safe = markers.safe_end(text, pos)
            if spec.arg_end_lead:
                safe = min(safe, hold_for(text, pos, spec.arg_end_lead + spec.arg_end))
            return None, safe
        start, found, kind = hit
        value_end = start
        lead = spec.arg_end_lead
        if lead and kind == "end" and start - len(lead) >= pos and text.startswith(lead, start - len(lead)):
            value_end = start - len(lead)
        return (value_end, start + len(found), kind), start

    def _value_string(self, text: str, pos: int, final: bool) -> int:
        hit, safe = self._value_end(text, pos)
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
        hit, safe = self._value_end(text, pos)
        if hit is None:
            end = len(text) if final else safe
            self._value_parts.append(text[pos:end])
            if final:
                raw = "".join(self._value_parts)
                self.out.add_arguments(convert_tagged_value(raw, self._kind, self._schema()))
                return self._close_tagged(len(text), incomplete=True)
            return end
        value_end, marker_end, kind = hit
        self._value_parts.append(text[pos:value_end])
        raw = "".join(self._value_parts)
        self.out.add_arguments(convert_tagged_value(raw, self._kind, self._schema()))
        return self._value_finished(marker_end, kind, value_end)

    def _schema(self):
        return self._spec.argument_schema(self._name, self._key)

    def _value_finished(self, marker_end: int, kind: str, value_end: int) -> int:
        self._value_parts = []
        if kind == "end":
            self._step = T_BETWEEN
            return marker_end
        # end of turn inside a value: the call was cut off
        self.out.add_arguments("}")
        self._end_call(incomplete=True)
        self._mode = self._stopped
        return marker_end
