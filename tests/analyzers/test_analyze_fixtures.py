"""The analyzer on the project's own fixture templates, one per format family."""

from __future__ import annotations

from pathlib import Path

import pytest

import autoparser

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "templates"
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"


def analyze_fixture(name: str) -> autoparser.Analysis:
    return autoparser.analyze((FIXTURES / name).read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.jinja")), ids=lambda p: p.stem)
def test_fixture_analysis_snapshot(path: Path, snapshot) -> None:
    assert analyze_fixture(path.name).to_dict() == snapshot


def test_there_is_a_fixture_per_family() -> None:
    assert len(list(FIXTURES.glob("*.jinja"))) >= 10


def test_v31_style_separator_calls_and_thinking_switch() -> None:
    a = analyze_fixture("deepseek_v31_style.jinja")
    assert (a.reasoning.start, a.reasoning.end, a.reasoning.toggle) == ("<think>", "</think>", "thinking")
    assert a.reasoning.forced_open and not a.reasoning.default_on
    t = a.tools
    assert t.format == "tag_json" and t.parallel
    assert (t.section_start, t.call_start, t.name_end, t.call_end, t.section_end) == (
        "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>")
    assert "<｜tool▁calls▁begin｜>" in a.triggers
    assert a.stop[0] == EOS


def test_fenced_arguments() -> None:
    t = analyze_fixture("deepseek_fenced.jinja").tools
    assert t.format == "tag_json"
    assert (t.name_start, t.name_end, t.args_start, t.args_end) == ("function<｜tool▁sep｜>", "\n", "```json\n", "\n```")
    assert t.call_separator == "\n"


def test_forced_open_reasoning_found_from_stripped_history() -> None:
    r = analyze_fixture("r1_forced_open.jinja").reasoning
    assert (r.mode, r.start, r.end, r.forced_open) == ("tagged", "<think>", "</think>", True)
    assert r.toggle is None


def test_switch_that_changes_only_the_end_of_the_whole_prompt() -> None:
    """The template writes the assistant's header whether or not a generation prompt is asked for, so
    the switch's empty pair is found where the whole prompt ends."""
    a = analyze_fixture("tail_switch.jinja")
    r = a.reasoning
    assert (r.start, r.end, r.toggle, r.default_on, r.closed_when_off) == ("<think>", "</think>", "enable_thinking",
                                                                           True, True)
    off = a.parser(prompt=a.render([{"role": "user", "content": "hi"}], **a.thinking_kwargs(False)))
    assert off.parse("Hello")["content"] == "Hello"
    on = a.parser(prompt=a.render([{"role": "user", "content": "hi"}]))
    assert on.parse("<think>why</think>\nHello") == {"role": "assistant", "reasoning_content": "why",
                                                        "content": "Hello", "tool_calls": []}


def test_thinking_switch_closes_reasoning_when_off() -> None:
    a = analyze_fixture("thinking_switch.jinja")
    r = a.reasoning
    assert (r.toggle, r.default_on, r.closed_when_off, r.forced_open) == ("enable_thinking", True, True, False)
    assert a.thinking_kwargs(False) == {"enable_thinking": False}
    assert a.tools.format == "json" and a.tools.call_start.strip() == "<tool_call>"


def test_xml_parameters_are_tagged_with_raw_strings() -> None:
    t = analyze_fixture("xml_parameters.jinja").tools
    assert t.format == "tag_tagged" and t.arg_string_raw
    assert t.name_start.strip() == "<function=" and t.arg_start.strip() == "<parameter="


def test_key_value_tags() -> None:
    t = analyze_fixture("key_value_tags.jinja").tools
    assert t.format == "tag_tagged"
    assert t.arg_start.strip() == "<arg_key>" and t.arg_end.strip() == "</arg_value>"
    assert "<arg_value>" in t.arg_key_end


def test_bracket_array_with_ids() -> None:
    t = analyze_fixture("bracket_array.jinja").tools
    assert (t.format, t.array, t.section_start, t.id_field) == ("json", True, "[CALLS]", "id")


def test_bare_json_single_call() -> None:
    a = analyze_fixture("bare_json.jinja")
    t = a.tools
    assert (t.format, t.args_field, t.parallel, t.section_start, t.call_start) == ("json", "parameters", False, "", "")
    assert a.triggers and a.triggers[0].startswith("{")
    assert any("parallel" in w for w in a.warnings)


def test_content_wrapped_and_nested_names() -> None:
    a = analyze_fixture("content_wrapped.jinja")
    assert (a.content.mode, a.content.start, a.content.end) == ("wrapped", "<|START_RESPONSE|>", "<|END_RESPONSE|>")
    assert (a.tools.name_field, a.tools.args_field, a.tools.array) == ("tool_name", "parameters", True)
    assert a.stop[0] == "<|END_OF_TURN_TOKEN|>"


def test_plain_chat_has_no_tools_and_says_so() -> None:
    a = analyze_fixture("plain_chat.jinja")
    assert not a.tools.supported and a.reasoning.mode == "none"
    assert any("tool" in w for w in a.warnings)


def test_analysis_round_trips_through_json() -> None:
    a = analyze_fixture("deepseek_fenced.jinja")
    again = autoparser.Analysis.from_dict(a.to_dict())
    assert again.to_dict() == a.to_dict()


def test_turn_end_of_no_marker_shape() -> None:
    """A turn ended by markup of no known shape: a bracketed run of symbols (`[/]`)."""
    assert analyze_fixture("numbered_calls.jinja").stop[0] == "[/]"


def test_reasoning_between_delimiters_of_no_marker_shape() -> None:
    """Reasoning the history writes between the same plain delimiters before an answer and before
    calls (`(thinking)...(/thinking)`); the marker after the closing opens the calls."""
    r = analyze_fixture("separated_calls.jinja").reasoning
    assert (r.mode, r.start, r.end) == ("tagged", "(thinking)", "(/thinking)")


def test_call_id_written_after_the_arguments() -> None:
    """`CALL name {...} AS id`: the id is a hole in the call's end, and the parser reads it there."""
    a = analyze_fixture("id_after_args.jinja")
    assert a.tools.call_end == " AS {id}\n"
    output = 'CALL get_weather {"location": "Paris"} AS call_7x\nCALL get_weather {"location": "Rome"} AS b-2'
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"location": {"type": "string"}}}}}]
    parser = a.parser(tools=tools)
    whole = parser.parse(output)
    assert [c["id"] for c in whole["tool_calls"]] == ["call_7x", "b-2"]
    assert whole["content"] is None
    for size in (1, 2, 3, 7):
        stream = parser.stream()
        for at in range(0, len(output), size):
            stream.feed(output[at:at + size])
        stream.finish()
        assert stream.message() == whole
