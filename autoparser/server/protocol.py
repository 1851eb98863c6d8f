"""The `/v1/chat/completions` request: its fields, their checks, and the normalized form.

Pydantic checks types and ranges; `parse_request` turns its errors (and malformed JSON) into
400 OpenAI errors naming the offending field, so the route never sees an unchecked body.
Beyond OpenAI's fields the request accepts the ones vLLM and SGLang users send (`top_k`,
`min_p`, `repetition_penalty`, `stop_token_ids`, `ignore_eos`, `include_stop_str_in_output`,
`skip_special_tokens`, `chat_template_kwargs`, `separate_reasoning`) and a few of this server's
own: `thinking` (a switch, or `{"type": "enabled", "budget_tokens": N}`), `thinking_budget`,
`reasoning` and `enable_reasoning` (other clients' switches), `stream_reasoning`,
`tool_call_policy`, `full_text`, `extensions` and `return_prompt`.
Unknown fields are ignored, as vLLM does, so clients written for other servers keep working.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from autoparser.server.errors import APIError, bad_request
from autoparser.server.validation import checked_body

MessageRole = Literal["system", "developer", "user", "assistant", "tool"]


class ChatMessage(BaseModel):
    """One conversation turn. Extra keys (`prefix`, `reasoning_content`...) reach the template."""

    model_config = ConfigDict(extra="allow")

    role: MessageRole
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(BaseModel):
    include_usage: bool = False


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class ThinkingOption(BaseModel):
    """Anthropic/DeepSeek style `{"type": "enabled", "budget_tokens": N}`."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["enabled", "disabled"]
    budget_tokens: int | None = Field(default=None, ge=0)


class ReasoningOption(BaseModel):
    """OpenRouter style `{"enabled": true, "effort": "high", "max_tokens": N}`."""

    model_config = ConfigDict(extra="ignore")

    enabled: bool | None = None
    effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    max_tokens: int | None = Field(default=None, ge=0)


MAX_CHOICES = 8
"""Most `n` a chat request may ask for: each choice is a generation of its own."""


class GenerationFields(BaseModel):
    """The fields every generating endpoint shares: limits, sampling, stops, output options."""

    model_config = ConfigDict(extra="ignore")
    max_choices: ClassVar[int] = 1

    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    separate_reasoning: bool = True
    full_text: bool = False
    extensions: bool = False
    return_prompt: bool = False

    @field_validator("n")
    @classmethod
    def _choices(cls, value: int) -> int:
        if not 1 <= value <= cls.max_choices:
            raise ValueError(f"n must be between 1 and {cls.max_choices}" if cls.max_choices > 1
                             else "only n=1 is supported on this endpoint")
        return value

    def check(self) -> None:
        """The checks across fields, as OpenAI makes them."""
        if self.stream_options is not None and not self.stream:
            raise bad_request("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                              param="stream_options")

    @field_validator("stop")
    @classmethod
    def _non_empty_stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if any(stop == "" for stop in stops):
            raise ValueError("stop strings must not be empty")
        return value

    def top_logprobs_wanted(self) -> int | None:
        """How many alternatives per token to report; None when no log-probabilities are wanted."""
        return None


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high"]

# The reasoning budget (tokens) each effort sets when the request names none itself.
EFFORT_BUDGETS: dict[str, int | None] = {"low": 256, "medium": 1024, "high": None}


class ChatCompletionRequest(GenerationFields):
    max_choices: ClassVar[int] = MAX_CHOICES
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    max_completion_tokens: int | None = Field(default=None, ge=1)
    response_format: ResponseFormat | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    thinking: bool | ThinkingOption | None = None
    thinking_budget: int | None = Field(default=None, ge=0)
    reasoning_effort: ReasoningEffort | None = None
    reasoning: bool | ReasoningOption | None = None
    enable_reasoning: bool | None = None
    stream_reasoning: bool = True
    """Off: a stream sends the reasoning as one delta once it ends; content still streams."""
    tool_call_policy: Literal["lenient", "strict"] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tool_preamble: bool = True
    """Off: never add the tools preamble for this request, even where the server would."""

    def top_logprobs_wanted(self) -> int | None:
        if not self.logprobs:
            if self.top_logprobs:
                raise bad_request("top_logprobs needs logprobs: true.", param="top_logprobs")
            return None
        return self.top_logprobs or 0

    _raw_tools: list[dict[str, Any]] | None = PrivateAttr(default=None)
    """The tools exactly as sent: templates print them as JSON, so key order shows in the prompt."""



# -- parsing ---------------------------------------------------------------------------------------


def parse_json_body(body: bytes) -> dict[str, Any]:
    """A request body as a JSON object within the edge's bounds (nesting, integers, text), or a 400."""
    return checked_body(body, chat=False)


def parse_request(body: bytes | dict[str, Any]) -> ChatCompletionRequest:
    """Decode and check a request body; every problem becomes a 400 naming the field."""
    data = checked_body(body)
    try:
        request = ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    request.check()
    if request.tools:
        request._raw_tools = data["tools"]
    return request


def validation_error(exc: ValidationError) -> APIError:
    """The first pydantic error as a 400, its location written the way OpenAI names params."""
    first = exc.errors()[0]
    param = location_to_param(first.get("loc", ()))
    message = first.get("msg", "invalid value")
    if param:
        message = f"{param}: {message}"
    return APIError(400, message, param=param or None, code="invalid_value")


def location_to_param(loc: tuple[Any, ...] | list[Any]) -> str:
    """`("messages", 0, "content")` -> `"messages[0].content"`; pydantic's union tags are dropped."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif isinstance(item, str) and ("[" in item or item in _UNION_TAGS or item.startswith("function-")):
            continue
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


_UNION_TAGS = {"str", "list", "bool", "int", "float", "dict", "none", "NamedToolChoice", "ThinkingOption",
               "ReasoningOption",
               "literal['auto','none','required']", "literal['enabled','disabled']"}


# -- normalization ---------------------------------------------------------------------------------

_VISION_PARTS = {"image_url", "input_image", "image"}
_AUDIO_PARTS = {"input_audio", "audio", "audio_url"}


def message_text(content: str | list[dict[str, Any]] | None, param: str) -> str | None:
    """A message's content as text: text parts are joined by newlines, other parts refused."""
    if content is None or isinstance(content, str):
        return content
    texts: list[str] = []
    for index, part in enumerate(content):
        part_param = f"{param}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        kind = kind if isinstance(kind, str) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in _VISION_PARTS:
            raise APIError(400, "This model has no vision support: image content parts cannot be used.",
                           param=part_param, code="unsupported_content")
        elif kind in _AUDIO_PARTS:
            raise APIError(400, "This model has no audio support: audio content parts cannot be used.",
                           param=part_param, code="unsupported_content")
        else:
            raise APIError(400, f"Unsupported content part type {kind!r}; only 'text' parts are accepted.",
                           param=part_param, code="unsupported_content")
    return "\n".join(texts)


def template_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as chat templates expect them: plain-text content, `developer` read as `system`.

    An assistant turn that only calls tools gets empty content: templates either test it
    (`if message['content']`, `is none`) or concatenate it (`message['content'] + ...`), and
    only a string satisfies both once the renderer drops None-valued keys.
    """
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        data = message.model_dump(exclude_none=True)
        content = message_text(message.content, f"messages[{index}].content")
        role = "system" if message.role == "developer" else message.role
        if content is None and role != "assistant":
            raise bad_request(f"messages[{index}].content: a {message.role} message needs content",
                              param=f"messages[{index}].content")
        if role == "assistant" and content is None and not message.tool_calls:
            raise bad_request(f"messages[{index}]: an assistant message needs content or tool_calls",
                              param=f"messages[{index}]")
        if role == "tool" and not message.tool_call_id:
            data.setdefault("tool_call_id", "")
        data["role"] = role
        data["content"] = "" if content is None else content
        out.append(data)
    return out


def tool_dicts(request: ChatCompletionRequest) -> list[dict[str, Any]] | None:
    """The request's tools as plain dicts, in the client's key order where it sent JSON."""
    if not request.tools:
        return None
    if request._raw_tools is not None:
        return request._raw_tools
    return [tool.model_dump(exclude_none=True) for tool in request.tools]


def tool_choice_value(request: ChatCompletionRequest) -> str | dict[str, Any]:
    """The effective tool_choice as the parser and grammar take it, checked against the tools.

    OpenAI's default is `auto` with tools and `none` without; a named tool must be one of
    `tools`, and `required`/named need tools at all.
    """
    choice = request.tool_choice
    names = [tool.function.name for tool in request.tools or []]
    if choice is None:
        return "auto" if names else "none"
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in names:
            raise APIError(400, f"tool_choice names the function {choice.function.name!r}, "
                                "which is not among the request's tools.",
                           param="tool_choice", code="unknown_tool")
        return {"type": "function", "function": {"name": choice.function.name}}
    if choice == "required" and not names:
        raise bad_request("tool_choice 'required' needs at least one tool in 'tools'.", param="tool_choice")
    return choice


# Names clients use for a thinking switch in `chat_template_kwargs`; they count as a request
# for thinking on templates whose own switch has another name.
THINKING_KWARGS = ("enable_thinking", "thinking", "enable_reasoning", "reasoning")


def requested_thinking(request: ChatCompletionRequest, toggle: str | None, toggle_on: Any) -> bool | None:
    """Whether the request asks for thinking, by the first of these it sets: the template's own
    switch in `chat_template_kwargs`, another common switch name there, `thinking`,
    `enable_reasoning`, `reasoning` (a switch, or `enabled`/`effort`), `reasoning_effort`
    (`none`/`minimal` off, the others on); None means "as the template's default"."""
    kwargs = request.chat_template_kwargs or {}
    if toggle and toggle in kwargs:
        value = kwargs[toggle]
        return value == toggle_on if not isinstance(toggle_on, bool) else bool(value)
    named = next((kwargs[name] for name in THINKING_KWARGS if isinstance(kwargs.get(name), bool)), None)
    if named is not None:
        return named
    thinking = request.thinking
    if isinstance(thinking, ThinkingOption):
        return thinking.type == "enabled"
    if thinking is not None:
        return thinking
    if request.enable_reasoning is not None:
        return request.enable_reasoning
    reasoning = request.reasoning
    if isinstance(reasoning, bool):
        return reasoning
    if reasoning is not None and reasoning.enabled is not None:
        return reasoning.enabled
    effort = _effort(request)
    return None if effort is None else effort in EFFORT_BUDGETS


def _effort(request: ChatCompletionRequest) -> str | None:
    if request.reasoning_effort is not None:
        return request.reasoning_effort
    reasoning = request.reasoning
    return reasoning.effort if isinstance(reasoning, ReasoningOption) else None


def thinking_budget(request: ChatCompletionRequest) -> int | None:
    """The most reasoning tokens the request allows: `thinking_budget`, `thinking.budget_tokens`,
    `reasoning.max_tokens`, or the budget its effort sets."""
    if request.thinking_budget is not None:
        return request.thinking_budget
    if isinstance(request.thinking, ThinkingOption) and request.thinking.budget_tokens is not None:
        return request.thinking.budget_tokens
    if isinstance(request.reasoning, ReasoningOption) and request.reasoning.max_tokens is not None:
        return request.reasoning.max_tokens
    return EFFORT_BUDGETS.get(_effort(request) or "")


def stop_strings(request: GenerationFields) -> list[str]:
    if request.stop is None:
        return []
    return [request.stop] if isinstance(request.stop, str) else list(request.stop)


def response_schema(request: ChatCompletionRequest) -> dict[str, Any] | None:
    """The JSON schema the answer must follow, or None for free text."""
    fmt = request.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "object"}
    if fmt.json_schema is None or fmt.json_schema.json_schema is None:
        raise bad_request("response_format json_schema needs json_schema.schema.", param="response_format")
    return fmt.json_schema.json_schema


def response_format(request: ChatCompletionRequest) -> dict[str, Any] | None:
    """The request's `response_format` as the OpenAI dict (None where it asks for none)."""
    fmt = request.response_format
    return None if fmt is None else fmt.model_dump(by_alias=True, exclude_none=True)


def requested_max_tokens(request: GenerationFields) -> int | None:
    return getattr(request, "max_completion_tokens", None) or request.max_tokens
