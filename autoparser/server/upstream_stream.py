"""A streamed `/completion` answer, read as server-sent events.

`stream_events` writes the request with h11 and reads the answer with httptools over asyncio's
streams, at a fraction of httpx's CPU cost per streamed token; it yields the events each read of
the socket brought, reading at a pace the caller sets, and turns llama-server's error events
into `UpstreamError`s a client can act on. Closing the connection cancels the stream.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import h11
import httptools

from autoparser.server.upstream_client import CONNECT_TIMEOUT_S, UpstreamError, refusal_text


async def stream_events(base_url: str, path: str, body: dict[str, Any], read_timeout_s: float,
                        pace_s: Callable[[], float] | float = 0.0, headers: dict[str, str] | None = None,
                        ) -> AsyncIterator[list[dict[str, Any]]]:
    """POST `body` as JSON and yield the JSON of each `data:` line of the SSE answer, as lists:
    the events that one read of the socket brought.

    With `pace_s`, once the first event has come, the socket is read at most every `pace_s`
    seconds (or what `pace_s()` says before each read): the events of the tokens that arrived
    meanwhile then cost one wake-up and one read rather than one each.

    One connection per stream over asyncio's streams, the request written by h11 and the answer
    read by httptools' C parser: the upstream sends each token as an HTTP chunk of its own, and
    h11 takes about 4 µs of CPU a chunk to httptools' 0.1 (httpx's layers cost twice h11's).
    Closing the connection is how a stream is cancelled.
    """
    url = urlsplit(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    target = (url.path.rstrip("/") + path) or "/"
    payload = json.dumps(body).encode()
    fields = [("Host", url.netloc), ("Content-Type", "application/json"), ("Content-Length", str(len(payload))),
              ("Accept", "text/event-stream"), ("Connection", "close"), *(headers or {}).items()]
    try:
        request = h11.Connection(h11.CLIENT).send(h11.Request(method="POST", target=target, headers=fields))
    except h11.ProtocolError as exc:
        raise UpstreamError(f"cannot send a request to {base_url}{path}: {exc}") from None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(url.hostname, port, ssl=url.scheme == "https" or None), CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise UpstreamError(f"cannot reach {base_url}{path}: {exc or type(exc).__name__}") from None
    answer = _Answer()
    try:
        writer.write(request + payload)
        buffer, refusal = b"", b""
        loop = asyncio.get_running_loop()
        read_at = 0.0
        started = False
        while not answer.complete:
            pause = pace_s() if callable(pace_s) else pace_s
            if started and (wait := read_at + pause - loop.time()) > 0:
                await _paused(writer.transport, wait)
            read_at = loop.time()
            async with asyncio.timeout(read_timeout_s):  # no task per read, unlike wait_for
                data = await reader.read(1 << 16)
            if not data:
                if answer.status not in (0, 200):
                    break  # a refusal whose body ends with the connection
                raise ConnectionResetError("the connection closed before the end of the answer")
            received = answer.feed(data)
            if answer.status != 200:
                refusal += received
                continue
            *complete, buffer = (buffer + received).split(b"\n\n")
            events, failure = parse_events(complete)
            if events:
                started = True
                yield events
            if failure is not None:
                raise failure
        if answer.status != 200:
            raise UpstreamError(f"the upstream answered HTTP {answer.status}: {refusal_text(refusal)}")
    except (OSError, TimeoutError, httptools.HttpParserError) as exc:
        raise UpstreamError(f"the upstream {base_url} failed: {type(exc).__name__}: {exc}") from None
    finally:
        writer.close()


class _Answer:
    """An HTTP response as httptools' parser reads it: the status, the body, whether it ended."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._body: list[bytes] = []
        self.status = 0
        self.complete = False

    def feed(self, data: bytes) -> bytes:
        """The body bytes in `data` (chunked transfer encoding undone)."""
        self._parser.feed_data(data)
        body, self._body = b"".join(self._body), []
        return body

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


async def _paused(transport: asyncio.BaseTransport, seconds: float) -> None:
    """Sleep with the socket unread: the events that arrive meanwhile stay in the kernel and come
    in one read after it. A transport that kept reading would take each event as it came (one
    wake-up and one `recv` per token, the stream's largest cost) only to buffer it."""
    # uvloop's transports have these methods without being `asyncio.ReadTransport`s
    reading = getattr(transport, "is_reading", bool)()
    if reading:
        transport.pause_reading()  # type: ignore[attr-defined]
    try:
        await asyncio.sleep(seconds)
    finally:
        if reading and not transport.is_closing():
            transport.resume_reading()  # type: ignore[attr-defined]


def parse_events(raw_events: list[bytes]) -> tuple[list[dict[str, Any]], UpstreamError | None]:
    """The events before the first error event, and that error (to raise once they are handled).
    The `data:` lines are decoded as one JSON array: one decoder call for a read's events costs
    a third of one call each."""
    payloads: list[bytes] = []
    failure: UpstreamError | None = None
    for raw in raw_events:
        for line in raw.split(b"\n"):
            if line.startswith(b"data: "):
                payloads.append(line[6:])
            elif line.startswith(b"error: "):
                failure = upstream_failure(line[7:].decode(errors="replace"))
                break
        if failure is not None:
            break
    events = json.loads(b"[" + b",".join(payloads) + b"]") if payloads else []
    for index, payload in enumerate(events):
        if "error" in payload:
            error = payload["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            return events[:index], upstream_failure(str(message))
    return events, failure


LAZY_TRIGGER_REJECTED = re.compile(r"Unexpected empty grammar stack after accepting piece: (.*) \((\d+)\)", re.S)
"""What llama.cpp's grammar throws when a lazy grammar's trigger fires and the rest of the
triggering token is text the grammar does not allow there; llama-server catches it, ends the
request with an error event and keeps serving. (The own engine resamples such a token:
`lazy_guard`; llama-server samples on its own, so the front end cannot.)"""


def upstream_failure(message: str) -> UpstreamError:
    """The error for an error event the upstream ended a stream with, in words a client can act on."""
    rejected = LAZY_TRIGGER_REJECTED.search(message)
    if rejected is None:
        return UpstreamError(f"the upstream failed: {message}")
    piece, token = rejected.groups()
    return UpstreamError(
        f"llama-server ended the generation: token {token} fired the tool-call grammar's trigger, and the text "
        f"from the trigger on, {piece!r}, is not what the grammar allows there; llama-server cannot sample another "
        f"token in its place (its message: {message})")
