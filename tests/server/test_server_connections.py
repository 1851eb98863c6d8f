"""Hostile clients at the HTTP layer, against real uvicorn and h11 serving a stand-in app (no
model): slow or silent clients, too many connections, double framing, forged hosts, bodies that
are not declared JSON, request ids with control characters, and a log flood."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn

from autoparser.server.app import RequestIdMiddleware
from autoparser.server.connections import ConnectionLimits, RateLimitFilter, guarded_protocol
from autoparser.server.guards import (
    GuardSettings,
    RequestGuardMiddleware,
    clean_request_id,
    default_allowed_hosts,
    host_allowed,
    host_name,
    is_json_media_type,
    parse_allowed_hosts,
)

LIMITS = ConnectionLimits(header_timeout_s=0.6, body_timeout_s=0.6, max_connections=4, refused_wait_s=0.3)


class EchoApp:
    """Reads the whole body and answers 200 with its length; records what it saw."""

    def __init__(self) -> None:
        self.disconnects = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnects += 1
                return
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = json.dumps({"received": size}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


@dataclass
class Running:
    port: int
    app: EchoApp
    server: uvicorn.Server

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        return sock


@contextlib.contextmanager
def serving(limits: ConnectionLimits = LIMITS, allowed_hosts: tuple[str, ...] = ("*",)) -> Iterator[Running]:
    echo = EchoApp()
    app = RequestIdMiddleware(RequestGuardMiddleware(echo, GuardSettings(allowed_hosts)))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    config = uvicorn.Config(app, http=guarded_protocol(limits), lifespan="off", log_level="warning",
                            timeout_keep_alive=30)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield Running(sock.getsockname()[1], echo, server)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def request(body: bytes = b"{}", host: str = "localhost", content_type: str = "application/json",
            extra: str = "") -> bytes:
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
    if content_type:
        head += f"Content-Type: {content_type}\r\n"
    return (head + f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def read_response(sock: socket.socket, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """One whole response (status, headers, body), read until its Content-Length is in."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), headers, body


def closed_by_server(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


# -- timeouts ----------------------------------------------------------------------------------------


def test_a_silent_connection_gets_408_after_the_header_deadline() -> None:
    with serving() as running, running.connect() as sock:
        started = time.monotonic()
        status, _headers, body = read_response(sock)
        assert status == 408 and json.loads(body)["error"]["code"] == "request_timeout"
        assert "headers" in json.loads(body)["error"]["message"]
        assert closed_by_server(sock)
        assert 0.5 < time.monotonic() - started < 3


def test_headers_sent_a_byte_at_a_time_do_not_extend_the_deadline() -> None:
    with serving() as running, running.connect() as sock:
        started = time.monotonic()
        for byte in request()[:30]:
            try:
                sock.send(bytes([byte]))
            except OSError:
                break
            time.sleep(0.05)
        status, _headers, _body = read_response(sock)
        assert status == 408 and time.monotonic() - started < 3


def test_a_body_that_stops_arriving_gets_408_and_the_route_sees_a_disconnect() -> None:
    with serving() as running, running.connect() as sock:
        sock.sendall(request(b'{"messages": []}')[:-5])  # headers and most of the body
        status, _headers, body = read_response(sock)
        assert status == 408 and "body" in json.loads(body)["error"]["message"]
        assert closed_by_server(sock)
        time.sleep(0.2)
        assert running.app.disconnects == 1


def test_the_next_request_on_a_kept_connection_has_its_own_deadline() -> None:
    with serving() as running, running.connect() as sock:
        for _ in range(3):  # whole requests keep the connection, however long it lives
            sock.sendall(request())
            assert read_response(sock)[0] == 200
            time.sleep(0.3)
        sock.sendall(request()[:10])
        assert read_response(sock)[0] == 408


def test_a_slow_route_is_not_cut_by_the_deadlines() -> None:
    async def slow(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await asyncio.sleep(1.5)  # longer than both deadlines: generation time is not limited here
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with serving() as running, running.connect() as sock:
        running.server.config.loaded_app = slow  # the protocol reads the app from the config
        sock.sendall(request())
        assert read_response(sock)[0] == 200


# -- the connection cap ------------------------------------------------------------------------------


def test_connections_over_the_cap_get_a_clear_503_and_the_cap_frees_up() -> None:
    with serving(ConnectionLimits(header_timeout_s=5, body_timeout_s=5, max_connections=4,
                                  refused_wait_s=1)) as running:
        held = [running.connect() for _ in range(4)]
        time.sleep(0.2)
        with running.connect() as extra:
            extra.sendall(request())
            status, headers, body = read_response(extra)
            assert status == 503 and headers.get("retry-after") == "1"
            assert json.loads(body)["error"]["code"] == "too_many_connections"
        for sock in held:
            sock.close()
        time.sleep(0.3)
        with running.connect() as again:
            again.sendall(request())
            assert read_response(again)[0] == 200


def test_a_flood_of_silent_connections_does_not_wedge_the_server() -> None:
    """300 connections that never send a byte: new clients are refused at once (never left
    hanging) while the flood holds the cap, and served once the deadline has dropped it."""
    limits = ConnectionLimits(header_timeout_s=1.0, body_timeout_s=1.0, max_connections=50, refused_wait_s=0.5)
    with serving(limits) as running:
        flood = [running.connect() for _ in range(300)]
        try:
            started = time.monotonic()
            with running.connect() as probe:
                probe.sendall(request())
                try:
                    status = read_response(probe, timeout=3)[0]
                except (ConnectionError, OSError):
                    status = 0  # refused before it could send: closed at once
            assert status in (503, 0) and time.monotonic() - started < 2
            time.sleep(limits.header_timeout_s + 0.5)
            with running.connect() as probe:
                probe.sendall(request())
                assert read_response(probe)[0] == 200
        finally:
            for sock in flood:
                sock.close()


# -- the guards --------------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", ""])
def test_a_body_not_declared_json_is_415_and_never_read(content_type: str) -> None:
    with serving() as running, running.connect() as sock:
        sock.sendall(request(b'{"messages": []}', content_type=content_type))
        status, _headers, body = read_response(sock)
        assert status == 415 and json.loads(body)["error"]["code"] == "unsupported_media_type"


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/vnd.api+json"])
def test_json_media_types_are_accepted(content_type: str) -> None:
    with serving() as running, running.connect() as sock:
        sock.sendall(request(b"{}", content_type=content_type))
        assert read_response(sock)[0] == 200


def test_content_length_with_transfer_encoding_is_refused() -> None:
    with serving() as running, running.connect() as sock:
        body = b'{"a": 1}'
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
        status, headers, response = read_response(sock)
        assert status == 400 and json.loads(response)["error"]["code"] == "conflicting_framing"
        assert headers.get("connection") == "close" and closed_by_server(sock)


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example",
                                  "localhost.evil.example", "[::2]:80", ""])
def test_a_foreign_host_is_400_on_a_loopback_server(host: str) -> None:
    with serving(allowed_hosts=default_allowed_hosts("127.0.0.1", loopback=True)) as running, \
            running.connect() as sock:
        no_host = request().replace(b"HTTP/1.1\r\nHost: localhost\r\n", b"HTTP/1.0\r\n")  # 1.1 needs one
        sock.sendall(request(host=host) if host else no_host)
        status, _headers, body = read_response(sock)
        assert status == 400 and json.loads(body)["error"]["code"] == "invalid_host"


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000", "LOCALHOST."])
def test_loopback_names_are_accepted_on_a_loopback_server(host: str) -> None:
    with serving(allowed_hosts=default_allowed_hosts("127.0.0.1", loopback=True)) as running, \
            running.connect() as sock:
        sock.sendall(request(host=host))
        assert read_response(sock)[0] == 200


def test_allowed_host_patterns() -> None:
    allowed = parse_allowed_hosts("models.lan, *.corp.example ,[::1]")
    assert allowed == ("models.lan", "*.corp.example", "::1")
    assert host_allowed(host_name(b"gpu1.corp.example:443"), allowed)
    assert not host_allowed(host_name(b"corp.example"), allowed)
    assert not host_allowed(host_name(b"evil.example"), allowed)
    assert host_allowed(host_name(b"[::1]:8000"), allowed)
    assert default_allowed_hosts("0.0.0.0", loopback=False) == ("*",)
    assert is_json_media_type(b"application/json;charset=utf-8") and not is_json_media_type(b"text/json+plain")


def test_request_ids_are_cleaned_before_they_are_echoed() -> None:
    hostile = "abc\x1b[31mred\x07" + "x" * 500
    with serving() as running, running.connect() as sock:
        sock.sendall(request(extra=f"x-request-id: {hostile}\r\n"))
        _status, headers, _body = read_response(sock)
    echoed = headers["x-request-id"]
    assert echoed.startswith("abc[31mred") and len(echoed) == 128
    assert all(0x21 <= ord(c) <= 0x7E for c in echoed)
    assert clean_request_id(b"\x00\x01\x7f \t") != b"" and clean_request_id(b"ok-1") == b"ok-1"


# -- the log -----------------------------------------------------------------------------------------


def test_a_flood_of_log_lines_is_cut_to_the_rate_and_says_so() -> None:
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("autoparser.test.flood")
    logger.propagate = False
    logger.addHandler(Collect())
    rate = RateLimitFilter(per_second=10, burst=20, max_chars=100)
    logger.addFilter(rate)
    started = time.monotonic()
    for i in range(100_000):
        logger.warning("400 request: %s", "x" * 5000 if i % 2 else i)
    elapsed = time.monotonic() - started
    assert len(records) <= 20 + 10 * elapsed + 1
    assert all(len(line) <= 100 + 40 for line in records)
    time.sleep(0.2)
    logger.warning("after the flood")
    assert "log lines dropped" in records[-1] and records[-1].endswith("after the flood")


# -- the app's middleware order -----------------------------------------------------------------------


class _Settings:
    """What `create_app` reads before a route runs."""

    def __init__(self, **fields: Any):
        from autoparser.server.service import ServerSettings

        self.settings = ServerSettings(**fields)


def app_client(**fields: Any) -> Any:
    from starlette.testclient import TestClient

    from autoparser.server.app import create_app

    return TestClient(create_app(_Settings(**fields), worker=None))  # type: ignore[arg-type]


def test_cors_is_off_unless_origins_are_given() -> None:
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type,authorization"}
    closed = app_client().options("/v1/chat/completions", headers=preflight)
    assert "access-control-allow-origin" not in closed.headers
    client = app_client(cors_allow_origins=("https://app.example",), api_key="k")
    allowed = client.options("/v1/chat/completions", headers=preflight)
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "https://app.example"
    other = client.options("/v1/chat/completions", headers={**preflight, "Origin": "https://attacker.example"})
    assert other.headers.get("access-control-allow-origin") != "https://attacker.example"


def test_the_guard_answers_before_the_api_key_and_with_a_request_id() -> None:
    client = app_client(api_key="k", allowed_hosts=("testserver",))
    response = client.post("/v1/chat/completions", content=b"{}", headers={"Content-Type": "text/plain"})
    assert response.status_code == 415 and response.headers["x-request-id"]
    response = client.post("/v1/chat/completions", json={}, headers={"Host": "attacker.example"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_host"
    assert client.post("/v1/chat/completions", json={}).status_code == 401


@pytest.mark.parametrize(("soft", "hard", "cap"), [(600, 600, 88), (1024, 1024, 512), (1024, 4096, 512)])
def test_the_connection_cap_leaves_descriptors_free(soft: int, hard: int, cap: int) -> None:
    """In a child: lowering the limit here could not be undone."""
    code = (f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
            "from autoparser.server.startup import connection_cap; print(connection_cap(512), "
            "resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    got_cap, raised_to = map(int, done.stdout.split())
    assert got_cap == cap and raised_to == hard, done.stderr
