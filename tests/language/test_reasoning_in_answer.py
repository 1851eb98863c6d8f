"""A reasoning block written after answer text (`Before <<weigh>>X<</weigh>> Rest`): the model
re-opens its thought channel inside the answer. Where the template's reasoning markers are
distinctive (they begin with a symbol and hold no whitespace: `<think>`, `<|channel>thought`,
`<<weigh>>`), the block is reasoning, closed by its end marker or by the end of the output, and
its markers are markup, never content (`reasoning-in-answer`). Where a marker is a word prose may
hold (`BEGIN REASONING`), only an empty block is markup; the text stays as written.

Each output is read whole, streamed a character at a time and split in two at every place (one
message), loses nothing at any cut, and reads alike in Lark; prose in such a block streams within
the hold-back bound.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import analyses
import corpora
import pytest
from corpora import llamacpp_templates
from test_hostile_outputs import _agrees_whole_and_streamed
from unplaced import lost_letters

import autoparser
from autoparser.generators.lark import parse_with_lark
from autoparser.language.build import Request, build_language

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "templates"
holdback = corpora.tool_module("holdback_report")
GEMMA4 = ["google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"]


@cache
def fixture(name: str) -> autoparser.Analysis:
    return autoparser.load(str(FIXTURES / name))


@cache
def gemma4(name: str) -> autoparser.Analysis:
    return autoparser.load(str(next(p for p in llamacpp_templates() if p.name == name)))


def _checked(analysis: autoparser.Analysis, text: str, tools: list | None, thinking: bool = True) -> dict:
    """The whole parse, after checking against it the streams, and Lark; at every cut, stream
    equals whole and nothing is lost."""
    parser = analysis.parser(tools=tools, thinking=thinking)
    whole = _agrees_whole_and_streamed(parser, text)
    for end in range(len(text) + 1):  # (`unplaced.left_out` wants reasoning before content, in order)
        cut = _agrees_whole_and_streamed(parser, text[:end])
        assert not lost_letters(analysis, text[:end], cut), (text[:end], cut)
    lark = parse_with_lark(analysis, text, tools=tools, thinking=thinking)
    assert (lark["reasoning_content"], lark["content"]) == (whole["reasoning_content"], whole["content"])
    return whole


CALL = '<<act>>{"name": "get_weather", "arguments": {"city": "Oslo"}}<</act>>'


@pytest.mark.parametrize("tools", [None, analyses.WEATHER_TOOLS], ids=["no-tools", "tools"])
@pytest.mark.parametrize("text, reasoning, content", [
    ("Before\n<<weigh>>X<</weigh>>\nRest", "X", "Before\n\nRest"),
    ("Before <<weigh>>cut off", "cut off", "Before"),  # closed by the end of the output
    ("<<weigh>>A<</weigh>>Mid <<weigh>>B<</weigh>>End", "AB", "Mid End"),
    ("A <<weigh>><</weigh>>B", None, "A B"),  # an empty block, as before
    ("A <<weigh>><<weigh>>x<</weigh>> B", "x", "A  B"),  # its start marker written twice
    ("A <<weigh>>x <<weigh>> y<</weigh>> B", "x <<weigh>> y", "A  B"),
    # a second end marker: as of any reasoning the output did not open (policy rule role-from-prompt)
    ("A <<weigh>>x <</weigh>> y <</weigh>> B", "x", "A  y  B"),
    ("A <<weig", None, "A <<weig"),  # a marker cut off is text
])
def test_a_reasoning_block_after_answer_text_is_reasoning(text: str, reasoning: str | None, content: str,
                                                          tools: list | None) -> None:
    whole = _checked(fixture("reasoning_after_answer.jinja"), text, tools)
    assert (whole["reasoning_content"], whole["content"]) == (reasoning, content)


def test_a_call_after_a_reasoning_block_in_the_answer_is_read() -> None:
    whole = _checked(fixture("reasoning_after_answer.jinja"), f"Sure. <<weigh>>Oslo it is<</weigh>>\n{CALL}",
                     analyses.WEATHER_TOOLS)
    assert (whole["reasoning_content"], whole["content"]) == ("Oslo it is", "Sure.")
    assert analyses.calls(whole) == [("get_weather", {"city": "Oslo"})]


@pytest.mark.parametrize("text, reasoning, content, calls", [
    # reasoning first in the output is read by the leading rules alone: a call's opener ends it
    # (the answer does not begin with a block, which would read the call as reasoning)
    (f"<<weigh>>x{CALL}", "x", None, 1),
    ("<<weigh>>A<</weigh>><<weigh>>B<</weigh>>End", "AB", "End", 0),  # a block right after a closed one
    ("<<weigh>>A<</weigh>><<weigh>>B", "AB", None, 0),
    # a block the answer opened and no end marker closed ends at a call's opener, as leading reasoning does
    (f"Sure. <<weigh>>Oslo{CALL}", "Oslo", "Sure.", 1),
    (f"Sure. <<weigh>>Oslo{CALL} Done.", "Oslo", "Sure.  Done.", 1),
    (f"{CALL}<<weigh>>x<</weigh>>y", "x", "y", 1),  # after the calls
    (f"{CALL}\n{CALL}<<weigh>>x", "x", None, 2),  # after calls, between them no text
])
def test_a_block_in_the_answer_beside_leading_reasoning_and_calls(text: str, reasoning: str | None,
                                                                 content: str | None, calls: int) -> None:
    whole = _checked(fixture("reasoning_after_answer.jinja"), text, analyses.WEATHER_TOOLS)
    assert (whole["reasoning_content"], whole["content"], len(analyses.calls(whole))) == (reasoning, content, calls)


@pytest.mark.parametrize("after, reasoning, content, calls", [
    ("<think>x</think>y{call}{end}", "x", "By", 2),
    ("<think>x{call}{end}", "x", "B", 2),  # ended by the next call's opener
    ("<think>x", "x", "B", 1),
])
def test_a_block_between_calls_ends_them_and_is_read_after_them(after: str, reasoning: str, content: str,
                                                                calls: int) -> None:
    """DeepSeek-R1: calls in a section, then text and a reasoning block: the block is reasoning
    wherever the section is read to end (text between calls, or the answer after the calls)."""
    analysis = analyses.deepseek_r1()
    t = analysis.tools
    written = analyses.render_output(analysis, None, "", [("get_weather", {"city": "Paris"})], stop=False)
    call = written[len(t.section_start):len(written) - len(t.section_end)]
    text = t.section_start + call + " B" + after.format(call=call, end=t.section_end)
    # (the whole output only: every cut of every prefix would cost minutes at this length)
    parser = analysis.parser(tools=analyses.WEATHER_TOOLS)
    whole = _agrees_whole_and_streamed(parser, text)
    assert not lost_letters(analysis, text, whole)
    lark = parse_with_lark(analysis, text, tools=analyses.WEATHER_TOOLS)
    assert (lark["reasoning_content"], lark["content"]) == (whole["reasoning_content"], whole["content"])
    assert (whole["reasoning_content"], whole["content"], len(analyses.calls(whole))) == (reasoning, content, calls)


@pytest.mark.parametrize("tools", [None, analyses.WEATHER_TOOLS], ids=["no-tools", "tools"])
def test_prose_that_writes_the_opener_opens_reasoning(tools: list | None) -> None:
    """A distinctive start marker after answer text opens reasoning at once, though no end marker
    follows: the role of the text after it is decided as it streams, never by waiting for an end
    marker (a block read as reasoning only once closed would hold its text back unbounded), as
    vLLM's streaming path takes every delta after the start token as reasoning until the end
    token. Prose that merely names the marker pays for it; a marker that is a word keeps its text
    (below)."""
    whole = _checked(fixture("reasoning_after_answer.jinja"), "Wrap it in <<weigh>> tags.", tools)
    assert (whole["reasoning_content"], whole["content"]) == ("tags.", "Wrap it in")


def test_the_block_is_stated_in_the_language() -> None:
    language = str(build_language(fixture("reasoning_after_answer.jinja"), Request(reading=True, lazy=False)))
    assert "reasoning-in-answer ::=" in language and "reasoning-in-answer-unclosed ::=" in language
    generated = str(build_language(fixture("reasoning_after_answer.jinja"), Request(lazy=False)))
    assert "reasoning-in-answer" not in generated  # what the parser reads, not what generation writes


@pytest.mark.parametrize("text", ["Hi BEGIN REASONING x END REASONING there", "Hi BEGIN REASONING x"])
def test_markers_that_are_words_keep_a_block_in_the_answer_as_text(text: str) -> None:
    """`BEGIN REASONING` may be prose: after answer text it opens nothing."""
    analysis = fixture("caps_lines.jinja")
    assert "reasoning-in-answer" not in str(build_language(analysis, Request(reading=True, lazy=False)))
    whole = _agrees_whole_and_streamed(analysis.parser(thinking=True), text)
    assert (whole["reasoning_content"], whole["content"]) == (None, text)


@pytest.mark.parametrize("name", GEMMA4)
@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("text, reasoning, content", [
    ("Before\n<|channel>thought\nX<channel|>\nRest", "X", "Before\n\nRest"),
    ("Before\n<|channel>thought\nX", "X", "Before"),
    ("<|channel>thought\nA<channel|>Mid<|channel>thought\nB<channel|>End", "A\nB", "MidEnd"),
    ("Hello<|channel>thought\n<channel|>", None, "Hello"),
])
def test_gemma4_reasoning_after_answer_text_is_reasoning(name: str, thinking: bool, text: str,
                                                         reasoning: str | None, content: str) -> None:
    """Gemma 4 in its own prompt state (the model writes `<|channel>thought` itself): a block after
    answer text was content with its markers."""
    whole = _checked(gemma4(name), text, analyses.WEATHER_TOOLS, thinking)
    assert (whole["reasoning_content"], whole["content"]) == (reasoning, content)


@pytest.mark.parametrize("name", GEMMA4)
def test_gemma4_a_call_after_reasoning_in_the_answer(name: str) -> None:
    text = 'Let me check.<|channel>thought\nOslo<channel|><|tool_call>call:get_weather{city:<|"|>Oslo<|"|>}<tool_call|>'
    whole = _checked(gemma4(name), text, analyses.WEATHER_TOOLS)
    assert (whole["reasoning_content"], whole["content"]) == ("Oslo", "Let me check.")
    assert analyses.calls(whole) == [("get_weather", {"city": "Oslo"})]


@pytest.mark.parametrize("path", [FIXTURES / "reasoning_after_answer.jinja",
                                  *[next(p for p in llamacpp_templates() if p.name == n) for n in GEMMA4]],
                         ids=lambda p: p.stem)
@pytest.mark.parametrize("prose", [holdback.PROSE, holdback.MARKED_PROSE], ids=["prose", "marked"])
def test_prose_in_a_block_after_answer_text_streams_within_the_bound(path: Path, prose: str) -> None:
    analysis = autoparser.load(str(path))
    start, end = analysis.reasoning.start.strip(), analysis.reasoning.end.strip()
    for tools in (holdback.TOOLS, None):
        parser = analysis.parser(tools=tools)
        for after in (end + " Rest", ""):
            # (a line break after the marker: `<|channel>thoughtThe` is no marker, its word goes on)
            case = holdback.Case("reasoning-in-answer", "Before " + start + "\n", after, prose)
            held, roles = holdback.most_held(parser, case)
            assert held <= holdback.BOUND, (held, roles)
            assert roles.startswith("content/reasoning"), roles


LONG_BLOCK = "Let me check the answer again, now that the tool has said what the weather is."


@pytest.mark.parametrize("make", [analyses.deepseek_r1, lambda: fixture("deepseek_v31_style.jinja"),
                                  lambda: fixture("content_wrapped.jinja")], ids=["deepseek_r1", "v31_style", "wrapped"])
@pytest.mark.parametrize("lead", ["I should call a tool.", ""], ids=["reasoning-first", "empty-first"])
def test_a_long_block_after_calls_that_followed_reasoning_is_reasoning(make, lead: str) -> None:
    """Reasoning, a call, then a reasoning block of its own longer than the hold-back bound: the
    block is reasoning, whole and streamed, whatever the reasoning first in the output held. (A
    reading that reads reasoning past a call's end is dropped there, `_not_reasoning_over`, only
    where that reasoning holds the call: the block began after it.)"""
    analysis = make()
    r = analysis.reasoning
    text = (analyses.render_output(analysis, lead, "", [("get_weather", {"city": "Paris"})], thinking=True, stop=False)
            + r.start + LONG_BLOCK + r.end + "Here it is.")
    parser = analysis.parser(tools=analyses.WEATHER_TOOLS, thinking=True)
    whole = _agrees_whole_and_streamed(parser, text)
    assert not lost_letters(analysis, text, whole)
    assert (whole["reasoning_content"], whole["content"], len(analyses.calls(whole))) == (lead + LONG_BLOCK, "Here it is.", 1)
