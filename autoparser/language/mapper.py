"""From captures to the message, for every backend that reads the language (the streaming reader
and Lark): an argument member's key, a tagged or literal argument's raw text as JSON text by its
schema (the value's section unwrapped, Python literals decoded), and the member's `"key": value`
text in the arguments' object. The message itself is
assembled by `message.Output`, which both backends feed.

Standard library only: the standalone module embeds it.
"""

from __future__ import annotations

import json
from typing import Any

from autoparser.language import ir
from autoparser.language.request import has_string_alternative, value_kind
from autoparser.language.values import (
    allows_null,
    convert_literal_value,
    convert_tagged_value,
    decided_end,
    decode_string_body,
    nested_to_json,
)


def member_key(member: Any) -> str | None:
    """The argument a member holds (`ir.Rule.key`; None: any key, read from the text)."""
    return member.key if isinstance(member, ir.Rule) else None


def member_opening(key: str | None) -> str:
    """The text of an arguments' object member before its value: its key (`""` where the text
    gave none) and the colon."""
    return json.dumps(key or "", ensure_ascii=False) + ": "


def member_json(key: str | None, raw: str, node: Any, section: tuple[str, ...] = (), cut: bool = False) -> str:
    """A tagged argument as a member of the arguments' JSON object: `"key": value`."""
    return member_opening(key) + argument_json(raw, node, section, cut)


def without_section(value: str, section: tuple[str, ...]) -> str:
    """A value wrapped in the language's value section (`ir.Language.value_section`), unwrapped."""
    if not section:
        return value
    opening, closing = section
    if value.startswith(opening) and closing in value:
        inner, _, rest = value[len(opening):].partition(closing)
        return inner + rest
    return value


def literal_spelling(node: Any) -> ir.Spelling | None:
    """How a value node's literals are written (None: it is read as no literal)."""
    if isinstance(node, ir.PyValue):
        return node.spelling
    return node.literals if isinstance(node, ir.RawString) else None


def quoted_text(body: str, spelling: ir.Spelling) -> str:
    """The text of a quoted literal's body: the spelling's escape before one of its quotes is
    that quote; other escapes are read as Python and JSON read them."""
    escape = spelling.escape
    if not escape or escape not in body:
        return decode_string_body(body)
    parts, start, pos = [], 0, 0
    while (found := body.find(escape, pos)) >= 0:
        after = body[found + len(escape):found + len(escape) + 1]
        pos = found + len(escape) + len(after)
        if after and after in spelling.quotes:
            parts += [decode_string_body(body[start:found]), after]
            start = pos
    return "".join(parts) + decode_string_body(body[start:])


def open_literal_body(raw: str, spelling: ir.Spelling) -> str | None:
    """The body of a quoted literal whose quote is not closed (`"Pa`: `Pa`, an escape cut in two
    left out); None where `raw` is no such literal."""
    text = raw.strip()
    if not text or text[0] not in spelling.quotes:
        return None
    body = text[1:]
    end = decided_end(body, text[0], spelling.escape)
    if body.endswith(text[0]) and end == len(body) - 1:
        return None
    return body[:end]


def argument_json(raw: str, node: Any, section: tuple[str, ...] = (), cut: bool = False) -> str:
    """The JSON text of a tagged argument's value, read from its raw text by its schema; `cut`:
    the output ended inside it, so a quoted literal left open is what was written of its body."""
    schema = getattr(node, "schema", None)
    spelling = literal_spelling(node)
    if spelling is not None:
        kind, text = value_kind(schema), raw.strip()
        body = open_literal_body(raw, spelling) if cut else None
        if body is not None:
            return json.dumps(quoted_text(body, spelling), ensure_ascii=False)
        if text == spelling.null and allows_null(schema):
            return "null"
        if kind != "string" and text in (spelling.true, spelling.false):
            return "true" if text == spelling.true else "false"
        if kind != "json" and len(text) > 1 and text[0] in spelling.quotes and text[-1] == text[0]:
            return json.dumps(quoted_text(text[1:-1], spelling), ensure_ascii=False)
        nested = nested_to_json(raw, node.nested) if isinstance(node, ir.PyValue) and node.nested else None
        return nested if nested is not None else convert_literal_value(raw, kind, schema)
    if isinstance(node, ir.Json):
        return convert_tagged_value(raw, "json", schema)
    raw = without_section(raw, section)
    if isinstance(node, ir.RawString) and node.empty is not None and not raw.strip():
        return node.empty
    kind = "json" if isinstance(node, ir.RawString) and node.as_json else value_kind(schema)
    if kind == "string":
        null = getattr(node, "null", "")
        return "null" if null and raw.strip() == null and allows_null(schema) else json.dumps(raw, ensure_ascii=False)
    if kind == "auto" and has_string_alternative(schema):
        # a union with a string alternative: a JSON value (as the grammar writes one) is that value,
        # any other text the string, even text in the template's nested syntax
        return convert_tagged_value(raw, "json", schema)
    nested = nested_to_json(raw, node.nested) if isinstance(node, ir.RawString) and node.nested else None
    return nested if nested is not None else convert_tagged_value(raw, kind, schema)
