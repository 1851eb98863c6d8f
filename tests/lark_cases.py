"""Hand-built analyses of six real tool-call formats, for the Lark grammar tests.

The markers were read off renders of the real templates (llama.cpp's and the shared corpus's).
They stand in for `autoparser.analyze` until it exists; once it does, the agreement test
analyzes the templates themselves and uses these only to compare against.
"""

from __future__ import annotations

import json
from typing import Any

import corpora
import pytest
from lark import Lark

from autoparser.analysis import Analysis

DEEPSEEK_V3_1: dict[str, Any] = {
    "generation_prompt": "<｜Assistant｜>",
    "reasoning": {"mode": "tagged", "start": "<think>", "end": "</think>", "forced_open": True,
                  "toggle": "thinking", "default_on": False, "closed_when_off": True},
    "content": {"mode": "plain"},
    "tools": {"supported": True, "format": "tag_json", "parallel": True,
              "section_start": "<｜tool▁calls▁begin｜>", "section_end": "<｜tool▁calls▁end｜>",
              "call_start": "<｜tool▁call▁begin｜>", "call_end": "<｜tool▁call▁end｜>",
              "name_end": "<｜tool▁sep｜>"},
    "stop": ["<｜end▁of▁sentence｜>"],
}

DEEPSEEK_R1: dict[str, Any] = {
    "generation_prompt": "<｜Assistant｜>",
    "reasoning": {"mode": "tagged", "start": "<think>", "end": "</think>"},
    "content": {"mode": "plain"},
    "tools": {"supported": True, "format": "tag_json", "parallel": True,
              "section_start": "<｜tool▁calls▁begin｜>", "section_end": "<｜tool▁calls▁end｜>",
              "call_start": "<｜tool▁call▁begin｜>", "call_end": "<｜tool▁call▁end｜>",
              "call_separator": "\n", "name_start": "function<｜tool▁sep｜>", "name_end": "\n",
              "args_start": "```json\n", "args_end": "\n```"},
    "stop": ["<｜end▁of▁sentence｜>"],
}

HERMES: dict[str, Any] = {
    "generation_prompt": "<|im_start|>assistant\n",
    "content": {"mode": "plain"},
    "tools": {"supported": True, "format": "json", "parallel": True,
              "call_start": "<tool_call>\n", "call_end": "\n</tool_call>", "call_separator": "\n"},
    "stop": ["<|im_end|>"],
}

QWEN3_CODER: dict[str, Any] = {
    "generation_prompt": "<|im_start|>assistant\n",
    "content": {"mode": "plain"},
    "tools": {"supported": True, "format": "tag_tagged", "parallel": True,
              "call_start": "<tool_call>\n", "call_end": "</function>\n</tool_call>", "call_separator": "\n",
              "name_start": "<function=", "name_end": ">\n",
              "arg_start": "<parameter=", "arg_key_end": ">\n", "arg_end": "\n</parameter>\n"},
    "stop": ["<|im_end|>"],
}

GLM_4_5: dict[str, Any] = {
    "generation_prompt": "<|assistant|>",
    "reasoning": {"mode": "tagged", "start": "<think>", "end": "</think>", "toggle": "enable_thinking"},
    "content": {"mode": "plain"},
    "tools": {"supported": True, "format": "tag_tagged", "parallel": True,
              "call_start": "<tool_call>", "call_end": "</tool_call>", "call_separator": "\n",
              "name_end": "\n", "arg_start": "<arg_key>", "arg_key_end": "</arg_key>\n<arg_value>",
              "arg_end": "</arg_value>", "arg_separator": "\n"},
    "stop": ["<|user|>", "<|observation|>", "<|endoftext|>"],
}

MISTRAL_NEMO: dict[str, Any] = {
    "generation_prompt": "",
    "content": {"mode": "plain"},
    "tools": {"supported": True, "format": "json", "parallel": True, "array": True,
              "section_start": "[TOOL_CALLS]", "call_start": "[", "call_end": "]", "call_separator": ", ",
              "id_field": "id"},
    "stop": ["</s>"],
}

# name -> (analysis data, template file name, where the template lives, bos, eos)
CASES: dict[str, tuple[dict[str, Any], str, str, str, str]] = {
    "deepseek_v3_1": (DEEPSEEK_V3_1, "deepseek-ai-DeepSeek-V3.1.jinja", "llama_cpp",
                      "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek_r1": (DEEPSEEK_R1, "hfjs-e2e__deepseek-ai-DeepSeek-R1.jinja", "shared",
                    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "hermes": (HERMES, "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "llama_cpp",
               "<|begin_of_text|>", "<|im_end|>"),
    "qwen3_coder": (QWEN3_CODER, "Qwen3-Coder.jinja", "llama_cpp", "", "<|im_end|>"),
    "glm_4_5": (GLM_4_5, "GLM-4.6.jinja", "llama_cpp", "", "<|endoftext|>"),
    "mistral_nemo": (MISTRAL_NEMO, "mistralai-Mistral-Nemo-Instruct-2407.jinja", "llama_cpp", "<s>", "</s>"),
}


def analysis_of(name: str, source: str = "") -> Analysis:
    """The hand-built analysis of case `name`, carrying `source` so that it can render."""
    data, _file, _where, bos, eos = CASES[name]
    return Analysis.from_dict(data, source=source, bos_token=bos, eos_token=eos)


def template_source(name: str) -> str:
    """The real template of case `name`; skips the test when its corpus is unavailable."""
    _data, file_name, where, _bos, _eos = CASES[name]
    if where == "llama_cpp":
        candidates = [p for p in corpora.llamacpp_templates() if p.name == file_name]
    else:
        shared = corpora.shared_corpus_dir()
        candidates = [shared / "templates" / file_name] if shared else []
    for path in candidates:
        if path.is_file():
            return path.read_text(encoding="utf-8")
    pytest.skip(f"template {file_name} not found in the {where} corpus")
    raise AssertionError("unreachable")


def real_analysis(name: str, *, analyzed: bool) -> Analysis:
    """Case `name` with its real template: analyzed by `autoparser.analyze`, or hand-built."""
    source = template_source(name)
    _data, _file, _where, bos, eos = CASES[name]
    if analyzed:
        from autoparser import analyze

        return analyze(source, bos_token=bos, eos_token=eos)
    return analysis_of(name, source)


# -- round-trip probes (CONTRACT section 6) -----------------------------------------------------------

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a place.",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string"}, "days": {"type": "integer"}, "options": {"type": "object"}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
]

HISTORY: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris?"}]

# a marker spelled out inside a string: other formats' markers, so every format can carry it
SPELLED_MARKERS = "</tool_call> <｜tool▁call▁end｜> [TOOL_CALLS] </think>"


def _call(index: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call{index:05d}", "type": "function", "function": {"name": name, "arguments": arguments}}


PROBES: dict[str, dict[str, Any]] = {
    "content": {"role": "assistant", "content": "It is sunny in Paris."},
    "reasoning_content": {"role": "assistant", "content": "It is sunny in Paris.",
                          "reasoning_content": "The user wants the weather."},
    "one_call": {"role": "assistant", "content": "",
                 "tool_calls": [_call(1, "get_weather", {"location": "Paris", "days": 3})]},
    "two_calls": {"role": "assistant", "content": "",
                  "tool_calls": [_call(1, "get_weather", {"location": "Paris"}),
                                 _call(2, "search", {"query": "Paris events"})]},
    "reasoning_call": {"role": "assistant", "content": "", "reasoning_content": "I need the forecast.",
                       "tool_calls": [_call(1, "search", {"query": "forecast"})]},
    "tricky_arguments": {"role": "assistant", "content": "", "tool_calls": [_call(1, "get_weather", {
        "location": f'Ré "quoted" {{braces}} [x]\nsecond line ünïcode 天気 {SPELLED_MARKERS}',
        "days": -1, "options": {"nested": [1, 2.5, None, True, "x"], "empty": {}}})]},
}


def round_trip_output(analysis: Analysis, message: dict[str, Any], tools: list[dict[str, Any]] | None,
                      thinking: bool | None = None) -> str | None:
    """What the model would have produced for `message` (CONTRACT section 6), None if not applicable."""
    kwargs = analysis.thinking_kwargs(thinking)
    base = analysis.render(HISTORY, tools=tools, add_generation_prompt=True, **kwargs)
    full = analysis.render([*HISTORY, message], tools=tools, add_generation_prompt=False, **kwargs)
    if not full.startswith(base):
        return None
    output = full[len(base):]
    trimmed = output.rstrip()
    for stop in sorted(analysis.stop, key=len, reverse=True):
        if stop.strip() and trimmed.endswith(stop.strip()):
            return trimmed[: len(trimmed) - len(stop.strip())]
    return output


def expected_message(message: dict[str, Any], output: str) -> dict[str, Any]:
    """`message` normalized like `comparable`; reasoning only where the template rendered it."""
    reasoning = (message.get("reasoning_content") or "").strip()
    if reasoning and reasoning not in output:
        reasoning = ""
    return comparable({"reasoning_content": reasoning, "content": message.get("content"),
                       "tool_calls": message.get("tool_calls") or []})


def comparable(message: dict[str, Any]) -> dict[str, Any]:
    """A message with ids dropped, arguments as JSON values, text stripped (None when empty)."""
    def text(value: Any) -> str | None:
        return (value or "").strip() or None

    calls = []
    for call in message.get("tool_calls") or []:
        function = call["function"]
        arguments = function["arguments"]
        calls.append((function["name"], json.loads(arguments) if isinstance(arguments, str) else arguments))
    return {"reasoning_content": text(message.get("reasoning_content")), "content": text(message.get("content")),
            "tool_calls": calls}


def assert_loads_in_lark(grammar: str) -> None:
    """The printed grammar is one Lark builds a parser from, loaded as its header says."""
    header = next(line for line in grammar.splitlines() if line.startswith("// Load with:"))
    assert 'parser="earley", lexer="dynamic"' in header
    Lark(grammar, parser="earley", lexer="dynamic")
