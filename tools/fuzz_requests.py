#!/usr/bin/env python3
"""Mutated request bodies against a running server: does any answer a 5xx, break a stream or
print a traceback?

A server is started on the tiny model. Each round takes a valid body of one endpoint
(`/v1/chat/completions`, `/v1/completions`, `/v1/responses`, `/v1/ag-ui`), changes it a few
times at random places (a value replaced by another JSON type, a huge number, a deep list, a
lone surrogate, special-token text; a key dropped or added) and sends it, streamed or not.
A finding is an answer of 500 or more, a streamed 200 that does not end with `[DONE]` (or, for
`/v1/responses` and AG-UI, with their closing event), a body that is not JSON where an error is
expected, a connection error, or a traceback in the server's log. Generation is kept short:
token limits are capped at 8, so rounds stay fast on a random model.

Usage::

    python tools/fuzz_requests.py [--seed 1] [--seconds 120] [--out findings.json]

Exit 1 on any finding.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import start_server, stop_server, tiny_model  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}

SEEDS: dict[str, list[dict[str, Any]]] = {
    "/v1/chat/completions": [
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        {"model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "weather?"}],
         "tools": [WEATHER], "tool_choice": "auto", "max_tokens": 6, "temperature": 0.5},
        {"model": "m", "messages": [
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": None, "reasoning_content": "look it up",
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
         "tools": [WEATHER], "max_tokens": 4, "logprobs": True, "top_logprobs": 2},
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "json please"}]}],
         "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {
             "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}},
         "max_completion_tokens": 8, "stop": ["}"], "seed": 3},
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER],
         "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "max_tokens": 8,
         "parallel_tool_calls": False, "chat_template_kwargs": {"thinking": True}, "n": 2},
    ],
    "/v1/completions": [
        {"model": "m", "prompt": "Once", "max_tokens": 4},
        {"model": "m", "prompt": ["a b"], "max_tokens": 3, "echo": True, "logprobs": 2, "stop": "."},
    ],
    "/v1/responses": [
        {"model": "m", "input": "hi", "max_output_tokens": 4},
        {"model": "m", "instructions": "brief", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "rain"}],
         "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}],
         "max_output_tokens": 6, "text": {"format": {"type": "json_object"}}},
    ],
    "/v1/ag-ui": [
        {"threadId": "t", "runId": "r", "state": {}, "messages": [{"id": "1", "role": "user", "content": "hi"}],
         "tools": [{"name": "get_weather", "description": "w", "parameters": WEATHER["function"]["parameters"]}],
         "context": [], "forwardedProps": {"max_tokens": 4}},
    ],
}

TOKEN_LIMITS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
SPECIAL_TEXT = ["<｜end▁of▁sentence｜>", "<｜User｜>", "<｜tool▁calls▁begin｜>", "</think>", "<think>"]


def random_scalar(rng: random.Random) -> Any:
    return rng.choice([
        None, True, False, 0, -1, 1, 2**63, -(2**70), 10**4000 if rng.random() < 0.1 else 7, 1.5, -0.0, 1e308,
        "", "x", "a\ud800b", "\x00\x1b[31m", "😀" * 50, rng.choice(SPECIAL_TEXT), "a" * rng.choice([1, 500, 70_000]),
        "{\"city\": \"Paris\"", "null", "function", "required", "none", "json_schema",
    ])


def random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 2 or roll < 0.6:
        return random_scalar(rng)
    if roll < 0.75:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.85:
        return nested(rng.choice([50, 150, 300]), rng.random() < 0.5)
    return {rng.choice(["type", "name", "content", "role", "a", "properties", "$ref", "items"]): random_value(rng, depth + 1)
            for _ in range(rng.randint(0, 3))}


def same_kind(value: Any, rng: random.Random) -> Any:
    """Another value of the same JSON type, so the body more often stays valid and runs deeper."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice([0, 1, -1, 2, 7, 2**31, value + 1])
    if isinstance(value, float):
        return rng.choice([0.0, 1.0, 2.5, -1.0, 1e-9])
    if isinstance(value, str):
        return rng.choice(["", " ", "\n", value * 3, value + rng.choice(SPECIAL_TEXT), "Ω" * 7, "\ud83d",
                           "a\x00b", value[::-1]])
    if isinstance(value, list):
        return value + value if value and rng.random() < 0.5 else []
    if isinstance(value, dict):
        return {} if rng.random() < 0.5 else {**value, "extra": random_scalar(rng)}
    return random_scalar(rng)


def nested(depth: int, as_list: bool) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value] if as_list else {"a": value}
    return value


def places(value: Any, path: tuple = ()) -> list[tuple]:
    """Every path to a value inside the body (the body itself excluded)."""
    found: list[tuple] = [path] if path else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += places(item, (*path, index))
    return found


def parent_of(body: Any, path: tuple) -> Any:
    for step in path[:-1]:
        body = body[step]
    return body


def mutate(body: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    body = copy.deepcopy(body)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        paths = places(body)
        if not paths:
            break
        path = rng.choice(paths)
        parent = parent_of(body, path)
        action = rng.random()
        if action < 0.35:
            parent[path[-1]] = same_kind(parent[path[-1]], rng)
        elif action < 0.6:
            parent[path[-1]] = random_value(rng)
        elif action < 0.75:
            del parent[path[-1]]
        elif action < 0.9 and isinstance(parent, dict):
            parent[rng.choice(["extra", "type", "name", "content", "tool_calls", "stream_options", "$ref"])] = \
                random_value(rng)
        elif isinstance(parent, list):
            parent.append(copy.deepcopy(rng.choice(parent)) if parent else random_value(rng))
    for key in TOKEN_LIMITS:
        if isinstance(body.get(key), int) and not isinstance(body.get(key), bool) and body[key] > 8:
            body[key] = 8
    if not any(isinstance(body.get(key), int) for key in TOKEN_LIMITS) and "forwardedProps" not in body:
        body.setdefault("max_tokens", 8)
    return body


def encode(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


def stream_finished(endpoint: str, text: str) -> bool:
    if endpoint == "/v1/ag-ui":
        return "RUN_FINISHED" in text or "RUN_ERROR" in text
    if endpoint == "/v1/responses":
        return "response.completed" in text or "response.failed" in text or "response.incomplete" in text
    return text.rstrip().endswith("data: [DONE]")


def send(client: httpx.Client, url: str, endpoint: str, body: dict[str, Any],
         statuses: Counter[int]) -> str | None:
    """What is wrong with the answer to one body, or None; counts its status."""
    content = encode(body)
    streamed = body.get("stream") is True or endpoint == "/v1/ag-ui"
    try:
        with client.stream("POST", url + endpoint, content=content,
                           headers={"content-type": "application/json"}) as response:
            text = response.read().decode("utf-8", "replace")
    except httpx.HTTPError as error:
        return f"connection error: {type(error).__name__}: {error}"
    statuses[response.status_code] += 1
    if response.status_code >= 500 and response.status_code != 503:
        return f"status {response.status_code}: {text[:300]}"
    if response.status_code >= 400:
        try:
            json.loads(text)
        except ValueError:
            return f"status {response.status_code} with a body that is not JSON: {text[:200]}"
        return None
    if streamed and response.headers.get("content-type", "").startswith("text/event-stream") \
            and not stream_finished(endpoint, text):
        return f"stream did not finish: ...{text[-300:]}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--out", type=Path, help="write the findings as JSON here")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    findings: list[dict[str, Any]] = []
    sent = 0
    statuses: Counter[int] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model(Path(tmp))
        log_path = Path(tmp) / "server.log"
        process, url = start_server(model, log_path, "--parallel", "2", "--n-ctx", "2048")
        try:
            with httpx.Client(timeout=60) as client:
                served = client.get(url + "/v1/models").json()["data"][0]["id"]
                deadline = time.monotonic() + args.seconds
                while time.monotonic() < deadline:
                    endpoint = rng.choice(sorted(SEEDS))
                    seed = rng.choice(SEEDS[endpoint])
                    body = mutate({**seed, "model": served} if "model" in seed else seed, rng)
                    if rng.random() < 0.5 and isinstance(body, dict):
                        body["stream"] = True
                    problem = send(client, url, endpoint, body, statuses)
                    sent += 1
                    if problem:
                        findings.append({"endpoint": endpoint, "problem": problem,
                                         "body": encode(body)[:2000].decode("utf-8", "replace")})
                health = client.get(url + "/health", timeout=10).status_code
        finally:
            stop_server(process)
        log = log_path.read_text(errors="replace")
    if health != 200:
        findings.append({"endpoint": "/health", "problem": f"status {health} after the run", "body": ""})
    if "Traceback" in log:
        findings.append({"endpoint": "log", "problem": "a traceback in the server log",
                         "body": log[log.index("Traceback"):][:3000]})
    print(f"{sent} requests in {args.seconds:g} s, {len(findings)} findings; statuses "
          + ", ".join(f"{status}: {count}" for status, count in sorted(statuses.items())))
    for finding in findings[:20]:
        print(f"- {finding['endpoint']}: {finding['problem']}\n  body: {finding['body'][:400]}")
    if args.out:
        args.out.write_text(json.dumps(findings, indent=1, ensure_ascii=False))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
