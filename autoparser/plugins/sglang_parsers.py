"""SGLang's function-call detector and reasoning detector, named `autoparser`.

SGLang builds one detector per request. `FunctionCallParser` passes the served tokenizer to
detectors that accept one, and the request's tools on every call; the detector keeps one
autoparser stream, so each chunk costs only its own length. `ReasoningParser` builds the
reasoning detector the same way and tells it when the request forces reasoning on or off.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.function_call.base_format_detector import BaseFormatDetector
from sglang.srt.function_call.core_types import StreamingParseResult, ToolCallItem
from sglang.srt.parser.reasoning_parser import BaseReasoningFormatDetector
from sglang.srt.parser.reasoning_parser import StreamingParseResult as ReasoningResult

from autoparser.plugins.common import (
    PluginError,
    ServedModel,
    merge_deltas,
    served_model,
)


def _model(tokenizer: Any) -> ServedModel:
    if tokenizer is None:
        raise PluginError("the autoparser detectors need the served tokenizer")
    return served_model(tokenizer)


class AutoparserDetector(BaseFormatDetector):
    """Tool calls in the served model's own format, as its chat template's analysis describes.

    SGLang hands it the text after its reasoning parser's cut, reasoning blocks inside the answer
    already taken out by that parser (or, with `separate_reasoning` off, the whole output), so it
    reads no reasoning at all, whatever the template's switch."""

    def __init__(self, tokenizer: Any = None) -> None:
        super().__init__()
        self._model = _model(tokenizer)
        markers = self._model.analysis.tools.markers
        self.bot_token = markers.section_start or markers.call_start
        self.eot_token = markers.section_end or markers.call_end
        self._stream: Any = None

    def _parser(self, tools: list[Any] | None) -> Any:
        dicts = [tool.model_dump(exclude_none=True) if hasattr(tool, "model_dump") else dict(tool)
                 for tool in tools or []]
        return self._model.answer_parser(dicts, "auto", True)

    def has_tool_call(self, text: str) -> bool:
        """A call (of any tool: SGLang does not pass the tools here), or markup to drop; where
        this says no, SGLang passes the text on as it is."""
        return self._model.answer_has_work(text)

    def detect_and_parse(self, text: str, tools: list[Any]) -> StreamingParseResult:
        message = self._parser(tools).parse(text)
        calls = [ToolCallItem(tool_index=index, name=call["function"]["name"],
                              parameters=call["function"]["arguments"])
                 for index, call in enumerate(message["tool_calls"])]
        return StreamingParseResult(normal_text=message["content"] or "", calls=calls)

    def parse_streaming_increment(self, new_text: str, tools: list[Any]) -> StreamingParseResult:
        if self._stream is None:
            self._stream = self._parser(tools).stream()
        return _result(self._stream.feed(new_text))

    def finish(self, tools: list[Any]) -> StreamingParseResult:
        if self._stream is None:
            return StreamingParseResult()
        return _result(self._stream.finish())

    def supports_structural_tag(self) -> bool:
        return False

    def parses_required_natively(self) -> bool:
        return True

    def structure_info(self):  # type: ignore[no-untyped-def]
        raise NotImplementedError("autoparser does not build SGLang structural tags yet")


def _reasoning_default(reasoning: Any) -> str | None:
    """SGLang's name for when a template's prompt opens reasoning, used where SGLang cannot tell
    from the template itself: a toggle it knows by name, always, or never (the model opens it)."""
    if reasoning.mode == "none" or not reasoning.forced_open:
        return None
    if reasoning.toggle in ("thinking", "enable_thinking"):
        return reasoning.toggle if reasoning.default_on else f"explicit_{reasoning.toggle}"
    return "always"


def _result(deltas: list[dict[str, Any]]) -> StreamingParseResult:
    _, content, calls = merge_deltas(deltas)
    items = [ToolCallItem(tool_index=call["index"], name=call["name"] if call["id"] else None,
                          parameters=call["arguments"]) for call in calls]
    return StreamingParseResult(normal_text=content, calls=items)


class AutoparserReasoningDetector(BaseReasoningFormatDetector):
    """Reasoning where autoparser's reading finds it (`ServedModel.reasoning_cut`).

    SGLang's `force_reasoning` says whether the request thinks (from the template's switch);
    where the reasoning starts then follows from the analysis, as in autoparser's own parse: inside
    it where the template's prompt opens it, else the model may open it, or imply it.

    A reasoning block written inside the answer (after answer text, or reopened after calls) is
    read here too: SGLang's function-call results have no reasoning field, and without tools
    SGLang passes this detector's normal text on as the content. The text after the cut is read
    as autoparser reads the answer after reasoning, calls left as text (`ServedModel.answer_reader`
    with tool choice "none"), so the block's text is reasoning and its markers are dropped. Each
    stage trims the reasoning it reads: whitespace between the reasoning the output began with
    and such a block is not served."""

    def __init__(self, stream_reasoning: bool = True, force_reasoning: bool | None = None,
                 tokenizer: Any = None, **kwargs: Any) -> None:
        model = _model(tokenizer)
        start, end, interrupts = model.reasoning_markers()
        reasoning = model.analysis.reasoning
        super().__init__(start, end, stream_reasoning=stream_reasoning,
                         force_reasoning=bool(force_reasoning), reasoning_default=_reasoning_default(reasoning),
                         **{k: v for k, v in kwargs.items() if k in ("continue_final_message", "previous_content")})
        self._split = model.reasoning_split(force_reasoning, stream_reasoning=stream_reasoning)
        self._rest_started = False
        self._stream_reasoning = stream_reasoning
        # the answer's own reader, where reasoning blocks may come inside it (calls stay text)
        # (read as without a prompt, as the cut is: SGLang gives the detectors none)
        self._answer = (model.answer_reader(None, "none", True, force_reasoning, first_turn=False)
                        if model.answer_reasoning(force_reasoning, first_turn=False) else None)
        self._answer_stream: Any = None
        self._held: list[str] = []  # reasoning inside the answer, where reasoning is not streamed

    # SGLang passes the text after reasoning on as the answer unparsed when the request has no
    # tools or the text no tool call, so the whitespace autoparser drops around it is dropped here

    # A reasoning block inside the answer is read here too (SGLang's function-call detector has no
    # reasoning to return): the rest is read by the answer's own reader, which takes the block
    # out (its text is reasoning) and leaves call markup as text for the function-call detector.

    def detect_and_parse(self, text: str) -> ReasoningResult:
        reasoning, rest = self._split.split(text)
        if self._answer is None:
            return ReasoningResult(normal_text=rest.strip(), reasoning_text=reasoning)
        message = self._answer.parse(rest)
        return ReasoningResult(normal_text=message["content"] or "",
                               reasoning_text=reasoning + (message["reasoning_content"] or ""))

    def parse_streaming_increment(self, new_text: str) -> ReasoningResult:
        reasoning, rest = self._split.feed(new_text)
        more_reasoning, normal = self._rest(rest, last=False)
        return ReasoningResult(normal_text=normal, reasoning_text=reasoning + more_reasoning)

    def finish(self) -> ReasoningResult:
        reasoning, rest = self._split.finish()
        more_reasoning, normal = self._rest(rest, last=True)
        return ReasoningResult(normal_text=normal, reasoning_text=reasoning + more_reasoning)

    def _rest(self, text: str, last: bool) -> tuple[str, str]:
        """(reasoning inside the answer, answer text) newly known from the text after the cut."""
        if self._answer is None:
            if not self._rest_started:
                text = text.lstrip()
                self._rest_started = bool(text)
            return "", text
        if self._answer_stream is None:
            self._answer_stream = self._answer.stream()
        deltas = self._answer_stream.feed(text) if text else []
        reasoning, content, _ = merge_deltas(deltas + (self._answer_stream.finish() if last else []))
        if not self._stream_reasoning:  # it comes out whole, at the end
            self._held.append(reasoning)
            reasoning = "".join(self._held) if last else ""
        return reasoning, content
