"""Sampling inside ``llama_decode`` (``Engine(device_sampling=True)``) against the host sampler, on
the tiny model: greedy picks the same tokens; sampled picks follow the same distribution (chi-square
tests over many seeded draws); banned end-of-generation tokens, UTF-8 checks, stop tokens and
batches that mix device- and host-sampled generations keep working.

The engines run on the CPU, where a row's logits do not depend on the batch it is decoded in. On a
GPU they do (a fresh prompt is one batch, a reused prefix's last token is decoded alone), and a
random mixture-of-experts model turns those last-bit differences into other experts and other
tokens: there, tokens compare only between generations that reach them in the same cache state.
``tools/gpu_figures.py`` makes this comparison on a GPU."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from corpora import tool_module

pytest_plugins = ["tiny_model"]

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

from autoparser.llama.engine import Engine, GrammarSpec, SamplingParams  # noqa: E402

# the limit `tools/gpu_figures.py` compares the same draws with on a GPU
chi_square_limit = tool_module("gpu_figures").chi_square_limit

PROMPT = "<｜User｜>Tell me something about the weather.<｜Assistant｜>"
DRAWS = 1500


@pytest.fixture(scope="module")
def engines(tiny_model_path: Path) -> Iterator[tuple[Engine, Engine]]:
    device = Engine(str(tiny_model_path), n_ctx=2048, n_parallel=2, device_sampling=True)
    host = Engine(str(tiny_model_path), n_ctx=2048, n_parallel=2, device_sampling=False)
    yield device, host
    device.close()
    host.close()


def tokens_of(engine: Engine, prompt: str, n: int, sampling: SamplingParams, **kwargs: object) -> list[int]:
    return [t.token_id for t in engine.generate(engine.tokenize(prompt), n, sampling, **kwargs)]  # type: ignore[arg-type]


def first_tokens(engine: Engine, sampling: dict[str, float], n: int = DRAWS) -> Counter[int]:
    return Counter(tokens_of(engine, PROMPT, 1, SamplingParams(seed=seed, **sampling))[0] for seed in range(n))


def test_device_sampling_is_on_where_asked(engines: tuple[Engine, Engine]) -> None:
    device, host = engines
    assert device.device_sampling and not host.device_sampling
    generation = device.new_generation(device.tokenize(PROMPT), 4, SamplingParams(seed=1))
    assert generation.on_device
    generation.close()
    grammar = device.new_generation(device.tokenize(PROMPT), 4, SamplingParams(seed=1),
                                    grammar=GrammarSpec('root ::= "a"+'))
    penalised = device.new_generation(device.tokenize(PROMPT), 4, SamplingParams(seed=1, presence_penalty=0.5))
    with_logprobs = device.new_generation(device.tokenize(PROMPT), 4, SamplingParams(seed=1, logprobs=2))
    assert not any(g.on_device for g in (grammar, penalised, with_logprobs))
    for generation in (grammar, penalised, with_logprobs):
        generation.close()


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_greedy_gives_the_host_tokens(engines: tuple[Engine, Engine], ignore_eos: bool) -> None:
    device, host = engines
    greedy = SamplingParams(temperature=0.0)
    for topic in ("rain", "trains", "the sea"):
        prompt = f"<｜User｜>Say something about {topic}.<｜Assistant｜>"
        assert tokens_of(device, prompt, 48, greedy, ignore_eos=ignore_eos) == \
            tokens_of(host, prompt, 48, greedy, ignore_eos=ignore_eos)


def test_top_k_draws_follow_the_softmax(engines: tuple[Engine, Engine]) -> None:
    """Goodness of fit: top-k 10 at temperature 0.7 over the first token's logits, whose ten best
    log-probabilities the host reports."""
    device, host = engines
    tokens_of(host, PROMPT, 1, SamplingParams(temperature=0.0))  # the draws' cache state: see the module's text
    reported = next(iter(host.generate(host.tokenize(PROMPT), 1, SamplingParams(temperature=0.0, logprobs=20))))
    assert reported.logprobs is not None
    best = reported.logprobs.top[:10]
    ids = [token for token, _piece, _logprob in best]
    scaled = np.array([logprob for _token, _piece, logprob in best]) / 0.7
    expected = np.exp(scaled - scaled.max())
    expected /= expected.sum()
    counts = first_tokens(device, {"temperature": 0.7, "top_k": 10, "top_p": 1.0, "min_p": 0.0})
    assert set(counts) <= set(ids)
    observed = np.array([counts[token] for token in ids], dtype=float)
    bins = expected * DRAWS >= 5  # pool the rare ones, as a chi-square test needs
    observed = np.append(observed[bins], observed[~bins].sum())
    expected = np.append(expected[bins], expected[~bins].sum()) * DRAWS
    keep = expected > 0
    statistic = float((((observed - expected) ** 2)[keep] / expected[keep]).sum())
    assert statistic < chi_square_limit(int(keep.sum()) - 1), (statistic, observed, expected)


def test_whole_vocabulary_draws_match_the_host(engines: tuple[Engine, Engine]) -> None:
    """Homogeneity: the server's default sampling (temperature 1, whole vocabulary) on the device
    and on the host, each drawn many times with its own seeds."""
    device, host = engines
    sampling = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    on_device, on_host = first_tokens(device, sampling), first_tokens(host, sampling)
    frequent = sorted(t for t in set(on_device) | set(on_host) if on_device[t] + on_host[t] >= 20)
    table = np.array([[counts[t] for t in frequent] + [DRAWS - sum(counts[t] for t in frequent)]
                      for counts in (on_device, on_host)], dtype=float)
    table = table[:, table.sum(axis=0) > 0]
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())
    assert len(frequent) >= 3
    assert statistic < chi_square_limit(table.shape[1] - 1), (statistic, table)


def test_ignore_eos_bans_end_tokens_and_text_stays_utf8(engines: tuple[Engine, Engine]) -> None:
    device, _host = engines
    for seed in range(6):
        tokens = list(device.generate(device.tokenize(PROMPT), 160, SamplingParams(seed=seed, temperature=1.5,
                                                                                     top_k=0, top_p=1.0, min_p=0.0),
                                      ignore_eos=True))
        assert len(tokens) == 160
        assert not any(device.is_eog(t.token_id) for t in tokens)
        data = b"".join(device.token_to_piece(t.token_id) for t in tokens)
        data.decode("utf-8")  # raises on a broken character


def test_a_stop_token_ends_a_device_generation(engines: tuple[Engine, Engine]) -> None:
    device, host = engines
    greedy = SamplingParams(temperature=0.0)
    full = tokens_of(host, PROMPT, 24, greedy, ignore_eos=True)
    stop = full[5]
    cut = full[: full.index(stop)]
    assert tokens_of(device, PROMPT, 24, greedy, ignore_eos=True, stop_token_ids=[stop]) == cut


def test_device_and_host_generations_share_a_batch(engines: tuple[Engine, Engine]) -> None:
    device, host = engines
    greedy = SamplingParams(temperature=0.0)
    expected_free = tokens_of(host, PROMPT, 20, greedy, ignore_eos=True)
    grammar = GrammarSpec('root ::= [a-z ]+ "."')
    expected_grammar = tokens_of(host, PROMPT, 20, greedy, ignore_eos=True, grammar=grammar)
    free = device.new_generation(device.tokenize(PROMPT), 20, greedy, ignore_eos=True)
    constrained = device.new_generation(device.tokenize(PROMPT), 20, greedy, ignore_eos=True, grammar=grammar)
    assert free.on_device and not constrained.on_device
    out: dict[int, list[int]] = {id(free): [], id(constrained): []}
    generations = [free, constrained]
    while not all(g.finished for g in generations):
        for generation, token in zip(generations, device.step(generations), strict=True):
            if token is not None:
                out[id(generation)].append(token.token_id)
    for generation in generations:
        generation.close()
    assert out[id(free)] == expected_free
    assert out[id(constrained)] == expected_grammar


def test_device_generations_stepped_together_give_their_lone_tokens(engines: tuple[Engine, Engine]) -> None:
    """Two device-sampled generations in one batch, one of them ending first: each gets the tokens
    it gets alone, and the step goes on for the other."""
    device, host = engines
    greedy = SamplingParams(temperature=0.0)
    prompts = [PROMPT, "<｜User｜>Say something about trains.<｜Assistant｜>"]
    budgets = [6, 18]
    expected = [tokens_of(host, prompt, n, greedy, ignore_eos=True) for prompt, n in zip(prompts, budgets, strict=True)]
    generations = [device.new_generation(device.tokenize(prompt), n, greedy, ignore_eos=True)
                   for prompt, n in zip(prompts, budgets, strict=True)]
    out: list[list[int]] = [[], []]
    while not all(g.finished for g in generations):
        for tokens, token in zip(out, device.step(generations), strict=True):
            if token is not None:
                tokens.append(token.token_id)
    for generation in generations:
        generation.close()
    assert out == expected


def step_all(engine: Engine, generations: list, out: list[list[int]], steps: int | None = None) -> None:
    """Step until every generation ends (or ``steps`` steps), each one's tokens into ``out``."""
    while not all(g.finished for g in generations) and (steps is None or steps > 0):
        for tokens, token in zip(out, engine.step(generations), strict=True):
            if token is not None:
                tokens.append(token.token_id)
        steps = None if steps is None else steps - 1


def test_a_free_slot_keeps_its_chain_a_while_then_gives_it_up(engines: tuple[Engine, Engine]) -> None:
    """A slot given back keeps its device chain for ``IDLE_CHAIN_STEPS`` steps (the next request
    reseeds it: no new graph plan), then loses it; the generation still running gets its lone
    tokens throughout, and so does a seeded one that takes the kept chain."""
    from autoparser.llama.engine import IDLE_CHAIN_STEPS

    device, _host = engines
    greedy, seeded = SamplingParams(temperature=0.0), SamplingParams(temperature=1.0, seed=7)
    other = "<｜User｜>Say something about trains.<｜Assistant｜>"
    long_budget = 2 * IDLE_CHAIN_STEPS + 10
    expected_long = tokens_of(device, other, long_budget, greedy, ignore_eos=True)
    expected_seeded = tokens_of(device, PROMPT, 6, seeded, ignore_eos=True)
    short = device.new_generation(device.tokenize(PROMPT), 3, SamplingParams(temperature=1.0, seed=3), ignore_eos=True)
    long = device.new_generation(device.tokenize(other), long_budget, greedy, ignore_eos=True)
    out: list[list[int]] = [[], []]
    step_all(device, [short, long], out, steps=4)
    freed = short.slot
    assert short.finished and freed is not None and freed.owner is None
    short.close()
    kept = freed.chain
    assert kept is not None
    again = device.new_generation(device.tokenize(PROMPT), 6, seeded, ignore_eos=True)
    again_out: list[list[int]] = [[], out[1]]
    step_all(device, [again, long], again_out, steps=8)
    assert again.slot is freed and freed.chain is kept  # reseeded, not replaced
    assert again.finished and again_out[0] == expected_seeded
    again.close()
    due = freed.free_since + IDLE_CHAIN_STEPS  # in the engine's count of steps
    step_all(device, [long], [out[1]], steps=due - device._steps - 1)
    assert freed.chain is kept
    step_all(device, [long], [out[1]], steps=1)
    assert freed.chain is None
    step_all(device, [long], [out[1]])
    long.close()
    assert out[1] == expected_long


def test_a_cancelled_device_generation_stops_at_once(engines: tuple[Engine, Engine]) -> None:
    device, host = engines
    greedy = SamplingParams(temperature=0.0)
    expected = tokens_of(host, PROMPT, 5, greedy, ignore_eos=True)
    got: list[int] = []
    generation = device.new_generation(device.tokenize(PROMPT), 20, greedy, ignore_eos=True,
                                       should_stop=lambda: len(got) >= 5)
    while not generation.finished:
        token = device.step([generation])[0]
        if token is not None:
            got.append(token.token_id)
    generation.close()
    assert got == expected
    assert generation.stats.finish_reason == "cancelled"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The same model served with sampling inside llama_decode and on the host."""
    from server_harness import find_template, start_server, tiny_model

    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    started = {mode: start_server(model, "--n-ctx", "2048", "--parallel", "2", "--device-sampling", mode,
                                  log_dir=tmp_path_factory.mktemp(f"device-{mode}")) for mode in ("on", "off")}
    yield started
    for server in started.values():
        server.stop()  # type: ignore[attr-defined]


def chat(server: object, stream: bool, **extra: object) -> tuple[str, str]:
    """(content, finish_reason) of one greedy request, streamed or not."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Say something about rain."}],
            "max_tokens": 40, "temperature": 0, "stream": stream, **extra}
    with server.http() as http:  # type: ignore[attr-defined]
        if not stream:
            choice = http.post("/v1/chat/completions", json=body).raise_for_status().json()["choices"][0]
            return choice["message"]["content"] or "", choice["finish_reason"]
        content, finish = "", ""
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    import json

                    choice = (json.loads(line[6:]).get("choices") or [{}])[0]
                    content += (choice.get("delta") or {}).get("content") or ""
                    finish = choice.get("finish_reason") or finish
        return content, finish


def test_the_server_streams_what_it_returns_whole_with_device_sampling(servers: dict[str, object]) -> None:
    assert "sampling: inside llama_decode" in servers["on"].log_path.read_text()  # type: ignore[attr-defined]
    assert "sampling: on the host" in servers["off"].log_path.read_text()  # type: ignore[attr-defined]
    for extra in ({}, {"ignore_eos": True}, {"stop": ["e"]}):
        whole = chat(servers["on"], False, **extra)
        assert chat(servers["on"], True, **extra) == whole
        assert chat(servers["off"], False, **extra) == whole
