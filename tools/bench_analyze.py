"""Analysis time per template over both real corpora: median and maximum.

    python tools/bench_analyze.py [--repeat 3]

Each template is analyzed from a cold start of its own (compiled-template and render caches are
cleared), `--repeat` times; the best of the repeats counts, to keep scheduler noise out.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import autoparser  # noqa: E402
from autoparser import render  # noqa: E402
from autoparser.render import TemplateRenderError  # noqa: E402


def corpus() -> list[Path]:
    from corpora import all_templates

    return all_templates()


def time_one(source: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        cache = getattr(render, "_COMPILED", None)
        if isinstance(cache, dict):
            cache.clear()
        start = time.perf_counter()
        try:
            autoparser.analyze(source, bos_token="<s>", eos_token="</s>")
        except TemplateRenderError:
            pass
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    paths = corpus()
    if not paths:
        print("no corpus found", file=sys.stderr)
        return 1
    times = {p.name: time_one(p.read_text(encoding="utf-8"), args.repeat) for p in paths}
    ordered = sorted(times.values())
    print(f"templates: {len(ordered)}")
    print(f"median: {statistics.median(ordered) * 1000:.1f} ms   (goal: <= 50 ms)")
    print(f"max:    {ordered[-1] * 1000:.1f} ms   ({max(times, key=times.get)})")
    print(f"p90:    {ordered[int(len(ordered) * 0.9)] * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
