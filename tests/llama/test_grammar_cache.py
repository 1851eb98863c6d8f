"""Grammars compiled once and copied per generation (`autoparser.llama.grammar_cache`): the copies
generate exactly what a freshly parsed grammar generates, eager and lazy, and using a copy
leaves the kept grammar untouched for the next generation."""

from __future__ import annotations

import pytest

pytest_plugins = ["tiny_model"]  # the tiny-model fixtures

pytest.importorskip("llama_cpp")

from autoparser.llama.engine import GenerationStats, GrammarSpec, SamplingParams  # noqa: E402
from autoparser.llama.grammar_check import GrammarError, create_grammar_sampler  # noqa: E402

PROMPT = "<｜User｜>Say something.<｜Assistant｜>"
EAGER = GrammarSpec(gbnf='root ::= "{" [a-z]{1,8} ":" [0-9]{1,3} "}"')
LAZY = GrammarSpec(gbnf='root ::= "a" [0-9]{1,4} "."', lazy=True, trigger_patterns=[r"[\s\S]*?(a)[\s\S]*"])


def texts(engine, grammar: GrammarSpec, seeds: range) -> list[str]:  # type: ignore[no-untyped-def]
    prompt = engine.tokenize(PROMPT)
    return ["".join(t.text for t in engine.generate(prompt, 60, SamplingParams(seed=seed), grammar=grammar,
                                                    stats=GenerationStats()))
            for seed in seeds]


def fresh_samplers(engine, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Every generation parses its grammar anew, as before grammars were kept."""
    monkeypatch.setattr(engine._grammars, "sampler", lambda g: create_grammar_sampler(
        engine.vocab_ptr, g.gbnf, g.root, g.lazy, g.trigger_patterns, g.trigger_tokens))


@pytest.mark.parametrize("grammar", [EAGER, LAZY], ids=["eager", "lazy"])
def test_copies_generate_what_a_freshly_parsed_grammar_generates(tiny_engine, monkeypatch, grammar) -> None:
    kept = texts(tiny_engine, grammar, range(6))
    with monkeypatch.context() as patch:
        fresh_samplers(tiny_engine, patch)
        fresh = texts(tiny_engine, grammar, range(6))
    assert kept == fresh
    if grammar.lazy:  # the trigger fired in some runs, and each later run started before it again
        assert any("a" in text for text in kept) and any(not text.startswith("a") for text in kept)


def test_one_kept_grammar_per_distinct_grammar_and_use_leaves_it_untouched(tiny_engine) -> None:
    own = GrammarSpec(gbnf='root ::= "<" [a-z]{1,6} ">"')
    other = GrammarSpec(gbnf='root ::= "[" [0-9]{1,5} "]"')
    before = len(tiny_engine._grammars)
    first = texts(tiny_engine, own, range(3))
    assert len(tiny_engine._grammars) == before + 1
    assert texts(tiny_engine, own, range(3)) == first  # the same seeds, the same text: nothing carried over
    assert len(tiny_engine._grammars) == before + 1
    texts(tiny_engine, other, range(1))
    assert len(tiny_engine._grammars) == before + 2


def test_a_rejected_grammar_is_an_error_each_time_and_is_not_kept(tiny_engine) -> None:
    bad = GrammarSpec(gbnf='root ::= "a" undefined_rule')
    before = len(tiny_engine._grammars)
    for _ in range(2):
        with pytest.raises(GrammarError):
            tiny_engine.new_generation(tiny_engine.tokenize(PROMPT), 8, SamplingParams(seed=1), grammar=bad)
    assert len(tiny_engine._grammars) == before
