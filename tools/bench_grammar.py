#!/usr/bin/env python3
"""Decode speed with and without a grammar: llama-cpp-python's own path against autoparser's engine.

Prints tokens/s for four runs on the same tiny ``deepseek2`` model, prompt and sampling settings:

- ``llama-cpp-python``: ``Llama.create_completion`` without a grammar, then with
  ``LlamaGrammar.from_string`` (grammar applied to the whole vocabulary before top-k);
- ``autoparser engine``: ``Engine.generate`` without a grammar, then with the same grammar
  (sample first, check the one token, fall back to grammar-filtered sampling on rejection).

The goal is that the engine's constrained decoding runs at 80 % or more of unconstrained
decoding. A random-weight model is the worst case for the sample-first strategy: it rarely picks
an allowed token by itself, so many tokens need grammar-filtered sampling; the note on the
engine's constrained row says how many.

Every configuration runs once per round, rounds repeat ``--runs`` times, and medians are printed
both by wall-clock time and by process CPU time (the latter is steady on a busy machine).

Usage::

    python tools/bench_grammar.py [--model M.gguf | --vocab-size N] [--tokens 256] [--runs 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

#: A tool-call-like JSON list that never has to end: strings, numbers, enums and nesting.
BENCH_GRAMMAR = r"""
root   ::= "[" ws call ( "," ws call )* ws "]"
call   ::= "{" ws "\"name\"" ws ":" ws name ws "," ws "\"arguments\"" ws ":" ws args ws "}"
name   ::= "\"get_weather\"" | "\"search\""
args   ::= "{" ws "\"location\"" ws ":" ws string ws "," ws "\"days\"" ws ":" ws number ws "," ws "\"unit\"" ws ":" ws unit ws "}"
unit   ::= "\"celsius\"" | "\"fahrenheit\""
string ::= "\"" char* "\""
char   ::= [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= "-"? ( "0" | [1-9] [0-9]{0,6} ) ( "." [0-9]{1,6} )?
ws     ::= [ \t\n]{0,4}
"""

PROMPT = "<｜User｜>What is the weather in Paris for the next three days?<｜Assistant｜>"


def _interleaved_rates(runs: dict[str, Callable[[], int]], repeats: int) -> dict[str, tuple[float, float]]:
    """Run every configuration once per round, ``repeats`` rounds; return median tokens/s by wall and CPU time.

    Interleaving spreads load fluctuations of a shared machine evenly over the configurations, and
    the CPU-time figure (tokens per second of process CPU time) is immune to other processes.
    """
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            n = run()
            wall[name].append(n / (time.perf_counter() - start))
            cpu[name].append(n / max(1e-9, time.process_time() - start_cpu))
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in runs}


def bench(model: str, n_tokens: int, runs: int, seed: int, n_gpu_layers: int = 0) -> list[tuple[str, float, float, str]]:
    """Measure the four configurations; rows of (name, wall-clock tok/s, CPU-time tok/s, note), medians."""
    from llama_cpp import Llama, LlamaGrammar

    from autoparser.llama.engine import Engine, GenerationStats, GrammarSpec, SamplingParams

    sampling = {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "min_p": 0.05}
    llm = Llama(model, n_ctx=2048, verbose=False, seed=seed, n_gpu_layers=n_gpu_layers)
    llama_grammar = LlamaGrammar.from_string(BENCH_GRAMMAR, verbose=False)
    engine = Engine(model, n_ctx=2048, n_gpu_layers=n_gpu_layers)
    prompt = engine.tokenize(PROMPT)
    spec = GrammarSpec(gbnf=BENCH_GRAMMAR)
    fallbacks: list[float] = []

    def llama_run(with_grammar: bool) -> int:
        out = llm.create_completion(
            PROMPT,
            max_tokens=n_tokens,
            seed=seed,
            grammar=llama_grammar if with_grammar else None,
            **sampling,
        )
        return int(out["usage"]["completion_tokens"])

    def engine_run(with_grammar: bool) -> int:
        stats = GenerationStats()
        params = SamplingParams(seed=seed, **sampling)
        for _ in engine.generate(
            prompt, n_tokens, params, grammar=spec if with_grammar else None, stats=stats
        ):
            pass
        if with_grammar:
            fallbacks.append(stats.grammar_fallbacks / max(1, stats.completion_tokens))
        return stats.completion_tokens

    configs = {
        "llama-cpp-python, no grammar": lambda: llama_run(False),
        "llama-cpp-python, grammar": lambda: llama_run(True),
        "autoparser engine, no grammar": lambda: engine_run(False),
        "autoparser engine, grammar": lambda: engine_run(True),
    }
    for run in configs.values():  # warm-up
        run()
    fallbacks.clear()
    rates = _interleaved_rates(configs, runs)
    engine.close()
    rows = []
    for name, (wall, cpu) in rates.items():
        note = (
            f"grammar-filtered sampling for {statistics.mean(fallbacks):.0%} of tokens"
            if name == "autoparser engine, grammar"
            else ""
        )
        rows.append((name, wall, cpu, note))
    return rows


def _default_model(tmp: Path, vocab_size: int) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_tiny_model import build_tiny_model

    path = build_tiny_model(
        tmp / "tiny-deepseek2.gguf", chat_template=None, seed=0, n_regular_tokens=vocab_size
    )
    return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF to use (default: build the tiny deepseek2 model)")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per run (default 256)")
    parser.add_argument("--runs", type=int, default=5, help="runs per configuration (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=4000,
        help="regular tokens of the built tiny model (100000: DeepSeek's full vocab)",
    )
    parser.add_argument("--n-gpu-layers", type=int, default=0, help="layers offloaded to a GPU (-1: all; default 0)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or _default_model(Path(tmp), args.vocab_size)
        rows = bench(model, args.tokens, args.runs, args.seed, args.n_gpu_layers)

    width = max(len(r[0]) for r in rows)
    print(
        f"model: {Path(model).name if args.model else f'tiny deepseek2 (built, {args.vocab_size} regular tokens)'}, {args.tokens} tokens x {args.runs} runs, medians"
    )
    print(f"{'configuration':<{width}}  {'wall tok/s':>10}  {'cpu tok/s':>10}")
    for name, wall, cpu, note in rows:
        print(f"{name:<{width}}  {wall:>10.0f}  {cpu:>10.0f}  {note}")
    wall_by = {r[0]: r[1] for r in rows}
    cpu_by = {r[0]: r[2] for r in rows}

    def ratio(a: str, b: str) -> str:
        return f"wall {wall_by[a] / wall_by[b]:.0%}, cpu {cpu_by[a] / cpu_by[b]:.0%}"

    print(
        f"engine constrained / engine unconstrained:             {ratio('autoparser engine, grammar', 'autoparser engine, no grammar')}  (goal >= 80%)"
    )
    print(
        f"engine constrained / llama-cpp-python unconstrained:   {ratio('autoparser engine, grammar', 'llama-cpp-python, no grammar')}"
    )
    print(
        f"llama-cpp-python constrained / unconstrained:          {ratio('llama-cpp-python, grammar', 'llama-cpp-python, no grammar')}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
