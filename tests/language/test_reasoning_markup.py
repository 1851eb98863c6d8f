"""Reasoning markers written more often, or more briefly, than the template writes them.

Where the reasoning's start marker is a token-like tag and a word after it (`<|chan>thought`), a
model may write the tag once more before the marker (`<|chan><|chan>thought`): a channel opened
twice. That tag is markup there; anywhere else it stays text. Where no other marker writes that
tag (no other word after it names another part), the tag alone opens reasoning too: the word may
be left out.
"""

from __future__ import annotations

import pytest
from analyses import gpt_oss, parse

from autoparser.analysis import Analysis, ContentAnalysis, ReasoningAnalysis
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
    ("<|chan>Hello", "Hello", None),  # the tag alone, its word left out, opens reasoning too
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


@pytest.mark.parametrize("text, reasoning, content", [
    ("<think><think>plan</think>Hello", "plan", "Hello"),  # reasoning opened twice
    ("<think>\n<think>plan</think>Hello", "plan", "Hello"),
    ("<think><think><think>plan</think>Hello", "<think>plan", "Hello"),  # one more is the reasoning's text
    ("<think>a <think> b</think>Hello", "a <think> b", "Hello"),
])
def test_the_start_marker_written_again_right_after_the_models_own_is_markup(text: str, reasoning: str,
                                                                             content: str) -> None:
    analysis = channel_analysis(start="<think>", end="</think>")
    message = parse(analysis, text)
    assert (message["reasoning_content"], message["content"]) == (reasoning, content)
    lark = parse_with_lark(analysis, text)
    assert (lark["reasoning_content"], lark["content"]) == (reasoning, content)
    assert "start-again ::= gap{0,4} '<think>'" in str(build_language(analysis, Request(reading=True)))


@pytest.mark.parametrize("start", ["<think>", "[THINK]", "thought:"])
def test_a_start_marker_that_is_one_tag_or_no_tag_has_no_opener_again(start: str) -> None:
    language = build_language(channel_analysis(start=start, end="</end>"), Request(reading=True, lazy=False))
    assert "opener-again" not in str(language)


def test_the_opener_again_is_stated_as_markup() -> None:
    language = str(build_language(channel_analysis(), Request(reading=True, lazy=False)))
    assert "opener-again ::= '<|chan>'" in language


def test_the_tag_alone_is_stated_as_a_second_opener() -> None:
    language = str(build_language(channel_analysis(), Request(reading=True, lazy=False)))
    assert "bare-opener ::= '<|chan>'" in language
    generated = str(build_language(channel_analysis(), Request(lazy=False)))
    assert "bare-opener" not in generated  # what the parser reads, not what generation writes


def test_a_tag_that_another_marker_writes_needs_its_word() -> None:
    """The tag also opens the answer's channel (`<|chan>final`): alone it decides nothing, so it
    opens no reasoning and stays text."""
    analysis = channel_analysis()
    analysis.content = ContentAnalysis(mode="wrapped", start="<|chan>final", end="<chan|>")
    language = str(build_language(analysis, Request(reading=True, lazy=False)))
    assert "bare-opener" not in language
    message = parse(analysis, "<|chan>plan", thinking=True)
    assert message["reasoning_content"] is None and "<|chan>plan" in message["content"]


@pytest.mark.parametrize("start", ["<|chan>thought<|msg>", "<|chan>two words", "<|chan>"])
def test_only_a_tag_and_one_word_may_lose_the_word(start: str) -> None:
    language = build_language(channel_analysis(start=start), Request(reading=True, lazy=False))
    assert "bare-opener" not in str(language)


def test_harmony_channels_keep_requiring_their_words() -> None:
    language = build_language(gpt_oss(), Request(reading=True, lazy=False))
    assert "bare-opener" not in str(language)
