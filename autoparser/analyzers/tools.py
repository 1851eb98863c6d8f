"""The tool-call structure, learned from rendering one call, two calls, and their differences.

The probe calls use known names, ids and arguments, so each can be found in the output:

* the arguments of call A found as one JSON object that also holds A's name: the ``json`` format,
  and the object's keys name the fields;
* found as a JSON object outside the name: ``tag_json``; the text between them is markup;
* not found as JSON, but A's argument keys and values are there one by one: ``tag_tagged``.

Then, with the span of each call known, the text before call A in the one-call output, the text
after it, and the text between the two calls of the two-call output share their markup:
``between = call_end + separator + call_start``, ``before = section_start + call_start``,
``after = call_end + section_end + end of turn``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from autoparser.analysis import ContentAnalysis, MessagesAnalysis, ReasoningAnalysis, ToolsAnalysis
from autoparser.analyzers.diff import (
    common_prefix,
    common_suffix,
    cut_at_stop,
    first_marker_split,
    is_marker,
    segments,
    strip_prefix,
)
from autoparser.analyzers.probes import (
    ARGS_A,
    ARGS_B,
    ID_A,
    ID_B,
    NAME_A,
    NAME_B,
    PROBE_TOOLS,
    Prober,
)
from autoparser.analyzers.prompt import generation_prompt

KEY_HOLE = "{key}"
_FENCE_OPEN = re.compile(r"```[\w.+-]*[ \t]*\n?$")
_FENCE_CLOSE = re.compile(r"^\s*```")


@dataclass
class Span:
    start: int
    end: int


@dataclass
class CallRenders:
    one: str
    two: str | None
    as_text: bool
    definitions_shown: bool


def analyze_tools(prober: Prober, reasoning: ReasoningAnalysis, stop: list[str],
                  kwargs: dict[str, Any], warnings: list[str],
                  messages: MessagesAnalysis | None = None,
                  content: ContentAnalysis | None = None) -> ToolsAnalysis:
    renders = _render_calls(prober, kwargs)
    if renders is None:
        return ToolsAnalysis()
    if messages is not None and messages.call_body_named:
        renders = _without_call_headers(renders, messages)
    if not renders.definitions_shown:
        warnings.append("the template renders tool calls but never shows the tool definitions to the model; "
                        "pass a template that does (--chat-template-file) to tell the model about tools")
    one, two = renders.one, renders.two
    tools = ToolsAnalysis(supported=True, parallel=two is not None)
    if two is None:
        warnings.append("the template refuses two tool calls in one message, so parallel calls are off")

    call_json = _json_call(one)
    if call_json is not None:
        tools.format = "json"
        spans = _json_spans(one, two, tools, call_json)
    else:
        args_span = _json_args_span(one, ARGS_A)
        if args_span is not None:
            tools.format = "tag_json"
            spans = _tag_json_spans(one, two, tools, args_span)
        else:
            tools.format = "tag_tagged"
            spans = _tagged_spans(one, two, tools)
    if spans is None:
        warnings.append("tool calls render, but their structure could not be worked out; tool calls will "
                        "stay in content")
        return ToolsAnalysis(supported=False)
    _markup(one, two, spans, tools, reasoning, stop, content or ContentAnalysis())
    _opened_by_prompt(tools, generation_prompt(prober, **kwargs) or "")
    if tools.format in ("tag_json", "tag_tagged"):
        _split_tag_markup(tools)
    _find_tag_id(tools)
    _confirm_call_index(one, two, tools)
    if tools.format == "tag_tagged" and not tools.arg_python:
        _nested_values(prober, tools, renders.as_text, kwargs)
    return tools


NESTED_ARGS: dict[str, Any] = {"obj_arg": {"inner_key": "inner text", "inner_num": 7}, "list_arg": ["one item", 3]}


def _nested_values(prober: Prober, tools: ToolsAnalysis, as_text: bool, kwargs: dict[str, Any]) -> None:
    """How an object or an array is written inside a tagged argument, when not as JSON."""
    output = prober.output(prober.calls_message([(NAME_A, NESTED_ARGS, ID_A)], as_text), tools=PROBE_TOOLS,
                           **kwargs) or ""
    if json.dumps(NESTED_ARGS["obj_arg"]) in output or "inner text" not in output:
        return
    quote = tools.arg_end
    if tools.arg_key_end_json and tools.arg_key_end == tools.arg_key_end_json + quote and quote.strip():
        written = _quoted_form(NESTED_ARGS["obj_arg"], quote)
        if written in output and _quoted_form(NESTED_ARGS["list_arg"], quote) in output:
            tools.arg_nested, tools.arg_nested_quote = "quoted", quote
            return
    if tools.arg_end_keyed and tools.arg_start:
        arg_start, key_end, arg_end = tools.arg_start.strip(), tools.arg_key_end, tools.arg_end.strip()
        obj = "".join(arg_start + k + key_end + str(v) + arg_end.replace(KEY_HOLE, k)
                      for k, v in NESTED_ARGS["obj_arg"].items())
        at = output.find("list_arg" + key_end)
        item_at = output.find(arg_start, at) + len(arg_start) if at >= 0 else -1
        item = output[item_at: output.find(key_end, item_at)] if item_at >= len(arg_start) else ""
        items = "".join(arg_start + item + key_end + str(v) + arg_end.replace(KEY_HOLE, item)
                        for v in NESTED_ARGS["list_arg"])
        if item and obj in output and items in output:
            tools.arg_nested, tools.arg_nested_item = "tags", item


def _quoted_form(value: Any, quote: str) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_quoted_form(v, quote)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_quoted_form(v, quote) for v in value) + "]"
    if isinstance(value, str):
        return quote + value + quote
    return json.dumps(value)


INDEX_HOLE = "{index}"


def _without_call_headers(renders: CallRenders, messages: MessagesAnalysis) -> CallRenders:
    """Calls in their own messages whose bodies name the call again: the bodies alone are the calls."""
    def strip(text: str | None) -> str | None:
        if text is None:
            return None
        for name in (NAME_A, NAME_B):
            text = text.replace(messages.call_header.replace("{name}", name) + messages.body_start, "", 1)
        return text

    return dataclasses.replace(renders, one=strip(renders.one) or "", two=strip(renders.two))


def _confirm_call_index(one: str, two: str | None, tools: ToolsAnalysis) -> None:
    """A number in the name markup counts calls when the second of two rendered calls carries the
    next number there (`:0` then `:1`); a number that stays the same is part of the marker."""
    if two is None or tools.format == "json" or not tools.name_end:
        return
    for digits in re.finditer(r"[0-9]+", tools.name_end):
        first = int(digits.group())
        head, tail = tools.name_end[: digits.start()], tools.name_end[digits.end():]
        if (NAME_A + tools.name_end in one and NAME_A + tools.name_end in two
                and NAME_B + head + str(first + 1) + tail in two):
            tools.call_index = head + INDEX_HOLE + tail
            tools.call_index_base = first
            return


# -- rendering --------------------------------------------------------------------------------------

# Tool definitions as OpenAI sends them, and flattened to the function objects some templates read.
TOOL_SHAPES = (PROBE_TOOLS, [t["function"] for t in PROBE_TOOLS])


def _render_calls(prober: Prober, kwargs: dict[str, Any]) -> CallRenders | None:
    for tools in TOOL_SHAPES:
        for as_text in (False, True):
            for empty in (None, ""):
                prober.shape.empty_content = empty
                found = _render_call_pair(prober, tools, as_text, kwargs)
                if found is not None:
                    return found
    prober.shape.empty_content = None
    return None


def _render_call_pair(prober: Prober, tools: list[dict[str, Any]], as_text: bool,
                      kwargs: dict[str, Any]) -> CallRenders | None:
    one = prober.output(prober.calls_message([(NAME_A, ARGS_A, ID_A)], as_text), tools=tools, **kwargs)
    if one is None or NAME_A not in one:
        return None
    two = prober.output(prober.calls_message([(NAME_A, ARGS_A, ID_A), (NAME_B, ARGS_B, ID_B)], as_text),
                        tools=tools, **kwargs)
    if two is not None and (NAME_B not in two or NAME_A not in two):
        two = None
    return CallRenders(one=one, two=two, as_text=as_text,
                       definitions_shown=_definitions_shown(prober, tools, kwargs))


def _definitions_shown(prober: Prober, tools: list[dict[str, Any]], kwargs: dict[str, Any]) -> bool:
    """Whether the prompt tells the model about the tools; some templates list them only inside a
    system message, so a history with one is tried too."""
    shape = prober.shape
    try:
        for system in dict.fromkeys((shape.system, True)):
            prober.shape = dataclasses.replace(shape, system=system)
            prompt = prober.prompt(tools=tools, **kwargs) or ""
            if "first_arg" in prompt or "First probe tool" in prompt:
                return True
    finally:
        prober.shape = shape
    return False


# -- finding calls ----------------------------------------------------------------------------------

def json_objects(text: str) -> list[tuple[int, int, dict[str, Any]]]:
    """Every JSON object in `text` as (start, end, value), found by decoding at each `{`."""
    decoder = json.JSONDecoder()
    found = []
    for at, char in enumerate(text):
        if char != "{":
            continue
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append((at, end, value))
    return found


def _holds(value: Any, target: Any) -> bool:
    if value == target:
        return True
    if isinstance(value, dict):
        return any(_holds(v, target) for v in value.values())
    if isinstance(value, list):
        return any(_holds(v, target) for v in value)
    return False


def _is_args(value: Any, args: dict[str, Any]) -> bool:
    if value == args:
        return True
    if isinstance(value, str):
        try:
            return json.loads(value) == args
        except ValueError:
            return False
    return False


@dataclass
class JsonCall:
    start: int
    end: int
    value: dict[str, Any]


def _json_call(text: str, name: str = NAME_A, args: dict[str, Any] = ARGS_A,
               after: int = 0) -> JsonCall | None:
    """The JSON object that is one call: the smallest holding name and arguments, widened to wrappers."""
    objects = [o for o in json_objects(text) if o[0] >= after]
    inner = [o for o in objects if _holds(o[2], name) and any(_is_args(v, args) for v in _values(o[2]))]
    if not inner:
        return None
    start, end, value = min(inner, key=lambda o: o[1] - o[0])
    while True:
        wrapper = [o for o in objects if o[0] < start and o[1] >= end and value in o[2].values()]
        if not wrapper:
            break
        start, end, value = min(wrapper, key=lambda o: o[1] - o[0])
    return JsonCall(start, end, value)


def _values(obj: dict[str, Any]) -> list[Any]:
    out = list(obj.values())
    for v in obj.values():
        if isinstance(v, dict):
            out.extend(v.values())
    return out


def _json_spans(one: str, two: str | None, tools: ToolsAnalysis, call: JsonCall) -> list[Span] | None:
    inner = call.value
    for key, value in call.value.items():
        if isinstance(value, dict) and NAME_A in value.values():
            tools.function_field = key
            inner = value
    tools.name_field = next(k for k, v in inner.items() if v == NAME_A)
    tools.args_field = next(k for k, v in inner.items() if _is_args(v, ARGS_A))
    tools.args_as_string = isinstance(inner[tools.args_field], str)
    for container in (call.value, inner):
        for key, value in container.items():
            if value == ID_A:
                tools.id_field = key
    if tools.id_field is None:
        tools.id_field = _numbered_id_field(two, call.value)
    spans = [Span(call.start, call.end)]
    if two is not None:
        first = _json_call(two)
        second = _json_call(two, NAME_B, ARGS_B, after=first.end if first else 0)
        if first is None or second is None:
            return None
        spans += [Span(first.start, first.end), Span(second.start, second.end)]
    before = one[: call.start].rstrip()
    after = one[call.end:].lstrip()
    tools.array = before.endswith("[") and after.startswith("]")
    return spans


def _numbered_id_field(two: str | None, first: dict[str, Any]) -> str | None:
    """A key the template fills with the call's position ("0", "1") instead of the given id."""
    second = _json_call(two, NAME_B, ARGS_B) if two is not None else None
    if second is None:
        return None
    for key, value in first.items():
        if str(value) == "0" and str(second.value.get(key)) == "1":
            return key
    return None


def _json_args_span(text: str, args: dict[str, Any], after: int = 0) -> Span | None:
    for start, end, value in json_objects(text):
        if start >= after and value == args:
            return Span(start, end)
    return None


def _tag_json_spans(one: str, two: str | None, tools: ToolsAnalysis, args: Span) -> list[Span] | None:
    name_at = one.rfind(NAME_A, 0, args.start)
    if name_at < 0:
        return None
    tools.name_end = one[name_at + len(NAME_A): args.start]
    spans = [Span(name_at, args.end)]
    if two is not None:
        a_at = two.find(NAME_A)
        a_args = _json_args_span(two, ARGS_A, a_at)
        b_at = two.find(NAME_B, a_args.end if a_args else 0)
        b_args = _json_args_span(two, ARGS_B, b_at)
        if a_at < 0 or a_args is None or b_at < 0 or b_args is None:
            return None
        spans += [Span(a_at, a_args.end), Span(b_at, b_args.end)]
    return spans


def _tagged_spans(one: str, two: str | None, tools: ToolsAnalysis) -> list[Span] | None:
    name_at = one.find(NAME_A)
    found = _tagged_positions(one, name_at + len(NAME_A))
    if found is None:
        return None
    key1, val1, key2, val2, style = found
    first_gap = one[name_at + len(NAME_A): key1.start]
    middle_gap = one[val1.end: key2.start]
    tools.arg_start = common_suffix(first_gap, middle_gap)
    tools.name_end = first_gap[: len(first_gap) - len(tools.arg_start)]
    tools.arg_end = middle_gap[: len(middle_gap) - len(tools.arg_start)]
    tools.arg_key_end = one[key1.end: val1.start]
    json_key_end = one[key2.end: val2.start]
    if json_key_end != tools.arg_key_end:
        tools.arg_key_end_json = json_key_end
        # a string opened by its own quote (`key:<|"|>text<|"|>,`): the quote closes it, the rest separates
        quote = tools.arg_key_end[len(json_key_end):] if tools.arg_key_end.startswith(json_key_end) else ""
        if quote.strip() and tools.arg_end.startswith(quote) and tools.arg_end != quote:
            tools.arg_end, tools.arg_separator = quote, tools.arg_end[len(quote):]
    if "first_arg" in tools.arg_end:
        # a closing tag named after its key: <first_arg>…</first_arg>
        tools.arg_end = tools.arg_end.replace("first_arg", KEY_HOLE)
        tools.arg_end_keyed = True
    tools.arg_string_raw = style == "raw"
    tools.arg_python = style == "python"
    if tools.arg_python:
        # literals end themselves: what follows one is a separator, not a closing tag
        tools.arg_separator, tools.arg_end = tools.arg_end, ""
    raw = style == "raw"
    if not tools.arg_start and not tools.arg_key_end:
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
        spans += [Span(a_at, found_two[3].end), Span(b_at, b_val + len("beta value") + (0 if raw else 1))]
    return spans


def _tagged_positions(text: str, at: int) -> tuple[Span, Span, Span, Span, str] | None:
    """Where A's argument keys and values are, and how a string value is written.

    The style is "json" for `"alpha value"`, "python" for `'alpha value'` (Python call syntax,
    where every value is a literal), "raw" for the bare text.
    """
    key1 = text.find("first_arg", at)
    if key1 < 0:
        return None
    bare = text.find("alpha value", key1)
    if bare < 0:
        return None
    style = {'"': "json", "'": "python"}.get(text[bare - 1], "raw")
    if style != "raw" and text[bare + len("alpha value"): bare + len("alpha value") + 1] != text[bare - 1]:
        style = "raw"
    val1_span = Span(bare - 1, bare + len("alpha value") + 1) if style != "raw" else Span(bare, bare + len("alpha value"))
    key2 = text.find("second_arg", val1_span.end)
    val2 = text.find("42", key2 + len("second_arg")) if key2 >= 0 else -1
    if key2 < 0 or val2 < 0:
        return None
    return (Span(key1, key1 + len("first_arg")), val1_span, Span(key2, key2 + len("second_arg")),
            Span(val2, val2 + 2), style)


# -- markup around the calls ------------------------------------------------------------------------

_ID_HOLE = "\x01" * len(ID_A)


def _markup(one: str, two: str | None, spans: list[Span], tools: ToolsAnalysis,
            reasoning: ReasoningAnalysis, stop: list[str], content: ContentAnalysis) -> None:
    # Ids differ between the calls; a same-length hole keeps the spans valid and lets them align.
    one = one.replace(ID_A, _ID_HOLE)
    two = two.replace(ID_A, _ID_HOLE).replace(ID_B, _ID_HOLE) if two is not None else None
    first = spans[0]
    before = _drop_empty_content(_drop_leading_reasoning(one[: first.start], reasoning), content)
    after = one[first.end:]
    if two is not None and len(spans) == 3:
        between = two[spans[1].end: spans[2].start]
        tools.call_end = common_prefix(between, after)
        rest = between[len(tools.call_end):]
        tools.call_start = common_suffix(rest, before)
        tools.call_separator = rest[: len(rest) - len(tools.call_start)]
    else:
        tools.call_start = ""
        tools.call_end = _until_stop(after, stop)
    tools.section_start = before[: len(before) - len(tools.call_start)]
    tools.section_end = _until_stop(after[len(tools.call_end):], stop)
    if tools.array:
        tools.section_start = tools.section_start.rstrip()
        tools.section_end = tools.section_end.lstrip()
        tools.section_start = tools.section_start[:-1] if tools.section_start.endswith("[") else tools.section_start
        tools.section_end = tools.section_end[1:] if tools.section_end.startswith("]") else tools.section_end
    tools.section_start = tools.section_start.lstrip()
    tools.section_end = tools.section_end.strip()
    if not tools.section_start.strip():
        tools.section_start = ""
    if not tools.section_end.strip():
        tools.section_end = ""
    if not tools.call_start.strip():
        tools.call_separator += tools.call_start
        tools.call_start = ""
    if not tools.call_end.strip():
        tools.call_separator = tools.call_end + tools.call_separator
        tools.call_end = ""
    _place_id_hole(tools)


def _opened_by_prompt(tools: ToolsAnalysis, prompt: str) -> None:
    """The prompt already wrote the first call's opener; later calls repeat it as a separator."""
    opener = tools.call_separator.strip()
    if tools.call_start or tools.section_start or not opener or not prompt.rstrip().endswith(opener):
        return
    tools.call_start, tools.call_separator = opener, tools.call_separator.replace(opener, "", 1)
    tools.opened_by_prompt = True


def _place_id_hole(tools: ToolsAnalysis) -> None:
    """A call id written before the name: `call_start` ID `id_end` name_start NAME."""
    for name in ("section_start", "call_separator"):
        setattr(tools, name, getattr(tools, name).replace(_ID_HOLE, ""))
    if _ID_HOLE in tools.call_start:
        before, _, after = tools.call_start.partition(_ID_HOLE)
        tools.call_start, tools.id_start, tools.id_end = before, "", after
        tools.id_before_name = True


def _drop_leading_reasoning(text: str, reasoning: ReasoningAnalysis) -> str:
    if reasoning.mode == "none" or not reasoning.end:
        return text
    at = text.find(reasoning.end)
    if at >= 0 and not text[:at].replace(reasoning.start, "").strip():
        return text[at + len(reasoning.end):].lstrip()
    return text


def _drop_empty_content(text: str, content: ContentAnalysis) -> str:
    """Calls rendered after an empty answer block (`<|open|>response<|sep|><|close|>response<|sep|>`):
    the block is the answer's markup, not the calls'."""
    start, end = content.start.strip(), content.end.strip()
    lead = text.lstrip()
    if content.mode == "wrapped" and start and end and lead.startswith(start):
        rest = lead[len(start):].lstrip()
        if rest.startswith(end):
            return rest[len(end):].lstrip()
    return text


def _until_stop(text: str, stop: list[str]) -> str:
    return cut_at_stop(text, stop).rstrip()


def _split_tag_markup(tools: ToolsAnalysis) -> None:
    """Tell the per-call opener from the text that introduces the name, and unwrap fences."""
    opener, rest = first_marker_split(tools.call_start)
    if opener:
        tools.call_start, tools.name_start = opener, rest
    else:
        tools.call_start, tools.name_start = "", tools.call_start
    if tools.format == "tag_json":
        fence = _FENCE_OPEN.search(tools.name_end)
        if fence:
            tools.args_start = tools.name_end[fence.start():]
            tools.name_end = tools.name_end[: fence.start()]
            close = _FENCE_CLOSE.match(tools.call_end)
            if close:
                tools.args_end = tools.call_end[: close.end()]
                tools.call_end = tools.call_end[close.end():]
    if tools.format == "tag_tagged" and tools.arg_end:
        last_arg_end = tools.arg_end.replace(KEY_HOLE, "second_arg")
        tools.call_end = strip_prefix(tools.call_end, last_arg_end)


def _find_tag_id(tools: ToolsAnalysis) -> None:
    if tools.format == "json" or not tools.name_end or ID_A not in tools.name_end:
        return
    at = tools.name_end.index(ID_A)
    tools.id_start = tools.name_end[:at]
    tools.id_end = tools.name_end[at + len(ID_A):]
    tools.name_end = ""


def tool_markers(tools: ToolsAnalysis) -> list[str]:
    out: list[str] = []
    for text in (tools.section_start, tools.section_end, tools.call_start, tools.call_end, tools.name_start,
                 tools.name_end, tools.arg_start, tools.arg_key_end, tools.arg_end, tools.id_start, tools.id_end):
        for seg in segments(text):
            if is_marker(seg) and seg not in out:
                out.append(seg)
    return out


def tool_triggers(tools: ToolsAnalysis) -> list[str]:
    """What the model writes first when it starts calling tools."""
    if not tools.supported:
        return []
    for text in (tools.section_start, tools.call_start, tools.name_start):
        if text.strip():
            return [text.strip()]
    if tools.format == "json":
        return ['{"' + (tools.function_field or tools.name_field) + '"']
    return []
