"""Whole-vocabulary sampling drawn in numpy: the draws follow the softmax distribution (min-p,
temperature and left-out tokens applied), a seed gives the same tokens every time, and a batch
step draws for each generation what it would draw alone."""

from __future__ import annotations

import numpy as np
import pytest

pytest_plugins = ["tiny_model"]  # the tiny-model fixtures

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

from autoparser.llama.engine import GenerationStats, GrammarSpec, SamplingParams  # noqa: E402
from autoparser.llama.sampling import TokenSampler, draw_token, draw_tokens  # noqa: E402

#: The server's defaults for a request that sets nothing (OpenAI's: no top-k, top-p or min-p).
OPENAI_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
PROMPT = "<｜User｜>Say something.<｜Assistant｜>"


def softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    weights = np.exp(scaled - scaled.max())
    return weights / weights.sum()


def chi_square(counts: np.ndarray, probabilities: np.ndarray) -> float:
    expected = probabilities * counts.sum()
    keep = expected > 0
    assert counts[~keep].sum() == 0, "a token of probability 0 was drawn"
    return float((((counts - expected) ** 2)[keep] / expected[keep]).sum())


#: Chi-square critical value for 5 degrees of freedom at p = 0.001: a correct sampler exceeds it
#: once in a thousand seeds; these seeds are fixed, so the test is deterministic.
CHI2_5DF_P001 = 20.52
DRAWS = 20_000


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7])
def test_draws_follow_the_softmax_distribution(temperature: float) -> None:
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0, 1.5], dtype=np.float32)
    rng = np.random.default_rng(42)
    uniforms = rng.random(DRAWS)
    rows = np.broadcast_to(logits, (DRAWS, logits.size))
    tokens = draw_tokens(rows, np.full(DRAWS, temperature), np.zeros(DRAWS), [None] * DRAWS, uniforms)
    counts = np.bincount(np.array(tokens), minlength=logits.size)
    assert chi_square(counts, softmax(logits, temperature)) < CHI2_5DF_P001


def test_draws_across_blocks_of_a_large_vocabulary_follow_the_distribution() -> None:
    """The draw finds a block of the vocabulary, then a token in it: tokens at both edges of a
    block and in the last, partial block come out in their proportions."""
    chosen = np.array([5, 1023, 1024, 2047, 2999])
    logits = np.full(3000, -40.0, dtype=np.float32)
    logits[chosen] = [0.0, 1.0, 0.5, -0.5, 0.2]
    rows = np.broadcast_to(logits, (DRAWS, logits.size))
    tokens = draw_tokens(rows, np.ones(DRAWS), np.zeros(DRAWS), [None] * DRAWS, np.random.default_rng(11).random(DRAWS))
    counts = np.bincount(np.array(tokens), minlength=logits.size)
    assert set(np.flatnonzero(counts)) <= set(chosen.tolist())
    assert chi_square(counts[chosen], softmax(logits[chosen], 1.0)) < 18.47  # 4 degrees of freedom, p = 0.001


def test_min_p_and_left_out_tokens_are_never_drawn_and_the_rest_keep_their_proportions() -> None:
    logits = np.array([3.0, 2.9, 2.5, 1.0, -2.0, 2.0, 0.0, 2.8], dtype=np.float32)
    min_p = 0.2  # keeps tokens with at least a fifth of the best one's probability: logit >= 3 + ln 0.2
    excluded = np.array([1])
    rng = np.random.default_rng(7)
    rows = np.broadcast_to(logits, (DRAWS, logits.size))
    tokens = draw_tokens(rows, np.full(DRAWS, 0.8), np.full(DRAWS, min_p), [excluded] * DRAWS, rng.random(DRAWS))
    counts = np.bincount(np.array(tokens), minlength=logits.size)
    kept = (logits >= logits.max() + np.log(min_p)) & (np.arange(logits.size) != 1)
    assert set(np.flatnonzero(counts)) == set(np.flatnonzero(kept))  # {0, 2, 5, 7}
    expected = np.where(kept, softmax(logits, 0.8), 0.0)
    expected /= expected.sum()
    assert chi_square(counts, expected) < 16.27  # 3 degrees of freedom, p = 0.001


def test_rows_of_one_batch_are_drawn_independently_and_an_empty_row_gives_none() -> None:
    logits = np.array([[0.0, 5.0, 0.0], [5.0, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=np.float32)
    before = logits.copy()
    tokens = draw_tokens(logits, np.array([0.1, 0.1, 1.0]), np.zeros(3),
                         [None, None, np.array([0, 1, 2])], np.array([0.5, 0.5, 0.5]))
    assert tokens == [1, 0, None]
    assert np.array_equal(logits, before)  # the input (llama.cpp's buffer) is left alone
    # a draw at the very top of the range still lands on a token that can be drawn
    assert draw_tokens(logits[:1], np.ones(1), np.zeros(1), [np.array([2])], np.array([np.nextafter(1.0, 0.0)])) == [1]


def test_only_plain_whole_vocabulary_sampling_is_drawn_in_numpy() -> None:
    def numpy_path(grammar: object = None, **changes: object) -> bool:
        sampler = TokenSampler(16, SamplingParams(**{**OPENAI_DEFAULTS, "seed": 1, **changes}), grammar)
        try:
            return sampler.draws_in_numpy
        finally:
            sampler.grammar = None  # not a real grammar sampler: nothing to free
            sampler.close()

    assert numpy_path()
    assert numpy_path(min_p=0.05, temperature=0.7)
    assert not numpy_path(temperature=0.0)  # greedy
    assert not numpy_path(top_k=40)
    assert not numpy_path(top_p=0.9)
    assert not numpy_path(repetition_penalty=1.1)
    assert not numpy_path(presence_penalty=0.5)
    assert not numpy_path(frequency_penalty=0.5)
    assert not numpy_path(grammar=object())


def test_a_seed_gives_the_same_draws_and_another_seed_others() -> None:
    logits = np.random.default_rng(3).standard_normal((40, 500)).astype(np.float32)

    def draws(seed: int) -> list[int | None]:
        sampler = TokenSampler(500, SamplingParams(**OPENAI_DEFAULTS, seed=seed))
        try:
            return [sampler.sample(row) for row in logits]
        finally:
            sampler.close()

    assert draws(5) == draws(5)
    assert draws(5) != draws(6)


def test_a_batch_draw_is_what_each_sampler_draws_alone() -> None:
    logits = np.random.default_rng(4).standard_normal((3, 300)).astype(np.float32)
    params = [SamplingParams(**{**OPENAI_DEFAULTS, "seed": 10 + i, "temperature": 0.6 + 0.3 * i}) for i in range(3)]
    excluded = [None, np.array([int(np.argmax(logits[1]))]), None]
    alone = []
    for p, row, ex in zip(params, logits, excluded, strict=True):
        sampler = TokenSampler(300, p)
        alone.append(sampler.sample(row, exclude=() if ex is None else ex))
        sampler.close()
    samplers = [TokenSampler(300, p) for p in params]
    together = draw_tokens(logits, np.array([s.temperature for s in samplers]), np.array([s.min_p for s in samplers]),
                           [s.excluded(() if ex is None else ex) for s, ex in zip(samplers, excluded, strict=True)],
                           np.array([s.rng.random() for s in samplers]))
    for sampler in samplers:
        sampler.close()
    assert together == alone


def test_one_row_alone_draws_what_it_draws_in_a_batch() -> None:
    """draw_token (a lone generation) and draw_tokens (a batch step) do the same arithmetic: the
    same token for every row, whatever the temperature, min-p, left-out tokens and draw."""
    rng = np.random.default_rng(8)
    n, vocab = 60, 5000  # several blocks
    logits = (rng.standard_normal((n, vocab)) * 4).astype(np.float32)
    temperature = rng.uniform(0.2, 2.0, n)
    min_p = np.where(rng.random(n) < 0.5, 0.0, rng.uniform(0.0, 0.3, n))
    excluded = [None if i % 3 else rng.choice(vocab, 200, replace=False) for i in range(n)]
    uniforms = rng.random(n)
    together = draw_tokens(logits, temperature, min_p, excluded, uniforms)
    alone = [draw_token(logits[i], temperature[i], min_p[i], excluded[i], uniforms[i]) for i in range(n)]
    assert together == alone


def test_leaving_out_the_best_token_draws_as_in_a_batch() -> None:
    """The lone draw finds the best allowed logit without a copy unless a left-out token holds the
    best value: as indices or as a mask, with and without min-p, the batch's token either way."""
    rng = np.random.default_rng(9)
    n, vocab = 24, 5000
    logits = (rng.standard_normal((n, vocab)) * 4).astype(np.float32)
    logits[::4, 7] = logits[::4, 9] = logits[::4].max(axis=1) + 1  # a tie for the best: one left out
    best = [np.flatnonzero(row == row.max()) for row in logits]
    excluded = [best[i][:1] if i % 2 else np.concatenate((best[i][:1], rng.choice(vocab, 50))) for i in range(n)]
    min_p = np.where(np.arange(n) % 3 == 0, 0.1, 0.0)
    temperature, uniforms = np.full(n, 0.8), rng.random(n)
    together = draw_tokens(logits, temperature, min_p, excluded, uniforms)
    as_indices = [draw_token(logits[i], 0.8, min_p[i], excluded[i], uniforms[i]) for i in range(n)]
    masks = [np.isin(np.arange(vocab), ids) for ids in excluded]
    as_masks = [draw_token(logits[i], 0.8, min_p[i], masks[i], uniforms[i]) for i in range(n)]
    assert together == as_indices == as_masks
    assert all(token not in ids for token, ids in zip(as_indices, excluded, strict=True))


# -- on the tiny model ---------------------------------------------------------------------------


def generate(engine, seed: int, n: int = 40) -> list[int]:  # type: ignore[no-untyped-def]
    stats = GenerationStats()
    sampling = SamplingParams(**OPENAI_DEFAULTS, seed=seed)
    return [t.token_id for t in engine.generate(engine.tokenize(PROMPT), n, sampling, ignore_eos=True, stats=stats)]


def test_a_lone_seeded_request_repeats_its_tokens(tiny_engine) -> None:
    first, again, other = generate(tiny_engine, 21), generate(tiny_engine, 21), generate(tiny_engine, 22)
    assert len(first) == 40
    assert first == again
    assert first != other


def test_a_grammar_keeps_llama_cpp_sampling_and_constrains_the_output(tiny_engine) -> None:
    sampling = SamplingParams(**OPENAI_DEFAULTS, seed=3)
    tokens = list(tiny_engine.generate(tiny_engine.tokenize(PROMPT), 30, sampling,
                                       grammar=GrammarSpec(gbnf='root ::= "yes" | "no"')))
    assert "".join(t.text for t in tokens) in ("yes", "no")
