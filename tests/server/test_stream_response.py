"""The streaming routes' SSE response (`runner.StreamResponse`) driven as an ASGI app: pieces go
out as they come, `[DONE]` ends the response in the same message, a quiet stream is pinged, and a
client that goes away cancels the stream and is reported to the close handler."""

from __future__ import annotations

import asyncio
from typing import Any

from autoparser.server.runner import StreamResponse


class Client:
    """ASGI `receive`/`send` of one connection; `leave()` makes `receive` answer a disconnect."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self._gone = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def leave(self) -> None:
        self._gone.set()

    def bodies(self) -> list[tuple[bytes, bool]]:
        return [(m["body"], m["more_body"]) for m in self.sent if m["type"] == "http.response.body"]


def test_pieces_then_done_end_the_response_in_one_message() -> None:
    async def pieces() -> Any:
        yield b"data: 1\n\n"
        yield "data: 2\n\n"
        yield b"data: 3\n\ndata: [DONE]\n\n"

    async def run() -> Client:
        client = Client()
        await StreamResponse(pieces())({"type": "http"}, client.receive, client.send)
        return client

    client = asyncio.run(run())
    start = client.sent[0]
    assert start["status"] == 200 and (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
    assert (b"x-accel-buffering", b"no") in start["headers"] and (b"cache-control", b"no-store") in start["headers"]
    assert client.bodies() == [(b"data: 1\n\n", True), (b"data: 2\n\n", True), (b"data: 3\n\ndata: [DONE]\n\n", False)]


def test_a_stream_without_done_is_ended_after_its_last_piece() -> None:
    async def pieces() -> Any:
        yield b"data: 1\n\n"

    async def run() -> Client:
        client = Client()
        await StreamResponse(pieces(), media_type="application/x-custom")({"type": "http"}, client.receive, client.send)
        return client

    client = asyncio.run(run())
    assert client.bodies() == [(b"data: 1\n\n", True), (b"", False)]


def test_a_quiet_stream_is_pinged() -> None:
    async def pieces() -> Any:
        await asyncio.sleep(0.35)
        yield b"data: [DONE]\n\n"

    async def run() -> Client:
        client = Client()
        await StreamResponse(pieces(), ping=0.1)({"type": "http"}, client.receive, client.send)
        return client

    bodies = asyncio.run(run()).bodies()
    pings = [body for body, _ in bodies if body.startswith(b": ping - ")]
    assert len(pings) >= 2 and all(body.endswith(b"\n\n") for body in pings)
    assert bodies[-1] == (b"data: [DONE]\n\n", False)


def test_a_client_that_leaves_cancels_the_stream_and_is_reported() -> None:
    cleaned: list[str] = []
    closed: list[dict[str, Any]] = []

    async def pieces() -> Any:
        try:
            yield b"data: 1\n\n"
            await asyncio.sleep(30)
            yield b"data: never\n\n"
        finally:
            cleaned.append("finally")

    async def on_close(message: dict[str, Any]) -> None:
        closed.append(message)

    async def run() -> tuple[Client, float]:
        client = Client()
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, client.leave)
        started = loop.time()
        await StreamResponse(pieces(), client_close_handler_callable=on_close)({"type": "http"}, client.receive,
                                                                               client.send)
        return client, loop.time() - started

    client, took = asyncio.run(run())
    assert took < 5 and cleaned == ["finally"] and closed == [{"type": "http.disconnect"}]
    assert client.bodies() == [(b"data: 1\n\n", True)]
