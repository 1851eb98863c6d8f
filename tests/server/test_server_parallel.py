"""Parallel slots in a real `serve --parallel 4` process: concurrent requests all answered in full
or refused with 503, streamed and non-streamed answers agreeing under load, a client that leaves
freeing its slot, prefix reuse on a conversation's second turn, and the 27,000-character message
that used to crash llama.cpp's tokenizer. Each runs on the own engine and through `serve
--upstream` in front of a llama-server."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import openai
import pytest
from llama_server import serving
from server_harness import ServerProcess, find_template, tiny_model

PARALLEL = 4
MAX_QUEUE = 4


@pytest.fixture(scope="module", params=["engine", "upstream"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The own engine with 4 slots, and `serve --upstream` in front of a llama-server with 4."""
    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    log_dir = tmp_path_factory.mktemp(f"parallel-{request.param}")
    with serving(request.param, model, "--max-queue", str(MAX_QUEUE), log_dir=log_dir, n_ctx=8192,
                 parallel=PARALLEL) as process:
        yield process


def ask(index: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Question {index}: what comes next?"}]


def in_threads(count: int, work: Any, timeout: float = 120.0) -> list[Any]:
    results: list[Any] = [None] * count
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, work(i))) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a client hung"
    return results


def wait_until_idle(server: ServerProcess, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        health = server.health()
        if not health["busy"] and health["waiting"] == 0:
            return
        time.sleep(0.02)
    pytest.fail(f"still busy after {within} s: {server.health()}")


def test_every_concurrent_request_gets_all_its_tokens_or_a_503(server: ServerProcess) -> None:
    n_tokens = 40

    def one(index: int) -> Any:
        client = server.client(timeout=120.0)
        try:
            if index % 2:
                stream = client.chat.completions.create(model="tiny", messages=ask(index), max_tokens=n_tokens,
                                                        seed=index, stream=True, extra_body={"ignore_eos": True},
                                                        stream_options={"include_usage": True})
                chunks = list(stream)
                return chunks[-1].usage.completion_tokens, [c.choices[0].finish_reason for c in chunks
                                                            if c.choices][-1]
            response = client.chat.completions.create(model="tiny", messages=ask(index), max_tokens=n_tokens,
                                                      seed=index, extra_body={"ignore_eos": True})
            return response.usage.completion_tokens, response.choices[0].finish_reason
        except openai.APIStatusError as exc:
            return exc.status_code

    outcomes = in_threads(12, one)
    answered = [o for o in outcomes if isinstance(o, tuple)]
    refused = [o for o in outcomes if o == 503]
    assert len(answered) + len(refused) == 12, outcomes
    assert len(answered) >= PARALLEL + MAX_QUEUE - 1
    assert all(o == (n_tokens, "length") for o in answered), outcomes
    wait_until_idle(server, within=5)


CITY_TOOL = {"type": "function", "function": {
    "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
                                         "days": {"type": "integer", "enum": [1, 2, 3]}},
        "required": ["city", "days"], "additionalProperties": False}}}


def streamed_message(stream: Any) -> dict[str, Any]:
    """The message rebuilt from streamed deltas: content, reasoning and tool calls by index."""
    content, reasoning, calls = [], [], {}
    for chunk in stream:
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is None:
            continue
        content.append(delta.content or "")
        reasoning.append((delta.model_extra or {}).get("reasoning_content") or "")
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"name": "", "arguments": ""})
            entry["name"] += (call.function.name or "") if call.function else ""
            entry["arguments"] += (call.function.arguments or "") if call.function else ""
    return {"content": "".join(content), "reasoning": "".join(reasoning),
            "calls": [calls[i] for i in sorted(calls)]}


def whole_message(response: Any) -> dict[str, Any]:
    message = response.choices[0].message
    return {"content": message.content or "", "reasoning": (message.model_extra or {}).get("reasoning_content") or "",
            "calls": [{"name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []]}


def test_streamed_deltas_equal_the_non_streamed_message_under_load(server: ServerProcess) -> None:
    """Four requests, each asked streamed and not, all eight at once (four run, four wait).

    The model's text depends on the batch it ran in, in the last float bits (see the README),
    so each pair is made to agree on the text: a forced tool call whose arguments the grammar
    leaves little choice in, decided by the same seed. The streamed deltas must rebuild exactly
    the non-streamed message, calls included."""

    def one(index: int) -> Any:
        client = server.client(timeout=120.0)
        request = {"model": "tiny", "messages": ask(100 + index // 2), "max_tokens": 80, "seed": index // 2,
                   "tools": [CITY_TOOL], "tool_choice": "required", "parallel_tool_calls": False,
                   # short prompts: all four fit one decode step, so each pair is batched alike
                   "extra_body": {"tool_preamble": False}}
        if index % 2:
            return streamed_message(client.chat.completions.create(**request, stream=True))
        return whole_message(client.chat.completions.create(**request))

    results = in_threads(8, one)
    for pair in range(4):
        streamed, whole = results[2 * pair + 1], results[2 * pair]
        assert len(whole["calls"]) == 1 and whole["calls"][0]["name"] == "get_weather"
        assert streamed["calls"][0]["name"] == whole["calls"][0]["name"]
        assert json.loads(streamed["calls"][0]["arguments"]) == json.loads(whole["calls"][0]["arguments"])
        assert streamed["content"] == whole["content"] and streamed["reasoning"] == whole["reasoning"]


def test_a_client_that_leaves_frees_its_slot(server: ServerProcess) -> None:
    long = {"model": "tiny", "max_tokens": 2000, "extra_body": {"ignore_eos": True}, "stream": True}
    streams = [server.client().chat.completions.create(messages=ask(200 + i), **long) for i in range(PARALLEL)]
    for stream in streams:  # the role chunk comes first, before the generation; then its first token
        chunks = iter(stream)
        next(chunks)
        next(chunks)
    done: dict[str, float] = {}

    def queued() -> None:
        server.client().chat.completions.create(model="tiny", messages=ask(300), max_tokens=4)
        done["at"] = time.monotonic()

    waiting = threading.Thread(target=queued)
    waiting.start()
    time.sleep(0.5)
    health = server.health()
    assert health["waiting"] == 1 and "at" not in done
    assert health["slots"] == {"total": PARALLEL, "busy": PARALLEL}
    assert health["queue"] == {"waiting": 1, "max": MAX_QUEUE}
    closed_at = time.monotonic()
    streams[0].close()
    waiting.join(30)
    assert done["at"] - closed_at < 2.0, "the queued request waited for the abandoned generation"
    for stream in streams[1:]:
        stream.close()
    wait_until_idle(server, within=5)
    assert server.health()["slots"] == {"total": PARALLEL, "busy": 0}


def test_second_turn_reuses_the_conversation_prefix(server: ServerProcess) -> None:
    client = server.client()
    notes = " ".join(f"Note {i}: the report for day {i} says it was calm." for i in range(60))
    messages = [{"role": "system", "content": notes}, {"role": "user", "content": "Summarize."}]
    first = client.chat.completions.create(model="tiny", messages=messages, max_tokens=12, seed=1)
    messages += [{"role": "assistant", "content": first.choices[0].message.content or ""},
                 {"role": "user", "content": "Which day was calmest?"}]
    second = client.chat.completions.create(model="tiny", messages=messages, max_tokens=4, seed=1)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= 0.8 * second.usage.prompt_tokens, (cached, second.usage.prompt_tokens)
    assert first.usage.prompt_tokens_details.cached_tokens < cached


def test_the_choices_of_one_request_read_its_prompt_once(server: ServerProcess) -> None:
    """`n > 1`: the choices run side by side, and all but one share the prompt's cells instead
    of reading the prompt again (the cached prompt tokens of `/metrics` count what they shared)."""
    if server.upstream:
        pytest.skip("llama-server keeps its own cache")
    client = server.client()
    notes = " ".join(f"Entry {i}: choices of one question share one prompt, {time.time_ns()}." for i in range(12))
    messages = [{"role": "system", "content": notes}, {"role": "user", "content": "Answer three times."}]

    def cached_so_far() -> float:
        with server.http() as http:
            text = http.get("/metrics").text
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("autoparser_cached_prompt_tokens_total"))

    before = cached_so_far()
    answer = client.chat.completions.create(model="tiny", messages=messages, n=3, max_tokens=48, seed=2,
                                            extra_body={"ignore_eos": True})
    assert [len(choice.message.content or "") > 0 for choice in answer.choices] == [True] * 3
    prompt = answer.usage.prompt_tokens
    assert cached_so_far() - before >= 2 * (prompt - 1), "two choices shared the prompt"


def test_a_27000_character_message_does_not_take_the_server_down(server: ServerProcess) -> None:
    client = server.client()
    restarts = server.health()["worker_restarts"]
    try:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x" * 27000}],
                                       max_tokens=4)
    except openai.BadRequestError as exc:  # longer than a slot: the usual clear 400
        assert exc.body["code"] == "context_length_exceeded"
    assert server.process.poll() is None
    response = client.chat.completions.create(model="tiny", messages=ask(1), max_tokens=4)
    assert response.choices[0].finish_reason in ("stop", "length")
    health = server.health()  # avoided, not survived: the model worker did not crash either
    assert health["worker"] == "ok" and health["worker_restarts"] == restarts
