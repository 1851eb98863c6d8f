"""Calls written as JSON objects: `{"name": ..., "arguments": {...}}`, alone, in an array, bare.

A mixin of `StreamParser` (see `autoparser.runtime.engine` for the modes and the rules every
mode follows). The object's keys come from the analysis (`name_field`, `args_field`, `id_field`,
`function_field`); "arguments" and "parameters" are always accepted for the arguments. Arguments
stream through the JSON scanner as soon as the name is known; arguments written as a JSON string
(stringified JSON) are collected and checked before they are emitted. `_json_args` also serves
the JSON arguments of tag formats.
"""

from __future__ import annotations

import json

from autoparser.language.values import loads_strict
from autoparser.runtime.jsonscan import (
    DONE,
    ERROR,
    MORE,
    JsonScanner,
    read_string_token,
    skip_whitespace,
)
from autoparser.runtime.markers import FULL, PARTIAL, match_at
from autoparser.runtime.steps import (
    A_ITEM,
    A_OPEN,
    NO,
    W_AFTER,
    W_ARGS_STRING,
    W_COLON,
    W_KEY,
    W_KEY_OR_END,
    W_OPEN,
    W_SKIP,
    W_VALUE,
    WAIT,
    YES,
)


class JsonCalls:
    """The call modes of JSON-object formats, and JSON argument streaming."""

    def _between_bare(self, text: str, pos: int, final: bool) -> int:
        """After a call written as a bare JSON object: another may follow after `;` or `,`."""
        p = skip_whitespace(text, pos)
        q = p
        if q < len(text) and text[q] in ";,":
            q = skip_whitespace(text, q + 1)
        if q >= len(text) and not final:
            return pos
        if q < len(text) and text[q] == "{" and self._tools_allowed():
            self.out.add_content(text[pos:p])
            self._begin_call(text[p:q], self._wrapper, W_OPEN)
            return q
        self._mode = self._content
        return pos

    def _json_args(self, text: str, pos: int, final: bool) -> int:
        scanner = self._scanner
        newpos, status, emitted = scanner.scan(text, pos, final)
        if self._args_buffer is not None:
            self._args_buffer.append(emitted)
        else:
            self.out.add_arguments(emitted)
        if status == MORE:
            if not final:
                return newpos
            self._close_json(scanner.closing(text[newpos:]))
            return self._finish_broken_json(len(text), incomplete=True)
        if status == DONE:
            self._mode = self._after_json
            return newpos
        held = scanner.held_raw()  # a member whose value is unreadable stays the model's text
        self._close_json(scanner.closing())
        pos = self._finish_broken_json(newpos, incomplete=True)
        self.out.add_content(held)
        return pos

    def _close_json(self, closing: str) -> None:
        if self._args_buffer is not None:
            self._args_buffer.append(closing)
        else:
            self.out.add_arguments(closing)

    def _finish_broken_json(self, pos: int, incomplete: bool) -> int:
        """Arguments that broke off (invalid character or end of output) were closed by repair."""
        if self._spec.format == "json":
            if not self._emitted:
                if not (self._name and self._args_buffer is not None):
                    return self._fail_call()
                self._emit_buffered_call()  # cut off while waiting for its id: still a call
            return self._to_junk(pos, incomplete=incomplete)
        if self.out.calls:
            self.out.calls[-1].incomplete = incomplete
        self._mode = self._after_args
        return pos

    # -- JSON-object calls ----------------------------------------------------------------------

    def _wrapper(self, text: str, pos: int, final: bool) -> int:
        """A call written as a JSON object: {"name": ..., "arguments": {...}, "id": ...}."""
        step = self._step
        if step == W_SKIP or step == W_ARGS_STRING:
            return self._wrapper_value_scan(text, pos, final)
        p = skip_whitespace(text, pos)
        if p >= len(text):
            if not final:
                return p
            return self._wrapper_cut(p)
        char = text[p]
        if step == W_OPEN:
            if char != "{":
                return self._wrapper_error(p)
            self._step = W_KEY_OR_END
            return p + 1
        if step == W_KEY_OR_END:
            if char == "}":
                return self._wrapper_close(p + 1)
            if char != '"':
                return self._wrapper_error(p)
            self._step = W_KEY
            return p
        if step == W_KEY:
            token = read_string_token(text, p, final)
            if token == "":
                return p
            if token is None:
                return self._wrapper_error(p)
            key, end = token
            place = self._has_place(key, text, end, final)
            if place == WAIT:
                return p
            if place == NO:
                return self._stray_member(p)
            self._key = key
            self._step = W_COLON
            return end
        if step == W_COLON:
            if char != ":":
                return self._wrapper_error(p)
            self._step = W_VALUE
            return p + 1
        if step == W_VALUE:
            return self._wrapper_value(text, p, final)
        # W_AFTER
        if char == ",":
            self._step = W_KEY_OR_END
            return p + 1
        if char == "}":
            return self._wrapper_close(p + 1)
        return self._wrapper_error(p)

    def _has_place(self, key: str, text: str, end: int, final: bool) -> int:
        """YES when the call has a place for a member of this key (a field the format names, not
        yet read; `"type": "function"` anywhere), NO when it has not, WAIT to see the value."""
        spec = self._spec
        if key == "type":
            return self._is_function_type(text, end, final)
        if key == spec.name_field:
            place = not self._name
        elif key in spec.args_fields:
            place = not self._has_args
        elif key == spec.id_field:
            place = not self._call_id
        elif key == spec.function_field:
            place = self._level == 0 and not self._name and not self._has_args
        else:
            place = False
        return YES if place else NO

    @staticmethod
    def _is_function_type(text: str, end: int, final: bool) -> int:
        """Whether `: "function"` follows the `type` key at `end` (YES, NO or WAIT)."""
        q = skip_whitespace(text, end)
        if q >= len(text):
            return NO if final else WAIT
        if text[q] != ":":
            return NO
        q = skip_whitespace(text, q + 1)
        if q >= len(text):
            return NO if final else WAIT
        token = read_string_token(text, q, final)
        if token == "":
            return WAIT
        return YES if token is not None and token[0] == "function" else NO

    def _stray_member(self, pos: int) -> int:
        """A member the call has no place for (`"argumes": {...}`, a second name): the model's text
        is not dropped. Before the call was emitted it is no call, and its text is content; after,
        the call is marked incomplete and the text from the member on is content."""
        if not self._emitted:
            return self._fail_call()
        return self._to_junk(pos, incomplete=True)

    def _wrapper_value(self, text: str, p: int, final: bool) -> int:
        spec = self._spec
        key = self._key
        char = text[p]
        if key == spec.name_field and not self._name and char == '"':
            token = read_string_token(text, p, final)
            if token == "":
                return p
            if token is None or not token[0] or not spec.name_allowed(token[0]):
                return self._wrapper_error(p)
            self._name, end = token
            self._step = W_AFTER
            if self._has_args and not self._emitted and not self._waiting_for_id():
                self._emit_buffered_call()
            return end
        if key == spec.id_field and char == '"' and not self._emitted:
            token = read_string_token(text, p, final)
            if token == "":
                return p
            if token is not None:
                self._call_id = token[0]
                self._step = W_AFTER
                if self._name and self._has_args and self._mode == self._wrapper:
                    self._emit_buffered_call()
                return token[1]
        if key == spec.function_field and char == "{" and self._level == 0:
            self._level = 1
            self._step = W_KEY_OR_END
            return p + 1
        if key in spec.args_fields and not self._has_args:
            if char == "{":
                q = skip_whitespace(text, p + 1)
                if q >= len(text) and not final:
                    return p
                if q >= len(text) or text[q] not in '"}':
                    return self._wrapper_error(p)
                self._has_args = True
                self._scanner = JsonScanner("{")
                self._after_json = self._wrapper_after_args
                if self._name and not self._waiting_for_id():
                    self._emit_call()
                else:
                    self._args_buffer = []
                self._mode = self._json_args
                return p
            if char == '"':
                self._scanner = JsonScanner('"')
                self._value_parts = []
                self._step = W_ARGS_STRING
                return p
            return self._wrapper_error(p)
        if key != "type":  # a known member whose value is of the wrong kind (`"id": {...}`)
            return self._stray_member(p)
        self._scanner = JsonScanner()
        self._step = W_SKIP
        return p

    def _waiting_for_id(self) -> bool:
        """Whether the call's id may still come: the format names an id key and none was read.

        Templates write the id after the arguments too (`{"name", "arguments", "id"}`); the
        model's own id is returned, so the call waits for it (its arguments are buffered)
        until the id or the end of the object."""
        return bool(self._spec.id_field) and not self._call_id

    def _emit_buffered_call(self) -> None:
        self._emit_call()
        self.out.add_arguments("".join(self._args_buffer or ()))
        self._args_buffer = None

    def _wrapper_after_args(self, text: str, pos: int, final: bool) -> int:
        self._mode = self._wrapper
        self._step = W_AFTER
        return pos

    def _wrapper_value_scan(self, text: str, pos: int, final: bool) -> int:
        """Skip a value of no interest, or collect arguments written as a JSON string."""
        scanner = self._scanner
        newpos, status, emitted = scanner.scan(text, pos, final)
        if self._step == W_ARGS_STRING:
            self._value_parts.append(emitted)
        if status == MORE:
            if final:
                return self._wrapper_cut(len(text))
            return newpos
        if status == ERROR:
            return self._wrapper_error(newpos)
        if self._step == W_ARGS_STRING:
            try:
                inner = loads_strict(loads_strict("".join(self._value_parts)))
            except ValueError:
                inner = None
            if not isinstance(inner, dict):
                return self._wrapper_error(newpos)
            self._has_args = True
            self._args_buffer = [json.dumps(inner, ensure_ascii=False)]
            if self._name and not self._emitted and not self._waiting_for_id():
                self._emit_buffered_call()
        self._scanner = None
        self._step = W_AFTER
        return newpos

    def _wrapper_close(self, end: int) -> int:
        if self._level == 1:
            self._level = 0
            self._step = W_AFTER
            return end
        if not self._emitted:
            if not self._name or (not self._has_args and self._spec.markerless):
                return self._fail_call()
            self._emit_call()
            self.out.add_arguments("".join(self._args_buffer) if self._args_buffer else "{}")
            self._args_buffer = None
        elif not self._has_args:
            self.out.add_arguments("{}")
        if self._spec.array or self._spec.markerless:
            return self._call_done(end)
        self._mode = self._after_args
        self._step = 0
        return end

    def _wrapper_error(self, pos: int) -> int:
        if not self._emitted:
            return self._fail_call()
        return self._to_junk(pos, incomplete=True)

    def _wrapper_cut(self, pos: int) -> int:
        """The output ended inside the call object."""
        if not self._emitted:
            return self._fail_call()
        if not self._has_args:
            self.out.add_arguments("{}")
        self._end_call(incomplete=True)
        self._mode = self._content
        return pos

    # -- calls in a JSON array ------------------------------------------------------------------

    def _array(self, text: str, pos: int, final: bool) -> int:
        step = self._step
        p = skip_whitespace(text, pos)
        if self._opener is not None:
            self._opener.append(text[pos:p])  # the section's opener is content until a call is certain
        if p >= len(text):
            return self._array_end(p) if final else p
        char = text[p]
        if step == A_OPEN:
            self._step = A_ITEM
            self._bracketed = char == "["
            if self._bracketed and self._opener is not None:
                self._opener.append(char)
            return p + 1 if self._bracketed else p
        if step == A_ITEM:
            if char == "{" and self._tools_allowed():
                self._begin_call(self._array_raw, self._wrapper, W_OPEN)
                self._array_raw = ""
                return p
            if char == "]" and self._bracketed:
                return self._array_end(p + 1, char)
            self._release_opener()
            self._mode = self._raw_mode
            return p
        # A_AFTER: after a call
        if char == "," and self._bracketed:
            self._step = A_ITEM
            return p + 1
        if char == "]" and self._bracketed:
            return self._array_end(p + 1)
        if char == "{" and not self._bracketed:
            self._step = A_ITEM
            return p
        return self._array_end(p)

    def _array_end(self, pos: int, closer: str = "") -> int:
        if self._opener is not None:  # the array held no call: it is content, brackets and all
            self._release_opener()
            self.out.add_content(closer)
        self._in_section = False
        self._mode = self._after_array
        return pos

    def _after_array(self, text: str, pos: int, final: bool) -> int:
        """After the closing bracket: the section's end marker, if the format has one."""
        p = skip_whitespace(text, pos)
        if p >= len(text) and not final:
            return pos
        found, end = match_at(text, p, self._spec.section_end, final)
        if found == PARTIAL:
            return pos
        self._mode = self._content
        return end if found == FULL else pos
