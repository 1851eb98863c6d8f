"""The server under bad input, load and disconnects: a real `serve` process with an API key.

One server (DeepSeek V3.1 template on the tiny model) with `--api-key`, a short queue and a
small body limit serves every test here.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest
from server_harness import ServerProcess, find_template, start_server, tiny_model

API_KEY = "test-key-123"
MAX_QUEUE = 4
MAX_BODY = 64 * 1024
LONG = {"max_tokens": 3500, "ignore_eos": True}  # seconds of generation on the tiny model


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    process = start_server(model, "--n-ctx", "4096", "--max-queue", str(MAX_QUEUE),
                           "--max-body-bytes", str(MAX_BODY), log_dir=tmp_path_factory.mktemp("load"),
                           api_key=API_KEY)
    yield process
    process.stop()


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 8, **fields}


def assert_error_object(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def wait_until_idle(server: ServerProcess, within: float) -> float:
    """Seconds until the server reports no running or waiting generation (fails after `within`)."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        health = server.health()
        if not health["busy"] and health["waiting"] == 0:
            return time.monotonic() - start
        time.sleep(0.02)
    pytest.fail(f"the server was still busy after {within} s: {server.health()}")


# -- bad input -------------------------------------------------------------------------------------


def test_malformed_json(server: ServerProcess) -> None:
    with server.http() as http:
        response = http.post("/v1/chat/completions", content=b'{"messages": [',
                             headers={"content-type": "application/json"})
    assert assert_error_object(response, 400)["code"] == "invalid_json"


def test_invalid_field_is_a_400_not_a_422(server: ServerProcess) -> None:
    with server.http() as http:
        response = http.post("/v1/chat/completions", json=body(temperature="hot"))
    assert assert_error_object(response, 400)["param"] == "temperature"


def test_unknown_named_tool(server: ServerProcess) -> None:
    tool = {"type": "function", "function": {"name": "known", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError) as info:
        server.client().chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], tools=[tool],
            tool_choice={"type": "function", "function": {"name": "unknown"}})
    assert info.value.body["param"] == "tool_choice" and "unknown" in info.value.body["message"]


def test_image_content(server: ServerProcess) -> None:
    content = [{"type": "text", "text": "My name is Olivier and I"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    with pytest.raises(openai.BadRequestError) as info:
        server.client().chat.completions.create(model="tiny", messages=[{"role": "user", "content": content}])
    assert "vision" in info.value.body["message"]


def test_prompt_too_long(server: ServerProcess) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        server.client().chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "lorem ipsum " * 3000}], max_tokens=4)
    assert info.value.body["code"] == "context_length_exceeded"


@pytest.mark.parametrize("key", [None, "wrong-key"])
def test_wrong_api_key(server: ServerProcess, key: str | None) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    response = httpx.post(server.base_url + "/v1/chat/completions", json=body(), headers=headers, timeout=10)
    assert assert_error_object(response, 401)["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.base_url + "/v1", api_key=key or "x", max_retries=0).models.list()
    assert httpx.get(server.base_url + "/health", timeout=5).status_code == 200  # the probe stays open


def test_body_too_large(server: ServerProcess) -> None:
    big = body(messages=[{"role": "user", "content": "x" * (MAX_BODY + 10)}])
    with server.http() as http:
        response = http.post("/v1/chat/completions", json=big)
        assert_error_object(response, 413)

        def chunks():  # no Content-Length: the limit applies while the body arrives
            data = json.dumps(big).encode()
            for i in range(0, len(data), 8192):
                yield data[i:i + 8192]

        response = http.post("/v1/chat/completions", content=chunks(),
                             headers={"content-type": "application/json"})
        assert_error_object(response, 413)


def test_unknown_route_is_an_error_object(server: ServerProcess) -> None:
    with server.http() as http:
        assert_error_object(http.get("/v1/nothing"), 404)


# -- load and disconnects --------------------------------------------------------------------------


def test_sixteen_concurrent_clients_are_answered_or_refused(server: ServerProcess) -> None:
    outcomes: list[Any] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        client = server.client(timeout=120.0)
        try:
            if index % 2:
                response = client.chat.completions.create(model="tiny", max_tokens=48, seed=index,
                                                          messages=[{"role": "user", "content": f"hi {index}"}])
                result: Any = response.choices[0].finish_reason
            else:
                stream = client.chat.completions.create(model="tiny", max_tokens=48, seed=index, stream=True,
                                                        messages=[{"role": "user", "content": f"hi {index}"}])
                result = [c.choices[0].finish_reason for c in stream if c.choices][-1]
        except openai.APIStatusError as exc:
            result = (exc.status_code, exc.response.headers.get("retry-after"), exc.body)
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a client hung"
    assert len(outcomes) == 16
    answered = [o for o in outcomes if o in ("stop", "length")]
    refused = [o for o in outcomes if isinstance(o, tuple)]
    assert len(answered) + len(refused) == 16, outcomes
    assert answered
    print(f"16 clients: {len(answered)} answered, {len(refused)} refused with 503")
    for status, retry_after, error in refused:
        assert status == 503 and retry_after and int(retry_after) >= 1 and error["code"] == "queue_full"
    wait_until_idle(server, within=5)


def test_streaming_disconnect_frees_the_slot(server: ServerProcess) -> None:
    results: dict[str, Any] = {}
    with server.http() as http, http.stream("POST", "/v1/chat/completions",
                                            json=body(stream=True, **LONG)) as stream:
        lines = stream.iter_lines()
        data = [line for line in (next(lines) for _ in range(12)) if line.startswith("data:")]
        assert len(data) >= 3
        waiting = threading.Thread(target=_timed_request, args=(server, results))
        waiting.start()
        time.sleep(0.3)
        assert server.health()["busy"] and server.health()["waiting"] == 1
        closed_at = time.monotonic()
    waiting.join(30)
    assert results["finish_reason"] in ("stop", "length")
    assert results["done_at"] - closed_at < 1.5, "the queued request waited for the abandoned generation"
    wait_until_idle(server, within=2)


def test_non_streaming_disconnect_frees_the_slot(server: ServerProcess) -> None:
    with server.http(timeout=0.6) as http, pytest.raises(httpx.ReadTimeout):
        http.post("/v1/chat/completions", json=body(**LONG))
    assert wait_until_idle(server, within=2) < 1.5


def _timed_request(server: ServerProcess, results: dict[str, Any]) -> None:
    response = server.client().chat.completions.create(model="tiny", max_tokens=8,
                                                       messages=[{"role": "user", "content": "next"}])
    results["finish_reason"] = response.choices[0].finish_reason
    results["done_at"] = time.monotonic()
