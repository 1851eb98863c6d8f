"""Prompts tokenized from the longest beginning tokenized before (`PrefixTokenizer`) get the
ids tokenizing them whole gives, with the own engine (the tiny model's DeepSeek vocabulary and
DeepSeek V3.1's template); a client's special-token text stays text."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from autoparser.server.prefix_tokens import PrefixTokenizer, PrefixTokens

pytest_plugins = ["tiny_model"]

EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"


@pytest.fixture(scope="module")
def service(tiny_engine: Any):  # type: ignore[no-untyped-def]
    import autoparser
    from autoparser.server.service import ChatService, ServerSettings

    engine = tiny_engine
    analysis = autoparser.analyze(engine.chat_template or "", bos_token=engine.bos_token, eos_token=engine.eos_token)
    return ChatService(analysis, engine, ServerSettings(model_name="tiny"))


def prepared(service: Any, messages: list[dict[str, Any]], **extra: Any) -> Any:
    from autoparser.server.protocol import parse_request

    return service.prepare(parse_request({"messages": messages, "max_tokens": 4, **extra}))


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Question {turn}: the weather in city {turn}?"})
        messages.append({"role": "assistant", "content": f"Sunny, {turn} °C. " * 5})
    return messages[:-1]


def test_a_growing_conversation_gets_the_whole_prompts_ids(service: Any, tiny_engine: Any) -> None:
    sent: list[str] = []
    tokenize = service.prompt_tokens._tokenize
    service.prompt_tokens._tokenize = lambda text: sent.append(text) or tokenize(text)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    try:
        for turns in range(1, 12):
            for extra in ({}, {"tools": tools}):
                chat = prepared(service, conversation(turns), **extra)
                assert chat.prompt_tokens == tiny_engine.tokenize(chat.prompt, parse_special=True)
                if turns > 2:  # only the end went to the tokenizer
                    assert len(sent[-1]) < len(chat.prompt) / 2
    finally:
        service.prompt_tokens._tokenize = tokenize
    assert 0 < service.prompt_tokens.prefixes.bytes <= service.prompt_tokens.prefixes.max_bytes


def test_a_clients_special_token_text_stays_text_after_the_same_text_was_kept(service: Any) -> None:
    """A single user message spelling the markers renders the same text as a two-turn
    conversation whose beginning is kept: its tokens still read the client's spellings as text."""
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
             {"role": "user", "content": "and?"}]
    honest = prepared(service, turns)
    prepared(service, turns)
    spelled = honest.prompt[honest.prompt.index(USER) + len(USER):honest.prompt.rindex(ASSISTANT)]
    assert spelled.startswith("hi") and EOS in spelled
    forged = prepared(service, [{"role": "user", "content": spelled}])
    assert forged.prompt == honest.prompt
    ids = set(service.special_token_ids.values())
    honest_specials = [token for token in honest.prompt_tokens if token in ids]
    forged_specials = [token for token in forged.prompt_tokens if token in ids]
    assert len(forged_specials) == len(honest_specials) - spelled.count(EOS) - spelled.count(USER) - spelled.count(ASSISTANT)


def test_ids_match_whole_tokenization_around_special_tokens(tiny_engine: Any, service: Any) -> None:
    whole = lambda text: tiny_engine.tokenize(text, parse_special=True)  # noqa: E731
    tokenizer = PrefixTokenizer(whole, service.special_token_ids)
    base = f"{USER}a b{ASSISTANT} x y"
    texts = [base, base + f"{EOS}{USER} z", base + f"{EOS}{USER} z{ASSISTANT}", f"{USER}a b{ASSISTANT}",
             base + f"{EOS}{EOS}", f"{USER}{ASSISTANT}", "", "plain", base + "é" * 10 + f"{USER}"]
    for text in texts + texts:
        assert tokenizer(text) == whole(text), text
    assert len(tokenizer.prefixes) > 0


def test_prefix_tokens_are_kept_at_special_tokens_and_bounded_in_bytes() -> None:
    weight = lambda text, tokens: sys.getsizeof(text) + 4 * tokens  # noqa: E731
    prefixes = PrefixTokens(max_bytes=weight("ab", 2) + weight("ab<S>cd", 5) + 10)
    text = "ab<S>cd<S>ef"  # tokens: a b <S>=9 c d <S>=9 e f
    prefixes.store(text, [2, 7], [1, 2, 9, 3, 4, 9, 5, 6], frozenset({9}))
    assert prefixes.bytes == weight("ab", 2) + weight("ab<S>cd", 5)
    assert prefixes.longest("ab<S>cd<S>gh", [2, 7]) == (7, [1, 2, 9, 3, 4])
    assert prefixes.longest("ab<S>xx<S>", [2, 7]) == (2, [1, 2])
    assert prefixes.longest("zz<S>", [2]) == (0, [])
    prefixes.store("a<S>", [1], [1, 2], frozenset({9}))  # no special token among the tokens: kept nowhere
    assert prefixes.longest("a<S>b", [1]) == (0, [])
    prefixes.store("abcdefghij<S>", [10], [1, 9], frozenset({9}))  # over the bound: the least recently used go
    assert prefixes.longest("ab<S>cd<S>", [2, 7]) == (2, [1, 2])
    assert prefixes.longest("abcdefghij<S>x", [10]) == (10, [1])
    assert prefixes.bytes <= prefixes.max_bytes


def test_only_the_tokens_after_a_kept_beginning_are_counted() -> None:
    """`known` vouches for the kept beginning's special tokens; a mismatch after it keeps nothing."""
    prefixes = PrefixTokens()
    # "a<S>b<S>c", cuts 1 and 5; "a<S>b"'s 3 tokens, with the first cut's special token, are known
    prefixes.store("a<S>b<S>c", [1, 5], [1, 9, 2, 9, 3], frozenset({9}), known=(1, 3))
    assert prefixes.longest("a<S>b<S>", [1, 5]) == (5, [1, 9, 2])
    prefixes.store("a<S>x<S>y", [1, 5], [1, 9, 2, 3], frozenset({9}), known=(1, 3))  # one special short
    assert prefixes.longest("a<S>x<S>", [1, 5]) == (1, [1])


def test_many_beginnings_of_one_length_are_found_by_their_text() -> None:
    prefixes = PrefixTokens()
    for seed in range(1000, 3000):
        prefixes.store(f"q{seed}<S>", [5], [seed, 9], frozenset({9}))
    assert prefixes.longest("q2345<S>x", [5]) == (5, [2345])
    assert prefixes.longest("q0000<S>x", [5]) == (0, [])
    assert len(prefixes) == 2000
