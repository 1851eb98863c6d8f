#!/usr/bin/env python3
"""Generated tokens/s through the server, streaming, against bare ``Llama.create_completion``.

Both sides run the same model, the same prompt (the text the server renders from the chat
messages, fetched with ``return_prompt``, tokenized the same way), the same sampling settings
(llama.cpp's defaults) and seed, and the same number of tokens (``ignore_eos`` on the server; a
random-weight model practically never ends by itself). The rate is completion tokens divided by
the wall time of the whole request as the client sees it: for the server, from sending the
request to reading ``data: [DONE]`` over HTTP; for llama-cpp-python, one
``create_completion`` call without streaming (its fastest path). The configurations run
alternately, ``--runs`` rounds, and the medians are compared. The goal is 97 % or better.
``create_completion(stream=True)`` and the server's engine without the server (what HTTP,
parsing and SSE cost) are printed for reference.

Without ``--model`` the tiny random-weight ``deepseek2`` model is built (``make_tiny_model.py``)
with llama.cpp's DeepSeek V3.1 template. On a shared machine, run with more rounds.

Usage::

    python tools/bench_serve.py [--model M.gguf] [--tokens 512] [--runs 5] [--seed 0] [--n-gpu-layers -1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import start_server, stop_server, tiny_model  # noqa: E402

MESSAGES = [{"role": "user", "content": "Write a long story about the weather in Paris."}]
SAMPLING = {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "min_p": 0.05}  # llama.cpp's defaults


def server_run(http, n_tokens: int, seed: int) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """(completion tokens, seconds) of one streamed request, up to `data: [DONE]`."""
    body = {"model": "bench", "messages": MESSAGES, "max_tokens": n_tokens, "seed": seed, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}, "repetition_penalty": 1.0, **SAMPLING}
    tokens = 0
    start = time.perf_counter()
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
    return tokens, time.perf_counter() - start


def bare_run(llm, prompt_tokens: list[int], n_tokens: int, seed: int, stream: bool) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """The same for ``Llama.create_completion`` on the same prompt tokens."""
    start = time.perf_counter()
    result = llm.create_completion(prompt_tokens, max_tokens=n_tokens, seed=seed, stream=stream,
                                   repeat_penalty=1.0, **SAMPLING)
    if not stream:
        return result["usage"]["completion_tokens"], time.perf_counter() - start
    chunks = list(result)
    seconds = time.perf_counter() - start
    finish = chunks[-1]["choices"][0]["finish_reason"]
    text = "".join(chunk["choices"][0]["text"] for chunk in chunks)
    # Chunks are not tokens (held-back UTF-8); a run cut by max_tokens has exactly that many.
    return (n_tokens if finish == "length" else len(llm.tokenize(text.encode(), add_bos=False))), seconds


def engine_run(engine, prompt_tokens: list[int], n_tokens: int, seed: int) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """The server's own engine without the server around it: what HTTP, parsing and SSE cost."""
    from autoparser.llama.engine import SamplingParams

    start = time.perf_counter()
    tokens = sum(1 for _ in engine.generate(prompt_tokens, n_tokens, SamplingParams(seed=seed, **SAMPLING),
                                            ignore_eos=True))
    return tokens, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="GGUF model (default: the tiny deepseek2 model)")
    parser.add_argument("--tokens", type=int, default=512, help="tokens per run (default 512)")
    parser.add_argument("--runs", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--n-gpu-layers", type=int, default=0, help="layers offloaded to a GPU (-1: all; default 0)")
    args = parser.parse_args(argv)

    import httpx
    from llama_cpp import Llama

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(args.model) if args.model else tiny_model(Path(tmp))
        process, url = start_server(model, Path(tmp) / "server.log", "--n-ctx", str(args.n_ctx),
                                    "--served-model-name", "bench",
                                    "--n-gpu-layers", str(args.n_gpu_layers))
        try:
            with httpx.Client(base_url=url, timeout=300) as http:
                rendered = http.post("/v1/chat/completions", json={
                    "messages": MESSAGES, "max_tokens": 1, "return_prompt": True}).json()["prompt"]
                llm = Llama(str(model), n_ctx=args.n_ctx, verbose=False, seed=args.seed, n_gpu_layers=args.n_gpu_layers)
                prompt_tokens = llm.tokenize(rendered.encode(), add_bos=False, special=True)
                from autoparser.llama.engine import Engine

                engine = Engine(str(model), n_ctx=args.n_ctx, n_gpu_layers=args.n_gpu_layers)
                rates: dict[str, list[float]] = {"server": [], "bare": [], "bare_stream": [], "engine": []}
                runs = {
                    "server": lambda: server_run(http, args.tokens, args.seed),
                    "bare": lambda: bare_run(llm, prompt_tokens, args.tokens, args.seed, stream=False),
                    "bare_stream": lambda: bare_run(llm, prompt_tokens, args.tokens, args.seed, stream=True),
                    "engine": lambda: engine_run(engine, prompt_tokens, args.tokens, args.seed),
                }
                for _ in range(args.runs):
                    for name, run in runs.items():
                        n, seconds = run()
                        rates[name].append(n / seconds)
        finally:
            stop_server(process)
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(f"model: {model.name}, {args.tokens} tokens per run, {args.runs} runs, seed {args.seed}")
    labels = {"server": "server, streaming (SSE)", "bare": "llama-cpp-python create_completion",
              "bare_stream": "  (create_completion, stream=True)",
              "engine": "  (autoparser Engine.generate, no server)"}
    for name, label in labels.items():
        runs_text = ", ".join(f"{r:.0f}" for r in rates[name])
        print(f"{label:36s} {median[name]:8.1f} tokens/s  (runs: {runs_text})")
    print(f"server / create_completion: {100 * median['server'] / median['bare']:.1f} %  (goal: 97 % or better)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
