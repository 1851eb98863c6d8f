"""Hand-built analyses of real output formats, tools with varied schemas, and real outputs.

Each analysis spells out a format as the chat templates of those families render it; the
`OUTPUTS` are what those templates render for an assistant turn (the model's output), used to
check that a grammar admits real text. They keep the grammar tests independent of the analyzer.
Formats that the runtime tests also use come from `analyses`, with the special tokens and
triggers a grammar needs added, so both suites test one spelling of each format.
"""

from __future__ import annotations

from dataclasses import replace

import analyses
from analyses import DS_EOS, DS_SEP

from autoparser.analysis import Analysis, ContentAnalysis, ReasoningAnalysis, ToolsAnalysis

(DS_CALLS_BEGIN, DS_CALLS_END), (DS_CALL_BEGIN, DS_CALL_END) = analyses.DS_SECTION, analyses.DS_CALL
DS_SPECIALS = [DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, DS_CALL_END, DS_SEP, DS_EOS, "<think>", "</think>"]


def _think(forced_open: bool, toggle: str | None = None, default_on: bool = True,
           closed_when_off: bool = False) -> ReasoningAnalysis:
    return ReasoningAnalysis(mode="tagged", start="<think>", end="</think>", forced_open=forced_open,
                             toggle=toggle, default_on=default_on, closed_when_off=closed_when_off)


def deepseek_v31() -> Analysis:
    """V3.1 as rendered with thinking on: the prompt ends with an open `<think>`."""
    return replace(analyses.deepseek_v31(), generation_prompt="<｜Assistant｜><think>",
                   preserved_tokens=DS_SPECIALS)


def deepseek_r1() -> Analysis:
    """R1 / V3-0324: ``function<｜tool▁sep｜>NAME`` then the arguments in a json fence."""
    return replace(analyses.deepseek_r1_0528(), preserved_tokens=DS_SPECIALS)


def deepseek_v3_0324() -> Analysis:
    return replace(analyses.deepseek_v3_0324(), preserved_tokens=DS_SPECIALS)


def qwen3() -> Analysis:
    """Hermes-style JSON inside ``<tool_call>`` tags, optional reasoning with a switch."""
    return replace(analyses.qwen3(),
                   preserved_tokens=["<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>"])


def hermes() -> Analysis:
    return replace(analyses.hermes(), preserved_tokens=["<tool_call>", "</tool_call>", "<|im_end|>"])


def qwen3_coder() -> Analysis:
    return Analysis(
        generation_prompt="<|im_start|>assistant\n",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_tagged", call_start="<tool_call>",
                            call_end="\n</function>\n</tool_call>", call_separator="\n", parallel=True,
                            name_start="\n<function=", name_end=">", arg_start="\n<parameter=",
                            arg_key_end=">\n", arg_end="\n</parameter>")),
        stop=["<|im_end|>"], preserved_tokens=["<tool_call>", "</tool_call>", "<|im_end|>"],
        triggers=["<tool_call>"])


def glm45() -> Analysis:
    return Analysis(
        generation_prompt="<|assistant|>",
        reasoning=_think(False, toggle="enable_thinking", closed_when_off=True),
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_tagged", call_start="\n<tool_call>",
                            call_end="\n</tool_call>", parallel=True, arg_start="\n<arg_key>",
                            arg_key_end="</arg_key>\n<arg_value>", arg_end="</arg_value>")),
        stop=["<|user|>"],
        preserved_tokens=["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
                          "<arg_value>", "</arg_value>"],
        triggers=["<tool_call>"])


def mistral_nemo() -> Analysis:
    """Calls as one JSON array after ``[TOOL_CALLS]``, each with a 9-character id."""
    return Analysis(
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="json", section_start="[TOOL_CALLS]", call_separator=", ",
                            parallel=True, id_field="id", array=True)),
        stop=["</s>"], preserved_tokens=["[TOOL_CALLS]"], triggers=["[TOOL_CALLS]"])


def mistral_small() -> Analysis:
    """``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`` per call."""
    return Analysis(
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_json", call_start="[TOOL_CALLS]", parallel=True,
                            id_start="[CALL_ID]", id_end="[ARGS]")),
        stop=["</s>"], preserved_tokens=["[TOOL_CALLS]", "[CALL_ID]", "[ARGS]"], triggers=["[TOOL_CALLS]"])


def kimi_k2() -> Analysis:
    return replace(analyses.kimi_k2(), generation_prompt="",
                   preserved_tokens=["<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                                     "<|tool_call_begin|>", "<|tool_call_end|>",
                                     "<|tool_call_argument_begin|>", "<|im_end|>"])


def wrapped_answer() -> Analysis:
    """A synthetic format: reasoning, then the answer always inside ``<answer>`` tags."""
    a = qwen3()
    a.content = ContentAnalysis(mode="wrapped", start="<answer>", end="</answer>")
    return a


def plain_content() -> Analysis:
    """A template with neither reasoning nor tools."""
    return Analysis(stop=["</s>"])


def lfm2_python() -> Analysis:
    """LFM2.5: Python call syntax, `[name(key='text', n=3)]` between special tokens."""
    return replace(analyses.lfm2_python(),
                   preserved_tokens=["<think>", "</think>", "<|tool_call_start|>", "<|tool_call_end|>"])


def keyed_tags() -> Analysis:
    """MiniMax-style: each argument in a tag named after its key."""
    return replace(analyses.keyed_tags(), triggers=["<tool_calls>"])


def gpt_oss() -> Analysis:
    """gpt-oss (harmony): ` to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>`."""
    return replace(analyses.gpt_oss(), triggers=[" to=functions."])


ANALYSES = {
    "deepseek-v3.1": deepseek_v31,
    "deepseek-r1": deepseek_r1,
    "deepseek-v3-0324": deepseek_v3_0324,
    "qwen3": qwen3,
    "hermes": hermes,
    "qwen3-coder": qwen3_coder,
    "glm-4.5": glm45,
    "mistral-nemo": mistral_nemo,
    "mistral-small-3.2": mistral_small,
    "kimi-k2": kimi_k2,
    "wrapped-answer": wrapped_answer,
    "lfm2.5": lfm2_python,
    "llama3.2-pythonic": analyses.llama32_pythonic,
    "minicpm3": analyses.minicpm3_kwargs,
    "functionary-v3.2": analyses.functionary_v32,
    "glm4-tool-only": analyses.glm4_tool_only,
    "keyed-tags": keyed_tags,
    "gpt-oss": gpt_oss,
}


def tool(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"{name} tool", "parameters": parameters}}


WEATHER = tool("get_weather", {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
    },
    "required": ["location"],
})

BOOK_TRIP = tool("book_trip", {
    "type": "object",
    "properties": {
        "traveler": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "age": {"type": "integer", "minimum": 0, "maximum": 130},
                "email": {"type": "string", "format": "email"},
            },
            "required": ["name"],
        },
        "stops": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "nights": {"type": "integer", "minimum": 1}},
                "required": ["city"],
            },
            "minItems": 1,
            "maxItems": 4,
        },
        "class": {"enum": ["economy", "business", "first"]},
        "flexible": {"type": "boolean"},
        "budget": {"type": ["number", "null"], "minimum": 0},
        "notes": {"type": "string", "maxLength": 40},
    },
    "required": ["traveler", "stops"],
})

SEARCH = tool("search", {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "filters": {"type": "object", "additionalProperties": {"type": "string"}},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,15}$"}},
        "limit": {"type": "integer", "exclusiveMinimum": 0, "maximum": 100},
    },
    "required": ["query"],
})

NO_ARGS = tool("get_time", {"type": "object", "properties": {}})

ANNOTATE = tool("annotate", {
    "type": "object",
    "properties": {
        "scores": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}, "maxItems": 5},
        "meta": {"type": "object"},
        "labels": {"type": "array", "items": {"enum": ["a", "b", 3, None]}},
    },
    "required": ["scores"],
})

TOOLS = [WEATHER, BOOK_TRIP, SEARCH, NO_ARGS, ANNOTATE]

# What the real templates render for a turn with two get_weather calls (after the prompt).
_DS_ARGS1, _DS_ARGS2 = '{"location": "Paris", "days": 3}', '{"location": "Rome"}'
OUTPUTS = {
    "deepseek-v3.1": (
        "The user wants weather.</think>" + DS_CALLS_BEGIN
        + DS_CALL_BEGIN + "get_weather" + DS_SEP + _DS_ARGS1 + DS_CALL_END
        + DS_CALL_BEGIN + "get_weather" + DS_SEP + _DS_ARGS2 + DS_CALL_END + DS_CALLS_END
    ),
    "deepseek-r1": (
        "<think>\nweather time\n</think>\n\n" + DS_CALLS_BEGIN
        + DS_CALL_BEGIN + "function" + DS_SEP + "get_weather\n```json\n" + _DS_ARGS1 + "\n```" + DS_CALL_END + "\n"
        + DS_CALL_BEGIN + "function" + DS_SEP + "get_weather\n```json\n" + _DS_ARGS2 + "\n```" + DS_CALL_END
        + DS_CALLS_END
    ),
    "deepseek-v3-0324": (
        DS_CALLS_BEGIN
        + DS_CALL_BEGIN + "function" + DS_SEP + "get_weather\n```json\n" + _DS_ARGS1 + "\n```" + DS_CALL_END
        + DS_CALLS_END
    ),
    "qwen3": (
        "<think>\nhmm\n</think>\n\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"location": "Paris", "days": 3}}\n</tool_call>\n<tool_call>\n'
        '{"name": "get_weather", "arguments": {"location": "Rome"}}\n</tool_call>'
    ),
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris", "days": 3}}\n</tool_call>',
    "qwen3-coder": (
        "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
        "<parameter=location>\nRome\n</parameter>\n</function>\n</tool_call>"
    ),
    "glm-4.5": (
        "\n<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
    ),
    "mistral-nemo": (
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris", "days": 3}, "id": "abc123456"}, '
        '{"name": "get_weather", "arguments": {"location": "Rome"}, "id": "abc123457"}]'
    ),
    "mistral-small-3.2": (
        '[TOOL_CALLS]get_weather[CALL_ID]abc123456[ARGS]{"location": "Paris", "days": 3}'
        '[TOOL_CALLS]get_weather[CALL_ID]abc123457[ARGS]{"location": "Rome"}'
    ),
    "kimi-k2": (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        + _DS_ARGS1 + "<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>"
        + _DS_ARGS2 + "<|tool_call_end|><|tool_calls_section_end|>"
    ),
    "lfm2.5": "<|tool_call_start|>[get_weather(location='Paris', days=3), get_weather(location='Rome')]<|tool_call_end|>",
    "llama3.2-pythonic": "[get_weather(location=Paris, France, days=3), get_weather(location=Rome)]",
    "minicpm3": ('<|tool_call_start|>\n```python\nget_weather(location="Paris",days=3)\nget_weather(location="Rome")\n'
                 "```\n<|tool_call_end|>"),
    "functionary-v3.2": 'get_weather\n{"location": "Paris", "days": 3}>>>get_weather\n{"location": "Rome"}',
    "glm4-tool-only": ("get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
                       "<arg_value>3</arg_value>\n</tool_call>\n<tool_call>get_weather\n<arg_key>location</arg_key>\n"
                       "<arg_value>Rome</arg_value>\n</tool_call>"),
    "keyed-tags": ('<tool_calls>\n<invoke name="get_weather">\n<location>Paris</location>\n<days>3</days>\n</invoke>\n'
                   '<invoke name="get_weather">\n<location>Rome</location>\n</invoke>\n</tool_calls>'),
    "gpt-oss": ' to=functions.get_weather<|channel|>commentary json<|message|>{"location": "Paris", "days": 3}<|call|>',
}
