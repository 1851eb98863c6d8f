"""The Lark grammar reads the newer formats as the runtime does: Python call syntax, keyword
arguments with unquoted or JSON values, calls opened by the generation prompt, end tags named
after the key, and calls named right after the section start.

Outputs are written by `analyses.render_output` from known messages, plus a few written by hand;
the grammar's message must equal the runtime's (call ids aside), and the printed grammars must
load in Lark.
"""

from __future__ import annotations

from typing import Any

import analyses
import pytest
from lark_cases import assert_loads_in_lark, comparable

from autoparser.generators.lark import generate_lark, parse_with_lark

FAMILIES = ["lfm2_python", "llama32_pythonic", "minicpm3_kwargs", "functionary_v32", "glm4_tool_only",
            "keyed_tags", "gpt_oss"]
TOOLS = analyses.WEATHER_TOOLS + [
    {"type": "function", "function": {"name": "search_web", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}}}}},
]
CALLS = [
    [("get_weather", {"city": "Paris, France", "days": 3})],
    [("get_weather", {"city": "Rome"}), ("search_web", {"query": "streaming parsers"})],
    [("get_weather", {"city": "Oslo", "options": {"units": "metric", "alerts": [True, None]}})],
]


def _outputs(family: str) -> list[str]:
    analysis = getattr(analyses, family)()
    texts = [analyses.render_output(analysis, None, "Just an answer.", [])]
    for written in CALLS:
        if not analysis.tools.parallel:
            written = written[:1]
        texts.append(analyses.render_output(analysis, None, "", written))
        texts.append(analyses.render_output(analysis, None, "Let me look.", written))
    return texts


def _agree(analysis: Any, text: str, tools: list[dict[str, Any]] | None = TOOLS) -> None:
    runtime = comparable(analysis.parser(tools=tools).parse(text))
    assert comparable(parse_with_lark(analysis, text, tools=tools)) == runtime, text


@pytest.mark.parametrize("family", FAMILIES)
def test_printed_grammars_load_in_lark(family: str) -> None:
    analysis = getattr(analyses, family)()
    for tools in (TOOLS, None):
        for choice in ("auto", "none", "required"):
            assert_loads_in_lark(generate_lark(analysis, tools=tools, tool_choice=choice))


@pytest.mark.parametrize("family", FAMILIES)
def test_rendered_outputs_agree(family: str) -> None:
    analysis = getattr(analyses, family)()
    for text in _outputs(family):
        _agree(analysis, text)
        _agree(analysis, text, tools=None)


HAND_WRITTEN = [
    ("lfm2_python", "<|tool_call_start|>[get_weather(city='it\\'s \"x\"\\n', days=2)]<|tool_call_end|>"),
    ("lfm2_python", "<|tool_call_start|>[get_weather(city='He said 'hi', then left', days=2)]<|tool_call_end|>"),
    ("lfm2_python", "<|tool_call_start|>[search_web()]<|tool_call_end|>"),
    ("llama32_pythonic", "[get_weather(city=Paris, France (west), days=3), search_web(query=a, b)]"),
    ("minicpm3_kwargs", '<|tool_call_start|>\n```python\nget_weather(city="He said "hi", ok",days=1)\n```\n'
                        "<|tool_call_end|>"),
    ("functionary_v32", 'all\nI will check.>>>get_weather\n{"city": "Paris"}>>>all\nDone.'),
    # (the grammar ends a value at any closing tag: `a </b> c` would be cut there)
    ("keyed_tags", '<tool_calls>\n<invoke name="get_weather">\n<city>a <b> c</city>\n</invoke>\n</tool_calls>'),
]


@pytest.mark.parametrize(("family", "text"), HAND_WRITTEN)
def test_hand_written_outputs_agree(family: str, text: str) -> None:
    _agree(getattr(analyses, family)(), text)
