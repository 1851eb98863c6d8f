"""The generation engine on the tiny model: determinism, grammars (eager and lazy), the sampling
shortcut's exactness, validation that never crashes the process, cancellation and statistics."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest_plugins = ["tiny_model"]  # the tiny-model fixtures

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

from autoparser.llama.engine import GenerationStats, GrammarSpec, SamplingParams  # noqa: E402
from autoparser.llama.grammar_check import (  # noqa: E402
    GrammarError,
    create_grammar_sampler,
    validate_gbnf,
    validate_trigger_patterns,
)

PROMPT = "<｜User｜>Say something.<｜Assistant｜>"

JSON_LIKE = r"""
root   ::= "{" ws "\"city\"" ws ":" ws string ws "," ws "\"days\"" ws ":" ws [1-9] [0-9]? ws "}"
string ::= "\"" [a-zA-Z ]{1,12} "\""
ws     ::= [ ]?
"""
JSON_LIKE_RE = re.compile(r'\{ ?"city" ?: ?"[a-zA-Z ]{1,12}" ?, ?"days" ?: ?[1-9][0-9]? ?\}')


def run(engine, prompt_text: str = PROMPT, max_tokens: int = 40, **kwargs):  # type: ignore[no-untyped-def]
    stats = GenerationStats()
    sampling = kwargs.pop("sampling", SamplingParams(seed=1))
    tokens = list(engine.generate(engine.tokenize(prompt_text), max_tokens, sampling, stats=stats, **kwargs))
    return tokens, stats


def text_of(tokens) -> str:  # type: ignore[no-untyped-def]
    return "".join(t.text for t in tokens)


# -- plain generation --------------------------------------------------------------------------------


def test_same_seed_same_tokens_other_seed_other_tokens(tiny_engine) -> None:
    a, _ = run(tiny_engine, sampling=SamplingParams(seed=11))
    b, _ = run(tiny_engine, sampling=SamplingParams(seed=11))
    c, _ = run(tiny_engine, sampling=SamplingParams(seed=12))
    assert [t.token_id for t in a] == [t.token_id for t in b]
    assert [t.token_id for t in a] != [t.token_id for t in c]


def test_length_finish_and_statistics(tiny_engine) -> None:
    tokens, stats = run(tiny_engine, max_tokens=12, ignore_eos=True)
    assert len(tokens) == 12 and stats.completion_tokens == 12
    assert stats.finish_reason == "length"
    assert stats.prompt_tokens == len(tiny_engine.tokenize(PROMPT))
    assert stats.prefill_ms > 0 and len(stats.decode_ms) == 12
    assert all(t.elapsed_ms >= 0 for t in tokens)


def test_text_pieces_are_the_incremental_utf8_decoding(tiny_engine) -> None:
    tokens, _ = run(tiny_engine, max_tokens=120, ignore_eos=True, sampling=SamplingParams(seed=5))
    raw = b"".join(tiny_engine.token_to_piece(t.token_id) for t in tokens)
    assert raw.decode("utf-8", errors="replace").startswith(text_of(tokens))


def test_prefix_reuse_between_requests(tiny_engine) -> None:
    run(tiny_engine, "<｜User｜>A shared beginning, then one ending.<｜Assistant｜>", max_tokens=2)
    _, stats = run(tiny_engine, "<｜User｜>A shared beginning, then another.<｜Assistant｜>", max_tokens=2)
    assert stats.cached_tokens > 3


def test_prompt_validation(tiny_engine) -> None:
    with pytest.raises(ValueError, match="empty"):
        tiny_engine.generate([], 4, SamplingParams())
    with pytest.raises(ValueError, match="context"):
        tiny_engine.generate([1] * tiny_engine.n_ctx, 4, SamplingParams())


def test_token_id_is_only_for_single_tokens(tiny_engine) -> None:
    assert tiny_engine.token_id("<｜tool▁calls▁begin｜>") is not None
    assert tiny_engine.token_id("certainly not one token") is None


def test_penalties_change_the_output(tiny_engine) -> None:
    plain, _ = run(tiny_engine, max_tokens=60, ignore_eos=True, sampling=SamplingParams(seed=3))
    penalised, _ = run(
        tiny_engine,
        max_tokens=60,
        ignore_eos=True,
        sampling=SamplingParams(seed=3, presence_penalty=1.5, frequency_penalty=1.0, repetition_penalty=1.3),
    )
    assert [t.token_id for t in plain] != [t.token_id for t in penalised]


# -- cancellation ------------------------------------------------------------------------------------


def test_should_stop_stops_within_a_token(tiny_engine) -> None:
    seen: list[int] = []
    stats = GenerationStats()
    gen = tiny_engine.generate(
        tiny_engine.tokenize(PROMPT),
        50,
        SamplingParams(seed=2),
        ignore_eos=True,
        should_stop=lambda: len(seen) >= 5,
        stats=stats,
    )
    for token in gen:
        seen.append(token.token_id)
    assert len(seen) == 5
    assert stats.finish_reason == "cancelled"


def test_closing_the_iterator_cancels_and_frees_the_engine(tiny_engine) -> None:
    stats = GenerationStats()
    gen = tiny_engine.generate(
        tiny_engine.tokenize(PROMPT), 50, SamplingParams(seed=2), ignore_eos=True, stats=stats
    )
    next(gen)
    gen.close()
    assert stats.finish_reason == "cancelled"
    tokens, again = run(tiny_engine, max_tokens=3, ignore_eos=True)
    assert len(tokens) == 3 and again.finish_reason == "length"


def test_a_second_concurrent_generation_is_refused_not_deadlocked(tiny_engine) -> None:
    first = tiny_engine.generate(tiny_engine.tokenize(PROMPT), 10, SamplingParams(seed=1), ignore_eos=True)
    next(first)
    second = tiny_engine.generate(tiny_engine.tokenize(PROMPT), 10, SamplingParams(seed=1))
    with pytest.raises(RuntimeError, match="one generation at a time"):
        next(second)
    first.close()
    assert len(run(tiny_engine, max_tokens=2, ignore_eos=True)[0]) == 2


# -- grammars ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_grammar_constrains_every_token(tiny_engine, seed: int) -> None:
    tokens, stats = run(
        tiny_engine, max_tokens=80, grammar=GrammarSpec(gbnf=JSON_LIKE), sampling=SamplingParams(seed=seed)
    )
    assert stats.finish_reason == "stop", text_of(tokens)
    assert JSON_LIKE_RE.fullmatch(text_of(tokens)), text_of(tokens)


def test_greedy_grammar_generation_is_deterministic(tiny_engine) -> None:
    greedy = SamplingParams(temperature=0.0)
    a, _ = run(tiny_engine, max_tokens=80, grammar=GrammarSpec(gbnf=JSON_LIKE), sampling=greedy)
    b, _ = run(tiny_engine, max_tokens=80, grammar=GrammarSpec(gbnf=JSON_LIKE), sampling=greedy)
    assert text_of(a) == text_of(b) and JSON_LIKE_RE.fullmatch(text_of(a))


def test_complete_grammar_with_ignore_eos_stops(tiny_engine) -> None:
    tokens, stats = run(
        tiny_engine, grammar=GrammarSpec(gbnf='root ::= "ok"'), ignore_eos=True, max_tokens=20
    )
    assert text_of(tokens) == "ok" and stats.finish_reason == "stop"


def test_lazy_grammar_is_free_before_the_trigger_and_binding_after(tiny_engine) -> None:
    """Trigger on the first letter 'a'; from there the text must be 'a', digits, '.'.

    Most tokens holding an 'a' carry more letters after it, which the grammar rejects: llama.cpp
    would abort the process replaying them, so this also proves the engine's trigger guard.
    """
    spec = GrammarSpec(
        gbnf='root ::= "a" [0-9]{1,4} "."', lazy=True, trigger_patterns=[r"[\s\S]*?(a)[\s\S]*"]
    )
    triggered = 0
    for seed in range(8):
        tokens, stats = run(tiny_engine, max_tokens=120, grammar=spec, sampling=SamplingParams(seed=seed))
        text = text_of(tokens)
        if "a" not in text:
            continue
        triggered += 1
        before, after = text[: text.index("a")], text[text.index("a") :]
        assert before.strip(), "free text came before the trigger"
        assert re.fullmatch(r"a[0-9]{0,4}\.?", after), after
        if stats.finish_reason == "stop":
            assert re.fullmatch(r"a[0-9]{1,4}\.", after), after
    assert triggered >= 2


def test_lazy_grammar_with_trigger_token_never_crashes(tiny_engine) -> None:
    """A trigger token the grammar cannot start with is never accepted (llama.cpp would abort)."""
    think = tiny_engine.token_id("<think>")
    spec = GrammarSpec(gbnf='root ::= "x"', lazy=True, trigger_tokens=[think])
    from autoparser.llama.lazy_guard import LazyTriggerGuard

    guard = LazyTriggerGuard(
        tiny_engine.vocab_ptr,
        spec.gbnf,
        "root",
        [],
        [think],
        tiny_engine.token_to_piece,
        lambda text: tiny_engine.tokenize(text, parse_special=False),
        lambda t: False,
    )
    assert not guard.is_safe(think)
    assert guard.is_safe(tiny_engine.tokenize("hello", parse_special=False)[0])
    tokens, _ = run(tiny_engine, grammar=spec, max_tokens=30)
    assert think not in [t.token_id for t in tokens]


# -- the sample-first shortcut is exact --------------------------------------------------------------


def _brute_force_best(allowed: np.ndarray, logits: np.ndarray, top_k: int, min_p: float) -> list[int]:
    ranked = allowed[np.argsort(-logits[allowed], kind="stable")][:top_k]
    if ranked.size:
        ranked = ranked[logits[ranked] >= logits[ranked[0]] + np.log(min_p)]
    return ranked.tolist()


@pytest.mark.parametrize("with_trie", [True, False])
def test_grammar_fallback_matches_brute_force(tiny_engine, with_trie: bool) -> None:
    """Along a path through a grammar, the candidates the sampler keeps are exactly the top-k
    grammar-allowed tokens of a full-vocabulary check (what grammar-first sampling would use)."""
    from autoparser.llama.sampling import TokenSampler

    rng = np.random.default_rng(0)
    params = SamplingParams(seed=0, top_k=20, min_p=0.05)
    grammar = create_grammar_sampler(tiny_engine.vocab_ptr, JSON_LIKE)
    sampler = TokenSampler(
        tiny_engine.n_vocab,
        params,
        grammar,
        trie=tiny_engine._token_trie() if with_trie else None,
        direct_tokens=tiny_engine._special_ids if with_trie else None,
    )
    all_ids = np.arange(tiny_engine.n_vocab, dtype=np.int32)
    try:
        for _ in range(25):
            logits = (rng.standard_normal(tiny_engine.n_vocab) * 3).astype(np.float32)
            allowed = all_ids[sampler._check(all_ids)]
            if with_trie:
                assert sorted(sampler._all_allowed().tolist()) == allowed.tolist()
            best = _brute_force_best(allowed, logits, 20, 0.05)
            assert sampler._best_allowed(logits).tolist() == best
            if with_trie:
                direct = sampler._restrictive_candidates(logits)
                assert direct is None or direct.tolist() == best
            token = sampler.sample(logits)
            if token is None or tiny_engine.is_eog(token):
                break
            assert sampler.grammar_allows(token)
            sampler.accept(token)
    finally:
        sampler.close()


# -- validation never crashes ------------------------------------------------------------------------

BAD_GRAMMARS = {
    "undefined rule": "root ::= item",
    "no root": 'start ::= "a"',
    "left recursion": 'root ::= root "a" | "b"',
    "bad escape": r'root ::= "\q"',
    "unterminated class": "root ::= [a-",
    "unterminated string": 'root ::= "abc',
    "missing ::=": 'root := "a"',
    "unknown token": "root ::= <｜no▁such▁token｜>",
    "empty": "   ",
}


@pytest.mark.parametrize("name", sorted(BAD_GRAMMARS))
def test_bad_grammars_raise_in_process(tiny_engine, name: str) -> None:
    with pytest.raises(GrammarError) as info:
        validate_gbnf(BAD_GRAMMARS[name], vocab=tiny_engine)
    assert str(info.value)


def test_bad_grammar_in_generate_raises_before_any_token_and_engine_survives(tiny_engine) -> None:
    with pytest.raises(GrammarError):
        tiny_engine.generate(
            tiny_engine.tokenize(PROMPT), 5, SamplingParams(), grammar=GrammarSpec(gbnf="root ::= x")
        )
    with pytest.raises(GrammarError):
        tiny_engine.generate(
            tiny_engine.tokenize(PROMPT),
            5,
            SamplingParams(),
            grammar=GrammarSpec(gbnf='root ::= "a"', lazy=True, trigger_patterns=["(?<=x)a"]),
        )
    tokens, _ = run(tiny_engine, max_tokens=2, ignore_eos=True)
    assert len(tokens) == 2


def test_grammar_check_without_vocabulary_checks_syntax(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOPARSER_VOCAB_GGUF", raising=False)
    validate_gbnf('root ::= <｜anything｜> "x" | <[7]>')
    with pytest.raises(GrammarError, match="Undefined rule"):
        validate_gbnf("root ::= <｜anything｜> nothing")


@pytest.mark.parametrize(
    "pattern, ok",
    [
        (r"[\s\S]*?(<｜tool▁calls▁begin｜>)[\s\S]*", True),
        (r"^(?!\s*<think>)[\s\S]*?(<tool_call>)", True),
        (r"x{2,3}", True),
        (r"(?s).*", False),
        (r"(?<=a)b", False),
        (r"(?P<name>a)", False),
        (r"a{", False),
        (r"\p{L}", False),
        (r"[]a]", False),
        (r"a++", False),
        (r"(unclosed", False),
    ],
)
def test_trigger_patterns_are_checked(pattern: str, ok: bool) -> None:
    if ok:
        validate_trigger_patterns([pattern])
    else:
        with pytest.raises(GrammarError):
            validate_trigger_patterns([pattern])
