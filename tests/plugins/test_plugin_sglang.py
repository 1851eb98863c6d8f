"""The `autoparser` detectors inside the real SGLang, on CPU and without weights.

The plugin's entry point registers them in SGLang's tables; every tool-capable template of both
corpora (R1-family ones included, `plugin_cases`) then has its outputs run through SGLang's own
`ReasoningParser` and `FunctionCallParser`, the objects its chat server builds per request, in
the order `serving_chat.py` calls them: `force_reasoning` as SGLang decides it for the request
(`detect_reasoning_pattern` on the template, then `_get_reasoning_from_request`), the reasoning
parser's `parse_non_stream`, then `has_tool_call` before `parse_non_stream`; streamed, every
chunk through the reasoning parser's `parse_stream_chunk` and its normal text through the
function-call parser's, both ends at the last chunk. Chunks: every 1, 3 and 7 characters, each
marker alone, and one token at a time as the tokenizer decodes them (markers are special
tokens). Reasoning, content, tool names and arguments must equal what `autoparser parse` gives;
with `separate_reasoning` off, what it gives reading reasoning as text. Also `stream_reasoning`
off and `tool_choice="required"`.

Needs SGLang: `bash tools/install_sglang.sh` then
`.venv-sglang/bin/python -m pytest -q -m sglang tests/plugins/test_plugin_sglang.py`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from engine_tokenizer import write_tokenizer
from plugin_cases import (
    BOS,
    EOS,
    IN_ANSWER,
    SERVED_REASONING,
    Case,
    analysis_of,
    cases_of,
    chunkings,
    in_answer_analysis,
    markers_of,
    tool_template_params,
)

from autoparser import ReasoningAnalysis
from autoparser.roundtrip import TOOLS

pytestmark = pytest.mark.sglang
pytest.importorskip("sglang", reason="SGLang is not installed (bash tools/install_sglang.sh)")

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, Tool  # noqa: E402
from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat  # noqa: E402
from sglang.srt.function_call.function_call_parser import FunctionCallParser  # noqa: E402
from sglang.srt.parser.reasoning_parser import ReasoningParser  # noqa: E402
from sglang.srt.parser.template_detection import detect_reasoning_pattern  # noqa: E402
from sglang.srt.plugins import load_plugins  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def registered() -> None:
    """What every SGLang process does first: run the `sglang.srt.plugins` entry points."""
    load_plugins()
    assert "autoparser" in FunctionCallParser.ToolCallParserEnum
    assert "autoparser" in ReasoningParser.DetectorMap


def served(analysis: Any, folder: Path) -> Any:
    """The served tokenizer: byte-level, the template's markers special tokens."""
    write_tokenizer(folder, analysis.source, BOS, EOS, specials=markers_of(analysis))
    return AutoTokenizer.from_pretrained(str(folder))


def force_reasoning(analysis: Any, tokenizer: Any, case: Case) -> bool:
    """What SGLang's chat server passes as `force_reasoning` for this request:
    `template_manager.force_reasoning or self._get_reasoning_from_request(request)`."""
    always, config = detect_reasoning_pattern(analysis.source)
    request = ChatCompletionRequest(model="m", messages=list(case.history), tools=TOOLS,
                                    chat_template_kwargs=analysis.thinking_kwargs(case.thinking) or None)
    detector = ReasoningParser("autoparser", tokenizer=tokenizer).detector
    server = SimpleNamespace(reasoning_parser="autoparser", _reasoning_detector=detector,
                             template_manager=SimpleNamespace(reasoning_config=config, force_reasoning=always))
    return bool(always or OpenAIServingChat._get_reasoning_from_request(server, request))


def forced_where_the_template_leaves_it_free(analysis: Any, case: Case, force: bool) -> bool:
    """Whether SGLang forces reasoning (its own reading of the template) where the template's
    switch, one SGLang does not read, is unset and leaves the prompt free: the detector is told
    the prompt opened reasoning and cannot see that it did not (a known limit, in the README)."""
    return force and case.thinking is None and bool(analysis.reasoning.toggle) and \
        not analysis.thinking_enabled(None)


def message(reasoning: str | None, content: str | None, calls: list[tuple[str, str]]) -> dict[str, Any]:
    return {"reasoning_content": reasoning or None, "content": content or None,
            "tool_calls": [(name, json.loads(arguments)) for name, arguments in calls]}


def autoparser_message(parser: Any, output: str) -> dict[str, Any]:
    parsed = parser.parse(output)
    return message(parsed["reasoning_content"], parsed["content"],
                   [(c["function"]["name"], c["function"]["arguments"]) for c in parsed["tool_calls"]])


def whole(tokenizer: Any, output: str, force: bool, separate_reasoning: bool = True,
          tool_choice: str = "auto") -> dict[str, Any]:
    """`serving_chat`'s non-streamed response: the reasoning parser, then `_process_tool_calls`."""
    reasoning, text = None, output
    if separate_reasoning:
        parser = ReasoningParser("autoparser", stream_reasoning=False, force_reasoning=force, tokenizer=tokenizer,
                                 tool_call_parser_active=True)
        reasoning, text = parser.parse_non_stream(output)
    tools = [Tool.model_validate(tool) for tool in TOOLS]
    calls = FunctionCallParser(tools, "autoparser", tokenizer=tokenizer, tool_choice=tool_choice)
    assert calls.owns_tool_format()  # required is parsed in the model's own format
    items: list[Any] = []
    if calls.has_tool_call(text):
        text, items = calls.parse_non_stream(text)
    return message(reasoning, text, [(item.name, item.parameters) for item in items])


def streamed(tokenizer: Any, chunks: list[str], force: bool, separate_reasoning: bool = True,
             stream_reasoning: bool = True, tool_choice: str = "auto") -> dict[str, Any]:
    """`serving_chat`'s streamed response: `_process_reasoning_stream`, then
    `_process_tool_call_stream` on its normal text, per chunk; the last chunk flushes both."""
    tools = [Tool.model_validate(tool) for tool in TOOLS]
    reasoning_parser = ReasoningParser("autoparser", stream_reasoning, force, tokenizer=tokenizer,
                                       tool_call_parser_active=True) if separate_reasoning else None
    call_parser = FunctionCallParser(tools, "autoparser", tokenizer=tokenizer, tool_choice=tool_choice)
    reasoning, content = [], []
    calls: dict[int, list[str]] = {}
    for number, chunk in enumerate(chunks):
        last = number == len(chunks) - 1
        delta = chunk
        if reasoning_parser is not None:
            thought, delta = reasoning_parser.parse_stream_chunk(chunk)
            if last:
                more_thought, more_delta = reasoning_parser.parse_stream_end()
                thought = (thought or "") + (more_thought or "")
                delta = (delta or "") + (more_delta or "")
            reasoning.append(thought or "")
        normal, items = call_parser.parse_stream_chunk(delta or "")
        if last:
            end_text, end_items = call_parser.parse_stream_end()
            normal, items = (normal or "") + end_text, list(items) + end_items
        content.append(normal or "")
        for item in items:
            entry = calls.setdefault(item.tool_index, ["", ""])
            entry[0] = item.name or entry[0]
            entry[1] += item.parameters or ""
    return message("".join(reasoning), "".join(content), [tuple(calls[i]) for i in sorted(calls)])


def token_chunks(tokenizer: Any, text: str) -> list[str]:
    """`text` one token at a time as the detokenizer turns ids into text (a token that ends
    inside a character waits for the next)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    chunks, done, end = [], "", 0
    while end < len(ids):
        end += 1
        decoded = tokenizer.decode(ids[:end], skip_special_tokens=False)
        if decoded.endswith("\ufffd") and end < len(ids):
            continue
        chunks.append(decoded[len(done):])
        done = decoded
    assert "".join(chunks) == text
    return chunks


@pytest.mark.parametrize("path", tool_template_params())
def test_detectors_match_autoparser_parse(path: Path, tmp_path: Path) -> None:
    analysis = analysis_of(path)
    tokenizer = served(analysis, tmp_path)
    as_text = dataclasses.replace(analysis, reasoning=ReasoningAnalysis()).parser(tools=TOOLS)
    for case in cases_of(analysis):
        force = force_reasoning(analysis, tokenizer, case)
        if forced_where_the_template_leaves_it_free(analysis, case, force):
            continue
        expected = autoparser_message(analysis.parser(tools=TOOLS, thinking=case.thinking), case.output)
        plain = autoparser_message(as_text, case.output)
        assert whole(tokenizer, case.output, force) == expected, case.name
        assert whole(tokenizer, case.output, force, separate_reasoning=False) == plain, case.name
        if case.has_calls:
            assert whole(tokenizer, case.output, force, tool_choice="required") == expected, case.name
        ways = {**chunkings(case.output, markers_of(analysis)), "tokens": token_chunks(tokenizer, case.output)}
        for how, chunks in ways.items():
            where = f"{case.name} {how}"
            assert streamed(tokenizer, chunks, force) == expected, where
            assert streamed(tokenizer, chunks, force, stream_reasoning=False) == expected, where
            assert streamed(tokenizer, chunks, force, separate_reasoning=False) == plain, where
            if case.has_calls:
                assert streamed(tokenizer, chunks, force, tool_choice="required") == expected, where


@pytest.mark.parametrize("name,output,thinking,reasoning,content", IN_ANSWER,
                         ids=[f"{n.removesuffix('.jinja')}-{i}" for i, (n, *_) in enumerate(IN_ANSWER)])
def test_reasoning_inside_the_answer_is_reasoning(name: str, output: str, thinking: bool | None, reasoning: str,
                                                   content: str, tmp_path: Path) -> None:
    """A reasoning block written inside the answer, after answer text or reopened after calls,
    through SGLang's parsers as autoparser parses it: its text reasoning, its markers nowhere;
    whole and streamed (every 1, 3 and 7 characters, each marker alone, one token at a time),
    with `stream_reasoning` on and off; and with no tools, where SGLang passes the reasoning
    parser's normal text on as the content itself."""
    analysis = in_answer_analysis(name)
    tokenizer = served(analysis, tmp_path)
    case = Case("in-answer", output, thinking, None, ({"role": "user", "content": "Weather?"},), False)
    force = force_reasoning(analysis, tokenizer, case)
    expected = autoparser_message(analysis.parser(tools=TOOLS, thinking=thinking), output)
    assert (expected["reasoning_content"], expected["content"]) == (reasoning, content)
    expected["reasoning_content"] = SERVED_REASONING.get(reasoning, reasoning)
    assert whole(tokenizer, output, force) == expected
    ways = {**chunkings(output, markers_of(analysis)), "tokens": token_chunks(tokenizer, output)}
    for how, chunks in ways.items():
        assert streamed(tokenizer, chunks, force) == expected, how
        assert streamed(tokenizer, chunks, force, stream_reasoning=False) == expected, how
    if "get_weather" not in output:  # no tools: the reasoning parser's normal text is the content
        parser = ReasoningParser("autoparser", stream_reasoning=False, force_reasoning=force, tokenizer=tokenizer)
        assert message(*parser.parse_non_stream(output), []) == expected
