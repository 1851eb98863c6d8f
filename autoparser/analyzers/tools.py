"""The tool-call structure, learned from rendering one call, two calls, and their differences.

The probe calls use known names, ids and arguments, so each can be found in the output:

* the arguments of call A found as one JSON object that also holds A's name: JSON calls
  (`json_calls`), and the object's keys name the fields;
* found as a JSON object outside the name: tag calls with JSON arguments (`tag_calls`); the text
  between them is markup;
* not found as JSON, but A's argument keys and values are there one by one: tag calls with
  tagged arguments.

Some templates write a call's id where its name would be, and never the name: models write ids
that hold the name (`call.get_weather.0`). Rendering the call under another name changes
nothing, under another id only the id: then the calls are rendered with the names as their ids,
which shows the layout, and the name is read from the id (`CallName.in_id`).

With the span of each call known, the markers around the calls follow (`call_markers`), and
each step adds its typed part to the `ToolsAnalysis` assembled at the end.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from autoparser.analysis import ContentAnalysis, MessagesAnalysis, ReasoningAnalysis
from autoparser.analyzers.call_markers import Span, call_markers, reopened_by_prompt
from autoparser.analyzers.diff import is_marker, segments
from autoparser.analyzers.instructed_calls import instructed_tools
from autoparser.analyzers.json_calls import find_json_call, json_args_span, json_calls
from autoparser.analyzers.probes import ARGS_A, ARGS_B, ID_A, ID_B, NAME_A, NAME_B, PROBE_TOOLS, Prober
from autoparser.analyzers.prompt import generation_prompt
from autoparser.analyzers.tag_calls import (
    nested_values,
    split_tag_markup,
    tag_json_calls,
    tagged_calls,
    typed_key_end,
)
from autoparser.tool_calls import JsonCalls, TagCalls, TaggedArguments, ToolsAnalysis


@dataclass
class CallRenders:
    one: str
    two: str | None
    as_text: bool
    definitions_shown: bool
    name_in_id: bool = False  # the template writes the id where the name would be, and never the name


def analyze_tools(prober: Prober, reasoning: ReasoningAnalysis, stop: list[str],
                  kwargs: dict[str, Any], warnings: list[str],
                  messages: MessagesAnalysis | None = None,
                  content: ContentAnalysis | None = None) -> ToolsAnalysis:
    renders = _render_calls(prober, kwargs)
    if renders is None:
        return _from_instructions(prober, kwargs, warnings)
    if messages is not None and messages.call_body_named:
        renders = _without_call_headers(renders, messages)
    if not renders.definitions_shown:
        warnings.append("the template renders tool calls but never shows the tool definitions to the model; "
                        "pass a template that does (--chat-template-file) to tell the model about tools")
    one, two = renders.one, renders.two
    if two is None:
        warnings.append("the template refuses two tool calls in one message, so parallel calls are off")
    found = _calls_and_spans(one, two)
    if found is None:
        warnings.append("tool calls render, but their structure could not be worked out; tool calls will "
                        "stay in content")
        return ToolsAnalysis(supported=False)
    calls, spans = found
    array = isinstance(calls, JsonCalls) and calls.array
    markers, id_before_name = call_markers(one, two, spans, array, reasoning, stop, content or ContentAnalysis())
    reopened = reopened_by_prompt(markers, generation_prompt(prober, **kwargs) or "")
    markers = reopened or markers
    if renders.name_in_id and not isinstance(calls, TagCalls):
        warnings.append("tool calls render only their ids, in a structure that could not be worked out; tool "
                        "calls will stay in content")
        return ToolsAnalysis(supported=False)
    if isinstance(calls, TagCalls):
        markers, calls = split_tag_markup(markers, calls, id_before_name, one, two)
        if renders.name_in_id:
            calls = dataclasses.replace(calls, name=dataclasses.replace(calls.name, in_id=True))
        arguments = calls.arguments
        if isinstance(arguments, TaggedArguments) and arguments.encoding != "python":
            nested = nested_values(prober, arguments, renders.as_text, kwargs)
            typed = typed_key_end(prober, arguments, renders.as_text, kwargs)
            arguments = dataclasses.replace(arguments, nested=nested,
                                            key_end_before_json=typed or arguments.key_end_before_json)
            calls = dataclasses.replace(calls, arguments=arguments)
    return ToolsAnalysis(supported=True, parallel=two is not None, markers=markers, calls=calls,
                         opened_by_prompt=reopened is not None)


def _from_instructions(prober: Prober, kwargs: dict[str, Any], warnings: list[str]) -> ToolsAnalysis:
    """No call renders: the format the instructions show by example, if they show one."""
    found = instructed_tools(prober, TOOL_SHAPES, kwargs)
    if found is None:
        return ToolsAnalysis()
    tools, example = found
    warnings.append("the template renders no tool call: the call syntax was learned from the example call its "
                    f"instructions show ({example.text!r}), not from a rendered call; the history it renders "
                    "leaves past calls out")
    return tools


def _calls_and_spans(one: str, two: str | None) -> tuple[JsonCalls | TagCalls, list[Span]] | None:
    """How a call is written, and where the calls are in both renders."""
    call = find_json_call(one)
    if call is not None:
        return json_calls(one, two, call)
    args = json_args_span(one, ARGS_A)
    if args is not None:
        return tag_json_calls(one, two, args)
    return tagged_calls(one, two)


def _without_call_headers(renders: CallRenders, messages: MessagesAnalysis) -> CallRenders:
    """Calls in their own messages whose bodies name the call again: the bodies alone are the calls."""
    def strip(text: str | None) -> str | None:
        if text is None:
            return None
        for name in (NAME_A, NAME_B):
            text = text.replace(messages.call_header.replace("{name}", name) + messages.body_start, "", 1)
        return text

    return dataclasses.replace(renders, one=strip(renders.one) or "", two=strip(renders.two))


# -- rendering --------------------------------------------------------------------------------------

# Tool definitions as OpenAI sends them, and flattened to the function objects some templates read.
TOOL_SHAPES = (PROBE_TOOLS, [t["function"] for t in PROBE_TOOLS])


# What an assistant message with only tool calls carries as content: nothing, empty text, or one
# empty text part (templates that read the first part of the content).
EMPTY_CONTENTS: tuple[Any, ...] = (None, "", [{"type": "text", "text": ""}])


def renders_a_call(prober: Prober) -> bool:
    """Whether any probe shape renders a tool call; the prober's shape is left as it was."""
    empty = prober.shape.empty_content
    try:
        return _render_calls(prober, {}) is not None
    finally:
        prober.shape.empty_content = empty


def _render_calls(prober: Prober, kwargs: dict[str, Any]) -> CallRenders | None:
    for tools in TOOL_SHAPES:
        for as_text in (False, True):
            for empty in EMPTY_CONTENTS:
                prober.shape.empty_content = empty
                found = _render_call_pair(prober, tools, as_text, kwargs)
                if found is not None:
                    return found
    prober.shape.empty_content = None
    return None


def _render_call_pair(prober: Prober, tools: list[dict[str, Any]], as_text: bool,
                      kwargs: dict[str, Any]) -> CallRenders | None:
    def output(calls: list[tuple[str, dict[str, Any], str]]) -> str | None:
        return prober.output(prober.calls_message(calls, as_text), tools=tools, **kwargs)

    one = output([(NAME_A, ARGS_A, ID_A)])
    if one is None:
        return None
    ids, name_in_id = (ID_A, ID_B), NAME_A not in one and _writes_id_for_name(one, output)
    if name_in_id:
        ids = (NAME_A, NAME_B)  # an id that is the name stands where the name would be written
        one = output([(NAME_A, ARGS_A, NAME_A)])
    if one is None or NAME_A not in one:
        return None
    two = output([(NAME_A, ARGS_A, ids[0]), (NAME_B, ARGS_B, ids[1])])
    if two is not None and (NAME_B not in two or NAME_A not in two):
        two = None
    return CallRenders(one=one, two=two, as_text=as_text,
                       definitions_shown=_definitions_shown(prober, tools, kwargs), name_in_id=name_in_id)


def _writes_id_for_name(one: str, output: Any) -> bool:
    """Whether a rendered call writes its id and never its name: under another name it renders
    the same, under another id only the id changes."""
    if ID_A not in one or ID_B in one:
        return False
    return output([(NAME_B, ARGS_A, ID_A)]) == one and output([(NAME_A, ARGS_A, ID_B)]) == one.replace(ID_A, ID_B)


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


# -- what the analysis derives from the calls' markup ------------------------------------------------

_MARKER_KEYS = ("section_start", "section_end", "call_start", "call_end", "name_start", "name_end", "arg_start",
                "arg_key_end", "arg_end", "id_start", "id_end")


def tool_markers(tools: ToolsAnalysis) -> list[str]:
    out: list[str] = []
    flat = tools.to_dict()
    for key in _MARKER_KEYS:
        for seg in segments(flat[key]):
            if is_marker(seg) and seg not in out:
                out.append(seg)
    return out


def tool_triggers(tools: ToolsAnalysis) -> list[str]:
    """What the model writes first when it starts calling tools."""
    if not tools.supported:
        return []
    name_start = tools.calls.name.start if isinstance(tools.calls, TagCalls) else ""
    for text in (tools.markers.section_start, tools.markers.call_start, name_start):
        if text.strip():
            return [text.strip()]
    if isinstance(tools.calls, JsonCalls):
        return ['{"' + (tools.calls.function_field or tools.calls.name_field) + '"']
    return []
