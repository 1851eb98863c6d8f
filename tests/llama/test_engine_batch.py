"""Continuous batching and prefix reuse in the engine, on the tiny model: several generations in
one context, joining and leaving between steps, each with its own sampler; slots chosen by the
longest shared prefix; reused prefixes giving the same tokens as fresh ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest_plugins = ["tiny_model"]

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

from autoparser.llama.engine import (  # noqa: E402
    MIN_FAST_ROWS,
    REREAD_FROM,
    Engine,
    Generation,
    GenerationStats,
    SamplingParams,
    chunk_size,
    short_tail_reread,
)

PROMPTS = [f"<｜User｜>Request number {i}: say something about {topic}.<｜Assistant｜>"
           for i, topic in enumerate(["rain", "snow", "the sea", "mountains", "cities", "trains"])]


@pytest.fixture(scope="module")
def batch_engine(tiny_model_path: Path) -> Iterator[Engine]:
    engine = Engine(str(tiny_model_path), n_ctx=4 * 1024, n_parallel=4)
    yield engine
    engine.close()


def lone(engine: Engine, prompt: str, n: int, seed: int, sampling: SamplingParams | None = None,
         **kwargs: Any) -> list[int]:
    tokens = engine.generate(engine.tokenize(prompt), n, sampling or SamplingParams(seed=seed), ignore_eos=True,
                             **kwargs)
    return [t.token_id for t in tokens]


def run_batch(engine: Engine, jobs: list[tuple[str, int, int]], join_at: dict[int, int] | None = None,
              sampling: SamplingParams | None = None, **kwargs: Any) -> tuple[list[list[int]], list[GenerationStats], int]:
    """Run (prompt, max_tokens, seed) jobs together; job i joins at step `join_at[i]` (default 0).
    Returns each job's tokens, stats and the number of steps."""
    join_at = join_at or {}
    stats = [GenerationStats() for _ in jobs]
    gens: list[Any] = [None] * len(jobs)
    out: list[list[int]] = [[] for _ in jobs]
    step = 0
    while step == 0 or any(g is None or not g.finished for g in gens):
        for i, (prompt, n, seed) in enumerate(jobs):
            if gens[i] is None and join_at.get(i, 0) <= step:
                gens[i] = engine.new_generation(engine.tokenize(prompt), n, sampling or SamplingParams(seed=seed),
                                                ignore_eos=True, stats=stats[i], **kwargs)
        running = [(i, g) for i, g in enumerate(gens) if g is not None and not g.finished]
        for (i, _g), token in zip(running, engine.step([g for _, g in running]), strict=True):
            if token is not None:
                out[i].append(token.token_id)
        step += 1
        assert step < 10_000
    for g in gens:
        g.close()
    return out, stats, step


def record_logits(monkeypatch: pytest.MonkeyPatch) -> dict[int, list[np.ndarray]]:
    """Every generation's logits, step by step, keyed by `id()` of its stats. Each stats object
    recorded is kept alive here: a generation given none makes its own, and once it was freed a
    later stats object could take its `id()` and find its logits already recorded."""
    seen: dict[int, list[np.ndarray]] = {}
    kept: list[Any] = []
    original = Generation.sample

    def recording(self: Generation, logits: np.ndarray, *args: Any) -> Any:
        if id(self.stats) not in seen:
            kept.append(self.stats)
        seen.setdefault(id(self.stats), []).append(logits.copy())
        return original(self, logits, *args)

    monkeypatch.setattr(Generation, "sample", recording)
    return seen


def test_every_batched_generation_gets_all_its_tokens(batch_engine: Engine) -> None:
    jobs = [(PROMPTS[i], 20 + 7 * i, i) for i in range(4)]
    out, stats, steps = run_batch(batch_engine, jobs)
    assert [len(tokens) for tokens in out] == [20, 27, 34, 41]
    assert all(s.finish_reason == "length" for s in stats)
    # round robin: the batch advanced every generation at each step, so the longest sets the pace
    assert steps <= 41 + 3
    assert batch_engine.free_slots() == 4


#: How far a batched generation's logits may drift from the lone run's (llama.cpp groups the
#: arithmetic by batch size; differences of 1e-3 to 2e-2 are seen on this model, whose logits
#: spread with a standard deviation of about 5).
TOLERANCE = 0.05


def test_batched_logits_match_lone_logits_within_tolerance(batch_engine: Engine,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy, alone and batched with generations joining at other steps: while the tokens agree,
    the logits agree within TOLERANCE, and where the tokens part, the lone run's two candidates
    were within 2 * TOLERANCE of each other (a near tie that float noise may flip)."""
    seen = record_logits(monkeypatch)
    greedy = SamplingParams(temperature=0.0)
    jobs = [(PROMPTS[i], 40, 0) for i in range(4)]
    alone, alone_logits = [], []
    alone_stats = [GenerationStats() for _ in jobs]  # all kept alive: `seen` is keyed by id()
    for (prompt, n, _), stats in zip(jobs, alone_stats, strict=True):
        alone.append(lone(batch_engine, prompt, n, 0, stats=stats, sampling=greedy))
        alone_logits.append(seen[id(stats)])
    batched, stats, _ = run_batch(batch_engine, jobs, join_at={1: 5, 2: 9, 3: 20}, sampling=greedy)
    for i in range(4):
        together = seen[id(stats[i])]
        for step, (a, b) in enumerate(zip(alone[i], batched[i], strict=True)):
            if a != b:
                lone_row = alone_logits[i][step]
                assert lone_row[a] - lone_row[b] <= 2 * TOLERANCE, (i, step)
                break
            assert np.abs(alone_logits[i][step] - together[step]).max() < TOLERANCE, (i, step)


def test_a_joining_generation_does_not_stall_the_running_ones(batch_engine: Engine) -> None:
    long_prompt = "<｜User｜>" + "a long prompt to read " * 120 + "<｜Assistant｜>"
    jobs = [(PROMPTS[0], 30, 1), (long_prompt, 4, 2)]
    out, stats, steps = run_batch(batch_engine, jobs, join_at={1: 3})
    assert len(out[0]) == 30 and len(out[1]) == 4
    assert stats[1].prompt_tokens > batch_engine.n_batch  # read in several chunks...
    assert steps <= 31 + 1  # ...while the first generation kept getting a token every step


def test_cancelled_generation_leaves_at_the_next_step(batch_engine: Engine) -> None:
    flag = {"stop": False}
    a = batch_engine.new_generation(batch_engine.tokenize(PROMPTS[0]), 100, SamplingParams(seed=1),
                                    ignore_eos=True, should_stop=lambda: flag["stop"])
    b = batch_engine.new_generation(batch_engine.tokenize(PROMPTS[1]), 100, SamplingParams(seed=2),
                                    ignore_eos=True)
    for _ in range(5):
        batch_engine.step([a, b])
    flag["stop"] = True
    batch_engine.step([a, b])
    assert a.finished and a.stats.finish_reason == "cancelled" and not b.finished
    assert batch_engine.free_slots() == 3
    a.close()
    b.close()
    assert batch_engine.free_slots() == 4


def test_slot_choice_prefers_the_longest_shared_prefix(batch_engine: Engine) -> None:
    conversation = "<｜User｜>" + "Tell me about the history of clocks. " * 20 + "<｜Assistant｜>"
    other = "<｜User｜>" + "Something else entirely, about birds. " * 20 + "<｜Assistant｜>"
    run_batch(batch_engine, [(conversation, 8, 1), (other, 8, 2), (PROMPTS[2], 8, 3), (PROMPTS[3], 8, 4)])
    follow_up = conversation + "Sure.<｜end▁of▁sentence｜><｜User｜>And watches?<｜Assistant｜>"
    _, stats, _ = run_batch(batch_engine, [(follow_up, 4, 5), (other + "More.", 4, 6)])
    # the follow-up's short new tail is read with cached tokens again (`short_tail_reread`)
    reread = len(batch_engine.tokenize(follow_up)) - MIN_FAST_ROWS
    assert stats[0].cached_tokens >= min(len(batch_engine.tokenize(conversation)) - 1, reread)
    assert stats[1].cached_tokens >= len(batch_engine.tokenize(other)) - 1


def test_reused_prefix_gives_the_same_tokens_as_a_fresh_run(tiny_model_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A reused prefix against a fresh prompt, greedy: the tokens agree until a near tie, and
    the logits within TOLERANCE. llama.cpp computes a prefix's keys and values with the
    arithmetic of the batch they came in, so the two differ in the last bits (logits by up to
    about 0.03 here); with sampling, the draws part wherever one lands near a boundary."""
    seen = record_logits(monkeypatch)
    greedy = SamplingParams(temperature=0.0)
    base = "<｜User｜>" + "The same long beginning for both requests. " * 30
    first, second = base + "First ending.<｜Assistant｜>", base + "Second ending.<｜Assistant｜>"
    with Engine(str(tiny_model_path), n_ctx=2048, n_parallel=1) as warm, \
            Engine(str(tiny_model_path), n_ctx=2048, n_parallel=1, reuse_prefix=False) as cold:
        first_stats = GenerationStats()  # kept alive: `seen` is keyed by id(), which a freed object gives away
        lone(warm, first, 4, seed=1, stats=first_stats)
        stats, fresh_stats = GenerationStats(), GenerationStats()
        reused = lone(warm, second, 48, seed=9, stats=stats, sampling=greedy)
        fresh = lone(cold, second, 48, seed=9, stats=fresh_stats, sampling=greedy)
        assert stats.cached_tokens >= len(warm.tokenize(base)) - 1
        assert fresh_stats.cached_tokens == 0
    for step, (a, b) in enumerate(zip(fresh, reused, strict=True)):
        fresh_row, reused_row = seen[id(fresh_stats)][step], seen[id(stats)][step]
        if a != b:
            assert fresh_row[a] - fresh_row[b] <= 2 * TOLERANCE, step
            break
        assert np.abs(fresh_row - reused_row).max() < TOLERANCE, step
    with pytest.raises(RuntimeError, match="closed"):
        warm.tokenize(base)


def test_a_prompt_must_fit_its_slot(batch_engine: Engine) -> None:
    assert batch_engine.n_ctx == batch_engine.n_ctx_total // 4
    with pytest.raises(ValueError, match="context"):
        batch_engine.new_generation([1] * batch_engine.n_ctx, 4, SamplingParams())
    prompt = [1] * (batch_engine.n_ctx - 10)
    out = list(batch_engine.generate(prompt, 100, SamplingParams(seed=1), ignore_eos=True))
    assert len(out) == 10  # the budget stops at the slot's end


def test_more_generations_than_slots_is_an_error_not_a_hang(batch_engine: Engine) -> None:
    gens = [batch_engine.new_generation(batch_engine.tokenize(p), 4, SamplingParams(seed=1))
            for p in PROMPTS[:5]]
    with pytest.raises(RuntimeError, match="slots"):
        batch_engine.step(gens)
    for g in gens:
        g.close()
    assert batch_engine.free_slots() == 4


def test_whole_vocabulary_sampling_draws_the_batch_in_one_pass(batch_engine: Engine,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """With OpenAI's default sampling (no top-k, top-p or min-p) every step draws the tokens of all
    its generations from one array of logits rows."""
    from autoparser.llama import engine as engine_module

    rows_per_draw: list[int] = []
    original = engine_module.draw_tokens

    def counting(logits: np.ndarray, *args: Any) -> Any:
        rows_per_draw.append(len(logits))
        return original(logits, *args)

    monkeypatch.setattr(engine_module, "draw_tokens", counting)
    plain = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, seed=5)
    out, _stats, steps = run_batch(batch_engine, [(PROMPTS[i], 24, i) for i in range(4)], sampling=plain)
    assert [len(tokens) for tokens in out] == [24] * 4
    assert rows_per_draw == [4] * 24


def test_a_short_tail_deep_in_the_cache_is_read_with_cached_tokens_again(tiny_model_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A second turn that adds a few dozen tokens to a long prompt: those rows would be read one
    at a time over the whole cache, so the engine reads MIN_FAST_ROWS tokens, some of them cached
    again. Greedy tokens and logits match a plain reuse of the whole prefix."""
    seen = record_logits(monkeypatch)
    greedy = SamplingParams(temperature=0.0)
    base = "<｜User｜>" + "The same long beginning for both requests. " * 30 + "<｜Assistant｜>"
    follow_up = base + "Fine.<｜end▁of▁sentence｜><｜User｜>" + "And then what happened next? " * 4 + "<｜Assistant｜>"
    with Engine(str(tiny_model_path), n_ctx=2048, n_parallel=1) as engine:
        length, prefix = len(engine.tokenize(follow_up)), len(engine.tokenize(base))
        assert REREAD_FROM <= length - prefix < MIN_FAST_ROWS
        lone(engine, base, 1, seed=1)
        stats = GenerationStats()
        reread = lone(engine, follow_up, 16, seed=2, stats=stats, sampling=greedy)
        assert stats.cached_tokens == length - MIN_FAST_ROWS
        monkeypatch.setattr("autoparser.llama.engine.short_tail_reread", lambda keep, _length: keep)
        lone(engine, base, 1, seed=1)
        plain_stats = GenerationStats()
        plain = lone(engine, follow_up, 16, seed=2, stats=plain_stats, sampling=greedy)
        assert plain_stats.cached_tokens >= prefix - 1
    for step, (a, b) in enumerate(zip(plain, reread, strict=True)):
        assert np.max(np.abs(seen[id(plain_stats)][step] - seen[id(stats)][step])) < TOLERANCE
        if a != b:  # a near tie may part greedy choices; after that the runs differ
            break


def test_prompt_chunks_leave_no_short_last_chunk() -> None:
    assert chunk_size(100, 512) == 100
    assert chunk_size(530, 512) == 530 - MIN_FAST_ROWS
    assert chunk_size(2014, 512) == 512
    assert short_tail_reread(2021, 2054) == 2054 - MIN_FAST_ROWS
    assert short_tail_reread(2050, 2054) == 2050  # a few rows cost less than reading a batch again
    assert short_tail_reread(1990, 2054) == 1990  # a fast batch already
    assert short_tail_reread(20, 40) == 20  # the whole prompt is short


def test_generations_of_one_prompt_read_it_once(tiny_model_path: Path) -> None:
    """Two generations of the same prompt started together (a request's `n` choices): the second
    waits for the first to read the prompt and shares its cells, reading only the last token
    itself; its tokens are those of a lone run with its seed, as the cells hold the same keys and
    values a lone run computes."""
    prompt = "<｜User｜>" + "One prompt for several answers, read only once. " * 12 + "<｜Assistant｜>"
    with Engine(str(tiny_model_path), n_ctx=2048, n_parallel=2) as engine, \
            Engine(str(tiny_model_path), n_ctx=2048, n_parallel=1, reuse_prefix=False) as cold:
        length = len(engine.tokenize(prompt))
        assert length > MIN_FAST_ROWS
        out, stats, _ = run_batch(engine, [(prompt, 12, 1), (prompt, 12, 2)])
        assert stats[0].cached_tokens == 0
        assert stats[1].cached_tokens == length - 1
        assert out == [lone(cold, prompt, 12, seed=1), lone(cold, prompt, 12, seed=2)]
        # once the first has read it, a third finds the prompt in the busy slot and shares it too
        first = engine.new_generation(engine.tokenize(prompt), 40, SamplingParams(seed=3), ignore_eos=True)
        for _ in range(3):
            engine.step([first])
        later_stats = GenerationStats()
        later = engine.new_generation(engine.tokenize(prompt), 4, SamplingParams(seed=4), ignore_eos=True,
                                      stats=later_stats)
        engine.step([first, later])
        assert later_stats.cached_tokens == length - 1
        first.close()
        later.close()
