"""Hand-built analyses of well-known output formats, and helpers, for runtime unit tests.

They spell out, field by field, what the analyzer should infer from each family's real template
(the markers were copied from those templates' rendering code), so the runtime can be tested on
its own. Tests that need the analyzer's real output use `autoparser.analyze` instead.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from typing import Any

from autoparser.analysis import Analysis, ContentAnalysis, ReasoningAnalysis, ToolsAnalysis
from autoparser.language.reading import Parser
from autoparser.tool_calls import TYPE_HOLE

DS_BOS = "<｜begin▁of▁sentence｜>"
DS_EOS = "<｜end▁of▁sentence｜>"
DS_SECTION = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
DS_CALL = ("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>")
DS_SEP = "<｜tool▁sep｜>"


def _think(**kwargs: Any) -> ReasoningAnalysis:
    return ReasoningAnalysis(mode="tagged", start="<think>", end="</think>", **kwargs)


def deepseek_v31() -> Analysis:
    """DeepSeek V3.1: `NAME<｜tool▁sep｜>{json}`; thinking switched by `thinking`, off by default."""
    return Analysis(
        generation_prompt="<｜Assistant｜><think></think>",
        reasoning=_think(forced_open=True, toggle="thinking", default_on=False, closed_when_off=True),
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_json", section_start=DS_SECTION[0],
                            section_end=DS_SECTION[1], call_start=DS_CALL[0], call_end=DS_CALL[1],
                            name_end=DS_SEP, parallel=True)),
        stop=[DS_EOS], preserved_tokens=["<think>", "</think>", *DS_SECTION, *DS_CALL, DS_SEP],
        triggers=[DS_SECTION[0]])


def _fenced_tools() -> ToolsAnalysis:
    return ToolsAnalysis.from_dict(dict(supported=True, format="tag_json", section_start=DS_SECTION[0],
                         section_end=DS_SECTION[1], call_start=DS_CALL[0], call_end=DS_CALL[1],
                         call_separator="\n", name_start="function" + DS_SEP, name_end="\n",
                         args_start="```json\n", args_end="\n```", parallel=True))


def deepseek_v3_0324() -> Analysis:
    """DeepSeek V3 / V3-0324: `function<｜tool▁sep｜>NAME` then a ```json fence; no reasoning."""
    return Analysis(generation_prompt="<｜Assistant｜>", tools=_fenced_tools(), stop=[DS_EOS],
                    triggers=[DS_SECTION[0]])


def deepseek_r1() -> Analysis:
    """DeepSeek R1 (distill template): the prompt opens `<think>`; tool calls fenced like V3."""
    return Analysis(generation_prompt="<｜Assistant｜><think>\n",
                    reasoning=_think(forced_open=True), tools=_fenced_tools(), stop=[DS_EOS],
                    triggers=[DS_SECTION[0]])


def hermes() -> Analysis:
    """Hermes / Qwen2.5: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`."""
    return Analysis(
        generation_prompt="<|im_start|>assistant\n",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="json", call_start="<tool_call>\n",
                            call_end="\n</tool_call>", call_separator="\n", parallel=True)),
        stop=["<|im_end|>"], triggers=["<tool_call>"])


def qwen3() -> Analysis:
    """Qwen3: Hermes-style calls plus `<think>` reasoning switched by `enable_thinking`."""
    analysis = hermes()
    analysis.reasoning = _think(toggle="enable_thinking", default_on=True, closed_when_off=True)
    return analysis


def qwen3_coder() -> Analysis:
    """Qwen3-Coder: `<function=NAME>` with `<parameter=KEY>` values, strings raw."""
    return Analysis(
        generation_prompt="<|im_start|>assistant\n",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_tagged", call_start="<tool_call>\n",
                            call_end="</function>\n</tool_call>", call_separator="\n",
                            name_start="<function=", name_end=">\n", arg_start="<parameter=",
                            arg_key_end=">\n", arg_end="\n</parameter>\n", parallel=True)),
        stop=["<|im_end|>"], triggers=["<tool_call>"])


def glm45() -> Analysis:
    """GLM-4.5: `<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>`."""
    return Analysis(
        generation_prompt="<|assistant|>",
        reasoning=_think(toggle="enable_thinking", default_on=True, closed_when_off=True),
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_tagged", call_start="<tool_call>",
                            call_end="</tool_call>", call_separator="\n", name_end="\n",
                            arg_start="<arg_key>", arg_key_end="</arg_key>\n<arg_value>",
                            arg_end="</arg_value>\n", parallel=True)),
        stop=["<|user|>", "<|observation|>", "<|endoftext|>"], triggers=["<tool_call>"])


def mistral_array() -> Analysis:
    """Mistral v0.3 / Nemo: `[TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": ...}]`."""
    return Analysis(
        generation_prompt="[/INST]",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="json", array=True, section_start="[TOOL_CALLS]",
                            call_start="[", call_end="]", call_separator=", ", id_field="id",
                            parallel=True)),
        stop=["</s>"], triggers=["[TOOL_CALLS]"])


def mistral_compact() -> Analysis:
    """Devstral / Mistral Small 3.2 (v11 tokenizer): `[TOOL_CALLS]NAME[ARGS]{json}`."""
    return Analysis(
        generation_prompt="[/INST]",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_json", call_start="[TOOL_CALLS]",
                            name_end="[ARGS]", parallel=True)),
        stop=["</s>"], triggers=["[TOOL_CALLS]"])


def llama31() -> Analysis:
    """Llama 3.1/3.2 JSON tool calling: a bare `{"name": ..., "parameters": {...}}` object."""
    return Analysis(
        generation_prompt="<|start_header_id|>assistant<|end_header_id|>\n\n",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="json", args_field="parameters", parallel=False)),
        stop=["<|eot_id|>", "<|eom_id|>"])


def bare_json_array() -> Analysis:
    """xLAM / Cogito style: the calls are a bare JSON array, `[{"name": ..., "arguments": ...}]`."""
    return Analysis(
        generation_prompt="<|im_start|>assistant\n",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="json", array=True, call_start="[", call_end="]",
                            call_separator=", ", parallel=True)),
        stop=["<|im_end|>"])


def kimi_k2() -> Analysis:
    """Kimi-K2: `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}`.

    The template numbers calls (`:0`, `:1`, ...); `call_index` says where (the analysis confirms it
    from two rendered calls).
    """
    return Analysis(
        generation_prompt="<|im_assistant|>assistant<|im_middle|>",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_json",
                            section_start="<|tool_calls_section_begin|>",
                            section_end="<|tool_calls_section_end|>", call_start="<|tool_call_begin|>",
                            call_end="<|tool_call_end|>", name_start="functions.",
                            name_end=":0<|tool_call_argument_begin|>", parallel=True,
                            call_index=":{index}<|tool_call_argument_begin|>")),
        stop=["<|im_end|>"], triggers=["<|tool_calls_section_begin|>"])


def kimi_k2_thinking() -> Analysis:
    analysis = kimi_k2()
    analysis.reasoning = _think()
    return analysis


def deepseek_v32() -> Analysis:
    """DeepSeek V3.2 DSML: `string="true"` values are raw text, `string="false"` ones JSON."""
    dsml = "｜DSML｜"
    return Analysis(
        generation_prompt="<｜Assistant｜></think>",
        reasoning=_think(forced_open=True, toggle="thinking", default_on=False, closed_when_off=True),
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_tagged",
                            section_start=f"\n\n<{dsml}function_calls>\n",
                            section_end=f"</{dsml}function_calls>", call_start=f"<{dsml}invoke name=\"",
                            name_end="\">\n", call_end=f"</{dsml}invoke>\n",
                            arg_start=f"<{dsml}parameter name=\"", arg_key_end="\" string=\"true\">",
                            arg_end=f"</{dsml}parameter>\n", arg_key_end_json="\" string=\"false\">",
                            parallel=True)),
        stop=[DS_EOS])


def deepseek_v4() -> Analysis:
    """DeepSeek V4: DSML like V3.2 inside a `<｜DSML｜tool_calls>` block."""
    analysis = deepseek_v32()
    markers = dataclasses.replace(analysis.tools.markers, section_start="\n\n<｜DSML｜tool_calls>\n",
                                  section_end="</｜DSML｜tool_calls>")
    analysis.tools = dataclasses.replace(analysis.tools, markers=markers)
    return analysis


def deepseek_r1_0528() -> Analysis:
    """DeepSeek R1-0528: the model writes `<think>` itself (the prompt does not open it, and the
    template never writes it: it only strips the history's reasoning up to `</think>`)."""
    analysis = deepseek_r1()
    analysis.generation_prompt = "<｜Assistant｜>"
    analysis.reasoning = _think(start_inferred=True)
    return analysis


def qwen3_thinking() -> Analysis:
    """Qwen3 *-Thinking-2507: the prompt opens `<think>`; there is no switch."""
    analysis = hermes()
    analysis.generation_prompt = "<|im_start|>assistant\n<think>\n"
    analysis.reasoning = _think(forced_open=True)
    return analysis


def kimi_k15() -> Analysis:
    """Kimi k1.5 reasoning with `◁think▷`/`◁/think▷` markers; no tool calling."""
    return Analysis(reasoning=ReasoningAnalysis(mode="tagged", start="◁think▷", end="◁/think▷"),
                    stop=["<|im_end|>"])


def lfm2_python() -> Analysis:
    """LFM2.5: Python call syntax in a bracketed section, `[name(key='text', n=3), ...]`."""
    return Analysis(
        generation_prompt="<|im_start|>assistant\n", reasoning=_think(),
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_tagged", section_start="<|tool_call_start|>[",
                            section_end="]<|tool_call_end|>", call_end=")", call_separator=", ",
                            name_end="(", arg_key_end="=", arg_separator=", ", arg_string_raw=False,
                            arg_python=True, parallel=True)),
        stop=["<|im_end|>"], triggers=["<|tool_call_start|>"])


def llama32_pythonic() -> Analysis:
    """Llama 3.2 "pythonic" calls as vLLM's template writes them: `[name(key=value, ...)]` with
    string values unquoted, so `, ` and `)` inside a value are told apart by what follows."""
    return Analysis(
        generation_prompt="<|start_header_id|>assistant<|end_header_id|>\n\n",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_tagged", section_start="[", section_end="]",
                            call_end=")", call_separator=", ", name_end="(", arg_key_end="=",
                            arg_end=", ", parallel=True)),
        stop=["<|eot_id|>"])


def minicpm3_kwargs() -> Analysis:
    """MiniCPM3: one `name(key=<JSON>,key=<JSON>)` line per call inside a python fence."""
    return Analysis(
        generation_prompt="<|im_start|>assistant\n",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_tagged",
                            section_start="<|tool_call_start|>\n```python\n",
                            section_end="```\n<|tool_call_end|>", call_end=")\n", name_end="(",
                            arg_key_end="=", arg_end=",", arg_string_raw=False, parallel=True)),
        stop=["<|im_end|>"], triggers=["<|tool_call_start|>"])


def functionary_v32() -> Analysis:
    """Functionary v3.2: the prompt ends with `>>>`; the output starts with a recipient, a tool
    name (`get_weather\n{...}`) or `all` (`all\nThe answer`), and `>>>` opens the next one."""
    return Analysis(
        generation_prompt="<|start_header_id|>assistant<|end_header_id|>\n\n>>>",
        content=ContentAnalysis(mode="wrapped", start="all\n"),
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_json", name_start=">>>", name_end="\n",
                            parallel=True, opened_by_prompt=True)),
        stop=["<|eot_id|>"])


def glm4_tool_only() -> Analysis:
    """GLM-4 (vLLM's tool-only template): the prompt ends with `<tool_call>`, the output starts
    with the call's name and its tagged arguments."""
    return Analysis(
        generation_prompt="<|assistant|>\n<tool_call>",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_tagged", call_start="<tool_call>",
                            call_end="\n</tool_call>", call_separator="\n", arg_start="\n<arg_key>",
                            arg_key_end="</arg_key>\n<arg_value>", arg_end="</arg_value>", parallel=True,
                            opened_by_prompt=True)),
        stop=["<|user|>"])


def keyed_tags() -> Analysis:
    """MiniMax-style: each argument in a tag named after its key, `<city>Paris</city>`."""
    return Analysis(
        generation_prompt="<|assistant|>",
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_tagged", section_start="<tool_calls>\n",
                            section_end="</tool_calls>", name_start="<invoke name=\"", name_end="\">\n",
                            call_end="</invoke>\n", arg_start="<", arg_key_end=">", arg_end="</{key}>\n",
                            arg_end_keyed=True, parallel=True)),
        stop=["<|end|>"])


def gpt_oss() -> Analysis:
    """gpt-oss (harmony): channels; a call is ` to=functions.NAME<|channel|>commentary json<|message|>{...}`."""
    return Analysis(
        generation_prompt="<|start|>assistant",
        reasoning=ReasoningAnalysis(mode="tagged", start="<|channel|>analysis<|message|>", end="<|end|>"),
        content=ContentAnalysis(mode="wrapped", start="<|channel|>final<|message|>", end="<|return|>"),
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_json", section_start=" to=functions.",
                            name_end="<|channel|>commentary json<|message|>", call_end="<|call|>")),
        stop=["<|return|>"])


FAMILIES = {
    "deepseek_v31": deepseek_v31,
    "deepseek_v3_0324": deepseek_v3_0324,
    "deepseek_r1": deepseek_r1,
    "hermes": hermes,
    "qwen3": qwen3,
    "qwen3_coder": qwen3_coder,
    "glm45": glm45,
    "mistral_array": mistral_array,
    "mistral_compact": mistral_compact,
    "llama31": llama31,
    "bare_json_array": bare_json_array,
    "kimi_k2": kimi_k2,
    "deepseek_v32": deepseek_v32,
    "deepseek_v4": deepseek_v4,
    "deepseek_r1_0528": deepseek_r1_0528,
    "qwen3_thinking": qwen3_thinking,
    "kimi_k15": kimi_k15,
    "lfm2_python": lfm2_python,
    "llama32_pythonic": llama32_pythonic,
    "minicpm3_kwargs": minicpm3_kwargs,
    "functionary_v32": functionary_v32,
    "glm4_tool_only": glm4_tool_only,
    "keyed_tags": keyed_tags,
    "gpt_oss": gpt_oss,
}

WEATHER_TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"},
            "options": {"type": "object"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}},
]


def render_output(analysis: Analysis, reasoning: str | None = None, content: str = "",
                  calls: list[tuple[str, dict[str, Any]]] = (), thinking: bool | None = None,
                  stop: bool = True) -> str:
    """A model output in the analysis's format (the inverse of parsing), for round-trip tests.

    Written from the layout in `autoparser.analysis`; string argument values of tag formats are
    written raw, everything else as JSON.
    """
    r, t = analysis.reasoning, analysis.tools
    out = ""
    if reasoning is not None:
        opened = r.forced_open and analysis.thinking_enabled(thinking)
        out += ("" if opened else r.start) + reasoning + r.end
    if t.opened_by_prompt and content:
        out += analysis.content.start  # the recipient that makes the opened header content
    out += content
    if calls:
        out += t.section_start
        rendered = [_render_call(t, index, name, args) for index, (name, args) in enumerate(calls)]
        if t.opened_by_prompt and not out:
            # the prompt wrote the first call's opener
            rendered[0] = rendered[0][len(t.call_start + t.name_start):]
        if t.format == "json" and t.array:
            out += "[" + ", ".join(rendered) + "]"  # call_start/call_end are the brackets
        elif t.format == "json" and not t.call_start:
            out += "; ".join(rendered)
        else:
            out += t.call_separator.join(rendered)
        out += t.section_end
    if stop and analysis.stop:
        out += analysis.stop[0]
    return out


def _render_call(t: ToolsAnalysis, index: int, name: str, args: dict[str, Any]) -> str:
    dumps = json.dumps
    if t.format == "json":
        body: dict[str, Any] = {t.name_field: name, t.args_field: args}
        if t.function_field:
            body = {"type": "function", t.function_field: body}
        return ("" if t.array else t.call_start) + dumps(body, ensure_ascii=False) + ("" if t.array else t.call_end)
    name_end = t.call_index.replace("{index}", str(index)) if t.call_index else t.name_end
    head = t.call_start + t.name_start + name + name_end
    if t.format == "tag_json":
        return head + t.args_start + dumps(args, ensure_ascii=False) + t.args_end + t.call_end
    parts = []
    # keys with no marker before them (`name(key=value, ...)`): the end marker goes between values
    between = not t.arg_start
    for key, value in args.items():
        arg_end = "" if between else t.arg_end.replace("{key}", key) if t.arg_end_keyed else t.arg_end
        if t.arg_python:
            parts.append(t.arg_start + key + t.arg_key_end + repr(value) + arg_end)
        elif isinstance(value, str) and t.arg_string_raw:
            parts.append(t.arg_start + key + t.arg_key_end.replace(TYPE_HOLE, "string") + value + arg_end)
        else:
            key_end = (t.arg_key_end_json or t.arg_key_end).replace(TYPE_HOLE, _json_type(value))
            parts.append(t.arg_start + key + key_end + dumps(value, ensure_ascii=False) + arg_end)
    return head + ((t.arg_end if between else "") + t.arg_separator).join(parts) + t.call_end


def _json_type(value: Any) -> str:
    """JSON's name for the type of `value` (what a key marker naming the type writes)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(value)]


GENERATED_ID = re.compile(r"call_[0-9a-f]{24}")


def without_generated_ids(message: dict[str, Any]) -> dict[str, Any]:
    """The message with ids the parser drew itself replaced by a placeholder (each parse draws
    new ones); an id the output carried is kept. Everything else is compared as it is."""
    calls = [dict(c, id="<generated>") if GENERATED_ID.fullmatch(str(c.get("id"))) else c
             for c in message.get("tool_calls") or []]
    return dict(message, tool_calls=calls)


def parse(analysis: Any, text: str, **options: Any) -> dict[str, Any]:
    """Parse whole and char by char; both must agree (ids drawn by the parser aside)."""
    parser = Parser(analysis, **options)
    whole = parser.parse(text)
    stream = parser.stream()
    for char in text:
        stream.feed(char)
    stream.finish()
    streamed = stream.message()
    assert without_generated_ids(streamed) == without_generated_ids(whole), \
        f"streamed {streamed!r} != whole {whole!r}"
    return whole


def calls(message: dict[str, Any]) -> list[tuple[str, Any]]:
    """A message's tool calls as (name, decoded arguments) pairs."""
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]


def streamed_in_random_chunks(parser: Any, text: str, seed: int, largest: int = 6) -> dict[str, Any]:
    """The message of `text` fed to a new stream in chunks of 1 to `largest` characters."""
    rng = random.Random(seed)
    stream = parser.stream()
    at = 0
    while at < len(text):
        size = rng.randint(1, largest)
        stream.feed(text[at:at + size])
        at += size
    stream.finish()
    return stream.message()


def streamed_in_two(parser: Any, text: str, cut: int) -> dict[str, Any]:
    """The message of `text` fed to a new stream in two chunks, cut at `cut`."""
    stream = parser.stream()
    stream.feed(text[:cut])
    stream.feed(text[cut:])
    stream.finish()
    return stream.message()


def whole_checked_by_streams(parser: Any, text: str) -> dict[str, Any]:
    """The whole parse of `text` (generated ids left out), checked against a stream fed a character
    at a time and against streams fed in two chunks cut at every place."""
    whole = without_generated_ids(parser.parse(text))
    stream = parser.stream()
    for char in text:
        stream.feed(char)
    stream.finish()
    assert without_generated_ids(stream.message()) == whole
    for cut in range(len(text) + 1):
        assert without_generated_ids(streamed_in_two(parser, text, cut)) == whole, cut
    return whole


def joined_deltas(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """Rebuild a message from deltas as an OpenAI client does."""
    reasoning, content, calls_by_index = [], [], {}
    for delta in deltas:
        assert len(delta) == 1
        if "reasoning_content" in delta:
            reasoning.append(delta["reasoning_content"])
        elif "content" in delta:
            content.append(delta["content"])
        else:
            for item in delta["tool_calls"]:
                call = calls_by_index.get(item["index"])
                if call is None:
                    call = calls_by_index[item["index"]] = {"id": item["id"], "type": item["type"],
                                                            "function": {"name": item["function"]["name"],
                                                                         "arguments": ""}}
                call["function"]["arguments"] += item["function"].get("arguments", "")
    return {"role": "assistant", "reasoning_content": "".join(reasoning) or None,
            "content": "".join(content) or None, "tool_calls": [calls_by_index[i] for i in sorted(calls_by_index)]}


def without_incomplete_flags(message: dict[str, Any]) -> dict[str, Any]:
    """The message as its deltas tell it: a call's `incomplete` flag is no delta's."""
    return dict(message, tool_calls=[{k: v for k, v in c.items() if k != "incomplete"}
                                     for c in message["tool_calls"]])
