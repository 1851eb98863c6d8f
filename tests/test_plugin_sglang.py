"""The `autoparser` detectors inside the real SGLang, on CPU and without weights.

The plugin's entry point registers them in SGLang's tables; each round-trip case's output is then
run through SGLang's own `ReasoningParser` and `FunctionCallParser` (the objects its chat
server builds per request), whole and in chunks. Reasoning, content, tool names and arguments
must equal what `autoparser parse` gives.

Needs SGLang: `bash tools/install_sglang.sh` then
`.venv-sglang/bin/python -m pytest -q -m sglang tests/test_plugin_sglang.py`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from corpora import llamacpp_templates
from engine_tokenizer import write_tokenizer

import autoparser
from autoparser.roundtrip import TOOLS, probe_messages, run_case

pytestmark = pytest.mark.sglang
pytest.importorskip("sglang", reason="SGLang is not installed (bash tools/install_sglang.sh)")

from sglang.srt.entrypoints.openai.protocol import Tool  # noqa: E402
from sglang.srt.function_call.function_call_parser import FunctionCallParser  # noqa: E402
from sglang.srt.parser.reasoning_parser import ReasoningParser  # noqa: E402
from sglang.srt.plugins import load_plugins  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
TEMPLATES = ["deepseek-ai-DeepSeek-V3.1.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
             "Qwen-Qwen3-0.6B.jinja", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
             "meta-llama-Llama-3.1-8B-Instruct.jinja", "Kimi-K2-Instruct.jinja", "GLM-4.6.jinja"]


@pytest.fixture(scope="module", autouse=True)
def registered() -> None:
    """What every SGLang process does first: run the `sglang.srt.plugins` entry points."""
    load_plugins()
    assert "autoparser" in FunctionCallParser.ToolCallParserEnum
    assert "autoparser" in ReasoningParser.DetectorMap


def _served(name: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    path = next((p for p in llamacpp_templates() if p.name == name), None)
    if path is None:
        pytest.skip(f"{name} is not in the template corpus")
    source = path.read_text(encoding="utf-8")
    analysis = autoparser.analyze(source, bos_token=BOS, eos_token=EOS)
    folder = write_tokenizer(Path(tmp_path_factory.mktemp("tokenizer")), source, BOS, EOS,
                             specials=[m for m in analysis.preserved_tokens if m])
    return analysis, AutoTokenizer.from_pretrained(str(folder))


def run_sglang(tokenizer: Any, output: str, force_reasoning: bool | None, chunk: int | None) -> dict[str, Any]:
    tools = [Tool.model_validate(tool) for tool in TOOLS]
    reasoning_parser = ReasoningParser("autoparser", force_reasoning=force_reasoning, tokenizer=tokenizer)
    call_parser = FunctionCallParser(tools, "autoparser", tokenizer=tokenizer)
    if chunk is None:
        reasoning, rest = reasoning_parser.parse_non_stream(output)
        content, items = call_parser.parse_non_stream(rest or "")
        calls = [(item.name, item.parameters) for item in items]
        return {"reasoning_content": reasoning or None, "content": content or None, "tool_calls": calls}
    reasoning, content = [], []
    calls: dict[int, list[str]] = {}

    def take_calls(text: str, end: bool = False) -> None:
        normal, items = call_parser.parse_stream_end() if end else call_parser.parse_stream_chunk(text)
        content.append(normal or "")
        for item in items:
            entry = calls.setdefault(item.tool_index, ["", ""])
            entry[0] = item.name or entry[0]
            entry[1] += item.parameters or ""

    for start in range(0, len(output), chunk):
        r, rest = reasoning_parser.parse_stream_chunk(output[start:start + chunk])
        reasoning.append(r or "")
        if rest:
            take_calls(rest)
    r, rest = reasoning_parser.parse_stream_end()
    reasoning.append(r or "")
    if rest:
        take_calls(rest)
    take_calls("", end=True)
    return {"reasoning_content": "".join(reasoning) or None, "content": "".join(content) or None,
            "tool_calls": [tuple(calls[i]) for i in sorted(calls)]}


@pytest.mark.parametrize("case", sorted(probe_messages()))
@pytest.mark.parametrize("name", TEMPLATES, ids=[n.removesuffix(".jinja") for n in TEMPLATES])
def test_detectors_match_autoparser_parse(name: str, case: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    analysis, tokenizer = _served(name, tmp_path_factory)
    message = probe_messages()[case]
    result = run_case(analysis, case, message)
    if result.status not in ("pass", "fail"):
        pytest.skip("round-trip case not applicable to this template")
    thinking = True if message.get("reasoning_content") else None
    expected = analysis.parser(tools=TOOLS, thinking=thinking).parse(result.output)
    # what SGLang's chat server passes: whether the prompt opened reasoning, or nothing
    opened = bool(analysis.reasoning.forced_open and analysis.thinking_enabled(thinking))
    for force, chunk in [(opened or None, None), (opened, None), (opened, 1), (opened or None, 4)]:
        got = run_sglang(tokenizer, result.output, force, chunk)
        assert got["reasoning_content"] == expected["reasoning_content"], chunk
        assert got["content"] == expected["content"], chunk
        want = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in expected["tool_calls"]]
        assert [(n, json.loads(a)) for n, a in got["tool_calls"]] == want, chunk
