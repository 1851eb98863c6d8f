"""Python literals in model output (`'text'`, `3`, `True`, `None`, `['a']`, `{'k': 1}`), read as JSON.

Templates that write tool calls in Python call syntax (``name(key='text', n=42)``), and templates
that print a value with Jinja's ``{{ value }}``, show Python's spelling of values. Two pieces:

* `decode_escape` decodes one backslash escape of a quoted string, so that a string value can be
  streamed as it arrives; it says when the escape is cut short and more text is needed.
* `literal_to_json` turns a complete literal into a JSON value. JSON is tried first (templates
  also write values with ``tojson``), then `ast.literal_eval`, then both spellings mixed
  (``{'a': true}``). `ast.literal_eval` evaluates no code: it accepts only literal syntax.

`convert_tagged_value` and `convert_literal_value` give the JSON text of a whole argument value
written as tagged text or as a literal; every backend reads values through them. Standard
library only: the standalone module embeds this file.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from typing import NamedTuple

from autoparser.language.request import schema_type

_SIMPLE_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f",
                   "v": "\v", "a": "\a", "/": "/", "\n": ""}
_HEX_LENGTHS = {"x": 2, "u": 4, "U": 8}
_HEX = re.compile(r"[0-9a-fA-F]*")
_OCTAL = re.compile(r"[0-7]{1,3}")
_LOW_SURROGATE = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_LOW_SURROGATE_PREFIX = re.compile(r"\\(?:u(?:[dD](?:[c-fC-F][0-9a-fA-F]{0,1})?)?)?\Z")
# A model's `'a\/b'` is a Python literal with an escape Python keeps as written; compiling it warns
# (DeprecationWarning, SyntaxWarning from 3.12) on stderr, attributed to the source "<unknown>"
for _category in (DeprecationWarning, SyntaxWarning):
    warnings.filterwarnings("ignore", message="invalid escape sequence", category=_category, module="<unknown>")

_JSON_WORDS = re.compile(r"\b(true|false|null)\b")
_PY_WORDS = {"true": "True", "false": "False", "null": "None"}
# a quoted string, or one the text ends inside (read to the end once: a quote that never closes
# would otherwise be scanned to the end again from every later quote, quadratic in the text)
_STRINGS = re.compile(r"""('(?:[^'\\]++|\\.)*+(?:'|\\?\Z)|"(?:[^"\\]++|\\.)*+(?:"|\\?\Z))""", re.S)
_NON_DECIMAL = re.compile(r"(?<![\w.])[+-]?0[xXoObB]")
# a quoted string literal's opening: an optional prefix (r, u, b) and the quote
QUOTE_OPEN = re.compile(r"([rRuUbB]{0,2})('\'\'|\"\"\"|'|\")")
MAX_LITERAL = 1_000_000  # longer texts are not evaluated (ast would build a huge tree)


def decode_escape(text: str, pos: int, final: bool) -> tuple[str, int] | None:
    """Decode the escape starting with the backslash at `text[pos]`: (characters, end).

    None when the escape is cut short and more text may complete it (never with `final`).
    Unknown escapes keep their backslash, as Python does; ``\\/`` is a slash, as in JSON.
    A UTF-16 surrogate pair written as two ``\\u`` escapes becomes one character; a lone
    surrogate, which no UTF-8 text can hold, becomes U+FFFD.
    """
    if pos + 1 >= len(text):
        return None if not final else ("\\", pos + 1)
    char = text[pos + 1]
    if char in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[char], pos + 2
    if char == "\r":  # a line continuation written with CRLF
        end = pos + 3 if text.startswith("\n", pos + 2) else pos + 2
        return "", end
    if char in "01234567":
        digits = _OCTAL.match(text, pos + 1).group()
        if len(digits) < 3 and pos + 1 + len(digits) >= len(text) and not final:
            return None
        return chr(int(digits, 8)), pos + 1 + len(digits)
    length = _HEX_LENGTHS.get(char)
    if length is None:
        return "\\" + char, pos + 2
    digits = _HEX.match(text, pos + 2, pos + 2 + length).group()
    if len(digits) < length:
        if not final and pos + 2 + len(digits) >= len(text):
            return None
        return "\\" + char, pos + 2  # a malformed escape stays as written
    code = int(digits, 16)
    end = pos + 2 + length
    if code > 0x10FFFF:
        return "\\" + char, pos + 2
    if 0xD800 <= code < 0xDC00:
        low = _LOW_SURROGATE.match(text, end)
        if low:
            second = int(low.group()[2:], 16)
            return chr(0x10000 + ((code - 0xD800) << 10) + (second - 0xDC00)), low.end()
        if not final and _LOW_SURROGATE_PREFIX.match(text, end):
            return None
        return "\ufffd", end
    if 0xDC00 <= code < 0xE000:
        return "\ufffd", end
    return chr(code), end


def decode_string_body(body: str, raw: bool = False) -> str:
    """The text of a quoted string's body, its escapes decoded (kept as written when `raw`)."""
    if raw or "\\" not in body:
        return body
    out: list[str] = []
    pos = 0
    while True:
        slash = body.find("\\", pos)
        if slash < 0:
            out.append(body[pos:])
            return "".join(out)
        out.append(body[pos:slash])
        decoded, pos = decode_escape(body, slash, True)
        out.append(decoded)


def decided_end(text: str, quote: str, escape: str) -> int:
    """How much of a quoted string's body read so far is decided: not an escape that may be cut
    in two (the last `escape` that begins one, within an escape's length of the end), nor a
    `quote` at the end, which may close the string."""
    cut = len(text)
    slash = text.rfind(escape, max(0, cut - 10)) if escape else -1
    run = slash
    while run > 0 and text[run - 1] == escape:
        run -= 1
    if slash >= 0 and (slash - run) % 2 == 0:  # the last escape character begins an escape
        cut = slash
    if cut and text[cut - 1] == quote:
        cut -= 1
    return cut


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def is_json_number(text: str) -> bool:
    """Whether `text` is one JSON number, kept as written however long or large, as the JSON
    scanner keeps it: decoding would shorten a long fraction to 17 digits, make `1e999` infinite
    (no JSON) and refuse an integer of over 4,300 digits."""
    return bool(_JSON_NUMBER.fullmatch(text))


class NotALiteral(ValueError):
    """The text is neither JSON nor a Python literal that has a JSON form."""


def literal_to_json(text: str):
    """The JSON value of a complete JSON or Python literal; raises `NotALiteral`."""
    text = text.strip()
    if not text or len(text) > MAX_LITERAL:
        raise NotALiteral(text[:40])
    try:
        return as_json(json.loads(text, parse_constant=_reject))  # 1e999 is no JSON number
    except (ValueError, RecursionError):
        pass
    if _NON_DECIMAL.search(_STRINGS.sub("''", text)):
        raise NotALiteral(text[:40])  # 0x1F, 0o17, 0b1: JSON has no such numbers; keep the text
    for candidate in (text, _python_words(text)):
        try:
            value = _literal(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        try:
            return as_json(value)
        except (ValueError, RecursionError):
            break
    raise NotALiteral(text[:40])


def _literal(text: str):
    """The value of a Python literal, each set a list of its items in the order written (a
    set's own order follows string hashing, which differs from run to run)."""
    tree = ast.parse(text, mode="eval")
    if isinstance(tree.body, ast.Tuple) and not _bracketed(text):
        # `3, 4` (or a value cut after `3,`) is a tuple to Python, but no value: it has no brackets
        raise ValueError("a tuple without brackets")
    value = ast.literal_eval(tree)  # rejects what Python would, such as a list inside a set
    if any(isinstance(node, ast.Set) for node in ast.walk(tree)):
        value = ast.literal_eval(_SetsAsLists().visit(tree))
    return value


def _bracketed(text: str) -> bool:
    """Whether a tuple's text is one bracketed tuple: put in a list, it is the list's one element."""
    try:
        elements = ast.parse(f"[{text}\n]", mode="eval").body.elts  # (the line ends a comment)
    except SyntaxError:
        return False
    return len(elements) == 1 and isinstance(elements[0], ast.Tuple)


class _SetsAsLists(ast.NodeTransformer):
    def visit_Set(self, node: ast.Set) -> ast.List:
        return ast.copy_location(ast.List(elts=[self.visit(item) for item in node.elts], ctx=ast.Load()), node)


def _reject(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _python_words(text: str) -> str:
    """JSON's `true`/`false`/`null` spelled the Python way, outside quoted strings."""
    parts = _STRINGS.split(text)
    for index in range(0, len(parts), 2):
        parts[index] = _JSON_WORDS.sub(lambda m: _PY_WORDS[m.group(1)], parts[index])
    return "".join(parts)


def as_json(value):
    """A Python literal's value with JSON types: tuples and sets as lists, keys as strings."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError("not a JSON number")
        return value
    if isinstance(value, list | tuple | set | frozenset):
        return [as_json(item) for item in value]
    if isinstance(value, dict):
        return {_json_key(key): as_json(item) for key, item in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise ValueError(f"{type(value).__name__} has no JSON form")


def _json_key(key) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(key)
    raise ValueError("a key with no JSON form")


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def loads_strict(text: str):
    """`json.loads` without the NaN/Infinity extensions, which would not serialize back to JSON."""
    return json.loads(text, parse_constant=_reject_constant)


def convert_literal_value(raw: str, kind: str, schema) -> str:
    """The JSON text of a literal value (`'text'`, `3`, `True`, `[1, 2]`, `{"a": null}`).

    A value that is no literal stays a string, its text stripped; so does an unquoted value
    whose schema type is string (`location=Paris`). A quoted value whose schema asks for another
    type is read once more (`days='3'` gives 3).
    """
    stripped = raw.strip()
    quoted = bool(QUOTE_OPEN.match(stripped)) and stripped[-1:] in "'\""
    if kind == "string" and not quoted:
        return json.dumps(stripped, ensure_ascii=False)
    if is_json_number(stripped):
        return stripped  # as written: `1e5` and `2.50` stay what the model wrote
    try:
        value = literal_to_json(stripped)
    except NotALiteral:
        return json.dumps(stripped, ensure_ascii=False)
    if isinstance(value, str) and kind != "string":
        wanted = schema_type(schema)
        if wanted and wanted != "string":
            try:
                inner = literal_to_json(value)
            except NotALiteral:
                inner = None
            if inner is not None and not isinstance(inner, str):
                value = inner
    return json.dumps(value, ensure_ascii=False)


def allows_null(schema) -> bool:
    """Whether a schema accepts null (`{"type": ["string", "null"]}`): raw `null` is then null."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(allows_null(option) for option in schema.get("anyOf") or schema.get("oneOf") or []
               if isinstance(option, dict) and option.get("type") == "null")


def convert_tagged_value(raw: str, kind: str, schema) -> str:
    """The JSON text of a tagged argument value whose raw text was buffered.

    "json": the value must parse as JSON, or as a Python literal (templates that print a value
    with ``{{ value }}`` write `True`, `None`, `{'a': 1}`); a string is parsed once more when the
    schema asks for another type (models quote numbers). "auto" (no usable schema): JSON when the
    text parses as a JSON number, boolean, null, array or object; anything else, a quoted string
    included, is the raw text as a string. Text that does not parse is always kept as a string.
    """
    stripped = raw.strip()
    if kind == "string" and stripped == "null" and allows_null(schema):
        return "null"
    if kind != "string" and is_json_number(stripped):
        return stripped  # as written: `1e5` and `2.50` stay what the model wrote
    try:
        value = as_json(loads_strict(stripped))  # as_json: 1e999 is no JSON number
    except (ValueError, RecursionError):
        if kind != "json":
            return json.dumps(raw, ensure_ascii=False)
        try:
            value = literal_to_json(stripped)
        except NotALiteral:
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


# -- nested values in tagged formats -----------------------------------------------------------------

_BARE_OBJECT_KEY = re.compile(r"([{,]\s*)([A-Za-z_][\w\-]*)(\s*:)")


def nested_to_json(raw: str, nested: tuple[str, ...]) -> str | None:
    """The JSON text of an object or array written in the template's own syntax (`nested`:
    ("quoted", quote), ("tags", arg_start, key_end, arg_end, item), ("bracketed", start, key_end,
    separator, quote[, object open, object close, array open, array close, member end]) or
    ("indented", key_end, item[, the argument's indentation[, quote]])), or None."""
    if nested[:1] == ("quoted",):
        value = quoted_to_json(raw, nested[1])
    elif nested[:1] == ("tags",):
        value = tags_to_json(raw, *nested[1:])
    elif nested[:1] == ("bracketed",):
        value = _Bracketed(raw, BracketedSyntax.of(nested[1:])).whole()
    elif nested[:1] == ("indented",):
        value = indented_to_json(raw, *nested[1:])
    else:
        return None
    return None if value is None else json.dumps(value, ensure_ascii=False)


def indented_to_json(raw: str, key_end: str, item: str, member_indent: str | None = None, quote: str = ""):
    """A block of lines indented deeper than its argument's (`\\n  unit: c\\n  days:\\n    - 1`): lines
    that open with `item` are an array's elements, others `KEY key_end VALUE` an object's members;
    a member or element with no value on its line holds the deeper lines after it. None when the
    text is not such a block (a value on the argument's own line, or a line indented no deeper
    than `member_indent`, the argument's own indentation: the next argument's or call's). With a
    `quote`, strings are written as JSON strings; without, as bare text."""
    if raw[:1] != "\n" and raw.strip():
        return None
    lines = [(len(line) - len(line.lstrip(" ")), line.strip()) for line in raw.split("\n") if line.strip()]
    if not lines or member_indent is not None and min(indent for indent, _ in lines) <= len(member_indent):
        return None
    try:
        value, end = _block(lines, 0, item, key_end, 0, bool(quote))
    except (ValueError, RecursionError):
        return None
    return value if end == len(lines) else None


def _block(lines: list[tuple[int, str]], at: int, item: str, key_end: str, depth: int, quoted: bool = False):
    """The object or array whose lines begin at `at`, all indented as that first line; and
    where its lines end."""
    if depth > 32:
        raise ValueError("nested too deep")
    indent, first = lines[at]
    listed = first.startswith(item)
    found: list = []
    members: dict = {}
    while at < len(lines) and lines[at][0] == indent:
        text = lines[at][1]
        if listed != text.startswith(item):
            raise ValueError("elements and members mixed")
        if listed:
            rest = text[len(item):]
        else:
            key, sep, rest = text.partition(key_end)
            if not sep:
                raise ValueError("no key end")
        at += 1
        if rest.strip():
            value = _leaf(rest, quoted)
        elif at < len(lines) and lines[at][0] > indent:
            value, at = _block(lines, at, item, key_end, depth + 1, quoted)
        else:
            value = "" if not listed else None
        if listed:
            found.append(value)
        else:
            members[key.strip()] = value
    if at < len(lines) and lines[at][0] > indent:
        raise ValueError("deeper line with no member before it")
    return (found if listed else members), at


class BracketedSyntax(NamedTuple):
    """A bracketed syntax's parts, as `("bracketed", ...)` of `ir.RawString.nested` lists them
    after its kind: `start` before each key, `key_end` after it, `separator` between members and
    elements, strings quoted by `quote` (or as JSON); an object's brackets and an array's (JSON's
    where the syntax states none), `member_end` after a member's value."""

    start: str
    key_end: str
    separator: str
    quote: str
    object_open: str = "{"
    object_close: str = "}"
    array_open: str = "["
    array_close: str = "]"
    member_end: str = ""

    @classmethod
    def of(cls, fields: tuple[str, ...]) -> BracketedSyntax:
        """The syntax from the fields after the kind: four, eight (its own brackets) or nine."""
        return cls(*fields[:4]) if len(fields) < 8 else cls(*fields[:9])


class _Bracketed:
    """A value between brackets in the template's own syntax (`{:units "metric" :days [1 2]}`):
    `start` before each key, `key_end` after it, `member_end` after its value, `separator` between
    members and elements (whitespace in them is optional, and whitespace alone may separate),
    strings quoted by `quote` or as JSON; a bare word is a JSON number, boolean or null, else
    text. Its brackets: an object's opening and closing, an array's (`(obj`, `)`, `(vec`, `)`)."""

    def __init__(self, raw: str, syntax: BracketedSyntax) -> None:
        self.text, self.pos = raw.strip(), 0
        self.start, self.key_end = syntax.start.strip(), syntax.key_end.strip()
        self.separator, self.quote = syntax.separator.strip(), syntax.quote
        brackets = (syntax.object_open, syntax.object_close, syntax.array_open, syntax.array_close)
        self.object_open, self.object_close, self.array_open, self.array_close = (b.strip() for b in brackets)
        self.member_end = syntax.member_end.strip()
        marks = (*brackets, self.member_end)
        self.stops = "".join(sorted({*"{}[]\"", *self.key_end[:1], *self.separator[:1], *self.quote[:1],
                                     *(mark.strip()[:1] for mark in marks if mark.strip())}))

    def whole(self):
        if not (self.text.startswith(self.object_open) or self.text.startswith(self.array_open)):
            return None
        try:
            value = self.value(0)
        except (ValueError, IndexError, RecursionError):
            return None
        return value if self.pos == len(self.text) else None

    def skip(self, token: str = "") -> bool:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1
        if token and self.text.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return not token

    def value(self, depth: int):
        if depth > 32:
            raise ValueError("nested too deep")
        self.skip()
        if self.skip(self.object_open):
            return dict(self.items(self.object_close, depth, keyed=True))
        if self.skip(self.array_open):
            return [v for _, v in self.items(self.array_close, depth, keyed=False)]
        return self.leaf()

    def items(self, close: str, depth: int, keyed: bool):
        found = []
        while not self.skip(close):
            if found and self.separator and not self.skip(self.separator):
                raise ValueError("no separator")
            key = self.key() if keyed else None
            found.append((key, self.value(depth + 1)))
            if keyed and self.member_end and not self.skip(self.member_end):
                raise ValueError("no member end")
        return found

    def key(self) -> str:
        if not self.skip(self.start) and self.member_end:
            raise ValueError("no member start")
        key = self.leaf()
        if self.key_end and not self.skip(self.key_end):
            raise ValueError("no key end")
        return key if isinstance(key, str) else json.dumps(key)

    def leaf(self):
        self.skip()
        text, at = self.text, self.pos
        if self.quote and text.startswith(self.quote, at):
            end = text.index(self.quote, at + len(self.quote))
            self.pos = end + len(self.quote)
            return text[at + len(self.quote):end]
        if text.startswith('"', at):
            value, self.pos = json.JSONDecoder().raw_decode(text, at)
            return value
        end = at
        while end < len(text) and not text[end].isspace() and text[end] not in self.stops:
            end += 1
        if end == at:
            raise ValueError("no value")
        self.pos = end
        return _leaf(text[at:end])


def quoted_to_json(raw: str, quote: str):
    """A value written as JSON whose strings are quoted by a marker and whose keys are bare
    (`{theme:<|"|>dark<|"|>,count:3}`), as a JSON value; None when it is not one."""
    out: list[str] = []
    pos = 0
    while True:
        start = raw.find(quote, pos)
        if start < 0:
            out.append(_BARE_OBJECT_KEY.sub(r'\1"\2"\3', raw[pos:]))
            break
        end = raw.find(quote, start + len(quote))
        if end < 0:
            return None
        out.append(_BARE_OBJECT_KEY.sub(r'\1"\2"\3', raw[pos:start]))
        out.append(json.dumps(raw[start + len(quote): end], ensure_ascii=False))
        pos = end + len(quote)
    try:
        return json.loads("".join(out))
    except ValueError:
        return None


def tags_to_json(raw: str, arg_start: str, key_end: str, arg_end: str, item: str, depth: int = 0):
    """A value written as nested tagged arguments (`<real>1.5</real><imaginary>2</imaginary>`) as a
    JSON object, or as an array when every element is named `item`; None when it is not one.
    `arg_end` names its key as `{key}`; leaves are JSON numbers, booleans and null, else text."""
    text = raw.strip()
    if depth > 32 or not arg_start or not text.startswith(arg_start):
        return None
    pairs: list[tuple[str, object]] = []
    pos = 0
    while pos < len(text):
        if not text.startswith(arg_start, pos):
            return None
        key_at = pos + len(arg_start)
        key_stop = text.find(key_end, key_at)
        if key_stop < 0:
            return None
        key = text[key_at:key_stop]
        close = arg_end.replace("{key}", key)
        value_at = key_stop + len(key_end)
        value_stop = _matching_close(text, value_at, arg_start + key + key_end, close)
        if not key or value_stop < 0:
            return None
        value_raw = text[value_at:value_stop]
        nested = tags_to_json(value_raw, arg_start, key_end, arg_end, item, depth + 1)
        pairs.append((key, nested if nested is not None else _leaf(value_raw)))
        pos = value_stop + len(close)
        while pos < len(text) and text[pos].isspace():
            pos += 1
    if item and pairs and all(key == item for key, _ in pairs):
        return [value for _, value in pairs]
    return dict(pairs)


def _matching_close(text: str, at: int, opener: str, close: str) -> int:
    depth = 0
    while True:
        stop = text.find(close, at)
        if stop < 0:
            return -1
        depth += text.count(opener, at, stop)
        if depth == 0:
            return stop
        depth -= 1
        at = stop + len(close)


def _leaf(raw: str, quoted: bool = False):
    stripped = raw.strip()
    try:
        value = json.loads(stripped)
    except ValueError:
        return stripped
    return value if quoted or not isinstance(value, str) else stripped
