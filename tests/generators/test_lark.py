"""The Lark grammar: the text `a.lark()` prints loads in Lark and reads outputs to the runtime's
message; its parse results on edge cases; and speed on large outputs."""

from __future__ import annotations

import json
import string
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lark.exceptions import UnexpectedInput
from lark_cases import (
    CASES,
    PROBES,
    TOOLS,
    analysis_of,
    assert_loads_in_lark,
    comparable,
    expected_message,
    real_analysis,
    round_trip_output,
)

from autoparser.analysis import Analysis
from autoparser.generators.lark import generate_lark, parse_with_lark, reading_grammar
from autoparser.generators.lark_ir import read_message


def tool(name: str, **properties: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {k: {"type": v} for k, v in properties.items()}}}}


def calls_of(message: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]


# -- the grammar as data --------------------------------------------------------------------------


def _thinking_modes(analysis: Analysis) -> list[bool | None]:
    return [None, True, False] if analysis.reasoning.toggle else [None]


@pytest.mark.parametrize("with_tools", [True, False], ids=["tools", "any-tool"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_printed_grammar_parses_reference_outputs_to_the_runtime_message(name: str, with_tools: bool) -> None:
    """The grammar `a.lark()` prints loads in Lark as its header says, and reads the template's
    reference outputs (every probe, every thinking mode) to the message the runtime builds,
    which is the message the template rendered."""
    analysis = real_analysis(name, analyzed=False)
    tools = TOOLS if with_tools else None
    checked = 0
    for thinking in _thinking_modes(analysis):
        printed = analysis.lark(tools=tools, thinking=thinking)
        written = reading_grammar(analysis, tools=tools, thinking=thinking)
        assert printed == written.grammar
        assert_loads_in_lark(printed)
        for probe, message in PROBES.items():
            output = round_trip_output(analysis, message, TOOLS, thinking)
            if output is None:
                continue
            read = comparable(read_message(written, output))
            runtime = comparable(analysis.parser(tools=tools, thinking=thinking).parse(output))
            assert read == runtime, (probe, thinking, output)
            if thinking is None:
                assert read == expected_message(message, output), (probe, output)
            checked += 1
    assert checked


def test_forced_open_grammar_reads_reasoning_first() -> None:
    """With thinking on, the prompt opened reasoning: the printed grammar starts inside it."""
    analysis = analysis_of("deepseek_v3_1")
    grammar = analysis.lark(tools=TOOLS, thinking=True)
    assert_loads_in_lark(grammar)
    written = reading_grammar(analysis, tools=TOOLS, thinking=True)
    message = read_message(written, "plan</think>Paris.")
    assert (message["reasoning_content"], message["content"]) == ("plan", "Paris.")


def test_analysis_lark_method_returns_the_grammar() -> None:
    analysis = analysis_of("hermes")
    assert analysis.lark(tools=TOOLS) == generate_lark(analysis, tools=TOOLS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_grammar_loads_in_lark_for_every_request(name: str) -> None:
    for tools in (None, TOOLS, []):
        for thinking in (None, True, False):
            for parallel in (True, False):
                assert_loads_in_lark(generate_lark(analysis_of(name), tools=tools, thinking=thinking,
                                                            parallel_tool_calls=parallel))


# -- reasoning ------------------------------------------------------------------------------------


def test_forced_open_output_starts_in_reasoning() -> None:
    a = analysis_of("deepseek_v3_1")
    m = parse_with_lark(a, "Let me think.</think>\n\nParis.<｜end▁of▁sentence｜>", thinking=True)
    assert (m["reasoning_content"], m["content"], m["tool_calls"]) == ("Let me think.", "Paris.", [])


def test_forced_open_without_end_marker_is_all_reasoning() -> None:
    m = parse_with_lark(analysis_of("deepseek_v3_1"), "still thinking <｜tool▁call▁begin｜> x", thinking=True)
    assert (m["reasoning_content"], m["content"]) == ("still thinking <｜tool▁call▁begin｜> x", None)


def test_unclosed_reasoning_ends_at_a_tool_section_when_no_end_marker_follows() -> None:
    call = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{"query": "q"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    m = parse_with_lark(analysis_of("deepseek_v3_1"), "r " + call + " after", thinking=True)
    assert (m["reasoning_content"], m["content"], calls_of(m)) == ("r", "after", [("search", {"query": "q"})])
    m = parse_with_lark(analysis_of("deepseek_v3_1"), "r " + call + "</think>done", thinking=True)
    assert (m["reasoning_content"], m["content"], m["tool_calls"]) == ("r " + call, "done", [])


def test_a_later_reasoning_end_marker_in_content_is_text() -> None:
    m = parse_with_lark(analysis_of("deepseek_v3_1"), "a</think>b</think>c", thinking=True)
    assert (m["reasoning_content"], m["content"]) == ("a", "b</think>c")
    assert parse_with_lark(analysis_of("deepseek_v3_1"), "ab</think>c", thinking=False)["content"] == "ab</think>c"


def test_text_between_and_after_calls_is_content() -> None:
    call = '<tool_call>{"name": "search", "arguments": {"query": "q"}}</tool_call>'
    m = parse_with_lark(analysis_of("hermes"), f"pre {call} mid {call} after<|im_end|>", tools=TOOLS)
    assert (m["content"], len(m["tool_calls"])) == ("pre  mid  after", 2)


def test_forced_open_accepts_a_repeated_start_marker() -> None:
    m = parse_with_lark(analysis_of("deepseek_v3_1"), "<think>\nhmm\n</think>ok", thinking=True)
    assert (m["reasoning_content"], m["content"]) == ("hmm", "ok")


def test_thinking_off_starts_in_content_and_allows_a_closed_block() -> None:
    a = analysis_of("deepseek_v3_1")
    assert parse_with_lark(a, "Paris.", thinking=False)["content"] == "Paris."
    m = parse_with_lark(a, "\n<think>r</think>\nc", thinking=False)
    assert (m["reasoning_content"], m["content"]) == ("r", "c")


def test_tool_markup_inside_reasoning_stays_reasoning() -> None:
    text = "<think>maybe <tool_call>{\"name\": \"x\"}</tool_call></think>done"
    m = parse_with_lark(analysis_of("glm_4_5"), text)
    assert m["reasoning_content"] == "maybe <tool_call>{\"name\": \"x\"}</tool_call>"
    assert (m["content"], m["tool_calls"]) == ("done", [])


def test_end_of_turn_equal_to_reasoning_end_is_read_as_reasoning_end() -> None:
    a = Analysis.from_dict({"reasoning": {"mode": "tagged", "start": "<|think|>", "end": "<|end|>"},
                            "stop": ["<|end|>"]})
    m = parse_with_lark(a, "<|think|>r<|end|>answer<|end|>")
    assert (m["reasoning_content"], m["content"]) == ("r", "answer")


# -- content --------------------------------------------------------------------------------------


def test_wrapped_content() -> None:
    a = Analysis.from_dict({"content": {"mode": "wrapped", "start": "<answer>", "end": "</answer>"},
                            "stop": ["<eot>"]})
    assert parse_with_lark(a, " <answer>\nhi\n</answer><eot>")["content"] == "hi"
    assert parse_with_lark(a, "plain")["content"] == "plain"


def test_empty_output_is_an_empty_message() -> None:
    m = parse_with_lark(analysis_of("hermes"), "")
    assert m == {"role": "assistant", "reasoning_content": None, "content": None, "tool_calls": []}


def test_tool_choice_none_makes_tool_markup_content() -> None:
    text = '<tool_call>{"name": "search", "arguments": {}}</tool_call>'
    m = parse_with_lark(analysis_of("hermes"), text, tools=TOOLS, tool_choice="none")
    assert m["tool_calls"] == [] and m["content"] == text


def test_tool_choice_required_and_named() -> None:
    a = analysis_of("hermes")
    with pytest.raises(UnexpectedInput):
        parse_with_lark(a, "No call.", tools=TOOLS, tool_choice="required")
    text = '<tool_call>{"name": "search", "arguments": {}}</tool_call>'
    assert calls_of(parse_with_lark(a, text, tools=TOOLS, tool_choice="required")) == [("search", {})]
    named = {"type": "function", "function": {"name": "get_weather"}}
    with pytest.raises(UnexpectedInput):
        parse_with_lark(a, text, tools=TOOLS, tool_choice=named)


def test_an_empty_tool_list_allows_any_name_like_the_runtime() -> None:
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert calls_of(parse_with_lark(analysis_of("hermes"), text, tools=[])) == [("f", {})]


# -- tool calls -----------------------------------------------------------------------------------


def test_content_then_parallel_json_calls() -> None:
    text = ('Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"arguments": {"query": "x"}, "name": "search"}\n</tool_call><|im_end|>')
    m = parse_with_lark(analysis_of("hermes"), text, tools=TOOLS)
    assert m["content"] == "Checking."
    assert calls_of(m) == [("get_weather", {"location": "Paris"}), ("search", {"query": "x"})]
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in m["tool_calls"])


def test_tool_names_are_restricted_to_the_given_tools() -> None:
    text = '<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>'
    with pytest.raises(UnexpectedInput):
        parse_with_lark(analysis_of("hermes"), text, tools=TOOLS)
    assert calls_of(parse_with_lark(analysis_of("hermes"), text)) == [("delete_all", {})]


def test_parallel_calls_can_be_switched_off() -> None:
    a = analysis_of("deepseek_v3_1")
    one = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
    two = one + "<｜tool▁call▁begin｜>search<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
    assert len(parse_with_lark(a, two)["tool_calls"]) == 2
    assert len(parse_with_lark(a, one, parallel_tool_calls=False)["tool_calls"]) == 1
    # one call only: the second is text, as the runtime reads it
    single = parse_with_lark(a, two, parallel_tool_calls=False)
    assert len(single["tool_calls"]) == 1
    assert comparable(single) == comparable(a.parser(parallel_tool_calls=False).parse(two))


def test_fenced_json_arguments_are_unwrapped() -> None:
    text = ("<think>\nplan\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n"
            "```json\n{\"query\": \"a ``` b\"}\n```<｜tool▁call▁end｜>\n<｜tool▁calls▁end｜>")
    m = parse_with_lark(analysis_of("deepseek_r1"), text)
    assert m["reasoning_content"] == "plan"
    assert calls_of(m) == [("search", {"query": "a ``` b"})]


def test_call_ids_carried_by_the_output_are_kept() -> None:
    text = '[TOOL_CALLS][{"name": "search", "arguments": {"query": "q"}, "id": "abcdefghi"}]</s>'
    m = parse_with_lark(analysis_of("mistral_nemo"), text, tools=TOOLS)
    assert m["tool_calls"][0]["id"] == "abcdefghi"
    assert calls_of(m) == [("search", {"query": "q"})]


def test_nested_function_object_with_string_arguments() -> None:
    a = Analysis.from_dict({"tools": {"supported": True, "format": "json", "call_start": "<call>",
                                      "call_end": "</call>", "function_field": "function", "id_field": "id",
                                      "args_as_string": True}})
    text = ('<call>{"id": "c1", "type": "function", "function": {"name": "search", '
            '"arguments": "{\\"query\\": \\"q\\"}"}}</call>')
    m = parse_with_lark(a, text)
    assert m["tool_calls"][0]["id"] == "c1"
    assert calls_of(m) == [("search", {"query": "q"})]


def test_bare_json_call_without_markers() -> None:
    a = Analysis.from_dict({"tools": {"supported": True, "format": "json", "args_field": "parameters"},
                            "stop": ["<|eot_id|>"]})
    m = parse_with_lark(a, '{"name": "search", "parameters": {"query": "q"}}<|eot_id|>', tools=TOOLS)
    assert (m["content"], calls_of(m)) == (None, [("search", {"query": "q"})])
    assert parse_with_lark(a, "Just text.", tools=TOOLS)["content"] == "Just text."


def test_tagged_values_follow_the_schema() -> None:
    tools = [tool("f", code="string", count="integer", flags="object", on="boolean")]
    text = ("<tool_call>\n<function=f>\n<parameter=code>\n123\n</parameter>\n<parameter=count>\n7\n</parameter>\n"
            "<parameter=flags>\n{'a': [1, None]}\n</parameter>\n<parameter=on>\nTrue\n</parameter>\n"
            "</function>\n</tool_call>")
    m = parse_with_lark(analysis_of("qwen3_coder"), text, tools=tools)
    assert calls_of(m) == [("f", {"code": "123", "count": 7, "flags": {"a": [1, None]}, "on": True})]


def test_tagged_values_without_schema_are_json_when_they_parse() -> None:
    text = "<tool_call>f\n<arg_key>n</arg_key>\n<arg_value>12</arg_value>\n<arg_key>s</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
    assert calls_of(parse_with_lark(analysis_of("glm_4_5"), text)) == [("f", {"n": 12, "s": "Paris"})]


def test_raw_values_keep_their_own_whitespace() -> None:
    text = "<tool_call>\n<function=f>\n<parameter=code>\n\n  x = {1}\n\n</parameter>\n</function>\n</tool_call>"
    m = parse_with_lark(analysis_of("qwen3_coder"), text, tools=[tool("f", code="string")])
    assert calls_of(m) == [("f", {"code": "\n  x = {1}\n"})]
    compact = "<tool_call><function=f><parameter=code>y</parameter></function></tool_call>"
    assert calls_of(parse_with_lark(analysis_of("qwen3_coder"), compact, tools=[tool("f", code="string")])) == [
        ("f", {"code": "y"})]


def test_call_without_arguments() -> None:
    m = parse_with_lark(analysis_of("glm_4_5"), "<tool_call>get_time\n</tool_call>", tools=[tool("get_time")])
    assert calls_of(m) == [("get_time", {})]


def test_call_ids_in_tags_before_and_after_the_name() -> None:
    before = Analysis.from_dict({"tools": {
        "supported": True, "format": "tag_json", "call_start": "<|call|>", "call_end": "<|/call|>",
        "id_end": "<|name|>", "id_before_name": True, "name_end": "<|args|>"}})
    m = parse_with_lark(before, '<|call|>c-7<|name|>search<|args|>{"query": "q"}<|/call|>')
    assert m["tool_calls"][0]["id"] == "c-7" and calls_of(m) == [("search", {"query": "q"})]
    after = Analysis.from_dict({"tools": {
        "supported": True, "format": "tag_json", "call_start": "<|call|>", "call_end": "<|/call|>",
        "name_start": "fn.", "id_start": ":", "id_end": "<|args|>"}})
    m = parse_with_lark(after, '<|call|>fn.search:0<|args|>{"query": "q"}<|/call|>')
    assert m["tool_calls"][0]["id"] == "0" and calls_of(m) == [("search", {"query": "q"})]


def test_markers_with_quotes_and_regex_characters() -> None:
    a = Analysis.from_dict({"tools": {
        "supported": True, "format": "tag_tagged", "section_start": "<x:calls>\n", "section_end": "</x:calls>",
        "name_start": '<invoke name="', "name_end": '">', "call_end": "</invoke>",
        "arg_start": '<parameter name="', "arg_key_end": '">', "arg_end": "</parameter>"}, "stop": ["[e~[\\"]})
    text = ('<x:calls>\n<invoke name="search">\n<parameter name="query">a "b" \\ c</parameter>\n</invoke>\n'
            '</x:calls>[e~[\\')
    assert calls_of(parse_with_lark(a, text)) == [("search", {"query": 'a "b" \\ c'})]


_PUNCTUATION = '<>|[]{}()/\\"\'.*+?^$:=!~#@'


def _marker(letter: str) -> st.SearchStrategy[str]:
    """Distinct markers: a letter no text contains, wrapped in random punctuation."""
    return st.tuples(st.text(_PUNCTUATION, min_size=1, max_size=3), st.text(_PUNCTUATION, max_size=3)).map(
        lambda parts: parts[0] + letter + parts[1])


@settings(max_examples=60, deadline=None)
@given(markers=st.tuples(*(_marker(letter) for letter in "SECNPA")),
       content=st.text(string.ascii_lowercase + " \n.,", max_size=30),
       name=st.text(string.ascii_lowercase + "_", min_size=1, max_size=12),
       arguments=st.dictionaries(st.text(max_size=8), st.one_of(st.text(max_size=20), st.integers()), max_size=3))
def test_any_marker_spelling_round_trips(markers: tuple[str, ...], content: str, name: str,
                                         arguments: dict[str, Any]) -> None:
    section_start, section_end, call_start, name_end, _unused, args_end = markers
    a = Analysis.from_dict({"tools": {
        "supported": True, "format": "tag_json", "section_start": section_start, "section_end": section_end,
        "call_start": call_start, "call_end": args_end, "name_end": name_end}})
    text = (content + section_start + call_start + name + name_end + json.dumps(arguments, ensure_ascii=False)
            + args_end + section_end)
    m = parse_with_lark(a, text)
    assert m["content"] == (content.strip() or None)
    assert calls_of(m) == [(name, arguments)]


# -- large outputs --------------------------------------------------------------------------------


BRACE_HEAVY = 'function f(a) { if (a) { return {x: [1, 2, {y: "}"}]}; } } // <b> </c>\n'


def _timed(analysis: Analysis, text: str, **kwargs: Any) -> tuple[float, dict[str, Any]]:
    parse_with_lark(analysis, "", **kwargs)  # builds and caches the parser
    start = time.process_time()  # CPU time: other work on a shared machine disturbs it less
    message = parse_with_lark(analysis, text, **kwargs)
    return time.process_time() - start, message


def test_100kb_outputs_parse_in_linear_time() -> None:
    code = (BRACE_HEAVY * (110_000 // len(BRACE_HEAVY)))[:100_000]
    v31, coder = analysis_of("deepseek_v3_1"), analysis_of("qwen3_coder")
    times = {}
    for size in (10_000, 100_000):
        value = code[:size]
        json_call = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write<｜tool▁sep｜>" + json.dumps({"code": value})
                     + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
        tagged_call = f"<tool_call>\n<function=write>\n<parameter=code>\n{value}\n</parameter>\n</function>\n</tool_call>"
        text = value + "</think>" + value
        elapsed_json, m1 = _timed(v31, json_call)
        elapsed_tagged, m2 = _timed(coder, tagged_call)
        elapsed_text, m3 = _timed(v31, text, thinking=True)
        assert calls_of(m1) == calls_of(m2) == [("write", {"code": value})]
        assert m3["reasoning_content"] == value.strip()
        times[size] = elapsed_json + elapsed_tagged + elapsed_text
    assert times[100_000] < 2.0, times
    assert times[100_000] / max(times[10_000], 1e-3) < 30, times


# -- round trips through real templates (hand-built analyses) -------------------------------------


@pytest.mark.parametrize("thinking", [None, True], ids=["default", "thinking"])
@pytest.mark.parametrize("probe", sorted(PROBES))
@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_through_real_template(name: str, probe: str, thinking: bool | None) -> None:
    analysis = real_analysis(name, analyzed=False)
    output = round_trip_output(analysis, PROBES[probe], TOOLS, thinking)
    if output is None:
        pytest.skip("not applicable: the conversation with the message does not start with the prompt")
    message = parse_with_lark(analysis, output, tools=TOOLS, thinking=thinking)
    assert comparable(message) == expected_message(PROBES[probe], output)
