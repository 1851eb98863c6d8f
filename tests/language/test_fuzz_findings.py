"""Outputs `tools/fuzz_outputs.py` found read unlike their whole parse or losing text: whole, one
character at a time, split in two at every place, nothing lost. One the reader does not read well
yet is a strict expected failure stating the gap, so that the fix turns it into a plain test."""

from __future__ import annotations

import analyses
import corpora
import pytest
from analyses import whole_checked_by_streams
from corpora import tool_module
from unplaced import losses_at_every_cut, marker_patterns

import autoparser

TOOLS = tool_module("fuzz_outputs").TOOLS  # the fuzzer's tools, whose language found it

_DSML_BROKEN_KEY = ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
                    '<｜DSML｜parameter name="location" string="true">Paris</｜DSML｜parameter>\n'
                    '<｜DSML｜parameter name="<｜DSML｜invoke name="')


@pytest.mark.parametrize("before", ["\n", "a\n"])
def test_a_call_opener_inside_a_parameter_name_in_reasoning_the_prompt_opened_reads_alike(before: str) -> None:
    """DeepSeek V4 DSML, reasoning the prompt opened, text before the calls' opener, a call whose
    second parameter's name holds the next call's opener (`<｜DSML｜parameter name="<｜DSML｜invoke
    name="`): the message does not depend on where the chunks end. Found by `tools/fuzz_outputs.py`
    (a `swap` mutation, seed 15, llama.cpp's templates): all of it is reasoning, whole and in any
    chunks (the whole parse once read the first call, incomplete, and the rest as content, where a
    stream one character at a time read all of it as reasoning)."""
    path = next((p for p in corpora.all_templates() if p.name == "deepseek-ai-DeepSeek-V4-Flash-0731.jinja"), None)
    if path is None:
        pytest.skip("DeepSeek-V4-Flash-0731 is not in the corpora")
    analysis = autoparser.load(str(path))
    parser = analysis.parser(tools=TOOLS, thinking=True)
    text = before + _DSML_BROKEN_KEY
    message = whole_checked_by_streams(parser, text)
    assert message["tool_calls"] == [] and message["reasoning_content"].endswith(_DSML_BROKEN_KEY)
    assert not losses_at_every_cut(text, parser.parse, marker_patterns(analysis), analysis.tools.array)


@pytest.mark.parametrize("text", [
    '<tool_calls>\nv<invoke name="search"></invoke>',
    '<tool_calls>\n>invoke name="search">\n<city>Paris</city>\n</invoke>\n<invoke name="search">\n'
    '<city>Oslo</city>\n</invoke>\n</tool_calls>',
])
def test_an_option_a_chunk_end_took_that_the_next_character_rules_out_leaves_the_reading_as_it_was(text: str) -> None:
    """A section's opener, then what no call begins with (`v`, a `>` swapped in for `<`), a later
    call whole: where a chunk ended right after the opener, the stream took the call's options
    before the next character was known and entered the call's rule; that character ruled them
    out and the reading failed where it forked, but still as inside a call, so recovery went on
    with the section (the later call a call), where the whole parse, never entering the call,
    read the section as text. A reading whose options are all ruled out so is as it was before
    them (`_Thread.restore`). Found by `tools/fuzz_outputs.py` (a `swap` mutation, seed 17, the
    `keyed_tags` family)."""
    analysis = analyses.FAMILIES["keyed_tags"]()
    parser = analysis.parser(tools=TOOLS, thinking=True)
    message = whole_checked_by_streams(parser, text)
    assert message["tool_calls"] == [] and message["content"] == text
    assert not losses_at_every_cut(text, parser.parse, marker_patterns(analysis), analysis.tools.array)


def test_a_bare_call_list_broken_in_its_first_call_after_text_reads_alike() -> None:
    """xLAM's JSON list of calls after text, a comma left out in the first call's array, a later
    call whole: the first call (incomplete) and the later one, whole and in any chunks (the whole
    parse once read all of it as content, a stream that let `Hi ` out first the calls). Found by
    `tools/fuzz_outputs.py` (a `drop` mutation, seed 17, the shared corpus). Recovery from the broken call, which reads the
    later call, wins over a content reading whose text began before the list as over one whose
    text begins at it: what went out before is no part of the choice."""
    path = next((p for p in corpora.all_templates() if p.name == "vllm__tool_chat_template_xlam_qwen.jinja"), None)
    if path is None:
        pytest.skip("xLAM's template is not in the corpora")
    analysis = autoparser.load(str(path))
    parser = analysis.parser(tools=TOOLS, thinking=True)
    text = 'Hi [{"name": "search", "arguments": {"items": [1.0 "two"]}}, {"name": "search", "arguments": {"query": "x"}}]'
    message = whole_checked_by_streams(parser, text)
    assert [call["function"]["arguments"] for call in message["tool_calls"]] == ['{"items": [1.0]}', '{"query": "x"}']
    assert message["content"].startswith("Hi ")
    assert not losses_at_every_cut(text, parser.parse, marker_patterns(analysis), analysis.tools.array)


@pytest.mark.xfail(strict=True, reason=(
    "the text-or-call choice (recovery._later_call_after_text, _text_before_later_call): a stream "
    "one character at a time decides for the broken call once the held text ends in `<｜`, the "
    "beginning of the section's opener, which the whole parse, seeing it whole, does not; the "
    "stream reads the reasoning as content, the whole parse as reasoning"))
def test_a_call_opener_whose_name_holds_the_section_opener_in_reasoning_reads_alike() -> None:
    """DeepSeek V4 DSML, reasoning the prompt opened, a call's own opener (the section's left
    out) whose name runs into the section's opener (`<｜DSML｜invoke name="run_code<｜DSML｜tool_calls>`).
    Found by `tools/fuzz_outputs.py` (a `swap` mutation, seed 20, the `deepseek_v4` family)."""
    analysis = analyses.FAMILIES["deepseek_v4"]()
    parser = analysis.parser(tools=TOOLS, thinking=True)
    whole_checked_by_streams(parser, '<｜DSML｜invoke name="run_code<｜DSML｜tool_calls></')
