"""`Parser`: one request's parser, the streaming reader (`interpret`) of the language the parser
reads (`build`, `Request.reading`).

A reader is built per stream or parse from the analysis and the request, so a stream of a parser
ends with the message `parse` returns; only the call ids differ, each drawn afresh when a call is
first emitted (a stream's `message()` carries the ids its deltas carried).

Standard library only: the standalone module (`autoparser.generators.module`) embeds this file
with what it imports, and its `parse` and `stream` are this `Parser`'s.
"""

from __future__ import annotations

from typing import Any

from autoparser.analysis_data import AnalysisData
from autoparser.language.build import Request, build_language, reasoning_cut
from autoparser.language.interpret import LanguageReader, LanguageStream
from autoparser.language.token_ids import ReasoningIds, decoder, encoder


def analysis_data(analysis: Any) -> AnalysisData:
    """The analysis as data: an `Analysis` as it is; its `to_dict()` form read back."""
    if isinstance(analysis, AnalysisData):
        return analysis
    # (an analysis of another copy of the package, as beside a standalone module, by its dict form)
    return AnalysisData.from_dict(analysis.to_dict() if hasattr(analysis, "to_dict") else analysis)


def reader(analysis: Any, tools: list[dict[str, Any]] | None = None, thinking: bool | None = None,
           parallel_tool_calls: bool = True, tool_choice: Any = "auto", tool_call_policy: str = "lenient",
           prompt: str | None = None, eos_token: str | None = None,
           response_format: Any = None) -> LanguageReader:
    """The reader of the language a request's output is read by. `eos_token` defaults to the
    analysis's own (an `Analysis` keeps it; its dict form does not)."""
    data = analysis_data(analysis)
    request = reading_request(analysis, tools, thinking, parallel_tool_calls, tool_choice, tool_call_policy,
                              prompt, eos_token, response_format)
    return LanguageReader(build_language(data, request), end_of_turn=tuple(data.stop))


def reading_request(analysis: Any, tools: list[dict[str, Any]] | None = None, thinking: bool | None = None,
                    parallel_tool_calls: bool = True, tool_choice: Any = "auto",
                    tool_call_policy: str = "lenient", prompt: str | None = None,
                    eos_token: str | None = None, response_format: Any = None) -> Request:
    """The `Request` a parser reads its output by."""
    eos = getattr(analysis, "eos_token", "") if eos_token is None else eos_token
    return Request(tools=tuple(tools or ()), thinking=thinking, parallel_tool_calls=parallel_tool_calls,
                   tool_choice=tool_choice, policy=tool_call_policy, prompt=prompt, lazy=False,
                   reading=True, end_tokens=(eos,) if eos else (), response_format=response_format)


class Parser:
    """Parses one request's model output, whole (`parse`) or incrementally (`stream`).

    `analysis` is an `Analysis` or its `to_dict()` form. `tools` are OpenAI tool dicts: when
    given, calls to other names stay content and tagged arguments are typed by each tool's JSON
    schema. `tool_choice="none"` turns tool parsing off; a `{"type": "function", "function":
    {"name": ...}}` choice accepts only that name. `tool_call_policy` is "lenient" or "strict"
    (see the CONTRACT's section 4).

    Tool call dicts carry `"incomplete": true` when their arguments had to be closed by repair
    (the output was cut off, or the JSON broke off mid-way); such a call should not be executed
    without checking.

    `prompt` is the rendered prompt the output continues: the parser starts where it leaves the
    model (inside reasoning only if it opened reasoning, inside the assistant's partial answer
    when it continues one); `thinking` is the fallback when no prompt is given. `eos_token` is the
    text of the model's end-of-generation token, by default the analysis's.

    `response_format` is the OpenAI `response_format` the request asked for: where it asks for
    JSON (`json_schema`, `json_object`), an answer wrapped in a code fence (```` ```json ````)
    is the JSON inside it.
    """

    def __init__(self, analysis: Any, tools: list[dict[str, Any]] | None = None,
                 thinking: bool | None = None, parallel_tool_calls: bool = True,
                 tool_choice: Any = "auto", tool_call_policy: str = "lenient",
                 prompt: str | None = None, eos_token: str | None = None,
                 response_format: Any = None) -> None:
        if tool_call_policy not in ("lenient", "strict"):
            raise ValueError(f"tool_call_policy must be 'lenient' or 'strict', not {tool_call_policy!r}")
        self.analysis = analysis
        # what a reader knows of the language is the same for every stream: built once
        self._reader = reader(analysis, tools, thinking, parallel_tool_calls, tool_choice, tool_call_policy,
                              prompt, eos_token, response_format)
        self._cut = reasoning_cut(analysis_data(analysis), reading_request(
            analysis, tools, thinking, parallel_tool_calls, tool_choice, tool_call_policy, prompt, eos_token))
        self._ids: dict[int, tuple[Any, ReasoningIds]] = {}

    def stream(self) -> LanguageStream:
        """A new incremental parser: `feed(chunk)` -> deltas, `finish()` -> deltas, `message()`."""
        return self._reader.stream()

    def parse(self, text: str) -> dict[str, Any]:
        """The assistant message for a complete model output."""
        return self._reader.parse(text)

    # -- token ids, for engines that work on them ------------------------------------------------

    def reasoning_ids(self, tokenizer: Any) -> ReasoningIds:
        """Where this parser's reasoning ends, in `tokenizer`'s ids (`ReasoningIds`): a Hugging
        Face style tokenizer, or a function `text -> ids` that adds no BOS. Built once per
        tokenizer."""
        kept = self._ids.get(id(tokenizer))
        if kept is None or kept[0] is not tokenizer:
            kept = self._ids[id(tokenizer)] = (tokenizer, ReasoningIds(self._cut, encoder(tokenizer), decoder(tokenizer)))
        return kept[1]

    def is_reasoning_end(self, token_ids: Any, tokenizer: Any) -> bool:
        """Whether the ids the model generated after the prompt have ended reasoning (or begun an
        answer with none): where an engine starts enforcing the answer's grammar."""
        return self.reasoning_ids(tokenizer).is_reasoning_end(list(token_ids))

    def extract_content_ids(self, token_ids: Any, tokenizer: Any) -> list[int]:
        """The answer's ids among those generated after the prompt (none while reasoning goes on)."""
        return self.reasoning_ids(tokenizer).extract_content_ids(list(token_ids))
