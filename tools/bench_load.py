#!/usr/bin/env python3
"""The server under concurrent load, and the second turn of a long conversation.

1. Throughput: for each ``--parallel`` value a server is started; then 1, 2, 4 and 8 clients
   each send ``--requests`` streaming requests one after another, all clients at once
   (``ignore_eos``, ``--tokens`` tokens each, a different seed and prompt per request). Printed
   per row: the aggregate tokens/s (completion tokens of all requests over the wall time of the
   round), time to first token (p50/p95, from sending the request to the first generated text),
   how many requests were refused with 503, and the CPU time the server process and the clients
   spent per token (Linux): on a machine shared with other work, wall-clock figures swing with
   the load, CPU time much less.
2. Prefix reuse: a conversation of about 1,500 prompt tokens, then its second turn (the first
   answer and a new question appended), with the prompt cache on and off
   (``--no-prefix-cache``). Printed: ``prompt_tokens``, ``cached_tokens`` and ``prefill_time``
   of both turns.

Without ``--model`` the tiny random-weight ``deepseek2`` model is built with llama.cpp's
DeepSeek V3.1 template. The machine's load average is printed before and after: on a shared
machine the figures swing with it.

Usage::

    python tools/bench_load.py [--model M.gguf] [--parallel 1,4] [--clients 1,2,4,8] [--tokens 96] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOPICS = ["rain", "snow", "the sea", "mountains", "cities", "trains", "birds", "clocks"]


def tiny_model(out_dir: Path) -> Path:
    sys.path.insert(0, str(REPO / "tools"))
    import fetch_corpus
    import make_tiny_model

    template = fetch_corpus.templates_dir() / "deepseek-ai-DeepSeek-V3.1.jinja"
    if not template.is_file():
        fetch_corpus.fetch()
    return make_tiny_model.build_tiny_model(out_dir / "tiny-v3.1.gguf", template.read_text(encoding="utf-8"),
                                            vocab_path=fetch_corpus.vocab_path())


def start_server(model: Path, log_path: Path, *args: str) -> tuple[subprocess.Popen, str]:
    import httpx

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "autoparser.server", "--model", str(model), "--port", "0",
               "--log-level", "warning", "--max-queue", "64", *args]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"the server exited:\n{log_path.read_text()}")
        found = re.search(r"listening on (http://\S+)", log_path.read_text(errors="replace"))
        if found:
            try:
                if httpx.get(found.group(1) + "/health", timeout=2).status_code == 200:
                    return process, found.group(1)
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    process.kill()
    sys.exit("the server did not start")


def stop_server(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


@dataclass
class Outcome:
    tokens: int = 0
    ttft_s: float | None = None
    refused: bool = False


def streamed_request(url: str, n_tokens: int, seed: int) -> Outcome:
    import httpx

    body = {"stream": True, "max_tokens": n_tokens, "seed": seed, "ignore_eos": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"Request {seed}: say something about "
                                                     f"{TOPICS[seed % len(TOPICS)]}."}]}
    outcome = Outcome()
    start = time.perf_counter()
    with httpx.Client(base_url=url, timeout=600) as http, \
            http.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code == 503:
            outcome.refused = True
            return outcome
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                outcome.tokens = chunk["usage"]["completion_tokens"]
            delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
            if outcome.ttft_s is None and (delta.get("content") or delta.get("reasoning_content")
                                           or delta.get("tool_calls")):
                outcome.ttft_s = time.perf_counter() - start
    return outcome


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_round(url: str, clients: int, requests: int, n_tokens: int, seed0: int) -> tuple[float, list[Outcome]]:
    """All clients at once, each sending `requests` requests in turn: (wall seconds, outcomes)."""
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client(index: int) -> None:
        barrier.wait()
        for r in range(requests):
            outcome = streamed_request(url, n_tokens, seed0 + index * requests + r)
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, outcomes


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def throughput(model: Path, tmp: Path, parallel: int, args: argparse.Namespace) -> list[dict]:
    process, url = start_server(model, tmp / f"server-p{parallel}.log", "--parallel", str(parallel),
                                "--n-ctx", str(args.n_ctx), *args.server_args)
    rows = []
    try:
        streamed_request(url, 8, 0)  # warm-up
        for clients in args.clients:
            server_cpu, own_cpu = cpu_seconds(process.pid), time.process_time()
            wall, outcomes = load_round(url, clients, args.requests, args.tokens, seed0=1000 * clients)
            server_cpu, own_cpu = cpu_seconds(process.pid) - server_cpu, time.process_time() - own_cpu
            done = [o for o in outcomes if not o.refused]
            n_tokens = max(1, sum(o.tokens for o in done))
            ttfts = [o.ttft_s for o in done if o.ttft_s is not None]
            rows.append({"parallel": parallel, "clients": clients, "requests": len(outcomes),
                         "refused": len(outcomes) - len(done), "tokens": sum(o.tokens for o in done),
                         "complete": all(o.tokens == args.tokens for o in done),
                         "tokens_per_s": sum(o.tokens for o in done) / wall,
                         "ttft_p50_ms": 1000 * statistics.median(ttfts) if ttfts else float("nan"),
                         "ttft_p95_ms": 1000 * percentile(ttfts, 0.95),
                         "server_cpu_us": 1e6 * server_cpu / n_tokens, "client_cpu_us": 1e6 * own_cpu / n_tokens})
            print(_row_text(rows[-1]), flush=True)
    finally:
        stop_server(process)
    return rows


def _row_text(row: dict) -> str:
    return (f"--parallel {row['parallel']}  {row['clients']} client(s): {row['tokens_per_s']:7.1f} tokens/s  "
            f"TTFT p50 {row['ttft_p50_ms']:6.1f} ms  p95 {row['ttft_p95_ms']:6.1f} ms  "
            f"{row['requests']} requests, {row['refused']} refused, "
            f"{'all tokens' if row['complete'] else 'TOKENS MISSING'}; "
            f"CPU per token: server {row['server_cpu_us']:.0f} us, clients {row['client_cpu_us']:.0f} us")


def conversation(n_sentences: int) -> list[dict]:
    sentences = [f"Note {i}: the {TOPICS[i % len(TOPICS)]} report for day {i} says conditions were "
                 f"{['calm', 'windy', 'mild', 'harsh'][i % 4]} and nothing else changed." for i in range(n_sentences)]
    return [{"role": "system", "content": " ".join(sentences)},
            {"role": "user", "content": "Summarize the notes above in one sentence."}]


def second_turn(model: Path, tmp: Path, reuse: bool, args: argparse.Namespace) -> dict:
    import httpx

    flags = ["--parallel", "1", "--n-ctx", str(args.n_ctx), *args.server_args] + ([] if reuse else ["--no-prefix-cache"])
    process, url = start_server(model, tmp / f"server-reuse-{reuse}.log", *flags)
    try:
        with httpx.Client(base_url=url, timeout=600) as http:
            def ask(messages: list[dict]) -> dict:
                return http.post("/v1/chat/completions", json={
                    "messages": messages, "max_tokens": 24, "seed": 1,
                    "temperature": 0}).raise_for_status().json()

            http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "warm up"}],
                                                    "max_tokens": 2})
            messages = conversation(args.sentences)
            first = ask(messages)
            answer = first["choices"][0]["message"]
            messages += [{"role": "assistant", "content": answer.get("content") or ""},
                         {"role": "user", "content": "Now say which day was the calmest."}]
            second = ask(messages)
    finally:
        stop_server(process)
    turns = [first, second]
    return {"reuse": reuse,
            "prompt_tokens": [t["usage"]["prompt_tokens"] for t in turns],
            "cached_tokens": [t["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) for t in turns],
            "prefill_ms": [t["prefill_time"] for t in turns]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="GGUF model (default: the tiny deepseek2 model)")
    parser.add_argument("--parallel", default="1,4", help="--parallel values to serve with (default 1,4)")
    parser.add_argument("--clients", default="1,2,4,8", help="concurrent clients (default 1,2,4,8)")
    parser.add_argument("--requests", type=int, default=2, help="requests per client (default 2)")
    parser.add_argument("--tokens", type=int, default=96, help="tokens per request (default 96)")
    parser.add_argument("--n-ctx", type=int, default=8192, help="server context (default 8192)")
    parser.add_argument("--sentences", type=int, default=72,
                        help="sentences in the conversation's first message (default 72: ~1,500 tokens)")
    parser.add_argument("--skip-load", action="store_true", help="only the second-turn measurement")
    parser.add_argument("--threads", type=int, help="the servers' --threads (default: theirs)")
    args = parser.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",")]
    args.server_args = ["--threads", str(args.threads)] if args.threads else []
    parallels = [int(p) for p in args.parallel.split(",")]

    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model = Path(args.model) if args.model else tiny_model(tmp)
        print(f"model: {model.name}, {args.tokens} tokens per request, {args.requests} request(s) per client")
        rows: list[dict] = []
        if not args.skip_load:
            for parallel in parallels:
                rows += throughput(model, tmp, parallel, args)
        turns = [second_turn(model, tmp, reuse, args) for reuse in (True, False)]
    if rows:
        one = next((r for r in rows if r["parallel"] == 1 and r["clients"] == 1), rows[0])
        for row in rows:
            if row["clients"] == 8:
                print(f"8 clients, --parallel {row['parallel']}: {row['tokens_per_s'] / one['tokens_per_s']:.2f}x "
                      "one client's aggregate tokens/s on --parallel 1 (goal for --parallel 4: 2.5x or more)")
    for turn in turns:
        (p1, p2), (_, c2), (t1, t2) = turn["prompt_tokens"], turn["cached_tokens"], turn["prefill_ms"]
        label = "with reuse   " if turn["reuse"] else "without reuse"
        print(f"second turn {label}: prompt {p1} -> {p2} tokens, cached {c2} ({100 * c2 / p2:.0f} %), "
              f"prefill {t1:.1f} ms -> {t2:.1f} ms ({100 * t2 / t1:.0f} % of the first turn)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
