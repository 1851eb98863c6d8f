"""The analysis of a chat template as plain data: the dataclasses describing a model's output
language, their defaults, and their JSON form (`to_dict` / `from_dict`).

`AnalysisData` holds only plain data (strings, booleans, lists and small frozen parts), so it
serializes to JSON and back without loss. The builder of the output language reads it, and the
standalone generated module, which embeds the builder, reads its embedded dict back with
`AnalysisData.from_dict`: this module therefore imports only the standard library and
`autoparser.tool_calls`. `autoparser.analysis.Analysis` adds what users do with an analysis
(render, parser, grammars).

How a model's output is laid out, in the order the fields below describe it::

    [reasoning.start] REASONING reasoning.end        (start omitted when the prompt opened it)
    [content.start] CONTENT [content.end]
    TOOL CALLS                                       (`ToolsAnalysis`, in `autoparser.tool_calls`)
    stop[0]                                          (end of turn, may be absent)
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Self

from autoparser.tool_calls import ToolsAnalysis

REASONING_MODES = ("none", "tagged", "tools_only")
CONTENT_MODES = ("plain", "wrapped", "wrapped_with_reasoning")
# What a template variable beyond the conversation carries (`AnalysisData.template_inputs`):
# the tool definitions as JSON text, any text (the template only prints it), or a list of
# documents (the template writes tool calls only in the turns it keeps for documents).
INPUT_KINDS = ("tools_text", "text", "documents")
# The document a render passes where none is given: a title and a text, as transformers documents them.
PLACEHOLDER_DOCUMENT = {"title": "", "text": ""}


@dataclass
class ReasoningAnalysis:
    """Where the model's hidden reasoning sits.

    `forced_open`: with thinking enabled, the generation prompt already ends inside reasoning
    (it ends with `start`), so the output begins with reasoning text and only `end` appears.
    `toggle`: the template variable that switches thinking, `toggle_on`/`toggle_off` the values
    that were seen to switch it, `default_on` whether thinking is on when the variable is unset.
    `closed_when_off`: with thinking off, the prompt ends with an empty ``start end`` pair.
    `start_inferred`: the template never writes the start marker (it only strips reasoning up to
    the end marker, and `start` is that marker's counterpart): the model's output opens inside
    reasoning, whether or not it writes the start marker.
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
    start_inferred: bool = False

    def toggle_kwargs(self, thinking: bool | None) -> dict[str, Any]:
        """Template variables that switch thinking on or off; none for `None` or without a toggle."""
        if thinking is None or not self.toggle:
            return {}
        return {self.toggle: self.toggle_on if thinking else self.toggle_off}


@dataclass
class ContentAnalysis:
    """Markers around the visible answer; `mode` says when they are present."""

    mode: str = "plain"
    start: str = ""
    end: str = ""


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
class AnalysisData:
    """Everything autoparser inferred about one chat template, as data."""

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
    template_inputs: dict[str, str] = field(default_factory=dict)
    source: str = field(default="", repr=False, compare=False)
    bos_token: str = field(default="", repr=False, compare=False)
    eos_token: str = field(default="", repr=False, compare=False)

    # -- serialization -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["tools"] = self.tools.to_dict()
        for private in ("source", "bos_token", "eos_token"):
            data.pop(private)
        if not data["template_inputs"]:
            del data["template_inputs"]  # written only for the few templates that need inputs
        return data

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "", bos_token: str = "",
                  eos_token: str = "") -> Self:
        """Read back the `to_dict()` form; keys it does not know are ignored, and missing or
        null parts take their defaults."""
        data = dict(data)
        reasoning = ReasoningAnalysis(**_known(ReasoningAnalysis, data.pop("reasoning", None)))
        content = ContentAnalysis(**_known(ContentAnalysis, data.pop("content", None)))
        tools = ToolsAnalysis.from_dict(data.pop("tools", None) or {})
        messages = MessagesAnalysis(**_known(MessagesAnalysis, data.pop("messages", None)))
        rest = {key: value for key, value in _known(cls, data).items() if value is not None}
        for private in ("source", "bos_token", "eos_token"):
            rest.pop(private, None)
        return cls(reasoning=reasoning, content=content, tools=tools, messages=messages, source=source,
                   bos_token=bos_token, eos_token=eos_token, **rest)

    # -- the request's thinking mode -----------------------------------------------------------

    def thinking_kwargs(self, thinking: bool | None) -> dict[str, Any]:
        """Template variables that put the template in the requested thinking mode."""
        return self.reasoning.toggle_kwargs(thinking)

    def thinking_enabled(self, thinking: bool | None) -> bool:
        """Whether reasoning is on for a request asking for `thinking` (None: the template's default)."""
        if self.reasoning.mode == "none":
            return False
        if thinking is None or not self.reasoning.toggle:
            return self.reasoning.default_on
        return bool(thinking)

    def input_kwargs(self, tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        """Values for the variables the template needs beyond the conversation (`template_inputs`)."""
        return input_values(self.template_inputs, tools)


def input_values(inputs: dict[str, str], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Template variables for `inputs` (name -> one of `INPUT_KINDS`) with these tools: the tool
    definitions as indented JSON (empty without tools), one placeholder document for a list of
    documents, and empty text for the rest."""
    tools_text = json.dumps(tools, ensure_ascii=False, indent=2) if tools else ""
    values: dict[str, Any] = {}
    for name, kind in inputs.items():
        if kind == "tools_text":
            values[name] = tools_text
        elif kind == "documents":
            values[name] = [dict(PLACEHOLDER_DOCUMENT)]
        else:
            values[name] = ""
    return values


def _known(cls: type, data: dict[str, Any] | None) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in (data or {}).items() if k in names}
