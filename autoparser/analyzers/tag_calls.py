"""Calls written as markup around the name, an optional id and the arguments.

The arguments are found either as one JSON object outside the name (``tag_json``) or, not being
JSON, as the probe's keys and values one by one (``tag_tagged``); the text between them is the
argument markup. Then the call markers are split: the per-call opener from the text that
introduces the name, a fence from the name's end, a call id from the name's end, and a number in
the name's end that counts the calls, when two rendered calls show it does.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import unicodedata
from typing import Any

from autoparser.analyzers.call_markers import ID_HOLE_IN_RENDER, Span
from autoparser.analyzers.diff import common_suffix, first_marker_split, segments, strip_prefix
from autoparser.analyzers.json_calls import json_args_span
from autoparser.analyzers.probes import ARGS_A, ARGS_B, ID_A, NAME_A, NAME_B, PROBE_TOOLS, Prober
from autoparser.tool_calls import (
    ID_HOLE,
    INDEX_HOLE,
    JSON_TYPES,
    KEY_HOLE,
    NAME_HOLE,
    TYPE_HOLE,
    CallId,
    CallIndex,
    CallMarkers,
    CallName,
    JsonArguments,
    NestedValues,
    TagCalls,
    TaggedArguments,
    ValueEncoding,
)

_FENCE_OPEN = re.compile(r"```[\w.+-]*[ \t]*\n?$")
_FENCE_CLOSE = re.compile(r"^\s*```")


def tag_json_calls(one: str, two: str | None, args: Span) -> tuple[TagCalls, list[Span]] | None:
    """Calls whose arguments are call A's arguments as JSON, found at `args` in `one`."""
    name_at = one.rfind(NAME_A, 0, args.start)
    if name_at < 0:
        return None
    spans = [Span(name_at, args.end)]
    if two is not None:
        a_at = two.find(NAME_A)
        a_args = json_args_span(two, ARGS_A, a_at)
        b_at = two.find(NAME_B, a_args.end if a_args else 0)
        b_args = json_args_span(two, ARGS_B, b_at)
        if a_at < 0 or a_args is None or b_at < 0 or b_args is None:
            return None
        spans += [Span(a_at, a_args.end), Span(b_at, b_args.end)]
    return TagCalls(name=CallName(end=one[name_at + len(NAME_A): args.start]), arguments=JsonArguments()), spans


def tagged_calls(one: str, two: str | None) -> tuple[TagCalls, list[Span]] | None:
    """Calls whose arguments each sit in their own markup."""
    name_at = one.find(NAME_A)
    found = _tagged_positions(one, name_at + len(NAME_A))
    if found is None:
        return None
    key1, val1, key2, val2, encoding = found
    first_gap = one[name_at + len(NAME_A): key1.start]
    middle_gap = one[val1.end: key2.start]
    arg_start = common_suffix(first_gap, middle_gap)
    arg_end = middle_gap[: len(middle_gap) - len(arg_start)]
    key_end = one[key1.end: val1.start]
    key_end_before_json = one[key2.end: val2.start]
    separator = ""
    if key_end_before_json == key_end:
        key_end_before_json = ""
    else:
        # a string opened by its own quote (`key:<|"|>text<|"|>,`): the quote closes it, the rest separates
        quote = key_end[len(key_end_before_json):] if key_end.startswith(key_end_before_json) else ""
        close = _closing_quote(quote, arg_end)
        if close and arg_end != close:
            arg_end, separator = close, arg_end[len(close):]
    end_names_key = "first_arg" in arg_end  # a closing tag named after its key: <first_arg>…</first_arg>
    arg_end = arg_end.replace("first_arg", KEY_HOLE)
    if encoding == "python":
        # literals end themselves: what follows one is a separator, not a closing tag
        separator, arg_end = arg_end, ""
    if not arg_start and not key_end:
        return None
    spans = [Span(name_at, val2.end)]
    if two is not None:
        a_at = two.find(NAME_A)
        found_two = _tagged_positions(two, a_at + len(NAME_A))
        b_at = two.find(NAME_B, found_two[3].end) if found_two else -1
        if found_two is None or b_at < 0:
            return None
        b_val = two.find("beta value", b_at)
        if b_val < 0:
            return None
        spans += [Span(a_at, found_two[3].end),
                  Span(b_at, b_val + len("beta value") + (0 if encoding == "raw_strings" else 1))]
    arguments = TaggedArguments(start=arg_start, key_end=key_end, end=arg_end, separator=separator,
                                encoding=encoding, end_names_key=end_names_key,
                                key_end_before_json=key_end_before_json)
    return TagCalls(name=CallName(end=first_gap[: len(first_gap) - len(arg_start)]), arguments=arguments), spans


def _tagged_positions(text: str, at: int) -> tuple[Span, Span, Span, Span, ValueEncoding] | None:
    """Where A's argument keys and values are, and how a string value is written: "json" for
    `"alpha value"`, "python" for `'alpha value'` (Python call syntax, where every value is a
    literal), "raw_strings" for the bare text."""
    key1 = text.find("first_arg", at)
    if key1 < 0:
        return None
    bare = text.find("alpha value", key1)
    if bare < 0:
        return None
    quote = text[bare - 1]
    encoding: ValueEncoding = {'"': "json", "'": "python"}.get(quote, "raw_strings")  # type: ignore[assignment]
    if encoding != "raw_strings" and text[bare + len("alpha value"): bare + len("alpha value") + 1] != quote:
        encoding = "raw_strings"
    val1 = (Span(bare, bare + len("alpha value")) if encoding == "raw_strings"
            else Span(bare - 1, bare + len("alpha value") + 1))
    key2 = text.find("second_arg", val1.end)
    val2 = text.find("42", key2 + len("second_arg")) if key2 >= 0 else -1
    if key2 < 0 or val2 < 0:
        return None
    return (Span(key1, key1 + len("first_arg")), val1, Span(key2, key2 + len("second_arg")),
            Span(val2, val2 + 2), encoding)


def split_tag_markup(markers: CallMarkers, found: TagCalls, id_before_name: CallId | None, one: str,
                     two: str | None) -> tuple[CallMarkers, TagCalls]:
    """Tell the per-call opener from the text that introduces the name, unwrap a fence, find the
    call id and the call index in the name's end."""
    opener, rest = first_marker_split(markers.call_start)
    call_start, name_start = (opener, rest) if opener else ("", markers.call_start)
    if id_before_name is not None:
        # the id comes first: what precedes it opens the call, and the name follows the id's end
        call_start, name_start = markers.call_start, ""
    name_end, call_end, arguments = found.name.end, markers.call_end, found.arguments
    if isinstance(arguments, JsonArguments):
        name_end, call_end, arguments = _unwrap_fence(name_end, call_end)
        if not arguments.end:
            named, call_end = _named_closing(call_end, two)
            arguments = dataclasses.replace(arguments, end=named)
    elif arguments.end:
        call_end = strip_prefix(call_end, arguments.end.replace(KEY_HOLE, "second_arg"))
    name_end, call_id = _id_in_name_end(name_end, id_before_name)
    if call_id is None:
        call_end = _id_in_call_end(call_end)
    name = CallName(start=name_start, end=name_end, index=_confirmed_call_index(one, two, name_end))
    markers = dataclasses.replace(markers, call_start=call_start, call_end=call_end)
    return markers, TagCalls(name=name, arguments=arguments, id=call_id)


def _closing_quote(quote: str, arg_end: str) -> str:
    """The quote that closes a string opened by `quote`, where the end after a string begins with
    it: the same marker (`<|"|>`, `§`), or an opening quotation mark's closing counterpart, as
    Unicode classes the two (`“` and `”`, `«` and `»`, `「` and `」`); "" where there is none."""
    if not quote.strip():
        return ""
    if arg_end.startswith(quote):
        return quote
    pairs = {"Pi": "Pf", "Ps": "Pe"}
    close = arg_end[:1]
    if len(quote) == 1 and close and unicodedata.category(close) == pairs.get(unicodedata.category(quote)):
        return close
    return ""


def _named_closing(call_end: str, two: str | None) -> tuple[str, str]:
    """A closing tag that names the tool (`</probe_alpha>`) closes that call's arguments, with the
    name as a hole; confirmed by the second call's closing naming the second tool. Returns the
    arguments' end and the rest of the call's end."""
    pieces = segments(call_end)
    named = next((i for i, piece in enumerate(pieces) if NAME_A in piece), None)
    if named is None:
        return "", call_end
    closing = "".join(pieces[: named + 1])
    if two is not None and closing.replace(NAME_A, NAME_B) not in two:
        return "", call_end
    return closing.replace(NAME_A, NAME_HOLE), "".join(pieces[named + 1:])


def _unwrap_fence(name_end: str, call_end: str) -> tuple[str, str, JsonArguments]:
    fence = _FENCE_OPEN.search(name_end)
    if not fence:
        return name_end, call_end, JsonArguments()
    start, name_end = name_end[fence.start():], name_end[: fence.start()]
    close = _FENCE_CLOSE.match(call_end)
    if not close:
        return name_end, call_end, JsonArguments(start=start)
    return name_end, call_end[close.end():], JsonArguments(start=start, end=call_end[: close.end()])


def _id_in_call_end(call_end: str) -> str:
    """A call's end that writes the call's id after its arguments (` AS call-1`), the id as a hole."""
    return call_end.replace(ID_HOLE_IN_RENDER, ID_HOLE, 1) if ID_HOLE_IN_RENDER in call_end else call_end


def _id_in_name_end(name_end: str, id_before_name: CallId | None) -> tuple[str, CallId | None]:
    if ID_A not in name_end:
        return name_end, id_before_name
    at = name_end.index(ID_A)
    return "", CallId(start=name_end[:at], end=name_end[at + len(ID_A):], before_name=id_before_name is not None)


def _confirmed_call_index(one: str, two: str | None, name_end: str) -> CallIndex | None:
    """A number in the name's end counts calls when the second of two rendered calls carries the
    next number there (`:0` then `:1`); a number that stays the same is part of the marker."""
    if two is None or not name_end:
        return None
    for digits in re.finditer(r"[0-9]+", name_end):
        first = int(digits.group())
        head, tail = name_end[: digits.start()], name_end[digits.end():]
        if NAME_A + name_end in one and NAME_A + name_end in two and NAME_B + head + str(first + 1) + tail in two:
            return CallIndex(marker=head + INDEX_HOLE + tail, base=first)
    return None


# one value of each JSON type but strings, under keys found nowhere else in a render
TYPED_ARGS: dict[str, Any] = {"number_kind": 42, "boolean_kind": True, "null_kind": None,
                              "object_kind": {"inner_key": 7}, "array_kind": [3]}


def typed_key_end(prober: Prober, args: TaggedArguments, as_text: bool, kwargs: dict[str, Any]) -> str | None:
    """The marker before a JSON value with the value's type as a hole (`type="{type}"`), where
    the template names each value's JSON type there (`string` before text, `number` before 42,
    `boolean` before true...); None where it does not."""
    number_end = args.key_end_before_json
    if "number" not in number_end or args.encoding != "raw_strings" or args.key_end != number_end.replace(
            "number", "string", 1):
        return None
    output = prober.output(prober.calls_message([(NAME_A, {**ARGS_A, **TYPED_ARGS}, ID_A)], as_text),
                           tools=PROBE_TOOLS, **kwargs) or ""
    hole = number_end.replace("number", TYPE_HOLE, 1)
    for key, value in TYPED_ARGS.items():
        kind = key.removesuffix("_kind")
        if kind not in JSON_TYPES or key + hole.replace(TYPE_HOLE, kind) + json.dumps(value) not in output:
            return None
    return hole


NESTED_ARGS: dict[str, Any] = {"obj_arg": {"inner_key": "inner text", "inner_num": 7}, "list_arg": ["one item", 3]}


def nested_values(prober: Prober, args: TaggedArguments, as_text: bool,
                  kwargs: dict[str, Any]) -> NestedValues | None:
    """How an object or an array is written inside a tagged argument, when not as JSON."""
    output = prober.output(prober.calls_message([(NAME_A, NESTED_ARGS, ID_A)], as_text), tools=PROBE_TOOLS,
                           **kwargs) or ""
    if json.dumps(NESTED_ARGS["obj_arg"]) in output or "inner text" not in output:
        return None
    quote = args.end
    if args.key_end_before_json and args.key_end == args.key_end_before_json + quote and quote.strip():
        if _quoted_form(NESTED_ARGS["obj_arg"], quote) in output and _quoted_form(NESTED_ARGS["list_arg"], quote) in output:
            return NestedValues(style="quoted", quote=quote)
    if args.end_names_key and args.start:
        arg_start, key_end, arg_end = args.start.strip(), args.key_end, args.end.strip()
        obj = "".join(arg_start + k + key_end + str(v) + arg_end.replace(KEY_HOLE, k)
                      for k, v in NESTED_ARGS["obj_arg"].items())
        at = output.find("list_arg" + key_end)
        item_at = output.find(arg_start, at) + len(arg_start) if at >= 0 else -1
        item = output[item_at: output.find(key_end, item_at)] if item_at >= len(arg_start) else ""
        items = "".join(arg_start + item + key_end + str(v) + arg_end.replace(KEY_HOLE, item)
                        for v in NESTED_ARGS["list_arg"])
        if item and obj in output and items in output:
            return NestedValues(style="tags", item=item)
    return member_markup(output, args) or bracketed_syntax(output, args) or indented_block(output, args) \
        or marked_collections(output, args)


def marked_collections(output: str, args: TaggedArguments) -> NestedValues | None:
    """Objects and arrays each between an opening and a closing of their own, where every value is
    JSON (`(obj (inner_key "inner text") (inner_num 7))`, `(vec "one item" 3)`): an object's members
    written as the call's arguments are, an array's elements apart by whitespace or a separator,
    the array closed as the object is. The openings, learnt from the object's and the array's
    render, differ (else an object could not be told from an array)."""
    if args.encoding != "json" or not args.start.strip() or not args.end.strip():
        return None
    obj, items = NESTED_ARGS["obj_arg"], [json.dumps(v, ensure_ascii=False) for v in NESTED_ARGS["list_arg"]]
    members = args.separator.join(args.start + k + args.key_end + json.dumps(v, ensure_ascii=False) + args.end
                                  for k, v in obj.items())
    value_at = _value_start(output, "obj_arg", args)
    members_at = output.find(members, value_at) if value_at >= 0 else -1
    next_arg = args.end + args.separator + args.start + "list_arg" + args.key_end
    after = members_at + len(members)
    close_at = output.find(next_arg, after) if members_at >= 0 else -1
    list_at = _value_start(output, "list_arg", args)
    first = output.find(items[0], list_at) if list_at >= 0 and close_at >= 0 else -1
    if first < 0:
        return None
    object_open, close = output[value_at:members_at], output[after:close_at]
    separator = output[first + len(items[0]):output.find(items[1], first)]
    array_open = output[list_at:first]
    array_open = array_open[:len(array_open) - len(separator)] if array_open.endswith(separator) else array_open
    array = array_open + separator + separator.join(items) + close
    if not (object_open.strip() and close.strip() and array_open.strip()) or object_open.strip() == array_open.strip() \
            or not output.startswith(array + args.end, list_at):
        return None
    return NestedValues(style="bracketed", start=args.start.strip(), key_end=args.key_end.strip(),
                        end=separator.strip(), brackets=(object_open.strip(), close.strip(), array_open.strip(),
                                                         close.strip()), member_end=args.end.strip())


def indented_block(output: str, args: TaggedArguments) -> NestedValues | None:
    """Objects and arrays as a block of lines indented deeper than their argument's, where each
    argument is a line of its own (`arg_start` a line break and indentation): an object's members
    written as its arguments are (`inner_key: inner text`), an array's elements each after the
    `item` marker (`- one item`), learnt from the object's and the array's render."""
    lead, key_end = args.start, args.key_end.rstrip()
    if "\n" not in lead or lead.strip() or not key_end.strip():
        return None
    indent = len(lead) - lead.rindex("\n") - 1
    obj_at, list_at = (output.find(key + key_end + "\n") for key in ("obj_arg", "list_arg"))
    if obj_at < 0 or list_at < 0:
        return None
    value_at = obj_at + len("obj_arg" + key_end)
    deeper = re.match(r"\n( +)", output[value_at:])
    if deeper is None or len(deeper.group(1)) <= indent:
        return None
    pad = "\n" + deeper.group(1)
    # strings raw, or JSON where the template writes every value as JSON
    leaf = str if args.encoding == "raw_strings" else lambda v: json.dumps(v, ensure_ascii=False)
    obj = "".join(pad + k + args.key_end + leaf(v) for k, v in NESTED_ARGS["obj_arg"].items())
    items_at = list_at + len("list_arg" + key_end) + len(pad)
    first = leaf(NESTED_ARGS["list_arg"][0])
    item = output[items_at:output.find(first, items_at)] if output.startswith(pad, items_at - len(pad)) else ""
    elements = "".join(pad + item + leaf(v) for v in NESTED_ARGS["list_arg"])
    if not item.strip() or not output.startswith(obj, value_at) \
            or not output.startswith(elements, items_at - len(pad)):
        return None
    quote = '"' if args.encoding != "raw_strings" else ""
    return NestedValues(style="indented", item=item.strip(), key_end=key_end.strip(), quote=quote)


def bracketed_syntax(output: str, args: TaggedArguments) -> NestedValues | None:
    """Objects and arrays between brackets with a syntax of their own (`{:inner_key "inner text"
    :inner_num 7}`, `["one item" 3]`): what comes before each key (`start`), between a key and its
    value (`key_end`) and between members or elements (`end`), learnt from the object's render;
    strings quoted as JSON writes them, or by a `quote` of the template's own."""
    (k1, v1), (k2, v2) = [(k, str(v)) for k, v in NESTED_ARGS["obj_arg"].items()]
    value_at = _value_start(output, "obj_arg", args)
    if value_at < 0 or not output.startswith("{", value_at):
        return None
    first = output.find(k1, value_at)
    text_at = output.find(v1, first) if first >= 0 else -1
    second = output.find(k2, text_at) if text_at >= 0 else -1
    number_at = output.find(v2, second) if second >= 0 else -1
    if number_at < 0:
        return None
    start, key_end = output[value_at + 1:first], output[second + len(k2):number_at]
    before_text, after_text = output[first + len(k1):text_at], output[text_at + len(v1):second]
    quote = before_text[len(key_end):] if before_text.startswith(key_end) else None
    if not quote or not after_text.startswith(quote) or not after_text.endswith(start):
        return None
    separator = after_text[len(quote):len(after_text) - len(start)]
    obj = "{" + start + k1 + key_end + quote + v1 + quote + separator + start + k2 + key_end + v2 + "}"
    one, three = NESTED_ARGS["list_arg"]
    array = "[" + quote + one + quote + separator + str(three) + "]"
    if not output.startswith(obj, value_at) or not output.startswith(array, _value_start(output, "list_arg", args)):
        return None
    if _is_literal(obj) and _is_literal(array):
        return None  # JSON or a Python literal (`{'k': 'v'}`): read as such, `True` and escapes included
    return NestedValues(style="bracketed", quote="" if quote == '"' else quote, start=start, key_end=key_end,
                        end=separator)


def _is_literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def member_markup(output: str, args: TaggedArguments) -> NestedValues | None:
    """Markup of its own around each member of an object argument (`<inner_key>inner text</inner_key>`
    as child elements of an argument's tag), learnt from where the object's value begins, and
    around each element of an array, named alike: the elements' name is the `item`."""
    obj, items = NESTED_ARGS["obj_arg"], NESTED_ARGS["list_arg"]
    keys, values = list(obj), [str(v) for v in obj.values()]
    value_at = _value_start(output, "obj_arg", args)
    first = output.find(keys[0], value_at) if value_at >= 0 else -1
    if first < 0:
        return None
    start = output[value_at:first]
    text_at = output.find(values[0], first)
    key_end = output[first + len(keys[0]):text_at]
    second = output.find(start + keys[1], text_at) if start.strip() and text_at >= 0 else -1
    end = output[text_at + len(values[0]):second] if second >= 0 else ""
    if not (key_end.strip() and end.strip()):
        return None
    end = end.replace(keys[0], KEY_HOLE)
    written = "".join(start + k + key_end + v + end.replace(KEY_HOLE, k) for k, v in zip(keys, values, strict=True))
    list_at = _value_start(output, "list_arg", args)
    item_at = list_at + len(start)
    item = output[item_at:output.find(key_end, item_at)] if output.startswith(start, list_at) else ""
    elements = "".join(start + item + key_end + str(v) + end.replace(KEY_HOLE, item) for v in items)
    if not item or not output.startswith(written, value_at) or not output.startswith(elements, list_at):
        return None
    return NestedValues(style="tags", item=item, start=start.strip(), key_end=key_end.strip(), end=end.strip())


def _value_start(output: str, key: str, args: TaggedArguments) -> int:
    """Where the value of argument `key` begins in a rendered call (-1: not found)."""
    marker = key + args.key_end
    at = output.find(marker)
    return at + len(marker) if at >= 0 else -1


def _quoted_form(value: Any, quote: str) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_quoted_form(v, quote)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_quoted_form(v, quote) for v in value) + "]"
    if isinstance(value, str):
        return quote + value + quote
    return json.dumps(value)
