"""vLLM's `ReasoningParser` and `ToolParser`, named `autoparser`, for any model with a chat template.

vLLM composes the two into one per-request parser: the reasoning parser sees the output first and
says where reasoning ends (on token ids for the structured-output gate, on text for the client);
the text after that goes to the tool parser. Both declare `engine_based_streaming`, so vLLM hands
them only each chunk's new text and ids, never the growing whole: streaming stays linear.

Importing this module registers both classes (for `--tool-parser-plugin` and
`--reasoning-parser-plugin`); the `vllm.general_plugins` entry point registers them lazily
instead (`autoparser.plugins.vllm.register`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from vllm.entrypoints.generate.base.protocol import (
    DeltaMessage,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.reasoning import ReasoningParser, ReasoningParserManager
from vllm.tool_parsers import ToolParser, ToolParserManager

from autoparser.language.request import CLOSED
from autoparser.plugins.common import (
    PLUGIN_NAME,
    CallIds,
    ReasoningSplit,
    ServedModel,
    merge_deltas,
    served_model,
    special_markers,
)

# the prompt's last tokens decoded to see where the output starts: its last turn's opening
_PROMPT_TAIL_TOKENS = 4096


class _ServedTokenizer:
    """What both parsers know about the served model: its analysis, and its markers that are
    special tokens."""

    def __init__(self, tokenizer: Any) -> None:
        self.model: ServedModel = served_model(tokenizer)
        key = (id(tokenizer), self.model.key)
        specials = _SPECIALS.get(key)
        if specials is None:
            specials = _SPECIALS[key] = special_markers(tokenizer, self.model.markers())
        self.specials = specials


_SPECIALS: dict[tuple[int, str], list[str]] = {}


def _adjust_detokenizer(request: Any, served: _ServedTokenizer) -> Any:
    """Markers that are special tokens must reach the parsers as text."""
    if served.specials:
        request.skip_special_tokens = False
        request.spaces_between_special_tokens = False
    return request


class AutoparserReasoningParser(ReasoningParser):
    """Reasoning as the chat template's analysis describes it.

    Where reasoning starts and ends is where autoparser's own parse of the output puts it
    (`ServedModel.reasoning_cut`), from the prompt when vLLM passes it (`set_prompt_token_ids`,
    its last tokens decoded) and the thinking switch of `chat_template_kwargs`.
    """

    engine_based_streaming = True

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, *args, **kwargs)
        self._served = _ServedTokenizer(tokenizer)
        self._thinking = self._served.model.thinking(kwargs.get("chat_template_kwargs"))
        self._start, self._end, self._interrupts = self._served.model.reasoning_markers()
        self._prompt: str | None = None
        self._prompt_len: int | None = None
        self._reasoning_ids: Any = None
        self._split: ReasoningSplit | None = None
        self._pending = ""

    @property
    def reasoning_start_str(self) -> str | None:
        return self._start or None

    @property
    def reasoning_end_str(self) -> str | None:
        return self._end or None

    # -- token ids: the structured-output gate and the prompt check ---------------------------
    # (where reasoning ends in ids is the parser's own `ReasoningIds`, for this request's prompt)

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        """Whether output after these prompt ids starts past reasoning (vLLM passes prompts only).
        The prompt is remembered: where it leaves the output decides the checks that follow."""
        self._remember_prompt(input_ids)
        return self._cut(self._prompt).start_state == CLOSED

    def _remember_prompt(self, ids: Sequence[int]) -> None:
        self._prompt_len = len(ids)
        self._prompt = self._prompt_text(ids)
        self._reasoning_ids = None

    def _prompt_text(self, ids: Sequence[int]) -> str:
        """The end of the prompt as text: enough to see how its last turn leaves the model."""
        return self.model_tokenizer.decode(list(ids[-_PROMPT_TAIL_TOKENS:]), skip_special_tokens=False)

    def _cut(self, prompt: str | None) -> Any:
        return self._served.model.reasoning_cut(self._thinking, prompt)

    def _ids(self) -> Any:
        """This request's `ReasoningIds`, found once per prompt (the streaming check asks per token)."""
        if self._reasoning_ids is None:
            self._reasoning_ids = self._served.model.reasoning_ids(self.model_tokenizer, self._cut(self._prompt))
        return self._reasoning_ids

    def is_reasoning_end_streaming(self, input_ids: Sequence[int], delta_ids: Iterable[int]) -> bool:
        """Whether the newest ids ended reasoning. vLLM passes the prompt's ids too: without a
        prompt seen first, only a marker in them counts, as if the prompt had opened reasoning."""
        delta = len(list(delta_ids))
        if self._prompt_len is None:
            opened = self._served.model.reasoning_ids(self.model_tokenizer, self._served.model.opened_cut())
            return opened.ends_within(input_ids, delta)
        return self._ids().ends_within(input_ids, delta, begin=self._prompt_len)

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        return self._ids().extract_content_ids(input_ids)

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        """Generated tokens inside reasoning, markers left out (the `reasoning_tokens` of usage);
        none where the prompt closed reasoning, as the text then holds no reasoning either."""
        return self._ids().reasoning_token_count(list(token_ids))

    # -- text ------------------------------------------------------------------------------

    def set_prompt_token_ids(self, prompt_token_ids: Sequence[int]) -> None:
        self._remember_prompt(prompt_token_ids)

    def adjust_initial_state_from_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        self.set_prompt_token_ids(prompt_token_ids)

    def _new_split(self) -> ReasoningSplit:
        return self._served.model.reasoning_split(self._thinking, self._prompt)

    def extract_reasoning(self, model_output: str, request: Any) -> tuple[str | None, str | None]:
        """The reasoning of the whole output: the reasoning it begins with, then any blocks inside
        the answer, which the tool parser reads in the rest and leaves out of the content (its
        result has no reasoning field); the rest, blocks included, goes to the tool parser."""
        reasoning, rest = self._new_split().split(model_output)
        if rest and self._served.model.answer_reasoning(self._thinking):
            inner = _answer_reader(self._served.model, request, self._thinking).parse(rest)["reasoning_content"]
            reasoning += inner or ""
        return reasoning or None, rest or None

    def extract_reasoning_streaming(self, previous_text: str, current_text: str, delta_text: str,
                                    previous_token_ids: Sequence[int], current_token_ids: Sequence[int],
                                    delta_token_ids: Sequence[int]) -> DeltaMessage | None:
        if self._split is None:
            self._split = self._new_split()
        reasoning, rest = self._split.feed(delta_text)
        self._pending += rest
        return DeltaMessage(reasoning=reasoning) if reasoning else None

    def has_engine_confirmed_reasoning_end(self) -> bool:
        return self._split is not None and self._split.ended

    def finish_streaming(self) -> DeltaMessage | None:
        """The text held back so far: what follows reasoning, which vLLM hands to the tool parser;
        or, at the end of an output whose reasoning never ended, reasoning never closed and the
        answer it could not yet tell from reasoning, which vLLM passes on as content itself."""
        reasoning = ""
        if self._split is not None and not self._split.ended:
            reasoning, rest = self._split.finish()
            self._pending += rest
            if self._pending:
                # no tool parser reads it: markup is dropped here (any call would have ended reasoning)
                self._pending = self._served.model.answer_parser(None, "none", True).parse(self._pending)["content"] or ""
        content, self._pending = self._pending, ""
        if not reasoning and not content:
            return None
        return DeltaMessage(reasoning=reasoning or None, content=content or None)

    def adjust_request(self, request: Any) -> Any:
        return _adjust_detokenizer(request, self._served)


class AutoparserToolParser(ToolParser):
    """Content and tool calls, parsed by autoparser's engine for the request's tools.

    It parses the text after reasoning (the reasoning parser's cut), as autoparser reads the
    answer after reasoning: a reasoning block written inside it (a model reopening its thought
    channel after answer text or calls) is reasoning, its markers markup. Streamed, that
    reasoning comes in the delta's `reasoning` field; a whole response's comes from the reasoning
    parser's `extract_reasoning`, which sees the whole output (vLLM's tool-call result has no
    reasoning field). Whether the request reads such blocks at all is told from its thinking
    switch and the template's first-turn prompt (`ServedModel.answer_reasoning`): the tool
    parser never sees the request's own prompt. `tool_choice="required"` and named choices are
    parsed here in the model's own format, not forced into vLLM's JSON.
    """

    supports_required_and_named = False
    engine_based_streaming = True
    # vLLM sets this when no reasoning parser is configured: reasoning, markers included, is content,
    # and the tool parser then reads no reasoning at all
    skip_reasoning_parsing = False

    def __init__(self, tokenizer: Any, tools: list[Any] | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, tools)
        self._served = _ServedTokenizer(tokenizer)
        self._stream: Any = None
        self._ids = CallIds()

    def _parser(self, request: Any) -> Any:
        model = self._served.model
        if self.skip_reasoning_parsing:  # no reasoning parser: reasoning is text
            return model.answer_parser(*_request_shape(request))
        return _answer_reader(model, request, model.thinking(getattr(request, "chat_template_kwargs", None)))

    def adjust_request(self, request: Any) -> Any:
        return _adjust_detokenizer(request, self._served)

    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        message = self._parser(request).parse(model_output)
        ids = CallIds()
        calls = [ToolCall(id=ids.unique(call["id"], model_output), type="function",
                          function=FunctionCall(name=call["function"]["name"],
                                                arguments=call["function"]["arguments"]))
                 for call in message["tool_calls"]]
        return ExtractedToolCallInformation(tools_called=bool(calls), tool_calls=calls,
                                            content=message["content"])

    def extract_tool_calls_streaming(self, previous_text: str, current_text: str, delta_text: str,
                                     previous_token_ids: Sequence[int], current_token_ids: Sequence[int],
                                     delta_token_ids: Sequence[int], request: Any) -> DeltaMessage | None:
        if self._stream is None:
            self._stream = self._parser(request).stream()
        if not delta_text:
            return None
        self._ids.saw(delta_text)
        return _delta_message(self._stream.feed(delta_text), self._ids)

    def finish_streaming(self) -> DeltaMessage | None:
        if self._stream is None:
            return None
        return _delta_message(self._stream.finish(), self._ids)


def _request_shape(request: Any) -> tuple[list[dict[str, Any]], Any, bool, dict[str, Any] | None]:
    """The request's tools, tool choice, parallel calls and response format, as autoparser takes them."""
    tools = [_tool_dict(tool) for tool in getattr(request, "tools", None) or []]
    parallel = getattr(request, "parallel_tool_calls", None)
    return tools, _tool_choice(getattr(request, "tool_choice", None)), parallel is not False, _response_format(request)


def _answer_reader(model: ServedModel, request: Any, thinking: bool | None) -> Any:
    """The tool stage's parser of the text after the reasoning parser's cut, reasoning blocks
    inside the answer read as reasoning (`ServedModel.answer_reader`)."""
    tools, choice, parallel, response_format = _request_shape(request)
    return model.answer_reader(tools, choice, parallel, thinking, response_format)


def _tool_dict(tool: Any) -> dict[str, Any]:
    """An OpenAI tool dict from a chat tool (nested function) or a Responses tool (flat)."""
    data = tool.model_dump(exclude_none=True) if hasattr(tool, "model_dump") else dict(tool)
    if "function" in data:
        return {"type": "function", "function": data["function"]}
    function = {k: data[k] for k in ("name", "description", "parameters") if k in data}
    return {"type": "function", "function": function}


def _response_format(request: Any) -> dict[str, Any] | None:
    """The request's `response_format` as an OpenAI dict (None: none asked for)."""
    fmt = getattr(request, "response_format", None)
    if fmt is None:
        return None
    return fmt.model_dump(exclude_none=True) if hasattr(fmt, "model_dump") else dict(fmt)


def _tool_choice(choice: Any) -> Any:
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        return choice
    data = choice.model_dump(exclude_none=True) if hasattr(choice, "model_dump") else dict(choice)
    name = (data.get("function") or {}).get("name") or data.get("name")
    return {"type": "function", "function": {"name": name}} if name else "auto"


def _delta_message(deltas: list[dict[str, Any]], ids: CallIds) -> DeltaMessage | None:
    """One `DeltaMessage` for one feed's deltas, holding only the fields that feed set."""
    if not deltas:
        return None
    reasoning, content, calls = merge_deltas(deltas)
    fields: dict[str, Any] = {}
    if reasoning:
        fields["reasoning"] = reasoning
    if content:
        fields["content"] = content
    if calls:
        # plain dicts: pydantic validates the whole delta in one call, faster than nested models
        fields["tool_calls"] = [
            {"index": call["index"], "id": ids.unique(call["id"]), "type": "function",
             "function": {"name": call["name"], "arguments": call["arguments"]}}
            if call["id"] else {"index": call["index"], "function": {"arguments": call["arguments"]}}
            for call in calls]
    return DeltaMessage(**fields) if fields else None


def register() -> None:
    """Register both parsers under the name `autoparser` (eagerly: this module is loaded)."""
    ToolParserManager.register_module(PLUGIN_NAME, module=AutoparserToolParser)
    ReasoningParserManager.register_module(PLUGIN_NAME, module=AutoparserReasoningParser)


register()
