#!/usr/bin/env python3
"""Time to first token of a short streamed prompt, one client, with and without tools.

A server is started on the tiny model (``--parallel 1``); after a warm-up, ``--requests``
streamed chat requests are sent one after another, each a short question with a different
seed, ``--tokens`` tokens each. TTFT is the time from sending the request to the first data
line after the role chunk (as ``bench_load.py`` measures it). With ``tools`` every request
carries the same weather tool and ``tool_choice`` ``auto``, so the answer runs under a lazy
GBNF grammar (the grammar is built for the first request and reused by the next ones).
Printed per case: TTFT p50, p95 and min; the machine's load average before and after.

Usage::

    python tools/bench_ttft.py [--model M.gguf | --shape tiny|aligned|medium [--vocab-size N]] [--requests 30] [--tokens 4]
                               [--cases plain,tools] [--threads N] [--n-gpu-layers N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import start_server, stop_server, tiny_model  # noqa: E402
from make_tiny_model import SHAPES  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def body(case: str, seed: int, n_tokens: int) -> dict:
    request = {"model": "bench", "stream": True, "max_tokens": n_tokens, "seed": seed, "ignore_eos": True,
               "messages": [{"role": "user", "content": f"Hello {seed}, how are you?"}]}
    if case == "tools":
        request |= {"tools": TOOLS, "tool_choice": "auto"}
    return request


def ttft(url: str, request: dict) -> float:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        start = time.perf_counter()
        connection.request("POST", "/v1/chat/completions", body=json.dumps(request),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
        seen, first = 0, None
        for line in response:
            if line.startswith(b"data: {"):
                seen += 1
                if seen == 2 and first is None:
                    first = time.perf_counter() - start
        if first is None:
            raise RuntimeError("no token came")
        return first
    finally:
        connection.close()


def run_case(url: str, case: str, args: argparse.Namespace) -> list[float]:
    ttft(url, body(case, 0, args.tokens))  # warm-up: the grammar and parser are built here
    return [ttft(url, body(case, seed, args.tokens)) for seed in range(1, args.requests + 1)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="GGUF model (default: the tiny deepseek2 model)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--vocab-size", type=int, help="regular tokens of the tiny model (default: the shape's)")
    parser.add_argument("--requests", type=int, default=30, help="measured requests per case (default 30)")
    parser.add_argument("--tokens", type=int, default=4, help="tokens per request (default 4)")
    parser.add_argument("--cases", default="plain,tools", help="plain, tools or both (default both)")
    parser.add_argument("--n-gpu-layers", type=int, help="the server's --n-gpu-layers (default: its own)")
    parser.add_argument("--threads", type=int, help="the server's --threads (default: its own; 1 keeps a busy "
                                                     "machine's thread synchronisation out of the prefill)")
    args = parser.parse_args(argv)
    server_args = ["--parallel", "1", "--served-model-name", "bench"]
    if args.n_gpu_layers is not None:
        server_args += ["--n-gpu-layers", str(args.n_gpu_layers)]
    if args.threads is not None:
        server_args += ["--threads", str(args.threads)]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model = Path(args.model) if args.model else tiny_model(tmp, args.shape, args.vocab_size)
        process, url = start_server(model, tmp / "server.log", *server_args)
        try:
            for case in args.cases.split(","):
                times = [1000 * t for t in run_case(url, case, args)]
                ordered = sorted(times)
                print(f"{case:>6}: TTFT p50 {statistics.median(times):6.1f} ms  "
                      f"p95 {ordered[round(0.95 * (len(ordered) - 1))]:6.1f} ms  min {ordered[0]:6.1f} ms  "
                      f"({len(times)} requests, {args.tokens} tokens each)", flush=True)
        finally:
            stop_server(process)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
