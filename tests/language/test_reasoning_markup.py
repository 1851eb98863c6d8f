"""Reasoning markers written more often than the template writes them, read as markup.

Where the reasoning's start marker is a token-like tag and a word after it (`<|chan>thought`), a
model may write the tag once more before the marker (`<|chan><|chan>thought`): a channel opened
twice. That tag is markup there; anywhere else it stays text.
"""

from __future__ import annotations

import pytest
from analyses import parse

from autoparser.analysis import Analysis, ReasoningAnalysis
from autoparser.generators.lark import parse_with_lark
from autoparser.language.build import Request, build_language


def channel_analysis(start: str = "<|chan>thought", end: str = "<chan|>") -> Analysis:
    return Analysis(generation_prompt="<|turn>model\n", stop=["<turn|>"],
                    reasoning=ReasoningAnalysis(mode="tagged", start=start, end=end, toggle="enable_thinking",
                                                default_on=False, closed_when_off=True))


@pytest.mark.parametrize("text, reasoning, content", [
    ("<|chan><|chan>thought\n<chan|>Hello", None, "Hello"),  # the tag written twice, empty reasoning
    ("<|chan><|chan>thought\nplan<chan|>Hello", "plan", "Hello"),
    ("<|chan>thought\nplan<chan|>Hello", "plan", "Hello"),
    ("<|chan>Hello", None, "<|chan>Hello"),  # the tag alone opens nothing: text
    ("Say <|chan><|chan> twice", None, "Say <|chan><|chan> twice"),
])
def test_the_start_markers_tag_written_again_before_it_is_markup(text: str, reasoning: str | None,
                                                                 content: str) -> None:
    analysis = channel_analysis()
    for thinking in (True, False):
        message = parse(analysis, text, thinking=thinking)
        assert (message["reasoning_content"], message["content"]) == (reasoning, content)
        lark = parse_with_lark(analysis, text, thinking=thinking)
        assert (lark["reasoning_content"], lark["content"]) == (reasoning, content)


@pytest.mark.parametrize("start", ["<think>", "[THINK]", "thought:"])
def test_a_start_marker_that_is_one_tag_or_no_tag_has_no_opener_again(start: str) -> None:
    language = build_language(channel_analysis(start=start, end="</end>"), Request(reading=True, lazy=False))
    assert "opener-again" not in str(language)


def test_the_opener_again_is_stated_as_markup() -> None:
    language = str(build_language(channel_analysis(), Request(reading=True, lazy=False)))
    assert "opener-again ::= '<|chan>'" in language
