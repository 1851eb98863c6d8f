"""Hostile clients against the real `serve` process (tiny model): what a web page, a slow or
flooding client or a broken proxy can send, shutting down with requests in flight, and request
bodies of the wrong shape. The connection-level mechanics are tested without a model in
`test_server_connections.py`; here they are checked end to end."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from server_harness import ServerProcess, find_template, start_server, tiny_model

pytestmark = pytest.mark.slow

TIMEOUT_S = 1.0
ASK = {"model": "tiny", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 4}
LONG = {**ASK, "max_tokens": 1800, "ignore_eos": True}  # within one 2,048-token slot


def model() -> Any:
    pytest.importorskip("llama_cpp")
    return tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    served = start_server(model(), "--n-ctx", "2048", "--parallel", "1", "--header-timeout", str(TIMEOUT_S),
                          "--body-timeout", str(TIMEOUT_S), log_dir=tmp_path_factory.mktemp("hostile"))
    yield served
    served.stop()


def address(server: ServerProcess) -> tuple[str, int]:
    parts = urlsplit(server.base_url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def raw_exchange(server: ServerProcess, data: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    """Send `data` as is; the status and body of the answer."""
    with socket.create_connection(address(server), timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
            head, sep, body = received.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), None)
            if sep and length is not None and len(body) >= length:
                break
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text[:500]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


# -- browsers ----------------------------------------------------------------------------------------


def test_a_text_plain_body_is_refused_and_not_run(server: ServerProcess) -> None:
    """A web page may post `text/plain` anywhere without asking; the server must not read it as JSON."""
    before = server.health()["worker_restarts"]
    response = httpx.post(server.base_url + "/v1/chat/completions", content=json.dumps(ASK),
                          headers={"Content-Type": "text/plain"}, timeout=10)
    assert error_of(response, 415)["code"] == "unsupported_media_type"
    assert "application/json" in response.json()["error"]["message"]
    health = server.health()
    assert not health["busy"] and health["worker_restarts"] == before


def test_a_rebound_host_name_is_refused(server: ServerProcess) -> None:
    host, port = address(server)
    response = httpx.post(server.base_url + "/v1/chat/completions", json=ASK, timeout=10,
                          headers={"Host": f"attacker.example:{port}"})
    assert error_of(response, 400)["code"] == "invalid_host"
    for name in (f"localhost:{port}", f"{host}:{port}"):
        assert httpx.get(server.base_url + "/v1/models", headers={"Host": name}, timeout=10).status_code == 200


def test_no_cors_headers_unless_asked(server: ServerProcess) -> None:
    preflight = httpx.options(server.base_url + "/v1/chat/completions", timeout=10, headers={
        "Origin": "https://attacker.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    assert "access-control-allow-origin" not in preflight.headers
    answer = httpx.get(server.base_url + "/v1/models", headers={"Origin": "https://attacker.example"}, timeout=10)
    assert "access-control-allow-origin" not in answer.headers


# -- framing, request ids, slow clients ---------------------------------------------------------------


def test_double_framing_is_refused(server: ServerProcess) -> None:
    body = json.dumps(ASK).encode()
    status, answer = raw_exchange(server, (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n{len(body):x}\r\n").encode() + body + b"\r\n0\r\n\r\n")
    assert status == 400 and json.loads(answer)["error"]["code"] == "conflicting_framing"


def test_a_request_id_with_control_characters_is_cleaned(server: ServerProcess) -> None:
    response = httpx.get(server.base_url + "/health", timeout=10,
                         headers={"x-request-id": "id\x1b]0;owned\x07" + "9" * 300})
    echoed = response.headers["x-request-id"]
    assert echoed.startswith("id]0;owned9") and len(echoed) == 128 and echoed.isprintable()
    assert "\x1b" not in server.log()


def test_a_stalled_body_gets_408_and_leaves_no_traceback(server: ServerProcess) -> None:
    body = json.dumps(ASK).encode()
    started = time.monotonic()
    status, answer = raw_exchange(server, (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n").encode() + body[:10])
    assert status == 408 and json.loads(answer)["error"]["code"] == "request_timeout"
    assert time.monotonic() - started < TIMEOUT_S + 3
    time.sleep(0.5)
    assert "Traceback" not in server.log()


def test_slow_clients_do_not_wedge_health(server: ServerProcess) -> None:
    """Connections that send a byte now and then (fewer than the cap) are dropped at the header
    deadline; meanwhile `/health` and a generation are answered at once."""
    flood: list[socket.socket] = []
    try:
        for _ in range(200):
            sock = socket.create_connection(address(server), timeout=5)
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
            flood.append(sock)
        started = time.monotonic()
        assert httpx.get(server.base_url + "/health", timeout=5).status_code == 200
        assert httpx.post(server.base_url + "/v1/chat/completions", json=ASK, timeout=30).status_code == 200
        assert time.monotonic() - started < 10
        time.sleep(TIMEOUT_S + 1)
        dropped = 0
        for sock in flood:
            sock.settimeout(2)
            try:
                if b" 408 " in sock.recv(4096):
                    dropped += 1
            except OSError:
                dropped += 1
        assert dropped == len(flood)
    finally:
        for sock in flood:
            sock.close()
    assert len(server.log()) < 200_000


def test_a_flood_over_the_connection_cap_is_refused_at_once(server: ServerProcess) -> None:
    """700 slow connections against the default cap of 512: a probe is answered (200, or a 503
    naming the limit) or closed at once, never left waiting; the log grows by a few KB."""
    logged = len(server.log())
    flood: list[socket.socket] = []
    try:
        for _ in range(700):
            sock = socket.create_connection(address(server), timeout=5)
            sock.sendall(b"GET /health HTTP/1.1\r\n")
            flood.append(sock)
        for _ in range(5):
            started = time.monotonic()
            try:
                response = httpx.get(server.base_url + "/health", timeout=5)
                assert response.status_code in (200, 503), response.text
                if response.status_code == 503:
                    assert response.json()["error"]["code"] == "too_many_connections"
            except httpx.TransportError:
                pass  # closed unanswered: more than 64 connections were already waiting for a 503
            assert time.monotonic() - started < 2
    finally:
        for sock in flood:
            sock.close()
    time.sleep(TIMEOUT_S + 0.5)
    assert httpx.get(server.base_url + "/health", timeout=5).status_code == 200
    assert len(server.log()) - logged < 100_000


# -- bodies of the wrong shape -----------------------------------------------------------------------

ODD_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": {"odd": True}}}, "required": ["city"]}}}
MALFORMED = [
    ("/v1/responses", {"model": "tiny", "input": [{"type": "reasoning", "content": 5}]}),
    ("/v1/responses", {"model": "tiny", "input": "hi", "text": {"format": "json_object"}}),
    ("/v1/responses", {"model": "tiny", "input": "hi", "text": {"format": 5}, "stream": True}),
    ("/v1/responses", {"model": "tiny", "input": [{"type": "reasoning", "summary": [{"text": ["x"]}]}]}),
    ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": [{"type": {}, "text": "x"}]}]}),
]


@pytest.mark.parametrize(("path", "body"), MALFORMED, ids=[f"{p}-{i}" for i, (p, _) in enumerate(MALFORMED)])
def test_malformed_bodies_are_400_not_500(server: ServerProcess, path: str, body: dict[str, Any]) -> None:
    response = httpx.post(server.base_url + path, json=body, timeout=30)
    assert error_of(response, 400)["message"]
    assert "Traceback" not in server.log()


def test_an_odd_tool_schema_does_not_break_the_tools_preamble(server: ServerProcess) -> None:
    """The tiny model's template hides tools, so the server writes a preamble with an example
    call built from the schema; a `type` that is an object must not break it."""
    response = httpx.post(server.base_url + "/v1/chat/completions", timeout=60, json={**ASK, "tools": [ODD_TOOL]})
    assert response.status_code == 200, response.text[:500]
    assert "Traceback" not in server.log()


# -- SIGTERM -----------------------------------------------------------------------------------------


def test_sigterm_ends_streams_with_an_error_and_done_and_answers_the_queue_503(tmp_path) -> None:  # type: ignore[no-untyped-def]
    served = start_server(model(), "--n-ctx", "2048", "--parallel", "1", log_dir=tmp_path)
    try:
        http = served.http(timeout=60)
        queued: dict[str, Any] = {}
        lines: list[str] = []
        with http.stream("POST", "/v1/chat/completions", json={**LONG, "stream": True}) as response:
            assert response.status_code == 200
            behind = threading.Thread(target=lambda: queued.setdefault(
                "response", http.post("/v1/chat/completions", json=ASK)))
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                lines.append(line[6:])
                if len(lines) == 3:
                    behind.start()
                    deadline = time.monotonic() + 10
                    while served.health()["waiting"] < 1:
                        assert time.monotonic() < deadline
                        time.sleep(0.02)
                    signalled = time.monotonic()
                    served.process.send_signal(signal.SIGTERM)
        behind.join(30)
        assert lines[-1] == "[DONE]", lines[-3:]
        last = json.loads(lines[-2])
        assert last["choices"][0]["finish_reason"] == "error"
        assert last["error"]["code"] == "server_shutting_down" and last["error"]["type"] == "server_error"
        error = error_of(queued["response"], 503)
        assert error["code"] == "server_shutting_down"
        assert served.process.wait(15) == 0
        print(f"drained and exited {time.monotonic() - signalled:.2f} s after SIGTERM")
    finally:
        if served.process.poll() is None:
            served.process.kill()
            served.process.wait(5)
    assert "Traceback" not in served.log(), served.log()[-3000:]


def test_sigterm_with_nothing_running_exits_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    served = start_server(model(), "--n-ctx", "512", "--parallel", "1", log_dir=tmp_path)
    started = time.monotonic()
    served.process.send_signal(signal.SIGTERM)
    try:
        assert served.process.wait(15) == 0
    except subprocess.TimeoutExpired:
        served.process.kill()
        raise
    assert time.monotonic() - started < 8
