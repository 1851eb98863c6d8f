"""The analysis of a chat template: plain data describing a model's output language.

An `Analysis` is produced by `autoparser.analyzers.analyze` and consumed by the parser runtime
and the grammar generators. It holds only strings, booleans and lists, so it serializes to JSON
(`to_dict`) and back (`from_dict`) without loss; the standalone generated module embeds it.

How a model's output is laid out, in the order the fields below describe it::

    [reasoning.start] REASONING reasoning.end        (start omitted when the prompt opened it)
    [content.start] CONTENT [content.end]
    tools.section_start
        tools.call_start CALL tools.call_end
        tools.call_separator
        tools.call_start CALL tools.call_end ...
    tools.section_end
    stop[0]                                          (end of turn, may be absent)

A CALL depends on `tools.format`:

* ``json``: one JSON object, e.g. ``{"name": "f", "arguments": {...}}``; the key names are
  `name_field`, `args_field`, optional `id_field`, optionally nested under `function_field`.
  When `array` is true the calls are the elements of one JSON array, and `call_start`,
  `call_end`, `call_separator` are the JSON punctuation around them.
* ``tag_json``: ``name_start NAME name_end args_start ARGS args_end`` where ARGS is a JSON
  object; `args_start`/`args_end` are a wrapper such as a ```` ```json ```` fence.
* ``tag_tagged``: ``name_start NAME name_end`` then per argument
  ``arg_start KEY arg_key_end VALUE arg_end`` (separated by `arg_separator`); string values are
  raw text when `arg_string_raw`, every other value is JSON; `arg_key_end_json` replaces
  `arg_key_end` before a non-string value when the template writes them differently. With
  `arg_python`, every value is a Python literal (`'text'`, `42`, `True`, `None`), as in
  ``[get_weather(location='Paris', days=3)]``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

REASONING_MODES = ("none", "tagged", "tools_only")
CONTENT_MODES = ("plain", "wrapped", "wrapped_with_reasoning")
TOOL_FORMATS = ("none", "json", "tag_json", "tag_tagged")


@dataclass
class ReasoningAnalysis:
    """Where the model's hidden reasoning sits.

    `forced_open`: with thinking enabled, the generation prompt already ends inside reasoning
    (it ends with `start`), so the output begins with reasoning text and only `end` appears.
    `toggle`: the template variable that switches thinking, `toggle_on`/`toggle_off` the values
    that were seen to switch it, `default_on` whether thinking is on when the variable is unset.
    `closed_when_off`: with thinking off, the prompt ends with an empty ``start end`` pair.
    """

    mode: str = "none"
    start: str = ""
    end: str = ""
    forced_open: bool = False
    toggle: str | None = None
    toggle_on: Any = True
    toggle_off: Any = False
    default_on: bool = True
    closed_when_off: bool = False
    rendered_in_history: bool = False


@dataclass
class ContentAnalysis:
    """Markers around the visible answer; `mode` says when they are present."""

    mode: str = "plain"
    start: str = ""
    end: str = ""


@dataclass
class ToolsAnalysis:
    """How tool calls are written. See the module docstring for the layout."""

    supported: bool = False
    format: str = "none"
    section_start: str = ""
    section_end: str = ""
    call_start: str = ""
    call_end: str = ""
    call_separator: str = ""
    parallel: bool = False
    # tag formats: text around the function name, and an optional wrapper around JSON arguments
    name_start: str = ""
    name_end: str = ""
    args_start: str = ""
    args_end: str = ""
    # json format
    name_field: str = "name"
    args_field: str = "arguments"
    id_field: str | None = None
    function_field: str | None = None
    array: bool = False
    args_as_string: bool = False
    # tag_tagged format
    arg_start: str = ""
    arg_key_end: str = ""
    arg_end: str = ""
    arg_separator: str = ""
    arg_string_raw: bool = True
    arg_end_keyed: bool = False  # `arg_end` names its key, written `{key}`: <city>Paris</city>
    arg_python: bool = False  # values are Python literals (`name(key='text', n=42)` call syntax)
    arg_key_end_json: str = ""  # when a non-string value is introduced differently from a string
    # objects and arrays inside an argument, when not written as JSON: "quoted" (JSON whose strings
    # are quoted by `arg_nested_quote` and whose keys are bare: `{k:<|"|>v<|"|>}`) or "tags" (the
    # argument markup nested, an array's elements all named `arg_nested_item`); confirmed by rendering
    arg_nested: str = ""
    arg_nested_quote: str = ""
    arg_nested_item: str = ""
    # tag formats that carry a call id: `id_start` ID `id_end`, right after `name_end`, or, when
    # `id_before_name`, right after `call_start` and before `name_start`
    id_start: str = ""
    id_end: str = ""
    id_before_name: bool = False
    content_allowed: bool = True
    # The generation prompt ends with the call opener (`>>>`): the output starts inside a call
    # header, where `content.start` (a recipient such as `all\n`) introduces plain content instead.
    opened_by_prompt: bool = False
    # The template numbers its calls inside `name_end` (`:0<|x|>`, ` index="1"`): `name_end` with
    # the number written `{index}`, confirmed by rendering two calls, and the first call's number.
    call_index: str = ""
    call_index_base: int = 0


@dataclass
class MessagesAnalysis:
    """A reply written as several messages, each opened by a header naming what it holds.

    ``HEADER body_start BODY separator HEADER body_start BODY ...``: `separator` ends one message
    and re-opens the turn; a header is the reasoning's (`reasoning_header`), the answer's
    (`content_header`) or a call's (`call_header`, the tool name written `{name}`). When
    `call_body_named`, a call's body names the call again and is parsed as a call by itself;
    otherwise the body holds only the arguments. Empty `body_start`: not a message format.
    """

    body_start: str = ""
    separator: str = ""
    opener: str = ""  # what re-opens the turn, the end of `separator` (`<|start|>assistant`)
    reasoning_header: str = ""
    content_header: str = ""
    call_header: str = ""
    call_body_named: bool = False


@dataclass
class Analysis:
    """Everything autoparser inferred about one chat template."""

    generation_prompt: str = ""
    reasoning: ReasoningAnalysis = field(default_factory=ReasoningAnalysis)
    content: ContentAnalysis = field(default_factory=ContentAnalysis)
    tools: ToolsAnalysis = field(default_factory=ToolsAnalysis)
    messages: MessagesAnalysis = field(default_factory=MessagesAnalysis)
    stop: list[str] = field(default_factory=list)
    preserved_tokens: list[str] = field(default_factory=list)
    triggers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    template_vars: dict[str, Any] = field(default_factory=dict)
    source: str = field(default="", repr=False, compare=False)
    bos_token: str = field(default="", repr=False, compare=False)
    eos_token: str = field(default="", repr=False, compare=False)

    # -- serialization -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for private in ("source", "bos_token", "eos_token"):
            data.pop(private)
        return data

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "", bos_token: str = "",
                  eos_token: str = "") -> Analysis:
        data = dict(data)
        reasoning = ReasoningAnalysis(**_known(ReasoningAnalysis, data.pop("reasoning", {})))
        content = ContentAnalysis(**_known(ContentAnalysis, data.pop("content", {})))
        tools = ToolsAnalysis(**_known(ToolsAnalysis, data.pop("tools", {})))
        messages = MessagesAnalysis(**_known(MessagesAnalysis, data.pop("messages", {}) or {}))
        rest = _known(cls, data)
        for private in ("source", "bos_token", "eos_token"):
            rest.pop(private, None)
        return cls(reasoning=reasoning, content=content, tools=tools, messages=messages, source=source,
                   bos_token=bos_token, eos_token=eos_token, **rest)

    # -- what users do with an analysis --------------------------------------------------------

    def thinking_kwargs(self, thinking: bool | None) -> dict[str, Any]:
        """Template variables that put the template in the requested thinking mode."""
        if thinking is None or not self.reasoning.toggle:
            return {}
        value = self.reasoning.toggle_on if thinking else self.reasoning.toggle_off
        return {self.reasoning.toggle: value}

    def thinking_enabled(self, thinking: bool | None) -> bool:
        if self.reasoning.mode == "none":
            return False
        if thinking is None or not self.reasoning.toggle:
            return self.reasoning.default_on
        return bool(thinking)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = True, **template_kwargs: Any) -> str:
        from autoparser.render import render_template

        return render_template(self.source, messages, tools=tools,
                               add_generation_prompt=add_generation_prompt,
                               bos_token=self.bos_token, eos_token=self.eos_token,
                               **template_kwargs)

    def parser(self, tools: list[dict[str, Any]] | None = None, thinking: bool | None = None,
               parallel_tool_calls: bool = True, tool_choice: Any = "auto",
               tool_call_policy: str = "lenient", prompt: str | None = None):
        from autoparser.runtime import Parser

        return Parser(self, tools=tools, thinking=thinking, parallel_tool_calls=parallel_tool_calls,
                      tool_choice=tool_choice, tool_call_policy=tool_call_policy, prompt=prompt)

    def gbnf(self, tools: list[dict[str, Any]] | None = None, tool_choice: Any = "auto",
             thinking: bool | None = None, parallel_tool_calls: bool = True,
             special_tokens: set[str] | list[str] | None = None, prompt: str | None = None,
             **kwargs: Any) -> str:
        from autoparser.generators.gbnf import generate_gbnf

        return generate_gbnf(self, tools=tools, tool_choice=tool_choice, thinking=thinking,
                             parallel_tool_calls=parallel_tool_calls,
                             special_tokens=special_tokens, prompt=prompt, **kwargs)

    def lark(self, tools: list[dict[str, Any]] | None = None, thinking: bool | None = None) -> str:
        from autoparser.generators.lark import generate_lark

        return generate_lark(self, tools=tools, thinking=thinking)


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}
