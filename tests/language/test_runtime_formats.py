"""Unit tests of the parser runtime, one output format at a time (hand-built analyses)."""

from __future__ import annotations

import json
from typing import Any

import analyses
from analyses import DS_CALL, DS_EOS, DS_SECTION, DS_SEP, WEATHER_TOOLS, calls, parse

from autoparser.language.build import build_language
from autoparser.language.request import Request


def v31_call(name: str, args: str) -> str:
    return f"{DS_CALL[0]}{name}{DS_SEP}{args}{DS_CALL[1]}"


def v31_section(*calls_text: str) -> str:
    return DS_SECTION[0] + "".join(calls_text) + DS_SECTION[1]


# -- DeepSeek V3.1 -----------------------------------------------------------------------------


def test_v31_content_then_parallel_calls() -> None:
    text = "Let me check. " + v31_section(v31_call("get_weather", '{"city": "Paris"}'),
                                          v31_call("search", '{"query": "x"}')) + DS_EOS
    message = parse(analyses.deepseek_v31(), text)
    assert message["content"] == "Let me check."
    assert message["reasoning_content"] is None
    assert calls(message) == [("get_weather", {"city": "Paris"}), ("search", {"query": "x"})]
    assert message["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'  # passed through


def test_v31_thinking_on_starts_in_reasoning() -> None:
    text = "Think first.</think>\n\nThe answer." + DS_EOS
    message = parse(analyses.deepseek_v31(), text, thinking=True)
    assert (message["reasoning_content"], message["content"]) == ("Think first.", "The answer.")


def test_v31_thinking_off_keeps_an_end_marker_inside_the_answer_as_text() -> None:
    """The prompt closed reasoning: a later `</think>` is part of the answer (nothing is lost)."""
    message = parse(analyses.deepseek_v31(), "Hidden?</think>Answer." + DS_EOS, thinking=False)
    assert message == {"role": "assistant", "reasoning_content": None, "content": "Hidden?</think>Answer.",
                       "tool_calls": []}


def test_missing_reasoning_end_keeps_everything_reasoning() -> None:
    """Seed rule 3.2.1: no `</think>` in reasoning mode -> all of it is reasoning."""
    message = parse(analyses.deepseek_v31(), "ABCD still thinking", thinking=True)
    assert (message["reasoning_content"], message["content"]) == ("ABCD still thinking", None)


def test_tool_markup_inside_closed_reasoning_stays_reasoning() -> None:
    inner = v31_section(v31_call("get_weather", '{"city": "Paris"}'))
    message = parse(analyses.deepseek_v31(), f"I could write {inner} here.</think>Done.", thinking=True)
    assert message["reasoning_content"] == f"I could write {inner} here."
    assert message["content"] == "Done." and message["tool_calls"] == []


def test_unclosed_reasoning_ends_where_tool_markup_begins() -> None:
    text = "I will call it." + v31_section(v31_call("get_weather", '{"city": "Paris"}'))
    message = parse(analyses.deepseek_v31(), text, thinking=True)
    assert message["reasoning_content"] == "I will call it."
    assert calls(message) == [("get_weather", {"city": "Paris"})]


def test_strict_policy_text_before_call_is_content() -> None:
    """Seed rule 3.2.3: content after reasoning, then tool markup -> all content, no call."""
    section = v31_section(v31_call("get_weather", '{"city": "Paris"}'))
    text = f"ABCD</think>\nEFG\n{section}"
    strict = parse(analyses.deepseek_v31(), text, thinking=True, tool_call_policy="strict")
    assert strict["reasoning_content"] == "ABCD"
    assert strict["content"] == f"EFG\n{section}"
    assert strict["tool_calls"] == []
    lenient = parse(analyses.deepseek_v31(), text, thinking=True)
    assert lenient["content"] == "EFG" and len(lenient["tool_calls"]) == 1


def test_strict_policy_only_whitespace_before_calls() -> None:
    """Seed rule 3.2.4: only newlines between `</think>` and the calls -> calls, no content."""
    text = "ABCD</think>\n\n" + v31_section(v31_call("get_weather", '{"city": "Paris"}'))
    message = parse(analyses.deepseek_v31(), text, thinking=True, tool_call_policy="strict")
    assert message["content"] is None and len(message["tool_calls"]) == 1


def test_strict_policy_text_between_calls_stops_call_parsing() -> None:
    """Seed rule 3.2.5: the first call stays; `XYZ` and everything after it is content."""
    first, second = v31_call("get_weather", '{"city": "A"}'), v31_call("search", '{"query": "B"}')
    text = f"{DS_SECTION[0]}{first}\nXYZ\n{second}{DS_SECTION[1]}"
    strict = parse(analyses.deepseek_v31(), text, tool_call_policy="strict")
    assert calls(strict) == [("get_weather", {"city": "A"})]
    assert strict["content"] == f"XYZ\n{second}{DS_SECTION[1]}"  # the rest is content, as it is
    lenient = parse(analyses.deepseek_v31(), text)
    assert len(lenient["tool_calls"]) == 2 and lenient["content"] == "XYZ"


def test_invalid_call_goes_to_content_and_other_calls_survive() -> None:
    bad = v31_call("search", "{bad json")
    text = "Sure. " + v31_section(v31_call("get_weather", '{"city": "Boston"}'), bad)
    message = parse(analyses.deepseek_v31(), text)
    assert calls(message) == [("get_weather", {"city": "Boston"})]
    assert message["content"] == "Sure. " + bad
    assert DS_SECTION[0] not in message["content"]


def test_invalid_json_after_a_valid_start_is_repaired() -> None:
    text = v31_section(v31_call("get_weather", '{"city": "Boston" oops}'))
    message = parse(analyses.deepseek_v31(), text)
    assert calls(message) == [("get_weather", {"city": "Boston"})]
    assert message["tool_calls"][0]["incomplete"] is True
    assert message["content"] == "oops}"


def test_truncated_arguments_are_closed_and_marked() -> None:
    text = DS_SECTION[0] + DS_CALL[0] + 'get_weather' + DS_SEP + '{"city": "Bos'
    message = parse(analyses.deepseek_v31(), text)
    assert calls(message) == [("get_weather", {"city": "Bos"})]
    assert message["tool_calls"][0]["incomplete"] is True


def test_text_after_the_end_of_turn_is_kept() -> None:
    message = parse(analyses.deepseek_v31(), "Hello." + DS_EOS + " trailing")
    assert message["content"] == "Hello. trailing"


def test_whitespace_inside_content_is_kept_exactly() -> None:
    message = parse(analyses.deepseek_v31(), "\n\n  a  \n\n b\t\n" + DS_EOS)
    assert message["content"] == "a  \n\n b"


# -- DeepSeek V3 / V3-0324 / R1: fenced arguments ------------------------------------------------


def fenced_call(name: str, args: str) -> str:
    return f"{DS_CALL[0]}function{DS_SEP}{name}\n```json\n{args}\n```{DS_CALL[1]}"


def test_v3_fenced_arguments_are_unwrapped() -> None:
    text = DS_SECTION[0] + fenced_call("get_weather", '{"city": "Tokyo"}') + "\n" + \
        fenced_call("search", '{"query": "hotels"}') + DS_SECTION[1] + DS_EOS
    message = parse(analyses.deepseek_v3_0324(), text)
    assert calls(message) == [("get_weather", {"city": "Tokyo"}), ("search", {"query": "hotels"})]
    assert message["content"] is None


def test_v3_missing_fence_is_tolerated() -> None:
    text = DS_SECTION[0] + f'{DS_CALL[0]}function{DS_SEP}get_weather\n{{"city": "Oslo"}}{DS_CALL[1]}' + DS_SECTION[1]
    assert calls(parse(analyses.deepseek_v3_0324(), text)) == [("get_weather", {"city": "Oslo"})]


def test_r1_prompt_opened_reasoning_and_a_repeated_start_marker() -> None:
    message = parse(analyses.deepseek_r1(), "\n<think>Reasoning here</think>\nThe rest")
    assert (message["reasoning_content"], message["content"]) == ("Reasoning here", "The rest")
    message = parse(analyses.deepseek_r1(), "Reasoning\n</think>\n\n" + DS_SECTION[0]
                    + fenced_call("get_weather", '{"city": "Rome"}') + DS_SECTION[1])
    assert message["reasoning_content"] == "Reasoning" and len(message["tool_calls"]) == 1


# -- JSON-object formats -----------------------------------------------------------------------


def hermes_call(name: str, args: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def test_hermes_calls_and_content() -> None:
    text = "I will check.\n" + hermes_call("get_weather", {"city": "Tokyo"}) + "\n" + \
        hermes_call("search", {"query": "x"}) + "<|im_end|>"
    message = parse(analyses.hermes(), text)
    assert message["content"] == "I will check."
    assert calls(message) == [("get_weather", {"city": "Tokyo"}), ("search", {"query": "x"})]


def test_arguments_before_name_and_stringified_arguments() -> None:
    text = '<tool_call>\n{"arguments": {"city": "Rome"}, "name": "get_weather"}\n</tool_call>' \
           '<tool_call>\n{"name": "search", "arguments": "{\\"query\\": \\"q\\"}"}\n</tool_call>'
    assert calls(parse(analyses.hermes(), text)) == [("get_weather", {"city": "Rome"}), ("search", {"query": "q"})]


def test_parallel_tool_calls_false_keeps_later_calls_as_content() -> None:
    second = hermes_call("search", {"query": "x"})
    message = parse(analyses.hermes(), hermes_call("get_weather", {"city": "A"}) + "\n" + second,
                    parallel_tool_calls=False)
    assert calls(message) == [("get_weather", {"city": "A"})]
    assert message["content"] == second


def test_unknown_tool_stays_content() -> None:
    call = hermes_call("delete_everything", {})
    message = parse(analyses.hermes(), call, tools=WEATHER_TOOLS)
    assert message["tool_calls"] == [] and message["content"] == call


def test_tool_choice_none_disables_tool_parsing() -> None:
    call = hermes_call("get_weather", {"city": "A"})
    assert parse(analyses.hermes(), call, tool_choice="none")["content"] == call


def test_named_tool_choice_accepts_only_that_tool() -> None:
    text = hermes_call("search", {"query": "q"}) + hermes_call("get_weather", {"city": "A"})
    choice = {"type": "function", "function": {"name": "get_weather"}}
    message = parse(analyses.hermes(), text, tool_choice=choice)
    assert calls(message) == [("get_weather", {"city": "A"})]


def test_qwen3_reasoning_then_call() -> None:
    text = "<think>\nPlan.\n</think>\n\n" + hermes_call("get_weather", {"city": "Lima"}) + "<|im_end|>"
    message = parse(analyses.qwen3(), text)
    assert message["reasoning_content"] == "Plan." and message["content"] is None
    assert calls(message) == [("get_weather", {"city": "Lima"})]


def test_mistral_array_calls_with_ids() -> None:
    text = 'I will check. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Tokyo"}, "id": "abc123xyz"}, ' \
           '{"id": "def456uvw", "name": "search", "arguments": {"query": "q"}}]</s>'
    message = parse(analyses.mistral_array(), text)
    assert message["content"] == "I will check."
    assert calls(message) == [("get_weather", {"city": "Tokyo"}), ("search", {"query": "q"})]
    # an id written before the arguments is known when the call is announced
    assert message["tool_calls"][1]["id"] == "def456uvw"


def test_mistral_compact_calls() -> None:
    text = 'Sure! [TOOL_CALLS]get_weather[ARGS]{"city": "Tokyo"}[TOOL_CALLS]search[ARGS]{}</s>'
    message = parse(analyses.mistral_compact(), text)
    assert message["content"] == "Sure!"
    assert calls(message) == [("get_weather", {"city": "Tokyo"}), ("search", {})]


def test_llama_bare_json_call() -> None:
    text = '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>'
    assert calls(parse(analyses.llama31(), text, tools=WEATHER_TOOLS)) == [("get_weather", {"city": "Paris"})]


def test_llama_json_that_is_not_a_call_stays_content() -> None:
    for text in ('{"city": "Paris"}', '{"name": "unknown_tool", "parameters": {}}', '{"name": "get_weather"}',
                 'Use {braces} freely.', '{"name": "get_weather", "parameters": {invalid}'):
        message = parse(analyses.llama31(), text, tools=WEATHER_TOOLS)
        assert message == {"role": "assistant", "reasoning_content": None, "content": text, "tool_calls": []}


def test_llama_semicolon_separated_calls() -> None:
    text = '{"name": "get_weather", "parameters": {"city": "A"}}; {"name": "search", "parameters": {"query": "B"}}'
    message = parse(analyses.llama31(), text, tools=WEATHER_TOOLS)
    assert calls(message) == [("get_weather", {"city": "A"}), ("search", {"query": "B"})]


# -- tagged arguments ---------------------------------------------------------------------------


def test_qwen3_coder_values_by_schema() -> None:
    text = ("Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n<parameter=options>\n{\"unit\": \"C\"}\n</parameter>\n"
            "</function>\n</tool_call><|im_end|>")
    message = parse(analyses.qwen3_coder(), text, tools=WEATHER_TOOLS)
    assert message["content"] == "Let me look."
    assert calls(message) == [("get_weather", {"city": "New\nYork", "days": 3, "options": {"unit": "C"}})]


def test_tagged_values_without_a_schema() -> None:
    """No schema: JSON numbers, booleans, null, arrays and objects are JSON; anything else a string."""
    values = {"a": "Dallas", "b": "12", "c": "true", "d": '{"x": 1}', "e": "2025-08-01", "f": '"quoted"',
              "g": "[1, 2", "h": ""}
    body = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in values.items())
    message = parse(analyses.glm45(), f"<tool_call>f\n{body}</tool_call>")
    assert calls(message) == [("f", {"a": "Dallas", "b": 12, "c": True, "d": {"x": 1}, "e": "2025-08-01",
                                     "f": '"quoted"', "g": "[1, 2", "h": ""})]


def test_glm_without_newlines_and_with_indentation() -> None:
    compact = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"
    indented = ("<tool_call>get_weather\n    <arg_key>city</arg_key>\n    <arg_value>Oslo</arg_value>\n"
                "    </tool_call>")
    for text in (compact, indented):
        assert calls(parse(analyses.glm45(), text, tools=WEATHER_TOOLS)) == [("get_weather", {"city": "Oslo"})]


def test_glm_call_without_arguments() -> None:
    assert calls(parse(analyses.glm45(), "<tool_call>noop\n</tool_call>")) == [("noop", {})]


def test_raw_string_values_keep_backslashes_quotes_and_markup() -> None:
    text = '<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>C:\\dir "q" a<b & c</arg_value>\n</tool_call>'
    assert calls(parse(analyses.glm45(), text, tools=WEATHER_TOOLS)) == [
        ("get_weather", {"city": 'C:\\dir "q" a<b & c'})]


def test_dsml_string_and_json_parameters() -> None:
    dsml = "｜DSML｜"
    text = (f'Let me.\n\n<{dsml}function_calls>\n<{dsml}invoke name="get_weather">\n'
            f'<{dsml}parameter name="city" string="true">Hangzhou</{dsml}parameter>\n'
            f'<{dsml}parameter name="days" string="false">10</{dsml}parameter>\n</{dsml}invoke>\n'
            f'<{dsml}invoke name="search">{{"query": "x"}}</{dsml}invoke>\n</{dsml}function_calls>')
    message = parse(analyses.deepseek_v32(), text)
    assert message["content"] == "Let me."
    assert calls(message) == [("get_weather", {"city": "Hangzhou", "days": 10}), ("search", {"query": "x"})]


def test_dsml_call_without_arguments_written_self_closed() -> None:
    """A call with no arguments written as one self-closed element (`<invoke name="f"/>`) is read
    with empty arguments, beside the long form, with the tools given or not."""
    dsml = "｜DSML｜"
    text = (f'Done.\n<{dsml}function_calls>\n<{dsml}invoke name="get_weather">\n'
            f'<{dsml}parameter name="city" string="true">SF</{dsml}parameter>\n</{dsml}invoke>\n'
            f'<{dsml}invoke name="search"/>\n</{dsml}function_calls>')
    for options in ({}, {"tools": WEATHER_TOOLS}):
        message = parse(analyses.deepseek_v32(), text, **options)
        assert message["content"] == "Done."
        assert calls(message) == [("get_weather", {"city": "SF"}), ("search", {})]
    alone = parse(analyses.deepseek_v32(), f'<{dsml}function_calls>\n<{dsml}invoke name="search"/>\n</{dsml}function_calls>')
    assert calls(alone) == [("search", {})] and not alone["content"]


def test_self_closed_call_only_where_the_call_is_an_element_named_by_an_attribute() -> None:
    """`<function=f>` is no element named by an attribute: Qwen3-Coder's calls have no self-closed form."""
    def reads(analysis: Any) -> str:
        return str(build_language(analysis, Request(reading=True)))

    assert "call-self-closed" in reads(analyses.deepseek_v32())
    assert "call-self-closed" not in reads(analyses.qwen3_coder())
    assert "call-self-closed" not in reads(analyses.glm45())


def test_kimi_call_ids_come_from_the_header() -> None:
    text = ("Checking. <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
            '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_call_begin|>'
            'functions.search:1<|tool_call_argument_begin|>{"query": "q"}<|tool_call_end|>'
            "<|tool_calls_section_end|><|im_end|>")
    message = parse(analyses.kimi_k2(), text)
    assert calls(message) == [("get_weather", {"city": "Paris"}), ("search", {"query": "q"})]
    assert [c["id"] for c in message["tool_calls"]] == ["functions.get_weather:0", "functions.search:1"]
