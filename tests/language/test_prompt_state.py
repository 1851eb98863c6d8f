"""The parser and the grammar start where the rendered prompt leaves the model (`prompt=`)."""

from __future__ import annotations

import re
from pathlib import Path

import analyses
import pytest
from analyses import without_generated_ids
from corpora import llamacpp_templates
from gbnf_sampler import Gbnf

import autoparser
from autoparser.generators.gbnf import build_grammar

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASKED = [{"role": "user", "content": "Weather in Paris?"}]
CALLED = ASKED + [
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]


@pytest.fixture(scope="module")
def v31() -> autoparser.Analysis:
    path = next((p for p in llamacpp_templates() if p.name == "deepseek-ai-DeepSeek-V3.1.jinja"), None)
    if path is None:
        pytest.skip("DeepSeek-V3.1 is not in the llama.cpp corpus")
    return autoparser.analyze(Path(path).read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)


def _prompt(a: autoparser.Analysis, messages: list[dict], thinking: bool) -> str:
    return a.render(messages, tools=TOOLS, add_generation_prompt=True, **a.thinking_kwargs(thinking))


def _both(parser, text: str) -> dict:
    whole = parser.parse(text)
    stream = parser.stream()
    for char in text:
        stream.feed(char)
    stream.finish()
    assert without_generated_ids(stream.message()) == without_generated_ids(whole)
    return whole


def test_v31_answer_after_a_tool_result_with_thinking_on_is_content(v31) -> None:
    prompt = _prompt(v31, CALLED, thinking=True)
    assert not prompt.rstrip().endswith("<think>")  # the turn after a tool result opens no reasoning
    message = _both(v31.parser(tools=TOOLS, thinking=True, prompt=prompt), "It is sunny in Paris." + EOS)
    assert (message["reasoning_content"], message["content"]) == (None, "It is sunny in Paris.")
    # without the prompt, `thinking=True` alone still means "the output starts inside reasoning"
    fallback = v31.parser(tools=TOOLS, thinking=True).parse("It is sunny in Paris." + EOS)
    assert fallback["reasoning_content"] == "It is sunny in Paris." and fallback["content"] is None


def test_v31_first_turn_with_thinking_on_starts_in_reasoning(v31) -> None:
    prompt = _prompt(v31, ASKED, thinking=True)
    message = _both(v31.parser(tools=TOOLS, thinking=True, prompt=prompt), "Let me check.</think>Sunny." + EOS)
    assert (message["reasoning_content"], message["content"]) == ("Let me check.", "Sunny.")


def test_v31_call_after_a_tool_result_is_still_a_call(v31) -> None:
    prompt = _prompt(v31, CALLED, thinking=True)
    text = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Rome\"}"
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>" + EOS)
    message = _both(v31.parser(tools=TOOLS, thinking=True, prompt=prompt), text)
    assert analyses.calls(message) == [("get_weather", {"city": "Rome"})] and message["content"] is None


def test_the_grammar_starts_from_the_same_state(v31) -> None:
    after_tool = _prompt(v31, CALLED, thinking=True)
    first_turn = _prompt(v31, ASKED, thinking=True)
    full = {name: v31.gbnf(tools=TOOLS, thinking=True, prompt=prompt, lazy=False)
            for name, prompt in (("after_tool", after_tool), ("first_turn", first_turn))}
    assert full["first_turn"] == v31.gbnf(tools=TOOLS, thinking=True, lazy=False)  # as the flag says
    assert "reasoning" in full["first_turn"].split("\n", 1)[0]
    assert "reasoning" not in full["after_tool"].split("\n", 1)[0]
    # the lazy grammar's trigger waits for `</think>` only where reasoning is open
    lazy = build_grammar(v31, tools=TOOLS, thinking=True, prompt=after_tool)
    assert lazy.trigger_words == ["<｜tool▁calls▁begin｜>"]
    assert build_grammar(v31, tools=TOOLS, thinking=True, prompt=first_turn).trigger_patterns[0].startswith(
        "<\\/think>")


def test_a_prefilled_answer_is_continued_as_content(v31) -> None:
    prompt = _prompt(v31, ASKED, thinking=False) + "The weather"
    message = _both(v31.parser(tools=TOOLS, thinking=True, prompt=prompt), " is sunny." + EOS)
    # the continuation keeps its leading space: the client appends it to its own prefix
    assert (message["reasoning_content"], message["content"]) == (None, " is sunny.")
    grammar = v31.gbnf(tools=TOOLS, thinking=True, prompt=prompt, lazy=False)
    assert "reasoning" not in grammar.split("\n", 1)[0]


def test_prefilled_reasoning_is_continued_as_reasoning(v31) -> None:
    prompt = _prompt(v31, ASKED, thinking=True) + "Let me"
    message = _both(v31.parser(tools=TOOLS, prompt=prompt), " check.</think>Sunny." + EOS)
    assert (message["reasoning_content"], message["content"]) == (" check.", "Sunny.")


def test_a_user_message_mentioning_the_start_marker_opens_nothing() -> None:
    qwen = analyses.qwen3()
    prompt = "<|im_start|>user\nWhat does <think> do?<|im_end|>\n<|im_start|>assistant\n"
    message = _both(qwen.parser(thinking=False, prompt=prompt), "It marks reasoning.")
    assert (message["reasoning_content"], message["content"]) == (None, "It marks reasoning.")


CALL_TEXT = ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}'
             '<｜tool▁call▁end｜><｜tool▁calls▁end｜>')


def test_calls_that_begin_inside_reasoning_end_it_in_parser_and_full_language(v31) -> None:
    """Thinking on, the model opens the calls before `</think>` and never closes the reasoning:
    the parser ends the reasoning there, and every language holds exactly that reading: the full
    and "required" grammars allow the calls right after the reasoning, and the lazy grammar fires
    on the calls-begin special token inside reasoning too. A mention of the marker written as
    text does not fire: the trigger patterns still wait for `</think>`."""
    prompt = _prompt(v31, ASKED, thinking=True)
    assert prompt.endswith("<think>")
    output = "I should check the weather." + CALL_TEXT
    message = _both(v31.parser(tools=TOOLS, thinking=True, prompt=prompt), output + EOS)
    assert message["reasoning_content"] == "I should check the weather."
    assert message["content"] is None
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    specials = v31.preserved_tokens
    full = build_grammar(v31, TOOLS, thinking=True, prompt=prompt, lazy=False, special_tokens=specials)
    assert Gbnf(full.gbnf).matches(output)
    required = build_grammar(v31, TOOLS, tool_choice="required", thinking=True, prompt=prompt,
                             special_tokens=specials)
    assert Gbnf(required.gbnf).matches(output)
    assert Gbnf(required.gbnf).matches("I should check the weather.</think>" + CALL_TEXT)
    lazy = build_grammar(v31, TOOLS, thinking=True, prompt=prompt, special_tokens=specials)
    assert lazy.trigger_words == ["<｜tool▁calls▁begin｜>"]
    assert all(re.search(p, output) is None for p in lazy.trigger_patterns)
    # without the special-token list the marker is text, which never fires inside reasoning
    as_text = build_grammar(v31, TOOLS, thinking=True, prompt=prompt)
    assert as_text.trigger_words == []


def test_a_mention_of_the_calls_opener_inside_closed_reasoning_stays_reasoning(v31) -> None:
    prompt = _prompt(v31, ASKED, thinking=True)
    output = "Maybe <｜tool▁calls▁begin｜> later.</think>It is sunny."
    message = _both(v31.parser(tools=TOOLS, thinking=True, prompt=prompt), output + EOS)
    assert (message["reasoning_content"], message["content"], message["tool_calls"]) == (
        "Maybe <｜tool▁calls▁begin｜> later.", "It is sunny.", [])
    grammar = build_grammar(v31, TOOLS, tool_choice="auto", thinking=True, prompt=prompt, lazy=False)
    assert Gbnf(grammar.gbnf).matches(output)
    # and the calls need some reasoning before them: an output that starts with them opened none
    required = build_grammar(v31, TOOLS, tool_choice="required", thinking=True, prompt=prompt)
    assert not Gbnf(required.gbnf).matches(CALL_TEXT)


@pytest.fixture(scope="module")
def no_reasoning() -> autoparser.Analysis:
    """A template that writes no reasoning at all (Kimi-K2's first template: no `<think>` in it)."""
    path = next((p for p in llamacpp_templates() if p.name == "moonshotai-Kimi-K2.jinja"), None)
    if path is None:
        pytest.skip("moonshotai-Kimi-K2 is not in the llama.cpp corpus")
    a = autoparser.analyze(Path(path).read_text(encoding="utf-8"), bos_token="<s>", eos_token="</s>")
    assert a.reasoning.mode == "none"
    return a


CONTINUED = " thinking</think>Hello, world!"


def test_a_thinking_tag_the_prompt_leaves_open_is_continued_as_reasoning(no_reasoning) -> None:
    """A caller prefills reasoning the template cannot show (`<think>I'm`, as llama.cpp does for
    this template): the output goes on inside that block, which the tag's closer ends."""
    prompt = no_reasoning.render(ASKED) + "<think>I'm"
    message = _both(no_reasoning.parser(prompt=prompt), CONTINUED)
    assert (message["reasoning_content"], message["content"]) == (" thinking", "Hello, world!")
    for seed in range(5):
        streamed = analyses.streamed_in_random_chunks(no_reasoning.parser(prompt=prompt), CONTINUED, seed)
        assert without_generated_ids(streamed) == without_generated_ids(message)
    assert no_reasoning.gbnf(prompt=prompt, lazy=False)


@pytest.mark.parametrize("prefill", [
    "<think>I'm</think>Hi",  # the prompt closed the block: the answer goes on
    "<answer>I'm",           # a tag that names no thinking
    "",                      # no prefill
])
def test_a_prompt_that_leaves_no_thinking_tag_open_reads_no_reasoning(no_reasoning, prefill: str) -> None:
    prompt = no_reasoning.render(ASKED) + prefill
    message = _both(no_reasoning.parser(prompt=prompt), CONTINUED)
    assert message["reasoning_content"] is None and "</think>" in message["content"]


def test_a_thinking_tag_in_the_users_message_opens_nothing(no_reasoning) -> None:
    prompt = no_reasoning.render([{"role": "user", "content": "What does <think> do?"}])
    message = _both(no_reasoning.parser(prompt=prompt), "It marks reasoning.")
    assert (message["reasoning_content"], message["content"]) == (None, "It marks reasoning.")
