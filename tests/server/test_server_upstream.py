"""`autoparser serve --upstream`: the front end in front of a real llama-server.

llama-server is built from the llama.cpp of the pinned llama-cpp-python source package
(`tests/llama_server.py`, skipped with the reason where it cannot be built) and run on the tiny
random-weight DeepSeek model. The random model writes tool calls only under a grammar, so the
tool calls here are forced (`tool_choice` required or named): what is proven is that the
front end's prompt, grammar, special tokens and parser work through llama-server's `/completion`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from llama_server import LlamaServer, start_llama_server
from server_harness import MODEL_NAME, REPO, ServerProcess, find_template, run_serve, start_server, tiny_model

pytestmark = pytest.mark.slow

TURN_TOKENS = 96
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
                   "required": ["city"], "additionalProperties": False}}}
ANSWER_SCHEMA = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"],
                 "additionalProperties": False}
INVENTED_TEMPLATE = REPO / "fixtures" / "templates" / "guillemet_json.jinja"
"""A format of the project's own invention: llama.cpp has no handler for it."""


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    server = start_llama_server(model, log_dir=tmp_path_factory.mktemp("llama-server"), parallel=4, n_ctx=2048)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def front(upstream: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(None, "--upstream", upstream.base_url, log_dir=tmp_path_factory.mktemp("front"))
    process.upstream = upstream.base_url
    yield process
    process.stop()


def _tool_calls_of_stream(chunks: list[Any]) -> list[dict[str, str]]:
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += call.id or ""
            entry["name"] += (call.function.name or "") if call.function else ""
            entry["arguments"] += (call.function.arguments or "") if call.function else ""
    return [calls[index] for index in sorted(calls)]


def test_streamed_chat_with_tools_through_llama_server(front: ServerProcess) -> None:
    client = front.client()
    chunks = list(client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER],
        tool_choice="required", max_tokens=TURN_TOKENS, seed=1, stream=True,
        stream_options={"include_usage": True}, extra_body={"thinking": False}))
    calls = _tool_calls_of_stream(chunks)
    assert calls and all(call["name"] == "get_weather" for call in calls)
    assert all(json.loads(call["arguments"])["city"] in ("Paris", "Lima") for call in calls)
    assert all(call["id"] for call in calls)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0


def test_multi_turn_tool_loop(front: ServerProcess) -> None:
    """Two forced calls with their results fed back, then a JSON answer that ends the loop."""
    client = front.client()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris, then in Lima?"}]
    seen_ids: set[str] = set()
    prompt_tokens = []
    for turn in range(2):
        chunks = list(client.chat.completions.create(
            model=MODEL_NAME, messages=messages, tools=[WEATHER], tool_choice="required", max_tokens=TURN_TOKENS,
            parallel_tool_calls=False, seed=turn, stream=True, stream_options={"include_usage": True},
            extra_body={"thinking": False}))
        prompt_tokens.append(chunks[-1].usage.prompt_tokens)
        calls = _tool_calls_of_stream(chunks)
        assert len(calls) == 1 and calls[0]["name"] == "get_weather"
        city = json.loads(calls[0]["arguments"])["city"]
        assert calls[0]["id"] not in seen_ids
        seen_ids.add(calls[0]["id"])
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": calls[0]["id"], "type": "function",
             "function": {"name": "get_weather", "arguments": calls[0]["arguments"]}}]})
        messages.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": f"Sunny in {city}."})
    answer = client.chat.completions.create(
        model=MODEL_NAME, messages=messages, tools=[WEATHER], tool_choice="none", max_tokens=TURN_TOKENS,
        extra_body={"thinking": False},
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}})
    choice = answer.choices[0]
    assert choice.finish_reason == "stop" and "done" in json.loads(choice.message.content)
    assert prompt_tokens[1] > prompt_tokens[0]  # the second turn's prompt holds the first turn


def test_auto_tool_choice_runs_the_lazy_grammar_upstream(front: ServerProcess) -> None:
    """`auto`: the grammar waits for the analysis' trigger (here a special token); whatever the
    model writes, the answer is text or valid calls, and llama-server stays up."""
    client = front.client()
    for seed in range(8):
        response = client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER],
            tool_choice="auto", max_tokens=64, seed=seed, temperature=1.5, extra_body={"thinking": False})
        choice = response.choices[0]
        assert choice.finish_reason in ("stop", "length", "tool_calls")
        for call in choice.message.tool_calls or []:
            assert call.function.name == "get_weather"
            assert json.loads(call.function.arguments)["city"] in ("Paris", "Lima")
    assert front.health()["worker"] == "ok"


def test_reasoning_with_a_budget_then_a_forced_call(front: ServerProcess) -> None:
    """The prompt opens reasoning: it runs free for 8 tokens, the front end closes it, and the
    answer runs under the grammar in a second upstream request."""
    response = front.client().chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Weather in Lima?"}], tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=TURN_TOKENS, seed=2,
        extra_body={"thinking": True, "thinking_budget": 8})
    message = response.choices[0].message
    assert message.model_extra["reasoning_content"]
    assert [call.function.name for call in message.tool_calls] == ["get_weather"]
    assert response.usage.completion_tokens > 8


def test_seed_logprobs_stop_and_usage_pass_through(front: ServerProcess) -> None:
    client = front.client()
    fields: dict[str, Any] = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
                              "logprobs": True, "top_logprobs": 3, "seed": 3, "extra_body": {"thinking": False}}
    first, second = client.chat.completions.create(**fields), client.chat.completions.create(**fields)
    assert first.choices[0].message.content == second.choices[0].message.content
    entries = first.choices[0].logprobs.content
    # llama-server's stream leaves out the entry of a token that ends inside a UTF-8 character
    # (the next token's entry carries its bytes), which a random model writes readily
    assert 1 <= len(entries) <= 6 and all(len(e.top_logprobs) == 3 and e.logprob <= 0 for e in entries)
    assert "".join(e.token for e in entries) == first.choices[0].message.content
    assert first.usage.completion_tokens == 6 and first.choices[0].finish_reason == "length"
    text = first.choices[0].message.content
    cut = text.strip()[-2:]
    plain = {key: value for key, value in fields.items() if key not in ("logprobs", "top_logprobs")}
    stopped = client.chat.completions.create(**plain, stop=[cut])
    content = stopped.choices[0].message.content or ""
    assert cut not in content and text.startswith(content.strip())
    assert stopped.choices[0].finish_reason == "stop"


def test_completions_endpoint_and_token_counts(front: ServerProcess) -> None:
    completion = front.client().completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=5,
                                                   seed=3, echo=True)
    choice = completion.choices[0]
    assert choice.text.startswith("Once upon a time") and choice.finish_reason == "length"
    assert completion.usage.completion_tokens == 5 and completion.usage.prompt_tokens > 0


def test_health_reports_the_upstream_slots(front: ServerProcess, upstream: LlamaServer) -> None:
    health = front.health()
    assert health["status"] == "ok" and health["worker"] == "ok"
    assert health["upstream"]["url"] == upstream.base_url
    assert health["upstream"]["slots"]["total"] == 4
    assert health["slots"]["total"] == 4


def test_a_closed_stream_frees_the_upstream_slot(front: ServerProcess, upstream: LlamaServer) -> None:
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": 1500, "stream": True, "ignore_eos": True, "thinking": False}
    with front.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # the generation runs upstream now; leave it
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        slots = httpx.get(upstream.base_url + "/slots", timeout=5).json()
        if not any(slot["is_processing"] for slot in slots):
            break
        time.sleep(0.1)
    assert not any(slot["is_processing"] for slot in slots), "the upstream kept generating for a gone client"


def test_errors_the_front_end_gives(front: ServerProcess) -> None:
    with front.http() as http:
        overflow = http.post("/v1/chat/completions", json={
            "model": MODEL_NAME, "messages": [{"role": "user", "content": "word " * 5000}]})
        assert overflow.status_code == 400 and overflow.json()["error"]["code"] == "context_length_exceeded"
        unknown = http.post("/v1/chat/completions", json={"model": "other", "messages": [{"role": "user",
                                                                                           "content": "Hi"}]})
        assert unknown.status_code == 404


def test_a_client_cannot_spell_a_special_token(front: ServerProcess) -> None:
    """A turn marker typed into a message is tokenized as text, not as the marker's token."""
    def prompt_tokens(content: str) -> int:
        response = front.client().chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": content}], max_tokens=1,
            extra_body={"thinking": False})
        return response.usage.prompt_tokens

    assert "<｜User｜>" in front.log()  # found among the special tokens at start-up
    assert prompt_tokens("a <｜User｜> b") > prompt_tokens("a b") + 1


def test_a_27000_character_message_does_not_take_llama_server_down(front: ServerProcess,
                                                                   upstream: LlamaServer) -> None:
    """llama-server's own `/tokenize` dies on such a run; the front end tokenizes it in pieces."""
    client = front.client()
    try:
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "x" * 27000}],
                                       max_tokens=4)
    except openai.BadRequestError as exc:  # longer than a slot: the usual clear 400
        assert exc.body["code"] == "context_length_exceeded"
    assert upstream.process.poll() is None
    assert front.health()["worker"] == "ok"


def test_what_llama_server_cannot_do_is_a_400(front: ServerProcess) -> None:
    with front.http() as http:
        for seed in (-1, 2**32):
            response = http.post("/v1/chat/completions", json={
                "model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "seed": seed, "max_tokens": 2})
            assert response.status_code == 400 and response.json()["error"]["param"] == "seed"
        assert front.health()["queue"]["waiting"] == 0  # the refused requests gave their places back
        fine = http.post("/v1/chat/completions", json={
            "model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "seed": 2**32 - 2, "max_tokens": 2})
        assert fine.status_code == 200


def test_an_upstream_that_goes_away(tmp_path: Path) -> None:
    """A stream it was feeding ends with an error chunk and `[DONE]`; then `/health` says so and
    requests get a 502 that says why; the front end stays up."""
    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    upstream = start_llama_server(model, log_dir=tmp_path, parallel=1, n_ctx=8192)
    try:
        front = start_server(None, "--upstream", upstream.base_url, log_dir=tmp_path)
    except BaseException:
        upstream.stop()
        raise
    try:
        body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "stream": True,
                "max_tokens": 8000, "ignore_eos": True, "thinking": False}
        lines: list[str] = []
        with front.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
            for line in response.iter_lines():
                if upstream.process.poll() is None and '"content":"' in line and '"content":""' not in line:
                    upstream.process.kill()
                lines.append(line)
        lines = [line for line in lines if line]
        assert any('"finish_reason":"error"' in line for line in lines) and lines[-1] == "data: [DONE]"
        upstream.stop()
        assert front.health()["worker"] == "unreachable"
        with front.http() as http:
            for stream in (True, False):
                response = http.post("/v1/chat/completions", json={**body, "stream": stream, "max_tokens": 2})
                error = response.json()["error"]
                assert response.status_code == 502 and error["code"] == "upstream_error"
                assert error["message"].startswith(f"cannot reach {upstream.base_url}/tokenize")
        assert front.process.poll() is None
    finally:
        front.stop()
        upstream.stop()


def test_an_upstream_with_an_api_key(tmp_path: Path) -> None:
    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    upstream = start_llama_server(model, "--api-key", "upstream-secret", log_dir=tmp_path, parallel=1, n_ctx=1024)
    try:
        refused = run_serve("--upstream", upstream.base_url, "--port", "0", timeout=60)
        assert refused.returncode == 1 and "--upstream:" in refused.stderr and "401" in refused.stderr
        front = start_server(None, "--upstream", upstream.base_url, "--upstream-api-key", "upstream-secret",
                             log_dir=tmp_path)
        try:
            chunks = list(front.client().chat.completions.create(
                model=MODEL_NAME, messages=[{"role": "user", "content": "Weather in Lima?"}], tools=[WEATHER],
                tool_choice="required", max_tokens=TURN_TOKENS, stream=True, extra_body={"thinking": False}))
            assert _tool_calls_of_stream(chunks)
            assert front.health()["upstream"]["slots"]["total"] == 1
        finally:
            front.stop()
    finally:
        upstream.stop()


def test_an_unreachable_upstream_is_one_line_and_exit_code_1() -> None:
    from llama_server import free_port

    result = run_serve("--upstream", f"http://127.0.0.1:{free_port()}", "--port", "0", timeout=60)
    assert result.returncode == 1
    assert "--upstream: cannot reach" in result.stderr and "Traceback" not in result.stderr


def test_model_and_upstream_exclude_each_other(tmp_path: Path) -> None:
    result = run_serve("--upstream", "http://127.0.0.1:1", "--model", str(tmp_path / "m.gguf"), timeout=60)
    assert result.returncode == 2 and "exclude each other" in result.stderr
    engine_options = run_serve("--upstream", "http://127.0.0.1:1", "--parallel", "4", "--threads", "2", timeout=60)
    assert engine_options.returncode == 2 and "--parallel, --threads belong to llama-server" in engine_options.stderr


# -- a format llama.cpp does not know --------------------------------------------------------------


@pytest.fixture(scope="module")
def invented(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LlamaServer, ServerProcess]]:
    model = tiny_model(INVENTED_TEMPLATE)
    upstream = start_llama_server(model, log_dir=tmp_path_factory.mktemp("llama-server-invented"), parallel=2,
                                  n_ctx=2048)
    try:
        front = start_server(None, "--upstream", upstream.base_url, log_dir=tmp_path_factory.mktemp("front-inv"))
    except BaseException:
        upstream.stop()
        raise
    yield upstream, front
    front.stop()
    upstream.stop()


def test_chat_template_file_overrides_the_upstream_template(upstream: LlamaServer, tmp_path: Path) -> None:
    """The front end renders and parses with the template it is given, whatever the upstream's
    model carries: the grammar makes the random model write that template's calls."""
    front = start_server(None, "--upstream", upstream.base_url, "--chat-template-file", str(INVENTED_TEMPLATE),
                         log_dir=tmp_path)
    try:
        response = front.client().chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Weather in Lima?"}], tools=[WEATHER],
            tool_choice="required", max_tokens=TURN_TOKENS, seed=5, extra_body={"return_prompt": True})
        assert response.model_extra["prompt"].endswith("«assistant»")
        calls = response.choices[0].message.tool_calls
        assert calls and json.loads(calls[0].function.arguments)["city"] in ("Paris", "Lima")
    finally:
        front.stop()


def test_invented_template_streams_correct_tool_calls(invented: tuple[LlamaServer, ServerProcess]) -> None:
    upstream, front = invented
    request: dict[str, Any] = {
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "Weather in Paris and Lima?"}],
        "tools": [WEATHER], "tool_choice": "required", "max_tokens": TURN_TOKENS, "seed": 4}
    chunks = list(front.client().chat.completions.create(stream=True, **request))
    calls = _tool_calls_of_stream(chunks)
    assert calls and all(call["name"] == "get_weather" for call in calls)
    assert all(json.loads(call["arguments"])["city"] in ("Paris", "Lima") for call in calls)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "«call»" not in content  # the markup went into tool calls, not into the text
    own = httpx.post(upstream.base_url + "/v1/chat/completions", json=request, timeout=60)
    own_calls = own.json()["choices"][0]["message"].get("tool_calls") if own.status_code == 200 else None
    assert not own_calls, f"llama-server's own parser read this format after all: {own.text[:300]}"


def test_the_events_of_one_read_before_an_error_event_are_kept() -> None:
    from autoparser.server.upstream import UpstreamError
    from autoparser.server.upstream_stream import parse_events

    events, failure = parse_events([b'data: {"content":"a"}', b'data: {"content":"b"}\ndata: {"error":{"message":"boom"}}',
                                    b'data: {"content":"c"}'])
    assert events == [{"content": "a"}, {"content": "b"}]
    assert isinstance(failure, UpstreamError) and failure.body()["error"]["message"] == "the upstream failed: boom"
    events, failure = parse_events([b'data: {"content":"a"}', b"error: gone", b'data: {"content":"c"}'])
    assert events == [{"content": "a"}] and failure is not None and "gone" in failure.body()["error"]["message"]
    assert parse_events([b": comment", b'data: {"content":"x"}']) == ([{"content": "x"}], None)


def _served_once(answer: list[bytes]) -> Any:
    """A server on 127.0.0.1 that reads one request and writes `answer`'s parts, then closes."""
    import asyncio

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        for part in answer:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.close()

    return asyncio.start_server(handle, "127.0.0.1", 0)


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)


@pytest.mark.parametrize("ending", ["complete", "cut", "refused"])
def test_stream_events_reads_chunked_events_split_anywhere(ending: str) -> None:
    import asyncio

    from autoparser.server.upstream import UpstreamError, stream_events

    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = _chunked(b'data: {"content":"a"}\n\n', b'data: {"content":"b"}\n\ndata: {"con', b'tent":"c"}\n\n')
    answer = [head + body[:7], body[7:40], body[40:]]
    if ending == "complete":
        answer.append(_chunked(b'data: {"content":"d","stop":true}\n\n') + b"0\r\n\r\n")
    elif ending == "refused":
        refusal = b'{"error":{"message":"no slot"}}'
        answer = [b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s" % (len(refusal), refusal)]

    async def run() -> tuple[list[str], Exception | None]:
        server = await _served_once(answer)
        port = server.sockets[0].getsockname()[1]
        texts: list[str] = []
        try:
            async for events in stream_events(f"http://127.0.0.1:{port}", "/completion", {}, 5.0):
                texts += [event["content"] for event in events]
        except UpstreamError as exc:
            return texts, exc
        finally:
            server.close()
        return texts, None

    texts, failure = asyncio.run(run())
    if ending == "refused":
        assert texts == [] and failure is not None and "HTTP 503: no slot" in failure.body()["error"]["message"]
    elif ending == "cut":
        assert texts == ["a", "b", "c"] and failure is not None
    else:
        assert texts == ["a", "b", "c", "d"] and failure is None


def test_a_kept_connection_the_server_closed_meanwhile_is_replaced() -> None:
    import socket
    import threading

    from autoparser.server.upstream import JsonPoster

    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def serve() -> None:  # one answer per connection, then closed without saying so
        for _ in range(3):
            connection, _address = listener.accept()
            accepted.append(1)
            with connection:
                connection.recv(65536)
                body = b'{"tokens": [1, 2]}'
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    poster = JsonPoster(f"http://127.0.0.1:{listener.getsockname()[1]}", {}, timeout=5.0)
    try:
        for _ in range(3):
            assert poster.post("/tokenize", {"content": "x"}) == (200, b'{"tokens": [1, 2]}')
    finally:
        listener.close()
    assert len(accepted) == 3


# -- a lazy grammar llama-server cannot keep -------------------------------------------------------

LETTER_THEN_DIGITS = 'root ::= "a" [0-9]{1,4} "."'
"""Woken by the first `a`: most tokens holding an `a` carry more letters after it, which this
grammar rejects right after its trigger (the own engine resamples such a token; llama-server
cannot)."""


def _generate_upstream(base_url: str, seed: int) -> tuple[str, list[tuple[str, Any]]]:
    """(the text the deltas carried, the job's events) of one lazy-grammar generation run by an
    `UpstreamWorker` on the real llama-server."""
    import asyncio

    from autoparser.llama.sampling import GrammarSpec, SamplingParams
    from autoparser.server.completion import Completion, OutputOptions
    from autoparser.server.completions import PlainText
    from autoparser.server.upstream import UpstreamVocabulary, UpstreamWorker
    from autoparser.server.worker import GenerationJob

    vocabulary = UpstreamVocabulary(base_url)
    vocabulary.connect()
    worker = UpstreamWorker(vocabulary, max_queue=4)
    grammar = GrammarSpec(gbnf=LETTER_THEN_DIGITS, lazy=True, trigger_patterns=[r"[\s\S]*?(a)[\s\S]*"])
    events: list[tuple[str, Any]] = []

    async def run() -> None:
        job = GenerationJob(
            prompt_tokens=vocabulary.tokenize("Hello, write something:"), max_tokens=60,
            sampling=SamplingParams(seed=seed), grammar=grammar, stop_token_ids=(), ignore_eos=False,
            completion=Completion(PlainText(), OutputOptions()), post=events.append)
        worker.submit(job)
        while not events or events[-1][0] == "deltas":
            await asyncio.sleep(0.01)

    try:
        asyncio.run(asyncio.wait_for(run(), 60))
    finally:
        worker.stop()
    text = "".join(delta.get("content") or "" for kind, deltas in events if kind == "deltas" for delta in deltas)
    return text, events


def test_a_lazy_grammar_llama_server_rejects_keeps_the_text_and_says_why(upstream: LlamaServer) -> None:
    """llama-server ends such a stream with an error event after the tokens it sent and keeps
    serving: the job hands on every generated text, then a 502 that says what happened and
    carries the message generated."""
    failed = 0
    for seed in range(6):
        text, events = _generate_upstream(upstream.base_url, seed)
        kind, payload = events[-1]
        if kind == "done":
            continue
        failed += 1
        assert kind == "error" and payload.status == 502 and payload.code == "upstream_error"
        assert "fired the tool-call grammar's trigger" in payload and "cannot sample another token" in payload
        assert (payload.generated.get("content") or "") == text
        assert "a" not in text  # the trigger's token is the one refused: none of its text was generated
        assert upstream.process.poll() is None
        assert httpx.get(upstream.base_url + "/health", timeout=5).status_code == 200
    assert failed >= 2, "llama-server accepted every trigger: the failure this test is about did not occur"


def test_a_plain_request_that_fails_mid_way_carries_the_generated_message() -> None:
    from autoparser.server.errors import EventError, event_api_error, event_error

    failure = EventError("generation failed: boom", status=502, code="upstream_error",
                         generated={"role": "assistant", "content": "so far"})
    body = event_api_error(failure).body()["error"]
    assert body["code"] == "upstream_error" and body["generated"]["content"] == "so far"
    assert "generated" not in event_error(failure)  # a stream has sent it as deltas already


def test_the_reader_waits_less_as_the_token_limit_nears() -> None:
    from autoparser.server.upstream import READ_MARGIN_S, READ_PACE_S, ReadPace, _Phase

    phase = _Phase()
    pace = ReadPace(96, phase)
    assert pace() == READ_PACE_S  # no token yet
    phase.count, phase.last_token_at = 10, 1.000
    assert pace() == READ_PACE_S  # the first read with tokens: the rate is timed from here
    phase.count, phase.last_token_at = 50, 1.010  # 40 tokens in 10 ms
    assert pace() == READ_PACE_S  # 46 tokens to go: 11.5 ms away
    phase.count, phase.last_token_at = 90, 1.020
    assert abs(pace() - (6 * 0.00025 + READ_MARGIN_S)) < 1e-9  # 6 tokens to go, 0.25 ms each
    phase.count = 96
    assert pace() == 0.0


TURN_ONE = "<｜begin▁of▁sentence｜>You are terse.<｜User｜>Weather in Paris?<｜Assistant｜></think>"
TURN_TWO = TURN_ONE + "Sunny, 21 °C.<｜end▁of▁sentence｜><｜User｜>And in Lima?<｜Assistant｜></think>"


def test_a_conversations_earlier_turns_are_not_tokenized_again(upstream: LlamaServer) -> None:
    """With the upstream's /tokenize as its tokenizer, the second turn's prompt sends only what
    follows the first turn's kept beginning, and gets the same tokens as tokenizing it whole."""
    from autoparser.server.prefix_tokens import PrefixTokenizer
    from autoparser.server.upstream import UpstreamVocabulary

    vocabulary = UpstreamVocabulary(upstream.base_url)
    vocabulary.connect()
    vocabulary.learn_special_tokens([TURN_TWO])
    assert {"<｜User｜>", "<｜Assistant｜>"} <= vocabulary.special_tokens
    whole = [vocabulary.tokenize(text) for text in (TURN_ONE, TURN_TWO, TURN_TWO + " ")]
    sent: list[str] = []
    post = vocabulary._post
    vocabulary._post = lambda path, body: sent.append(body["content"]) or post(path, body)  # type: ignore[method-assign]
    tokenizer = PrefixTokenizer(vocabulary.tokenize, vocabulary.special_ids)
    assert [tokenizer(text) for text in (TURN_ONE, TURN_TWO, TURN_TWO + " ")] == whole
    assert sent[0] == TURN_ONE
    # from the first turn's generation prompt on (its answer follows it)
    assert sent[1] == TURN_TWO[TURN_ONE.rindex("<｜Assistant｜>"):]
    assert TURN_TWO.endswith(sent[2][:-1]) and len(sent[2]) < 30  # the same prompt again: from its last cut on
    vocabulary.close()
