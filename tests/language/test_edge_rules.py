"""Imperfect output around reasoning and tool calls: nothing is lost and nothing is invented.

Each case is parsed whole and one character at a time (`analyses.parse` checks they agree).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import analyses
import pytest
from analyses import DS_CALL, DS_EOS, DS_SECTION, DS_SEP, WEATHER_TOOLS, calls, parse, without_generated_ids

import autoparser
from autoparser.language import policy
from autoparser.language.reading import Parser

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "templates"
V31_HEAD = DS_SECTION[0] + DS_CALL[0] + "get_weather" + DS_SEP


def _arguments(message: dict) -> dict:
    return json.loads(message["tool_calls"][0]["function"]["arguments"])


def test_an_end_marker_with_no_start_closes_the_reasoning_the_template_implies() -> None:
    """The model writes `<think>` itself (R1-0528 style) but left it out."""
    message = parse(analyses.deepseek_r1_0528(), "I should answer.</think>Forty-two." + DS_EOS)
    assert (message["reasoning_content"], message["content"]) == ("I should answer.", "Forty-two.")


def test_without_an_end_marker_implied_reasoning_stays_reasoning() -> None:
    """Seed 000 §3.2.1: where the model is in its reasoning stage, text that no end marker closes
    is reasoning (decided as it streams, not at the end: policy rule `role-from-prompt`)."""
    message = parse(analyses.deepseek_r1_0528(), "Forty-two." + DS_EOS)
    assert (message["reasoning_content"], message["content"]) == ("Forty-two.", None)


def test_implied_reasoning_ends_where_a_tool_call_starts() -> None:
    r1 = analyses.deepseek_r1_0528()
    text = "Checking. " + analyses.render_output(r1, None, "", [("get_weather", {"city": "Paris"})])
    message = parse(r1, text, tools=WEATHER_TOOLS)
    assert message["reasoning_content"] == "Checking." and message["content"] is None
    assert calls(message) == [("get_weather", {"city": "Paris"})]


def test_an_answer_that_did_not_open_reasoning_stays_the_answer() -> None:
    """Where the model writes the start marker itself (the template writes it too), an output that
    does not begin with it is the answer at once; an end marker in it is markup, not a reason to
    take back what streamed as content."""
    message = parse(analyses.qwen3(), "I should answer.</think>Forty-two.")
    assert (message["reasoning_content"], message["content"]) == (None, "I should answer.Forty-two.")


def test_a_later_end_marker_inside_the_answer_is_text() -> None:
    for analysis in (analyses.deepseek_r1(), analyses.deepseek_r1_0528()):
        message = parse(analysis, "Plan.</think>Use the `</think>` tag." + DS_EOS)
        assert (message["reasoning_content"], message["content"]) == ("Plan.", "Use the `</think>` tag.")


@pytest.mark.parametrize("family", ["deepseek_v31", "qwen3_thinking", "deepseek_r1"])
@pytest.mark.parametrize("thinking", [None, True])
@pytest.mark.parametrize("text, reasoning, content", [
    ("<think>Plan.</think>Answer.</think>", "Plan.", "Answer."),
    ("<think></think>Answer.</think>", None, "Answer."),
    ("<think>Plan.</think>Use </think> here.", "Plan.", "Use </think> here."),
])
def test_an_end_marker_written_again_last_after_a_closed_block_is_markup_in_every_family(
        family: str, thinking: bool | None, text: str, reasoning: str | None, content: str) -> None:
    """The rule holds whether the model or the prompt opened the block, empty or not, whatever
    order the language lists the readings in: last in the output the marker is markup, before
    the end it stays text."""
    message = parse(analyses.FAMILIES[family](), text, thinking=thinking)
    assert (message["reasoning_content"], message["content"]) == (reasoning, content)


def test_a_fence_with_no_language_tag_parses_like_a_json_fence() -> None:
    v3 = analyses.deepseek_v3_0324()
    tagged = analyses.render_output(v3, None, "", [("get_weather", {"city": "Paris"})])
    bare = tagged.replace("```json", "```")
    assert bare != tagged
    for text in (tagged, bare):
        message = parse(v3, text, tools=WEATHER_TOOLS)
        assert calls(message) == [("get_weather", {"city": "Paris"})] and message["content"] is None


def test_unparsable_arguments_never_give_invented_values() -> None:
    text = V31_HEAD + '{"city": Paris, "days": }' + DS_CALL[1] + DS_SECTION[1] + DS_EOS
    message = parse(analyses.deepseek_v31(), text)
    call = message["tool_calls"][0]
    assert _arguments(message) == {} and call["incomplete"] is True
    # nothing lost: the member that could not be read stays the model's text
    assert message["content"].startswith('"city": Paris, "days": }')


def test_unparsable_value_after_good_members_keeps_the_good_ones() -> None:
    text = V31_HEAD + '{"days": 3, "city": Paris}' + DS_CALL[1] + DS_SECTION[1]
    message = parse(analyses.deepseek_v31(), text)
    assert _arguments(message) == {"days": 3} and message["tool_calls"][0]["incomplete"] is True
    assert '"city": Paris' in message["content"]


def test_a_json_call_cut_off_keeps_only_complete_values() -> None:
    """The member the output stopped inside is no value of the call: its text is content."""
    complete = '{"city": "Paris"'
    for tail in (', "days": 1', ', "days": tr', ', "days": ', ', "da', ', "days"', ", ", ""):
        message = parse(analyses.deepseek_v31(), V31_HEAD + complete + tail)
        assert _arguments(message) == {"city": "Paris"}, tail
        assert message["tool_calls"][0]["incomplete"] is True
        assert message["content"] == (tail.rstrip() or None), tail


def test_a_tagged_call_cut_off_keeps_only_complete_values() -> None:
    coder = analyses.qwen3_coder()
    head = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    for tail in ("<parameter=days>\n", "<parameter=da"):
        message = parse(coder, head + tail, tools=WEATHER_TOOLS)
        assert _arguments(message) == {"city": "Paris"}, tail
        assert message["tool_calls"][0]["incomplete"] is True


def test_a_python_call_cut_off_keeps_only_complete_values() -> None:
    lfm = analyses.lfm2_python()
    start = analyses.render_output(lfm, None, "", [("get_weather", {"city": "Paris", "days": 12})])
    cut = start[: start.index("12")]
    message = parse(lfm, cut, tools=WEATHER_TOOLS)
    assert _arguments(message) == {"city": "Paris"} and message["tool_calls"][0]["incomplete"] is True


def test_a_tagged_value_running_to_the_end_is_kept() -> None:
    """The end-of-turn token after the value may have been removed from the output."""
    text = "<tool_call>\n<function=get_weather>\n<parameter=days>\n12"
    message = parse(analyses.qwen3_coder(), text, tools=WEATHER_TOOLS)
    assert _arguments(message) == {"days": 12} and message["tool_calls"][0]["incomplete"] is True


def test_a_string_cut_off_streams_as_written_and_marks_the_call() -> None:
    """A string value streams as it arrives (deltas cannot be taken back): a cut keeps what the
    model wrote of it, closed, and marks the call incomplete; no other value is made up."""
    message = parse(analyses.deepseek_v31(), V31_HEAD + '{"city": "Par')
    assert _arguments(message) == {"city": "Par"} and message["tool_calls"][0]["incomplete"] is True


def _numbered_token_analysis():  # type: ignore[no-untyped-def]
    """Kimi-K2's layout, but the name ends with a special token that has digits in it."""
    analysis = analyses.kimi_k2()
    calls = analysis.tools.calls
    name = dataclasses.replace(calls.name, end="<|tool_sep_2|>", index=None)
    analysis.tools = dataclasses.replace(analysis.tools, calls=dataclasses.replace(calls, name=name))
    return analysis


def test_digits_the_analysis_did_not_confirm_are_no_call_index() -> None:
    """Only `tools.call_index` (two rendered calls numbered in turn) makes a number a call index:
    digits in a special token, or in a marker such as ` v1:`, are the marker's own."""
    versioned = analyses.kimi_k2()
    calls_part = versioned.tools.calls
    name = dataclasses.replace(calls_part.name, end=" v1:", index=None)
    versioned.tools = dataclasses.replace(versioned.tools, calls=dataclasses.replace(calls_part, name=name))
    good = analyses.render_output(versioned, None, "", [("get_weather", {"city": "Paris"})])
    assert " v1:" in good and calls(parse(versioned, good, tools=WEATHER_TOOLS))
    assert not calls(parse(versioned, good.replace(" v1:", " v7:"), tools=WEATHER_TOOLS))
    analysis = _numbered_token_analysis()
    good = analyses.render_output(analysis, None, "", [("get_weather", {"city": "Paris"})])
    message = parse(analysis, good, tools=WEATHER_TOOLS)
    assert calls(message) == [("get_weather", {"city": "Paris"})]
    assert "<|tool_sep" not in message["tool_calls"][0]["id"]
    wrong = parse(analysis, good.replace("<|tool_sep_2|>", "<|tool_sep_7|>"), tools=WEATHER_TOOLS)
    assert wrong["tool_calls"] == [] and "<|tool_sep_7|>" in wrong["content"]


def test_the_grammar_keeps_a_numbered_special_token_whole() -> None:
    grammar = _numbered_token_analysis().gbnf(tools=WEATHER_TOOLS, special_tokens={"<|tool_sep_2|>"}, lazy=False)
    assert "<|tool_sep_2|>" in grammar and "[0-9]{1,4}" not in grammar
    kimi = analyses.kimi_k2().gbnf(tools=WEATHER_TOOLS, lazy=False)
    assert '":" [0-9]{1,4}' in kimi


def test_the_grammar_accepts_both_argument_keys_the_parser_reads() -> None:
    grammar = analyses.hermes().gbnf(tools=WEATHER_TOOLS, lazy=False)
    assert '"\\"arguments\\""' in grammar and '"\\"parameters\\""' in grammar
    text = '<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
    assert calls(parse(analyses.hermes(), text, tools=WEATHER_TOOLS)) == [("get_weather", {"city": "Paris"})]


def test_a_long_argument_right_after_the_prompt_opened_reasoning_streams_as_the_whole_reads_it() -> None:
    """R1: the output starts inside reasoning and opens the calls at once, with a 90 KB argument.
    The call is read as one, streamed or whole, however long its argument; the argument never
    ends up in the reasoning."""
    r1 = analyses.deepseek_r1()
    big = ("lorem ipsum dolor sit amet, " * 4000)[:90000]
    text = analyses.render_output(r1, None, "", [("get_weather", {"city": big})]) + DS_EOS
    parser = Parser(r1, tools=WEATHER_TOOLS)
    whole = parser.parse(text)
    stream = parser.stream()
    for at in range(0, len(text), 3):
        stream.feed(text[at:at + 3])
    stream.finish()
    streamed = stream.message()
    assert _arguments(whole) == _arguments(streamed) == {"city": big}
    assert (streamed["reasoning_content"], streamed["content"]) == (whole["reasoning_content"], whole["content"])
    assert not streamed["content"]


@pytest.mark.parametrize("past", [False, True], ids=["breaks-before-the-limit", "breaks-after-the-limit"])
def test_readings_undecided_give_way_at_the_limit_in_characters_however_the_chunks_come(past: bool) -> None:
    """A bare JSON call is read as a call and as text at once while its long argument streams; it
    breaks after the argument. Where it breaks before `UNDECIDED_LIMIT` characters are held, the
    text reading is left and the output is content; after, the readings gave way to the call at
    that very character (policy rule `undecided-too-long`), which is kept incomplete. The limit
    counts characters once, not events per reading per chunk: one character at a time, in
    threes and whole give one message."""
    analysis = autoparser.load(str(FIXTURES / "bare_json.jinja"))
    parser = analysis.parser(tools=WEATHER_TOOLS)
    head = analyses.render_output(analysis, None, "", [("get_weather", {"city": "x"})]).split('"x"')[0] + '"'
    big = ("lorem ipsum dolor sit amet, " * 3000)[:policy.UNDECIDED_LIMIT - len(head) + (100 if past else -100)]
    text = head + big + '" oops}}'
    whole = without_generated_ids(parser.parse(text))
    for size in (1, 3):
        stream = parser.stream()
        for at in range(0, len(text), size):
            stream.feed(text[at:at + size])
        stream.finish()
        assert without_generated_ids(stream.message()) == whole, size
    if past:
        assert [c.get("incomplete") for c in whole["tool_calls"]] == [True]
        assert _arguments(whole) == {"city": big} and whole["content"].strip() == "oops}}"
    else:
        assert (whole["tool_calls"], whole["content"]) == ([], text)
