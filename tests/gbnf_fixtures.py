"""Hand-built analyses of real output formats, tools with varied schemas, and real outputs.

Each analysis spells out a format as the chat templates of those families render it; the
`OUTPUTS` are what those templates render for an assistant turn (the model's output), used to
check that a grammar admits real text. They keep the grammar tests independent of the analyzer.
"""

from __future__ import annotations

from autoparser.analysis import Analysis, ContentAnalysis, ReasoningAnalysis, ToolsAnalysis

DS_CALLS_BEGIN, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
DS_EOS = "<｜end▁of▁sentence｜>"
DS_SPECIALS = [DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, DS_CALL_END, DS_SEP, DS_EOS, "<think>", "</think>"]


def _think(forced_open: bool, toggle: str | None = None, default_on: bool = True,
           closed_when_off: bool = False) -> ReasoningAnalysis:
    return ReasoningAnalysis(mode="tagged", start="<think>", end="</think>", forced_open=forced_open,
                             toggle=toggle, default_on=default_on, closed_when_off=closed_when_off)


def deepseek_v31() -> Analysis:
    return Analysis(
        generation_prompt="<｜Assistant｜><think>",
        reasoning=_think(True, toggle="thinking", default_on=False, closed_when_off=True),
        tools=ToolsAnalysis(supported=True, format="tag_json", section_start=DS_CALLS_BEGIN,
                            section_end=DS_CALLS_END, call_start=DS_CALL_BEGIN, call_end=DS_CALL_END,
                            parallel=True, name_end=DS_SEP),
        stop=[DS_EOS], preserved_tokens=DS_SPECIALS, triggers=[DS_CALLS_BEGIN])


def deepseek_r1() -> Analysis:
    """R1 / V3-0324: ``function<｜tool▁sep｜>NAME`` then the arguments in a json fence."""
    return Analysis(
        generation_prompt="<｜Assistant｜>",
        reasoning=_think(False),
        tools=ToolsAnalysis(supported=True, format="tag_json", section_start=DS_CALLS_BEGIN,
                            section_end=DS_CALLS_END, call_start=DS_CALL_BEGIN, call_end=DS_CALL_END,
                            call_separator="\n", parallel=True, name_start="function" + DS_SEP,
                            name_end="\n", args_start="```json\n", args_end="\n```"),
        stop=[DS_EOS], preserved_tokens=DS_SPECIALS, triggers=[DS_CALLS_BEGIN])


def deepseek_v3_0324() -> Analysis:
    a = deepseek_r1()
    a.reasoning = ReasoningAnalysis()
    return a


def qwen3() -> Analysis:
    """Hermes-style JSON inside ``<tool_call>`` tags, optional reasoning with a switch."""
    return Analysis(
        generation_prompt="<|im_start|>assistant\n",
        reasoning=_think(False, toggle="enable_thinking", closed_when_off=True),
        tools=ToolsAnalysis(supported=True, format="json", call_start="<tool_call>\n",
                            call_end="\n</tool_call>", call_separator="\n", parallel=True),
        stop=["<|im_end|>"], preserved_tokens=["<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>"],
        triggers=["<tool_call>"])


def hermes() -> Analysis:
    a = qwen3()
    a.reasoning = ReasoningAnalysis()
    a.preserved_tokens = ["<tool_call>", "</tool_call>", "<|im_end|>"]
    return a


def qwen3_coder() -> Analysis:
    return Analysis(
        generation_prompt="<|im_start|>assistant\n",
        tools=ToolsAnalysis(supported=True, format="tag_tagged", call_start="<tool_call>",
                            call_end="\n</function>\n</tool_call>", call_separator="\n", parallel=True,
                            name_start="\n<function=", name_end=">", arg_start="\n<parameter=",
                            arg_key_end=">\n", arg_end="\n</parameter>"),
        stop=["<|im_end|>"], preserved_tokens=["<tool_call>", "</tool_call>", "<|im_end|>"],
        triggers=["<tool_call>"])


def glm45() -> Analysis:
    return Analysis(
        generation_prompt="<|assistant|>",
        reasoning=_think(False, toggle="enable_thinking", closed_when_off=True),
        tools=ToolsAnalysis(supported=True, format="tag_tagged", call_start="\n<tool_call>",
                            call_end="\n</tool_call>", parallel=True, arg_start="\n<arg_key>",
                            arg_key_end="</arg_key>\n<arg_value>", arg_end="</arg_value>"),
        stop=["<|user|>"],
        preserved_tokens=["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
                          "<arg_value>", "</arg_value>"],
        triggers=["<tool_call>"])


def mistral_nemo() -> Analysis:
    """Calls as one JSON array after ``[TOOL_CALLS]``, each with a 9-character id."""
    return Analysis(
        tools=ToolsAnalysis(supported=True, format="json", section_start="[TOOL_CALLS]", call_separator=", ",
                            parallel=True, id_field="id", array=True),
        stop=["</s>"], preserved_tokens=["[TOOL_CALLS]"], triggers=["[TOOL_CALLS]"])


def mistral_small() -> Analysis:
    """``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`` per call."""
    return Analysis(
        tools=ToolsAnalysis(supported=True, format="tag_json", call_start="[TOOL_CALLS]", parallel=True,
                            id_start="[CALL_ID]", id_end="[ARGS]"),
        stop=["</s>"], preserved_tokens=["[TOOL_CALLS]", "[CALL_ID]", "[ARGS]"], triggers=["[TOOL_CALLS]"])


def kimi_k2() -> Analysis:
    return Analysis(
        tools=ToolsAnalysis(supported=True, format="tag_json", section_start="<|tool_calls_section_begin|>",
                            section_end="<|tool_calls_section_end|>", call_start="<|tool_call_begin|>",
                            call_end="<|tool_call_end|>", parallel=True, name_start="functions.",
                            name_end=":0<|tool_call_argument_begin|>"),
        stop=["<|im_end|>"], triggers=["<|tool_calls_section_begin|>"],
        preserved_tokens=["<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                          "<|tool_call_end|>", "<|tool_call_argument_begin|>", "<|im_end|>"])


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
    return Analysis(
        generation_prompt="<|im_start|>assistant\n", reasoning=_think(False),
        tools=ToolsAnalysis(supported=True, format="tag_tagged", section_start="<|tool_call_start|>[",
                            section_end="]<|tool_call_end|>", call_end=")", call_separator=", ",
                            name_end="(", arg_key_end="=", arg_separator=", ", arg_string_raw=False,
                            arg_python=True, parallel=True),
        stop=["<|im_end|>"], preserved_tokens=["<think>", "</think>", "<|tool_call_start|>", "<|tool_call_end|>"],
        triggers=["<|tool_call_start|>"])


def llama32_pythonic() -> Analysis:
    """Llama 3.2 "pythonic": `[name(key=value, ...)]`, strings unquoted."""
    return Analysis(
        generation_prompt="<|start_header_id|>assistant<|end_header_id|>\n\n",
        tools=ToolsAnalysis(supported=True, format="tag_tagged", section_start="[", section_end="]",
                            call_end=")", call_separator=", ", name_end="(", arg_key_end="=",
                            arg_end=", ", parallel=True),
        stop=["<|eot_id|>"])


def minicpm3() -> Analysis:
    """MiniCPM3: `name(key=<JSON>,key=<JSON>)` lines in a python fence."""
    return Analysis(
        generation_prompt="<|im_start|>assistant\n",
        tools=ToolsAnalysis(supported=True, format="tag_tagged",
                            section_start="<|tool_call_start|>\n```python\n",
                            section_end="```\n<|tool_call_end|>", call_end=")\n", name_end="(",
                            arg_key_end="=", arg_end=",", arg_string_raw=False, parallel=True),
        stop=["<|im_end|>"], triggers=["<|tool_call_start|>"])


def functionary_v32() -> Analysis:
    """Functionary v3.2: the prompt ends with `>>>`; a name (or `all` for content) starts the output."""
    return Analysis(
        generation_prompt="<|start_header_id|>assistant<|end_header_id|>\n\n>>>",
        content=ContentAnalysis(mode="wrapped", start="all\n"),
        tools=ToolsAnalysis(supported=True, format="tag_json", name_start=">>>", name_end="\n",
                            parallel=True, opened_by_prompt=True),
        stop=["<|eot_id|>"])


def glm4_tool_only() -> Analysis:
    """GLM-4 tool-only template: the prompt ends with `<tool_call>`."""
    return Analysis(
        generation_prompt="<|assistant|>\n<tool_call>",
        tools=ToolsAnalysis(supported=True, format="tag_tagged", call_start="<tool_call>",
                            call_end="\n</tool_call>", call_separator="\n", arg_start="\n<arg_key>",
                            arg_key_end="</arg_key>\n<arg_value>", arg_end="</arg_value>", parallel=True,
                            opened_by_prompt=True),
        stop=["<|user|>"])


def keyed_tags() -> Analysis:
    """MiniMax-style: each argument in a tag named after its key."""
    return Analysis(
        generation_prompt="<|assistant|>",
        tools=ToolsAnalysis(supported=True, format="tag_tagged", section_start="<tool_calls>\n",
                            section_end="</tool_calls>", name_start="<invoke name=\"", name_end="\">\n",
                            call_end="</invoke>\n", arg_start="<", arg_key_end=">", arg_end="</{key}>\n",
                            arg_end_keyed=True, parallel=True),
        stop=["<|end|>"], triggers=["<tool_calls>"])


def gpt_oss() -> Analysis:
    """gpt-oss (harmony): ` to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>`."""
    return Analysis(
        generation_prompt="<|start|>assistant",
        reasoning=ReasoningAnalysis(mode="tagged", start="<|channel|>analysis<|message|>", end="<|end|>"),
        content=ContentAnalysis(mode="wrapped", start="<|channel|>final<|message|>", end="<|return|>"),
        tools=ToolsAnalysis(supported=True, format="tag_json", section_start=" to=functions.",
                            name_end="<|channel|>commentary json<|message|>", call_end="<|call|>"),
        stop=["<|return|>"], triggers=[" to=functions."])


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
    "llama3.2-pythonic": llama32_pythonic,
    "minicpm3": minicpm3,
    "functionary-v3.2": functionary_v32,
    "glm4-tool-only": glm4_tool_only,
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
