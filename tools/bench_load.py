#!/usr/bin/env python3
"""The server under concurrent load, and the second turn of a long conversation.

1. Throughput: for each ``--parallel`` value a server is started; then 1, 2, 4 and 8 clients
   each send ``--requests`` streaming requests one after another, all clients at once
   (``ignore_eos``, ``--tokens`` tokens each, a different seed and prompt per request, the
   server's default sampling). Printed per row: the aggregate tokens/s (completion tokens of
   all requests over the wall time of the round), time to first token (p50/p95, from sending
   the request to the first chunk after the role chunk), how many requests were refused with
   503, and the CPU time spent per token (Linux) by the server's front end, its model worker
   process and the clients: on a machine shared with other work, wall-clock figures swing with
   the load, CPU time much less. With ``--rounds N`` every round runs N times and the median
   tokens/s is printed.
2. Prefix reuse: a conversation of about 1,500 prompt tokens, then its second turn (the first
   answer and a new question appended), with the prompt cache on and off
   (``--no-prefix-cache``). Printed: ``prompt_tokens``, ``cached_tokens`` and ``prefill_time``
   of both turns.

With ``--upstream``, the first measurement compares the two ways to serve instead: for each
``--parallel`` value a llama-server (``tools/build_llama_server.py``, or ``--llama-server PATH``)
is started on the model with that many slots, and ``autoparser serve --upstream`` in front of it;
each round runs twice, against llama-server's own ``/v1/chat/completions`` and against the front
end, with the same requests (explicit sampling: temperature 1, top-p 1, no top-k or min-p), and
the front end's share of llama-server's tokens/s is printed, the median over the rounds of each
front-end round against the llama-server round just before it (goal with 8 clients: 95 % or more).
The CPU time is the front end's and llama-server's.

The clients run in this process, on the same machine as the server. ``--client lean`` (the
default) reads the SSE stream with the standard library's ``http.client``, takes the token
count from the final ``usage`` chunk and parses no other chunk, so that the clients take as
little CPU as possible from the server; ``--client httpx`` parses every chunk with httpx, and
``--client openai`` streams through the ``openai`` package, as an application would.

Without ``--model`` the tiny random-weight ``deepseek2`` model is built with llama.cpp's
DeepSeek V3.1 template; ``--shape aligned`` builds it with attention widths that fill the CPU's
vector registers, as a real model's do (``make_tiny_model.SHAPES``). The machine's load average is printed before and after: on a shared
machine the figures swing with it. The summary at the end holds the acceptance figures.

Usage::

    python tools/bench_load.py [--model M.gguf | --shape tiny|aligned|medium [--vocab-size N]] [--parallel 1,4] [--clients 1,2,4,8] [--tokens 96]
                               [--threads N] [--n-gpu-layers N] [--device-sampling auto|on|off] [--client lean|httpx|openai] [--rounds N]
    python tools/bench_load.py --upstream [--llama-server PATH] [--parallel 4] [--clients 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import cpu_seconds, server_cpu_seconds, start_server, stop_server, tiny_model  # noqa: E402
from make_tiny_model import SHAPES  # noqa: E402

TOPICS = ["rain", "snow", "the sea", "mountains", "cities", "trains", "birds", "clocks"]
MODEL_NAME = "bench"
SAMPLING: dict = {}
"""Sampling fields every request carries (set with --upstream: llama-server's defaults differ)."""
EXPLICIT_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}


@dataclass
class Outcome:
    tokens: int = 0
    ttft_s: float | None = None
    refused: bool = False


def request_body(n_tokens: int, seed: int) -> dict:
    return {"model": MODEL_NAME, "stream": True, "max_tokens": n_tokens, "seed": seed, "ignore_eos": True,
            "stream_options": {"include_usage": True}, **SAMPLING,
            "messages": [{"role": "user", "content": f"Request {seed}: say something about "
                                                     f"{TOPICS[seed % len(TOPICS)]}."}]}


def lean_request(url: str, n_tokens: int, seed: int) -> Outcome:
    """One streamed request read line by line: TTFT at the first data line after the role chunk,
    the token count from the ``usage`` chunk; no other chunk is parsed."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    outcome = Outcome()
    try:
        start = time.perf_counter()
        connection.request("POST", "/v1/chat/completions", body=json.dumps(request_body(n_tokens, seed)),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status == 503:
            outcome.refused = True
            return outcome
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
        data_lines = 0
        for line in response:
            if not line.startswith(b"data: {"):
                continue
            data_lines += 1
            if data_lines == 2:
                outcome.ttft_s = time.perf_counter() - start
            if b'"completion_tokens"' in line:
                outcome.tokens = json.loads(line[6:])["usage"]["completion_tokens"]
    finally:
        connection.close()
    return outcome


def httpx_request(url: str, n_tokens: int, seed: int) -> Outcome:
    """One streamed request through httpx, every chunk parsed; TTFT at the first generated text."""
    import httpx

    outcome = Outcome()
    start = time.perf_counter()
    with httpx.Client(base_url=url, timeout=600) as client, \
            client.stream("POST", "/v1/chat/completions", json=request_body(n_tokens, seed)) as response:
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


def openai_request(url: str, n_tokens: int, seed: int) -> Outcome:
    """One streamed request through the ``openai`` package; TTFT at the first generated text."""
    import openai

    body = request_body(n_tokens, seed)
    extra = {"ignore_eos": body.pop("ignore_eos")}
    outcome = Outcome()
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
    start = time.perf_counter()
    try:
        stream = client.chat.completions.create(**body, extra_body=extra)
    except openai.APIStatusError as exc:
        if exc.status_code == 503:
            outcome.refused = True
            return outcome
        raise
    with stream:
        for chunk in stream:
            if chunk.usage is not None:
                outcome.tokens = chunk.usage.completion_tokens
            delta = chunk.choices[0].delta if chunk.choices else None
            if outcome.ttft_s is None and delta is not None and (
                    delta.content or getattr(delta, "reasoning_content", None) or delta.tool_calls):
                outcome.ttft_s = time.perf_counter() - start
    client.close()
    return outcome


CLIENTS: dict[str, Callable[[str, int, int], Outcome]] = {
    "lean": lean_request, "httpx": httpx_request, "openai": openai_request}


def load_round(request: Callable[[str, int, int], Outcome], url: str, clients: int, requests: int,
               n_tokens: int, seed0: int) -> tuple[float, list[Outcome]]:
    """All clients at once, each sending `requests` requests in turn: (wall seconds, outcomes)."""
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client(index: int) -> None:
        barrier.wait()
        for r in range(requests):
            outcome = request(url, n_tokens, seed0 + index * requests + r)
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
                                "--n-ctx", str(args.n_ctx), "--max-queue", "64",
                                "--served-model-name", MODEL_NAME, *args.server_args)
    request = CLIENTS[args.client]
    rows = []
    try:
        request(url, 8, 0)  # warm-up
        for clients in args.clients:
            rounds = [measured_round(request, url, process.pid, clients, args) for _ in range(args.rounds)]
            row = rounds[0] if len(rounds) == 1 else combined(rounds)
            rows.append({"parallel": parallel, "clients": clients, **row})
            print(_row_text(rows[-1]), flush=True)
    finally:
        stop_server(process)
    return rows


def measured_round(request: Callable[[str, int, int], Outcome], url: str, pid: int, clients: int,
                   args: argparse.Namespace, worker_pid: int | None = None) -> dict:
    """One round; the CPU time of `pid` and its children, or with `worker_pid`, of `pid` as the
    front end and of `worker_pid` as the model's process. llama-server alone counts as the worker."""
    def cpu() -> dict[str, float]:
        if worker_pid is not None:
            return {"front": cpu_seconds(pid), "worker": cpu_seconds(worker_pid)}
        if args.upstream:
            return {"front": 0.0, "worker": cpu_seconds(pid)}
        return server_cpu_seconds(pid)

    server_before, own_before = cpu(), time.process_time()
    wall, outcomes = load_round(request, url, clients, args.requests, args.tokens, seed0=1000 * clients)
    server_after, own_cpu = cpu(), time.process_time() - own_before
    done = [o for o in outcomes if not o.refused]
    n_tokens = sum(o.tokens for o in done)
    per_token = 1e6 / max(1, n_tokens)
    ttfts = [o.ttft_s for o in done if o.ttft_s is not None]
    return {"requests": len(outcomes), "refused": len(outcomes) - len(done), "tokens": n_tokens,
            "complete": all(o.tokens == args.tokens for o in done), "tokens_per_s": n_tokens / wall,
            "ttft_p50_ms": 1000 * statistics.median(ttfts) if ttfts else float("nan"),
            "ttft_p95_ms": 1000 * percentile(ttfts, 0.95), "ttfts": ttfts,
            "front_cpu_us": per_token * (server_after["front"] - server_before["front"]),
            "worker_cpu_us": per_token * (server_after["worker"] - server_before["worker"]),
            "client_cpu_us": per_token * own_cpu}


def upstream_comparison(model: Path, tmp: Path, parallel: int, args: argparse.Namespace) -> list[dict]:
    """llama-server alone against the front end in front of it, round by round in turn."""
    llama, llama_url = start_llama_server(args.llama_server, model, tmp / f"llama-server-p{parallel}.log",
                                          parallel, args.n_ctx, args.threads)
    try:
        front, front_url = start_server(None, tmp / f"front-p{parallel}.log", "--upstream", llama_url,
                                        "--max-queue", "64", "--served-model-name", MODEL_NAME)
    except BaseException:
        stop_server(llama)
        raise
    request = CLIENTS[args.client]
    rows = []
    try:
        request(llama_url, 8, 0)  # warm-up
        request(front_url, 8, 0)
        for clients in args.clients:
            direct, fronted = [], []
            for _ in range(args.rounds):  # alternated, so that both see the same drift of the machine
                direct.append(measured_round(request, llama_url, llama.pid, clients, args))
                fronted.append(measured_round(request, front_url, front.pid, clients, args,
                                              worker_pid=llama.pid))
            pair = [r[0] if len(r) == 1 else combined(r) for r in (direct, fronted)]
            for target, row in zip(("llama-server", "front end"), pair, strict=True):
                rows.append({"parallel": parallel, "clients": clients, "target": target, **row})
            # each round against the one run just before it: a swing of the machine's load
            # moves both, where the ratio of the two medians would take rounds far apart
            rows[-1]["share"] = statistics.median(
                f["tokens_per_s"] / d["tokens_per_s"] for d, f in zip(direct, fronted, strict=True))
            print(_upstream_row_text(rows[-2]), flush=True)
            print(_upstream_row_text(rows[-1]), flush=True)
    finally:
        stop_server(front)
        stop_server(llama)
    return rows


def start_llama_server(binary: str | None, model: Path, log_path: Path, parallel: int, n_ctx: int,
                       threads: int | None, timeout_s: float = 120.0) -> tuple[subprocess.Popen, str]:
    """llama-server on a free loopback port, `parallel` slots sharing `n_ctx` tokens."""
    import socket

    import httpx

    if binary is None:
        import build_llama_server

        binary = str(build_llama_server.build())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "--parallel", str(parallel),
               "--ctx-size", str(n_ctx), "--no-webui"] + (["--threads", str(threads)] if threads else [])
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"llama-server exited:\n{log_path.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    sys.exit("llama-server did not start")


def _upstream_row_text(row: dict) -> str:
    share = f"  = {100 * row['share']:.1f} % of llama-server alone (median of paired rounds)" if "share" in row else ""
    return (f"--parallel {row['parallel']}  {row['clients']} client(s)  {row['target']:>12}: "
            f"{row['tokens_per_s']:7.1f} tokens/s{_spread(row)}  TTFT p50 {row['ttft_p50_ms']:6.1f} ms  "
            f"p95 {row['ttft_p95_ms']:6.1f} ms  {'all tokens' if row['complete'] else 'TOKENS MISSING'}; "
            f"CPU per token: front end {row['front_cpu_us']:.0f} us, llama-server {row['worker_cpu_us']:.0f} us"
            f"{share}")


def _spread(row: dict) -> str:
    rates = row.get("all_tokens_per_s")
    return f" (rounds: {', '.join(f'{r:.0f}' for r in rates)})" if rates else ""


def combined(rounds: list[dict]) -> dict:
    """Several runs of one round: medians of the rates and CPU times, TTFT over all requests."""
    ttfts = [t for r in rounds for t in r["ttfts"]]
    out = {key: statistics.median(r[key] for r in rounds)
           for key in ("tokens_per_s", "front_cpu_us", "worker_cpu_us", "client_cpu_us")}
    return {**out, "requests": sum(r["requests"] for r in rounds), "refused": sum(r["refused"] for r in rounds),
            "tokens": sum(r["tokens"] for r in rounds), "complete": all(r["complete"] for r in rounds),
            "ttft_p50_ms": 1000 * statistics.median(ttfts) if ttfts else float("nan"),
            "ttft_p95_ms": 1000 * percentile(ttfts, 0.95), "ttfts": ttfts,
            "all_tokens_per_s": [r["tokens_per_s"] for r in rounds]}


def _row_text(row: dict) -> str:
    rates = row.get("all_tokens_per_s")
    spread = f" (rounds: {', '.join(f'{r:.0f}' for r in rates)})" if rates else ""
    server = row["front_cpu_us"] + row["worker_cpu_us"]
    return (f"--parallel {row['parallel']}  {row['clients']} client(s): {row['tokens_per_s']:7.1f} tokens/s{spread}  "
            f"TTFT p50 {row['ttft_p50_ms']:6.1f} ms  p95 {row['ttft_p95_ms']:6.1f} ms  "
            f"{row['requests']} requests, {row['refused']} refused, "
            f"{'all tokens' if row['complete'] else 'TOKENS MISSING'}; "
            f"CPU per token: server {server:.0f} us (front end {row['front_cpu_us']:.0f}, "
            f"model worker {row['worker_cpu_us']:.0f}), clients {row['client_cpu_us']:.0f} us")


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


def print_summary(rows: list[dict], turns: list[dict], args: argparse.Namespace) -> None:
    """The acceptance figures in one place: one client on --parallel 1 against 8 on the largest."""
    print(f"summary ({args.client} clients, {' '.join(args.server_args) or 'default threads'}):")
    one = next((r for r in rows if r["parallel"] == 1 and r["clients"] == 1), None)
    for row in rows:
        if row is one or row["clients"] == max(args.clients):
            server = row["front_cpu_us"] + row["worker_cpu_us"]
            print(f"  {row['clients']} client(s), --parallel {row['parallel']}: {row['tokens_per_s']:.0f} tokens/s, "
                  f"TTFT p50 {row['ttft_p50_ms']:.0f} ms p95 {row['ttft_p95_ms']:.0f} ms, CPU per token: "
                  f"server {server:.0f} us (front end {row['front_cpu_us']:.0f} + model worker "
                  f"{row['worker_cpu_us']:.0f}), clients {row['client_cpu_us']:.0f} us, "
                  f"{row['refused']} refused, {'all tokens' if row['complete'] else 'TOKENS MISSING'}")
            if one is not None and row is not one:
                print(f"    = {row['tokens_per_s'] / one['tokens_per_s']:.2f}x one client on --parallel 1 "
                      "(goal for 8 clients on --parallel 4: 2.5x or more)")
    for turn in turns:
        (p1, p2), (_, c2), (t1, t2) = turn["prompt_tokens"], turn["cached_tokens"], turn["prefill_ms"]
        label = "with reuse   " if turn["reuse"] else "without reuse"
        print(f"  second turn {label}: prompt {p1} -> {p2} tokens, cached {c2} ({100 * c2 / p2:.0f} %), "
              f"prefill {t1:.1f} ms -> {t2:.1f} ms ({100 * t2 / t1:.0f} % of the first turn; goals: "
              "80 % cached or more, 30 % or less)")


def print_upstream_summary(rows: list[dict], args: argparse.Namespace) -> None:
    print(f"summary ({args.client} clients, {args.rounds} round(s), {args.tokens} tokens per request):")
    for row in rows:
        if row["target"] == "front end":
            print(f"  {row['clients']} client(s), --parallel {row['parallel']}: the front end delivers "
                  f"{100 * row['share']:.1f} % of llama-server's tokens/s (goal with 8 clients: 95 % or more), "
                  f"at {row['front_cpu_us']:.0f} us of front-end CPU per token")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="GGUF model (default: the tiny deepseek2 model)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny",
                        help="shape of the tiny model (default tiny, the one the tests use)")
    parser.add_argument("--vocab-size", type=int, help="regular tokens of the tiny model (default: the shape's)")
    parser.add_argument("--n-gpu-layers", type=int, help="the servers' --n-gpu-layers (default: theirs)")
    parser.add_argument("--parallel", default="1,4", help="--parallel values to serve with (default 1,4)")
    parser.add_argument("--clients", default="1,2,4,8", help="concurrent clients (default 1,2,4,8)")
    parser.add_argument("--requests", type=int, default=2, help="requests per client (default 2)")
    parser.add_argument("--tokens", type=int, default=96, help="tokens per request (default 96)")
    parser.add_argument("--n-ctx", type=int, default=8192, help="server context (default 8192)")
    parser.add_argument("--sentences", type=int, default=72,
                        help="sentences in the conversation's first message (default 72: ~1,500 tokens)")
    parser.add_argument("--skip-load", action="store_true", help="only the second-turn measurement")
    parser.add_argument("--skip-reuse", action="store_true", help="only the throughput measurement")
    parser.add_argument("--threads", type=int, help="the servers' --threads (default: theirs)")
    parser.add_argument("--device-sampling", choices=("auto", "on", "off"),
                        help="the servers' --device-sampling (default: theirs; on samples inside llama_decode on "
                             "a CPU too, so that the model worker's CPU a token is what a GPU host spends beside "
                             "the decode plus the CPU's sampling passes)")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="lean",
                        help="how the clients read the stream (default lean: see above)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of every round; medians printed (default 1)")
    parser.add_argument("--upstream", action="store_true",
                        help="compare llama-server alone with autoparser serve --upstream in front of it")
    parser.add_argument("--llama-server", help="the llama-server binary (default: tools/build_llama_server.py's)")
    args = parser.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",")]
    args.server_args = (["--threads", str(args.threads)] if args.threads else []) + (
        ["--n-gpu-layers", str(args.n_gpu_layers)] if args.n_gpu_layers is not None else []) + (
        ["--device-sampling", args.device_sampling] if args.device_sampling else [])
    parallels = [int(p) for p in args.parallel.split(",")]

    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model = Path(args.model) if args.model else tiny_model(tmp, args.shape, args.vocab_size)
        print(f"model: {model.name}, {args.tokens} tokens per request, {args.requests} request(s) per client, "
              f"{args.client} clients, {args.rounds} round(s) each, server flags: "
              f"{' '.join(args.server_args) or '(defaults)'}")
        rows: list[dict] = []
        if args.upstream:
            SAMPLING.update(EXPLICIT_SAMPLING)
            for parallel in parallels:
                rows += upstream_comparison(model, tmp, parallel, args)
            print_upstream_summary(rows, args)
            print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            return 0
        if not args.skip_load:
            for parallel in parallels:
                rows += throughput(model, tmp, parallel, args)
        turns = [] if args.skip_reuse else [second_turn(model, tmp, reuse, args) for reuse in (True, False)]
    print_summary(rows, turns, args)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
