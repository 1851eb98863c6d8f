#!/usr/bin/env python3
"""The GPU serving figures in one run: the ceiling, the server's share of it, the time to first
token, and sampling inside ``llama_decode`` against sampling on the host.

Every step offloads ``--n-gpu-layers`` (default all) and runs one of the project's benchmarks as
its own process, in the order given, while ``--deadline`` allows (a lent GPU is held for minutes):

- ``decode``: ``bench_decode.py`` at 1, 4, 8 and 16 sequences: ``llama_decode`` alone, the ceiling
  any server reaches, the same with a device sampler chain on each sequence (what sampling inside
  ``llama_decode`` adds), then the engine's step over 1, 8 and 16 generations (its wall time a step
  against ``llama_decode``'s at as many sequences: what sampling and the engine add);
- ``load``: ``bench_load.py`` with N slots and N clients, N = 1, 8, 16 (aggregate tokens/s);
- ``serve``: ``bench_serve.py``, one stream through the server against the bare library;
- ``ttft``: ``bench_ttft.py``, a short prompt's first token, with and without a tool;
- ``grammar``: ``bench_grammar.py``, constrained against free generation;
- ``sampling``: the first token drawn many times inside ``llama_decode`` and on the host, for
  several sampling settings, compared by a chi-square test of homogeneity, and greedy tokens
  compared. Both engines reach each draw in the same cache state: on a GPU a prompt's logits
  depend on how its tokens were batched (a fresh prompt in one batch, a reused prefix's last token
  alone), and a random mixture-of-experts model turns those last-bit differences into other
  experts and other tokens, so draws are only comparable from the same state.

The summary divides the server's figures by the ceiling: single stream (``serve``'s SSE rate over
``llama_decode`` at 1 sequence) and aggregate at N slots (``load`` over ``llama_decode`` at N).

The model: ``python tools/make_tiny_model.py medium.gguf --shape medium --chat-template-file
T.jinja`` (1.2 B random weights, F32, bandwidth-bound like a 2 B F16 model on a GPU).

Usage::

    python tools/gpu_figures.py --model medium.gguf [--steps decode,load,serve,ttft,sampling,grammar]
                                [--n-gpu-layers -1] [--deadline 560]
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
STEPS = ("decode", "load", "serve", "ttft", "sampling", "grammar")
SLOTS = (1, 8, 16)
PROMPT = "<｜User｜>Tell me something about the weather.<｜Assistant｜>"
SAMPLING_SETTINGS = (
    {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05},
    {"temperature": 0.7, "top_k": 10, "top_p": 1.0, "min_p": 0.0},
    {"temperature": 1.0, "top_k": 0, "top_p": 0.9, "min_p": 0.0},
    {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0},
)


@dataclass
class Figures:
    """What the steps printed that the summary divides."""

    ceiling: dict[int, float] = field(default_factory=dict)  # sequences -> llama_decode tokens/s
    chained: dict[int, float] = field(default_factory=dict)  # sequences -> llama_decode with chains, tokens/s
    engine: dict[int, float] = field(default_factory=dict)  # generations -> Engine.step tokens/s
    aggregate: dict[int, float] = field(default_factory=dict)  # slots -> server tokens/s, as many clients
    single_stream: float | None = None
    ttft_ms: dict[str, float] = field(default_factory=dict)

    def read(self, line: str) -> None:
        if m := re.search(r"llama_decode, (\d+) sequence\(s\):.*wall\s+([\d.]+) us a step", line):
            self.ceiling[int(m[1])] = int(m[1]) * 1e6 / float(m[2])
        elif m := re.search(r"llama_decode with chains, (\d+) sequence\(s\):.*wall\s+([\d.]+) us a step", line):
            self.chained[int(m[1])] = int(m[1]) * 1e6 / float(m[2])
        elif m := re.search(r"Engine\.step, (\d+) generation\(s\):.*wall\s+([\d.]+) us a step", line):
            self.engine[int(m[1])] = int(m[1]) * 1e6 / float(m[2])
        elif (m := re.search(r"--parallel (\d+)\s+(\d+) client\(s\):\s+([\d.]+) tokens/s", line)) and m[1] == m[2]:
            self.aggregate[int(m[1])] = float(m[3])
        elif m := re.search(r"server, streaming \(SSE\)\s+([\d.]+) tokens/s", line):
            self.single_stream = float(m[1])
        elif m := re.search(r"(plain|tools): TTFT p50\s+([\d.]+) ms", line):
            self.ttft_ms[m[1]] = float(m[2])

    def summary(self) -> list[str]:
        lines = [f"llama_decode alone, {n} sequence(s): {rate:,.0f} tokens/s" for n, rate in sorted(self.ceiling.items())]
        lines += [f"llama_decode with a sampler chain a sequence, {n}: {rate:,.0f} tokens/s = "
                  f"{rate / self.ceiling[n]:.0%} of the ceiling" for n, rate in sorted(self.chained.items()) if n in self.ceiling]
        lines += [f"engine step, {n} generation(s): {rate:,.0f} tokens/s = {rate / self.ceiling[n]:.0%} of the ceiling"
                  for n, rate in sorted(self.engine.items()) if n in self.ceiling]
        if self.single_stream and 1 in self.ceiling:
            lines.append(f"single stream (server SSE): {self.single_stream:,.0f} tokens/s = "
                         f"{self.single_stream / self.ceiling[1]:.0%} of the ceiling (goal 90 %)")
        for n, rate in sorted(self.aggregate.items()):
            if n in self.ceiling:
                lines.append(f"{n} slot(s), {n} client(s): {rate:,.0f} tokens/s = {rate / self.ceiling[n]:.0%} "
                             f"of the ceiling" + (" (goal 70 %)" if n > 1 else ""))
        lines += [f"TTFT p50, {case}: {ms:.1f} ms (goal 20 ms)" for case, ms in self.ttft_ms.items()]
        return lines


def step_commands(step: str, model: str, ngl: int) -> list[list[str]]:
    tool = [sys.executable]
    gpu = ["--n-gpu-layers", str(ngl)]
    if step == "decode":
        return [tool + [str(TOOLS / "bench_decode.py"), "--model", model, *gpu, "--sizes", "1,4,8,16",
                        "--chains", "--generations", "1,8,16", "--steps", "64", "--reps", "3", "--n-ctx", "4096"]]
    if step == "load":
        return [tool + [str(TOOLS / "bench_load.py"), "--model", model, *gpu, "--parallel", str(n), "--clients", str(n),
                        "--requests", "2", "--tokens", "128", "--n-ctx", "16384", "--skip-reuse"] for n in SLOTS]
    if step == "serve":
        return [tool + [str(TOOLS / "bench_serve.py"), "--model", model, *gpu, "--tokens", "512", "--runs", "3",
                        "--n-ctx", "4096"]]
    if step == "ttft":
        return [tool + [str(TOOLS / "bench_ttft.py"), "--model", model, *gpu, "--requests", "20"]]
    if step == "grammar":
        return [tool + [str(TOOLS / "bench_grammar.py"), "--model", model, *gpu, "--tokens", "256", "--runs", "3"]]
    if step == "sampling":
        return [tool + [str(Path(__file__).resolve()), "--model", model, *gpu, "--sampling-only"]]
    raise SystemExit(f"unknown step {step!r}: choose from {', '.join(STEPS)}")


def run_step(command: list[str], seconds: float, figures: Figures, log: Path) -> None:
    """Run one benchmark, echoing and reading its standard output; llama.cpp's log goes to ``log``."""
    with log.open("ab") as err:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO, bufsize=1)
        deadline = time.monotonic() + seconds
        assert process.stdout is not None
        for line in process.stdout:
            print(line, end="", flush=True)
            figures.read(line)
            if time.monotonic() > deadline:
                process.kill()
                print(f"(stopped at the deadline: {' '.join(command[1:3])})", flush=True)
                break
        process.wait()


def chi_square_limit(dof: int, z: float = 3.09) -> float:
    """The chi-square value exceeded with probability about 0.001 (Wilson-Hilferty)."""
    h = 2.0 / (9.0 * dof)
    return dof * (1.0 - h + z * math.sqrt(h)) ** 3


def homogeneity(a: Counter[int], b: Counter[int]) -> tuple[float, int]:
    """Chi-square statistic and degrees of freedom of two samples of tokens, rare tokens pooled."""
    frequent = sorted(t for t in set(a) | set(b) if a[t] + b[t] >= 10)
    rows = [[c[t] for t in frequent] + [sum(c.values()) - sum(c[t] for t in frequent)] for c in (a, b)]
    columns = [i for i in range(len(rows[0])) if rows[0][i] + rows[1][i] > 0]
    rows = [[row[i] for i in columns] for row in rows]
    total = sum(map(sum, rows))
    statistic = 0.0
    for row in rows:
        for i, observed in enumerate(row):
            expected = sum(row) * (rows[0][i] + rows[1][i]) / total
            statistic += (observed - expected) ** 2 / expected
    return statistic, max(1, len(columns) - 1)


def sampling_check(model: str, ngl: int, draws: int) -> int:
    """Device against host sampling on this model; exit status 1 when a distribution or greedy differs."""
    sys.path.insert(0, str(REPO))
    from autoparser.llama.engine import Engine, SamplingParams

    engines = {on: Engine(model, n_ctx=2048, n_parallel=2, n_gpu_layers=ngl, device_sampling=on) for on in (True, False)}
    print(f"sampling inside llama_decode: {engines[True].device_sampling} (GPU offload: {engines[True].gpu_offload})")
    failures = 0
    for settings in SAMPLING_SETTINGS:
        counts = {on: Counter(next(iter(e.generate(e.tokenize(PROMPT), 1, SamplingParams(seed=seed, **settings)))).token_id
                              for seed in range(draws)) for on, e in engines.items()}
        statistic, dof = homogeneity(counts[True], counts[False])
        same = statistic < chi_square_limit(dof)
        failures += not same
        print(f"{settings}: chi-square {statistic:.1f} with {dof} dof (limit {chi_square_limit(dof):.1f}): "
              f"{'same distribution' if same else 'DIFFERENT'}; device {counts[True].most_common(3)}, "
              f"host {counts[False].most_common(3)}", flush=True)
    greedy = SamplingParams(temperature=0.0)
    for topic in ("rain", "trains", "the sea"):
        prompt = PROMPT.replace("the weather", topic)
        tokens = {on: [t.token_id for t in e.generate(e.tokenize(prompt), 32, greedy, ignore_eos=True)]
                  for on, e in engines.items()}
        failures += tokens[True] != tokens[False]
        print(f"greedy, {topic}: {'same tokens' if tokens[True] == tokens[False] else 'DIFFERENT tokens'}", flush=True)
    for engine in engines.values():
        engine.close()
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="GGUF model (make_tiny_model.py --shape medium)")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, in order (default {','.join(STEPS)})")
    parser.add_argument("--n-gpu-layers", type=int, default=-1, help="layers offloaded (default -1: all)")
    parser.add_argument("--deadline", type=float, default=560.0, help="seconds for all the steps (default 560)")
    parser.add_argument("--draws", type=int, default=400, help="draws per sampling setting (default 400)")
    parser.add_argument("--log", default="gpu_figures.log", help="llama.cpp's output (default gpu_figures.log)")
    parser.add_argument("--sampling-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sampling_only:
        return sampling_check(args.model, args.n_gpu_layers, args.draws)
    start, figures = time.monotonic(), Figures()
    for step in args.steps.split(","):
        for command in step_commands(step, args.model, args.n_gpu_layers):
            left = args.deadline - (time.monotonic() - start)
            if left < 20:
                print(f"===== {step}: skipped, {left:.0f} s left", flush=True)
                continue
            print(f"===== {step}: {' '.join(command[1:])}", flush=True)
            t0 = time.monotonic()
            run_step(command, left, figures, Path(args.log))
            print(f"----- {step} took {time.monotonic() - t0:.1f} s", flush=True)
    print("\n===== summary")
    for line in figures.summary():
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
