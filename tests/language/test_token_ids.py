"""The parser's token-id helpers (`Parser.is_reasoning_end`, `extract_content_ids`,
`reasoning_ids`), on the DeepSeek vocabulary of the tiny model (its markers are special tokens,
as in real DeepSeek GGUFs) tokenized by llama.cpp, and on a plain Hugging Face tokenizer.

The answer's ids must decode to the text the parser reads as the answer, for every prefix of the
output: reasoning has ended exactly when the parser has begun the answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import autoparser

pytest_plugins = ["tiny_model"]

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
CALLS = "<｜tool▁calls▁begin｜>"
CALL = "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def v31(tiny_template: str | None) -> Any:
    if tiny_template is None:
        pytest.skip("DeepSeek V3.1's template is not in the corpus")
    return autoparser.analyze(tiny_template, bos_token=BOS, eos_token=EOS)


@pytest.fixture(scope="module")
def encode(tiny_engine: Any) -> Iterator[Any]:
    yield lambda text: tiny_engine.tokenize(text, parse_special=True)


def parser(analysis: Any, thinking: bool | None, with_prompt: bool = True) -> Any:
    prompt = analysis.render(ASK, tools=[WEATHER], thinking=thinking) if with_prompt else None
    return analysis.parser(tools=[WEATHER], thinking=thinking, prompt=prompt)


def assert_agrees_with_the_text(p: Any, output_ids: list[int], encode: Any, engine: Any) -> None:
    """At every prefix no answer is read while reasoning has not ended; in the whole output all
    the reasoning read lies before the answer's ids."""
    ids = p.reasoning_ids(encode)
    for count in range(len(output_ids) + 1):
        prefix = output_ids[:count]
        text = engine.detokenize(prefix)
        message = p.parse(text)
        start = ids.content_start(prefix)
        assert p.is_reasoning_end(prefix, encode) is (start is not None)
        if start is None:
            assert not message["content"] and not message["tool_calls"], text
            assert p.extract_content_ids(prefix, encode) == []
        elif count == len(output_ids):  # (a call cut off early is still reasoning to the text's reading)
            before = p.parse(engine.detokenize(prefix[:start]))
            assert (message["reasoning_content"] or "") == (before["reasoning_content"] or ""), text
        if start is not None:
            assert p.extract_content_ids(prefix, encode) == prefix[start:]
        assert ids.reasoning_token_count(prefix) <= count


def test_reasoning_ends_at_its_end_marker_with_thinking_on(v31: Any, encode: Any, tiny_engine: Any) -> None:
    p = parser(v31, True)
    reasoning, answer = encode("Let me see."), encode("It is sunny.")
    end = encode("</think>")
    assert len(end) == 1
    output = [*reasoning, *end, *answer]
    assert not p.is_reasoning_end(reasoning, encode)
    assert p.extract_content_ids(reasoning, encode) == []
    assert p.is_reasoning_end(output, encode)
    assert p.extract_content_ids(output, encode) == answer
    assert p.reasoning_ids(encode).reasoning_token_count(output) == len(reasoning)
    assert tiny_engine.detokenize(p.extract_content_ids(output, encode)) == p.parse(
        tiny_engine.detokenize(output))["content"]
    assert_agrees_with_the_text(p, output, encode, tiny_engine)


def test_a_call_opened_inside_reasoning_ends_it_and_stays_in_the_answer(v31: Any, encode: Any,
                                                                        tiny_engine: Any) -> None:
    p = parser(v31, True)
    reasoning, call = encode("I should call it. "), encode(CALLS + CALL)
    output = [*reasoning, *call]
    assert p.is_reasoning_end(output, encode)
    assert p.extract_content_ids(output, encode) == call
    message = p.parse(tiny_engine.detokenize(output))
    assert message["tool_calls"] and message["reasoning_content"] == "I should call it."
    assert p.parse(tiny_engine.detokenize(call))["tool_calls"][0]["function"] == message["tool_calls"][0]["function"]
    assert_agrees_with_the_text(p, output, encode, tiny_engine)


def test_with_thinking_off_everything_is_the_answer(v31: Any, encode: Any) -> None:
    p = parser(v31, False)
    output = encode("Hello </think> there")
    assert p.is_reasoning_end([], encode)
    assert p.extract_content_ids(output, encode) == output
    assert p.reasoning_ids(encode).reasoning_token_count(output) == 0


def test_an_output_free_to_open_reasoning_decides_at_its_first_word(v31: Any, encode: Any, tiny_engine: Any) -> None:
    p = parser(v31, None, with_prompt=False)  # no prompt, no switch: the model may open reasoning itself
    ids = p.reasoning_ids(encode)
    opened = encode(" <think>hm</think>Hi")
    assert not p.is_reasoning_end(encode(" "), encode)
    assert not p.is_reasoning_end(opened[:2], encode)
    assert p.extract_content_ids(opened, encode) == encode("Hi")
    direct = encode("Hi there, how are you doing today, my friend?")
    assert p.is_reasoning_end(direct[:1], encode) and ids.ends_within(direct[:1], 1)
    assert p.extract_content_ids(direct, encode) == direct
    assert not ids.ends_within(direct, 1)  # decided near the first word, not again later
    before = encode("a prompt the engine passes too")
    assert ids.ends_within([*before, *direct[:1]], 1, begin=len(before))
    assert not ids.ends_within([*before, *opened[:2]], 1, begin=len(before))
    assert_agrees_with_the_text(p, opened, encode, tiny_engine)


def test_the_streaming_check_sees_a_marker_in_the_last_ids(v31: Any, encode: Any) -> None:
    ids = parser(v31, True).reasoning_ids(encode)
    reasoning, end = encode("a b c"), encode("</think>")
    assert not any(ids.ends_within(reasoning[:n], 1) for n in range(1, len(reasoning) + 1))
    assert ids.ends_within([*reasoning, *end], 1)
    assert not ids.ends_within([*reasoning, *end, *encode("x")], 1)
    assert ids.ends_within([*reasoning, *encode(CALLS)], 1)


def test_a_hugging_face_tokenizer_is_taken_as_it_is(v31: Any, tmp_path: Any) -> None:
    pytest.importorskip("transformers")
    from engine_tokenizer import write_tokenizer
    from transformers import AutoTokenizer

    folder = write_tokenizer(tmp_path / "tok", v31.source, BOS, EOS, specials=["<think>", "</think>", CALLS])
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    p = parser(v31, True)
    output = tokenizer.encode("hm</think>Hi", add_special_tokens=False)
    assert tokenizer.decode(p.extract_content_ids(output, tokenizer)) == "Hi"
    assert p.reasoning_ids(tokenizer) is p.reasoning_ids(tokenizer)
