"""``tools/gpu_figures.py`` reads the figures its benchmarks print and divides them by the ceiling."""

from __future__ import annotations

from collections import Counter

from corpora import tool_module

gpu_figures = tool_module("gpu_figures")
Figures, chi_square_limit, homogeneity = gpu_figures.Figures, gpu_figures.chi_square_limit, gpu_figures.homogeneity

PRINTED = """\
llama_decode, 1 sequence(s):  1679.7 us CPU a step (1679.7 a token), wall  1679.3 us a step
llama_decode, 8 sequence(s):  3129.6 us CPU a step ( 391.2 a token), wall  3127.9 us a step
Engine.step, 8 generation(s):   67.1 us CPU a token (llama_decode   48.7, the rest   18.4), wall  3910.0 us a step
--parallel 8  8 client(s):  1463.4 tokens/s  TTFT p50   62.9 ms  p95  102.9 ms  16 requests, 0 refused
--parallel 8  16 client(s):  1676.0 tokens/s  TTFT p50  635.3 ms  p95  745.4 ms  32 requests, 0 refused
server, streaming (SSE)                 548.9 tokens/s  (runs: 466, 549, 558)
 plain: TTFT p50    7.8 ms  p95   12.0 ms  min    7.3 ms  (20 requests, 4 tokens each)
 tools: TTFT p50   12.8 ms  p95   13.8 ms  min   12.0 ms  (20 requests, 4 tokens each)
"""


def test_the_summary_divides_the_servers_figures_by_the_ceiling() -> None:
    figures = Figures()
    for line in PRINTED.splitlines():
        figures.read(line)
    assert round(figures.ceiling[8]) == 2558 and figures.aggregate == {8: 1463.4}
    summary = "\n".join(figures.summary())
    assert "single stream (server SSE): 549 tokens/s = 92% of the ceiling" in summary
    assert "8 slot(s), 8 client(s): 1,463 tokens/s = 57% of the ceiling (goal 70 %)" in summary
    assert "TTFT p50, tools: 12.8 ms" in summary
    assert "engine step, 8 generation(s): 2,046 tokens/s = 80% of the ceiling" in summary


def test_samples_from_one_distribution_pass_and_others_do_not() -> None:
    same = homogeneity(Counter({1: 132, 2: 57, 3: 5, 4: 4, 5: 2}), Counter({1: 123, 2: 66, 3: 7, 4: 3, 5: 1}))
    other = homogeneity(Counter({1: 38, 2: 952, 3: 481, 4: 29}), Counter({1: 1470, 2: 19, 3: 9, 4: 2}))
    assert same[0] < chi_square_limit(same[1]) and other[0] > chi_square_limit(other[1])
