"""What a parser needs to know, computed once per `Parser` from the analysis and the request.

The runtime reads the analysis as a plain dict (`Analysis.to_dict()` form) so that the standalone
module, which embeds that dict, runs the very same code without the `autoparser` package.
"""

from __future__ import annotations

import json
from typing import Any

from autoparser.language.request import (
    KEY_HOLE,
    OPEN,
    args_keys,
    bare_fence,
    core,
    is_weak,
    split_call_index,
    start_state,
    tool_table,
)
from autoparser.language.values import quoted_to_json, tags_to_json
from autoparser.runtime.channels import new_call_id
from autoparser.runtime.markers import leading_ws, trailing_ws


class Spec:
    """Marker cores, modes and tool tables for one parser; shared by all its streams."""

    def __init__(self, analysis: dict[str, Any], tools: list[dict[str, Any]] | None,
                 thinking: bool | None, parallel_tool_calls: bool, tool_choice: Any,
                 tool_call_policy: str, prompt: str | None = None) -> None:
        if tool_call_policy not in ("lenient", "strict"):
            raise ValueError(f"tool_call_policy must be 'lenient' or 'strict', not {tool_call_policy!r}")
        reasoning = analysis.get("reasoning") or {}
        content = analysis.get("content") or {}
        tool_format = analysis.get("tools") or {}

        self.reasoning_mode = reasoning.get("mode", "none")
        self.has_reasoning = self.reasoning_mode != "none" and bool(core(reasoning.get("end")))
        self.reasoning_start = core(reasoning.get("start")) if self.has_reasoning else ""
        self.reasoning_end = core(reasoning.get("end")) if self.has_reasoning else ""
        self.start, self.continued = start_state(analysis, thinking, prompt)
        self.start_in_reasoning = self.has_reasoning and self.start == OPEN
        content_start, content_end = core(content.get("start")), core(content.get("end"))
        self.stops = [core(s) for s in analysis.get("stop") or [] if core(s)]

        self.format = tool_format.get("format", "none") if tool_format.get("supported", True) else "none"
        self.tools = tool_table(tools)
        self.allowed = set(self.tools) if self.tools is not None else None
        if isinstance(tool_choice, dict):
            chosen = (tool_choice.get("function") or {}).get("name")
            if chosen:
                self.allowed = {chosen}
        self.tools_on = self.format in ("json", "tag_json", "tag_tagged") and tool_choice != "none"
        self.parallel = bool(parallel_tool_calls)
        self.strict = tool_call_policy == "strict"

        get = tool_format.get
        self.section_start = core(get("section_start"))
        self.section_end = core(get("section_end"))
        self.array = bool(get("array")) and self.format == "json"
        self.call_start = "" if self.array else core(get("call_start"))
        self.call_end = "" if self.array else core(get("call_end"))
        self.call_separator = "" if self.array else core(get("call_separator"))
        self.name_start = core(get("name_start"))
        name_end = core(get("name_end"))
        index = core(get("call_index"))  # confirmed by the analysis; else digits in the marker
        head, hole, tail = index.partition("{index}")
        indexed = (head, tail) if hole else split_call_index(name_end)
        self.name_end, self.name_end_tail = indexed or (name_end, "")
        self.name_end_indexed = indexed is not None
        self.id_start = core(get("id_start"))
        self.id_end = core(get("id_end"))
        self.id_before_name = bool(get("id_before_name"))
        self.args_start = core(get("args_start"))
        self.args_end = core(get("args_end"))
        self.arg_start = core(get("arg_start"))
        self.arg_key_end = core(get("arg_key_end"))
        self.arg_key_end_raw = get("arg_key_end") or ""
        self.arg_key_end_json = core(get("arg_key_end_json"))
        self.arg_key_trail = trailing_ws(get("arg_key_end"))
        self.arg_end = core(get("arg_end"))
        self.arg_end_keyed = bool(get("arg_end_keyed")) and KEY_HOLE in self.arg_end
        self.arg_end_lead = leading_ws(get("arg_end"))
        self.arg_separator = core(get("arg_separator"))
        self.arg_string_raw = bool(get("arg_string_raw", True))
        self.arg_nested = get("arg_nested") or ""
        self.arg_nested_quote = get("arg_nested_quote") or ""
        self.arg_nested_item = get("arg_nested_item") or ""
        self.name_field = get("name_field") or "name"
        self.args_fields = args_keys(get("args_field"))
        self.id_field = get("id_field") or None
        self.function_field = get("function_field") or None
        # a call with no marker before it: a bare JSON object in the content (Llama 3.x style)
        self.markerless = (self.format == "json" and not self.section_start and not self.call_start)
        # what opens tool calls in content; also what ends an unclosed reasoning block
        # a name marker that is a tag of its own (`<function=`) also opens a call whose opener the
        # model left out
        self.name_opens_call = (self.format in ("tag_json", "tag_tagged") and bool(self.call_start)
                                and not self.section_start and self.name_start.startswith("<")
                                and not is_weak(self.name_start))
        self.tool_opener = self.section_start or self.call_start
        if not self.tool_opener and self.format in ("tag_json", "tag_tagged"):
            self.tool_opener = self.name_start
        self.arg_python = bool(get("arg_python")) and self.format == "tag_tagged"
        # values written as literals (Python call syntax, or JSON): their own syntax says where
        # they end, not the arg_end marker alone
        self.literal_values = self.format == "tag_tagged" and (self.arg_python or not self.arg_string_raw)
        # keys with no marker before them (`name(key=value, ...)`): the markers around values are
        # short punctuation that values may contain too, so an end marker counts only where what
        # follows it continues the call (`, next_key=`, `)` then `]`)
        self.bare_keys = self.format == "tag_tagged" and not self.arg_start
        # calls with no marker of their own (`[name(...), name(...)]`, `to=functions.NAME`): inside
        # a section, a call starts with its name
        self.bare_names = (self.format in ("tag_json", "tag_tagged") and not self.call_start
                           and not self.name_start)
        # the generation prompt ends with the call opener: the output starts inside a call header,
        # where the content start marker (a recipient such as `all`) introduces content instead
        self.opened_by_prompt = bool(get("opened_by_prompt")) and self.format in ("json", "tag_json", "tag_tagged")
        self.recipient = ""
        if self.opened_by_prompt and content_start:
            self.recipient, content_start = content_start, ""
        self.content_markers = [m for m in (content_start, content_end) if m]
        # an answer opened by its own marker may skip the reasoning the prompt opened: the marker
        # ends that reasoning (unless the reasoning's own end marker follows after all)
        self.content_start = content_start if content_start != self.reasoning_end else ""
        # a fence around JSON arguments (```json) is also accepted without its language tag
        self.args_start_bare = bare_fence(self.args_start)

    def nested_value(self, raw: str) -> str | None:
        """The JSON text of an object or array written in the template's own nested syntax, or None."""
        if self.arg_nested == "quoted" and self.arg_nested_quote in raw:
            value = quoted_to_json(raw, self.arg_nested_quote)
        elif self.arg_nested == "tags":
            value = tags_to_json(raw, self.arg_start, core(self.arg_key_end_raw), self.arg_end,
                                 self.arg_nested_item)
        else:
            return None
        return None if value is None else json.dumps(value, ensure_ascii=False)

    call_id = staticmethod(new_call_id)

    def name_allowed(self, name: str) -> bool:
        return self.allowed is None or name in self.allowed

    def argument_schema(self, tool: str, key: str) -> Any:
        if self.tools is None:
            return None
        return (self.tools.get(tool) or {}).get(key)
