"""The engine plugins' two stages composed as vLLM and SGLang compose them, without the engines.

Both engines run a reasoning parser over the output first, then hand what it leaves to their tool
parser as text. The plugins' stages are engine-neutral (`autoparser.plugins.common`): the cut
(`ServedModel.reasoning_split`), the tool stage's parser (`ServedModel.answer_parser`), SGLang's
tool-call check (`ServedModel.answer_has_work`). Here they are driven in the order each engine's chat
serving path drives its parser objects, for every tool-capable template of both corpora, whole
and streamed (every 1, 3 and 7 characters, and each marker alone in its chunk); the composed
message must equal autoparser's own parse of the same output, reasoning, content, calls and all.

Reasoning blocks written inside the answer (`plugin_cases.IN_ANSWER`, and the written cases of
templates whose reasoning may be reopened there) are reasoning in both engines' messages: vLLM's
tool stage reads them (streamed, in the delta's reasoning; whole, the reasoning parser adds
them), SGLang's reasoning detector reads them before its function-call detector.

The paths: SGLang with `separate_reasoning` on and off, `stream_reasoning` on and off, and
`tool_choice="required"`; vLLM with `include_reasoning` on and off, with no reasoning parser,
and with `tool_choice="required"` and tools marked `strict`. The real engines run the same
outputs through their own classes in `test_plugin_sglang.py` and `test_plugin_vllm.py`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from plugin_cases import (
    IN_ANSWER,
    SERVED_REASONING,
    USER,
    Case,
    analysis_of,
    cases_of,
    chunkings,
    in_answer_analysis,
    markers_of,
    tool_template_params,
)

from autoparser import ReasoningAnalysis
from autoparser.language.request import CLOSED
from autoparser.plugins.common import ServedModel, merge_deltas
from autoparser.roundtrip import TOOLS

STRICT_TOOLS = [{"type": "function", "function": {**tool["function"], "strict": True}} for tool in TOOLS]


def message(reasoning: str | None, content: str | None, calls: list[tuple[str, str]]) -> dict[str, Any]:
    return {"reasoning_content": reasoning or None, "content": content or None,
            "tool_calls": [(name, json.loads(arguments)) for name, arguments in calls]}


def autoparser_message(parser: Any, output: str) -> dict[str, Any]:
    parsed = parser.parse(output)
    return message(parsed["reasoning_content"], parsed["content"],
                   [(c["function"]["name"], c["function"]["arguments"]) for c in parsed["tool_calls"]])


class Stream:
    """What a client assembles from one streamed choice."""

    def __init__(self) -> None:
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.calls: dict[int, list[str]] = {}

    def take(self, deltas: list[dict[str, Any]]) -> None:
        reasoning, content, calls = merge_deltas(deltas)
        self.reasoning.append(reasoning)
        self.content.append(content)
        for call in calls:
            entry = self.calls.setdefault(call["index"], ["", ""])
            entry[0] = call["name"] if call["id"] else entry[0]
            entry[1] += call["arguments"]

    def message(self) -> dict[str, Any]:
        return message("".join(self.reasoning), "".join(self.content), [tuple(c) for _, c in sorted(self.calls.items())])


# -- SGLang's serving_chat, with `--reasoning-parser autoparser --tool-call-parser autoparser` ----


def sglang_whole(model: ServedModel, output: str, force: bool | None, separate_reasoning: bool = True,
                 tool_choice: Any = "auto") -> dict[str, Any]:
    """The non-streamed response: `ReasoningParser.parse_non_stream`, then (the request has
    tools) `FunctionCallParser.has_tool_call` and `parse_non_stream`."""
    reasoning, text = None, output
    if separate_reasoning:  # AutoparserReasoningDetector.detect_and_parse
        reasoning, rest = model.reasoning_split(force).split(output)
        text = rest.strip()
        if model.answer_reasoning(force, first_turn=False):  # reasoning blocks inside the answer
            inner = model.answer_reader(None, "none", True, force, first_turn=False).parse(rest)
            reasoning, text = (reasoning or "") + (inner["reasoning_content"] or ""), inner["content"] or ""
    # AutoparserDetector.has_tool_call: SGLang passes no tools there; required parses the same
    if not model.answer_has_work(text):
        return message(reasoning, text, [])
    parsed = model.answer_parser(TOOLS, "auto", True).parse(text)  # AutoparserDetector.detect_and_parse
    return message(reasoning, parsed["content"],
                   [(c["function"]["name"], c["function"]["arguments"]) for c in parsed["tool_calls"]])


def sglang_streamed(model: ServedModel, chunks: list[str], force: bool | None, separate_reasoning: bool = True,
                    stream_reasoning: bool = True) -> dict[str, Any]:
    """The streamed response: per chunk `parse_stream_chunk` of the reasoning parser, its normal
    text to the function-call parser's `parse_stream_chunk`; at the end both parsers' ends."""
    client = Stream()
    split = model.reasoning_split(force, stream_reasoning=stream_reasoning) if separate_reasoning else None
    inner = (model.answer_reader(None, "none", True, force, first_turn=False).stream()
             if split and model.answer_reasoning(force, first_turn=False) else None)
    tool_stream = model.answer_parser(TOOLS, "auto", True).stream()
    started = False
    held: list[str] = []  # reasoning inside the answer, where reasoning is not streamed

    def answer_of(rest: str, last: bool) -> tuple[str, str]:  # AutoparserReasoningDetector._answer
        if inner is None:
            return "", rest_of(rest)
        found_reasoning, content, _ = merge_deltas(inner.feed(rest) + (inner.finish() if last else []))
        if not stream_reasoning:
            held.append(found_reasoning)
            found_reasoning = "".join(held) if last else ""
        return found_reasoning, content

    def rest_of(text: str) -> str:  # AutoparserReasoningDetector._rest
        nonlocal started
        if not started:
            text = text.lstrip()
            started = bool(text)
        return text

    for number, chunk in enumerate(chunks):
        last = number == len(chunks) - 1
        delta = chunk
        if split is not None:
            reasoning, rest = split.feed(chunk)
            if last:
                more_reasoning, more_rest = split.finish()
                reasoning, rest = reasoning + more_reasoning, rest + more_rest
            found_reasoning, delta = answer_of(rest, last)
            client.take([{"reasoning_content": reasoning + found_reasoning}])
        client.take(tool_stream.feed(delta))
        if last:
            client.take(tool_stream.finish())
    return client.message()


# -- vLLM's DelegatingParser (parse / parse_delta), with both parser names ----------------------


def vllm_whole(model: ServedModel, case: Case, tools: list[dict[str, Any]], tool_choice: Any = "auto",
               reasoning_parser: bool = True) -> dict[str, Any]:
    """`parse`: `extract_reasoning`, then the tool parser's `extract_tool_calls` on the rest."""
    reasoning, rest = None, case.output
    if reasoning_parser:
        reasoning, rest = model.reasoning_split(case.thinking, case.prompt).split(case.output)
        reader = model.answer_reader(tools, tool_choice, True, case.thinking)
        # extract_reasoning: the reasoning inside the answer too, which the tool parser leaves out
        reasoning = (reasoning or "") + (reader.parse(rest or "")["reasoning_content"] or "")
    else:
        reader = model.answer_parser(tools, tool_choice, True)
    parsed = reader.parse(rest or "")
    return message(reasoning, parsed["content"],
                   [(c["function"]["name"], c["function"]["arguments"]) for c in parsed["tool_calls"]])


def vllm_streamed(model: ServedModel, case: Case, chunks: list[str], tools: list[dict[str, Any]],
                  tool_choice: Any = "auto", reasoning_parser: bool = True,
                  include_reasoning: bool = True) -> dict[str, Any]:
    """`parse_delta` per chunk: the reasoning parser until it confirms the reasoning's end, then
    the text it held back and every later chunk to the tool parser; at the end both flush."""
    client = Stream()
    split = model.reasoning_split(case.thinking, case.prompt) if reasoning_parser else None
    # is_reasoning_end(prompt): the output starts past reasoning
    ended = split is None or model.reasoning_cut(case.thinking, case.prompt).start_state == CLOSED
    reader = model.answer_reader(tools, tool_choice, True, case.thinking) if reasoning_parser else \
        model.answer_parser(tools, tool_choice, True)
    tool_stream = reader.stream()
    pending = ""
    for number, chunk in enumerate(chunks):
        deltas: list[dict[str, Any]] = []
        text = chunk
        if not ended:
            assert split is not None
            reasoning, rest = split.feed(chunk)  # extract_reasoning_streaming
            pending += rest
            deltas.append({"reasoning_content": reasoning})
            text = ""
            if split.ended:  # has_engine_confirmed_reasoning_end, then finish_streaming's flush
                ended, text, pending = True, pending, ""
        if ended and text:
            deltas += tool_stream.feed(text)
        if number == len(chunks) - 1:
            if not ended:  # the reasoning parser's finish_streaming: vLLM passes its text on as content
                assert split is not None
                reasoning, rest = split.finish()
                answer = model.answer_parser(None, "none", True).parse(pending + rest)["content"] if pending + rest else ""
                deltas.append({"reasoning_content": reasoning, "content": answer})
            deltas += tool_stream.finish()
        if not include_reasoning:
            deltas = [{k: v for k, v in d.items() if k != "reasoning_content"} for d in deltas]
        client.take(deltas)
    return client.message()


# -- the tests -----------------------------------------------------------------------------------


def _without_reasoning(analysis: Any) -> Any:
    return dataclasses.replace(analysis, reasoning=ReasoningAnalysis())


def _check(got: dict[str, Any], expected: dict[str, Any], where: str) -> None:
    assert got == expected, f"{where}: {got} != {expected}"


@pytest.mark.parametrize("path", tool_template_params())
def test_sglang_composition_matches_autoparser(path: Path) -> None:
    analysis = analysis_of(path)
    model = ServedModel("test", analysis)
    markers = markers_of(analysis)
    as_text = _without_reasoning(analysis).parser(tools=TOOLS)
    for case in cases_of(analysis):
        # what SGLang's serving_chat passes as force_reasoning: whether this request thinks
        force = analysis.thinking_enabled(case.thinking)
        expected = autoparser_message(analysis.parser(tools=TOOLS, thinking=case.thinking), case.output)
        _check(sglang_whole(model, case.output, force), expected, f"{case.name} whole")
        if case.has_calls:
            _check(sglang_whole(model, case.output, force, tool_choice="required"), expected, f"{case.name} required")
        # separate_reasoning off: the tool parser reads the whole output, reasoning as text
        plain = autoparser_message(as_text, case.output)
        _check(sglang_whole(model, case.output, force, separate_reasoning=False), plain, f"{case.name} unseparated")
        for how, chunks in chunkings(case.output, markers).items():
            where = f"{case.name} {how}"
            _check(sglang_streamed(model, chunks, force), expected, where)
            _check(sglang_streamed(model, chunks, force, stream_reasoning=False), expected, f"{where} held reasoning")
            _check(sglang_streamed(model, chunks, force, separate_reasoning=False), plain, f"{where} unseparated")


@pytest.mark.parametrize("path", tool_template_params())
def test_vllm_composition_matches_autoparser(path: Path) -> None:
    analysis = analysis_of(path)
    model = ServedModel("test", analysis)
    markers = markers_of(analysis)
    as_text = _without_reasoning(analysis).parser(tools=TOOLS)
    for case in cases_of(analysis):
        expected = autoparser_message(analysis.parser(tools=TOOLS, thinking=case.thinking, prompt=case.prompt),
                                      case.output)
        plain = autoparser_message(as_text, case.output)
        _check(vllm_whole(model, case, TOOLS), expected, f"{case.name} whole")
        _check(vllm_whole(model, case, STRICT_TOOLS), expected, f"{case.name} strict tools")
        _check(vllm_whole(model, case, TOOLS, reasoning_parser=False), plain, f"{case.name} no reasoning parser")
        if case.has_calls:
            required = autoparser_message(analysis.parser(tools=TOOLS, thinking=case.thinking, prompt=case.prompt,
                                                          tool_choice="required"), case.output)
            _check(vllm_whole(model, case, TOOLS, "required"), required, f"{case.name} required")
        hidden = dict(expected, reasoning_content=None)
        for how, chunks in chunkings(case.output, markers).items():
            where = f"{case.name} {how}"
            _check(vllm_streamed(model, case, chunks, TOOLS), expected, where)
            _check(vllm_streamed(model, case, chunks, TOOLS, include_reasoning=False), hidden, f"{where} hidden")
            _check(vllm_streamed(model, case, chunks, TOOLS, reasoning_parser=False), plain, f"{where} no reasoning")
            if case.has_calls:
                _check(vllm_streamed(model, case, chunks, TOOLS, "required"), required, f"{where} required")


def test_r1_answer_after_reasoning_reaches_the_client() -> None:
    """The reported loss: with R1's template, what follows the reasoning is the answer, streamed
    or not, with a call after it or not."""
    r1 = next(p.values[0] for p in tool_template_params() if p.id == "llama-cpp-deepseek-r1")
    analysis = analysis_of(r1)
    model = ServedModel("test", analysis)
    output = "The user wants the weather.</think>It is usually mild."
    for force in (True, False, None):
        assert sglang_whole(model, output, force)["content"] == "It is usually mild."
        assert sglang_streamed(model, list(output), force)["content"] == "It is usually mild."


# -- reasoning blocks inside the answer --------------------------------------------------------

@pytest.mark.parametrize("name,output,thinking,reasoning,content", IN_ANSWER,
                         ids=[f"{n.removesuffix('.jinja')}-{i}" for i, (n, *_) in enumerate(IN_ANSWER)])
def test_reasoning_inside_the_answer_is_reasoning_in_both_engines(name: str, output: str, thinking: bool | None,
                                                                   reasoning: str, content: str) -> None:
    """A reasoning block written inside the answer (after answer text, or reopened after calls):
    its text is reasoning and its markers are nowhere, as in autoparser's parse, whole and
    streamed, through both engines' stages."""
    analysis = in_answer_analysis(name)
    model = ServedModel("test", analysis)
    prompt = analysis.render(USER, tools=TOOLS, add_generation_prompt=True, **analysis.thinking_kwargs(thinking))
    case = Case("in-answer", output, thinking, prompt, tuple(USER), "get_weather" in output)
    expected = autoparser_message(analysis.parser(tools=TOOLS, thinking=thinking, prompt=prompt), output)
    assert (expected["reasoning_content"], expected["content"]) == (reasoning, content)
    force = analysis.thinking_enabled(thinking)
    assert autoparser_message(analysis.parser(tools=TOOLS, thinking=thinking), output) == expected
    expected = dict(expected, reasoning_content=SERVED_REASONING.get(reasoning, reasoning))
    _check(vllm_whole(model, case, TOOLS), expected, "vLLM whole")
    _check(sglang_whole(model, output, force), expected, "SGLang whole")
    for how, chunks in chunkings(output, markers_of(analysis)).items():
        _check(vllm_streamed(model, case, chunks, TOOLS), expected, f"vLLM {how}")
        _check(vllm_streamed(model, case, chunks, TOOLS, include_reasoning=False),
               dict(expected, reasoning_content=None), f"vLLM {how} hidden")
        _check(sglang_streamed(model, chunks, force), expected, f"SGLang {how}")
        _check(sglang_streamed(model, chunks, force, stream_reasoning=False), expected, f"SGLang {how} held")
