"""Connections that cannot wedge the server: deadlines for a request's headers and body, a cap on
open connections, and log lines that a flood cannot multiply without bound.

uvicorn closes a connection that stays idle after a response (`timeout_keep_alive`), but a
client that sends its headers a byte at a time, or never sends anything, keeps its socket until
the file descriptors run out, and then nothing else (not even `/health`) can connect.
`GuardedH11Protocol` is uvicorn's h11 protocol with:

- a deadline for the headers, from the connection (or the end of the previous response) to the
  end of the request line and headers: `408` and the connection is closed;
- a deadline for the body, from the end of the headers to the body's end: the same;
- at most `max_connections` open connections: the next ones get `503` as soon as they send
  anything (or are closed after a short wait if they send nothing) and are closed; beyond
  `refusing_at_most` of those, a connection is closed at once, unanswered.

uvicorn accepts at most its `backlog` connections per turn of the event loop, so with a small
backlog the descriptors in use stay below the open-file limit whatever arrives: when they run
out, every accept fails (and asyncio logs each failure with a traceback).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from autoparser.server.errors import error_body

log = logging.getLogger("autoparser.server")


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = 512
    refused_wait_s: float = 1.0
    """How long a connection over the cap may take to send its first bytes (and get its 503)."""
    refusing_at_most: int = 64
    """Connections over the cap that may wait for their 503 at once; more are closed unanswered,
    so that a flood never holds more than `max_connections + refusing_at_most` descriptors."""


def raw_response(status: int, reason: str, message: str, code: str, extra: bytes = b"") -> bytes:
    """A whole HTTP/1.1 error response that closes the connection, written outside h11."""
    body = json.dumps(error_body(status, message, code=code)).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n").encode()
    return head + extra + b"\r\n" + body


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's `http` protocol class with `limits` (uvicorn instantiates it per connection)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


class GuardedH11Protocol(H11Protocol):
    limits = ConnectionLimits()

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._deadline: Any = None
        self._refused = False
        self._waiting_since_cycle: Any = None

    # -- the connection cap ------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        over = len(self.connections) - self.limits.max_connections
        if over > self.limits.refusing_at_most:
            self.transport.close()
            return
        if over > 0:
            self._refused = True
            self._arm(self.limits.refused_wait_s)
            return
        self._await_headers(self.limits.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            self._refuse()
            return
        super().data_received(data)
        self._check_progress()

    def _refuse(self) -> None:
        if self.transport.is_closing():
            return
        self._refused = False
        log.warning("refused a connection: %d are open, the limit is %d (--max-connections)",
                    len(self.connections), self.limits.max_connections)
        self.transport.write(raw_response(
            503, "Service Unavailable",
            f"The server has too many open connections (the limit is {self.limits.max_connections}). "
            "Retry later.", "too_many_connections", extra=b"retry-after: 1\r\n"))
        self.transport.close()

    # -- deadlines ---------------------------------------------------------------------------------

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self._await_headers(self.limits.header_timeout_s)  # the next request on this connection
        else:
            self._check_progress()  # a pipelined request began at once

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _await_headers(self, seconds: float) -> None:
        self._waiting_since_cycle = self.cycle
        self._arm(seconds)

    def _check_progress(self) -> None:
        """After data arrived: once the headers are in, the deadline becomes the body's; once the
        body is in, the route's own time is not limited here."""
        if self._waiting_since_cycle is not self.cycle and self.cycle is not None:
            self._waiting_since_cycle = self.cycle
            if self.cycle.more_body:
                self._arm(self.limits.body_timeout_s)
            else:
                self._disarm()
        elif self.cycle is not None and not self.cycle.more_body and not self.cycle.response_complete:
            self._disarm()

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self._refused:
            self.transport.close()
            return
        cycle = self.cycle
        waiting_for_headers = cycle is None or cycle is self._waiting_since_cycle and cycle.response_complete
        if not waiting_for_headers and (cycle.response_started or not cycle.more_body):
            return  # the request is in; the route is answering
        part = "headers" if waiting_for_headers else "body"
        limit = self.limits.header_timeout_s if waiting_for_headers else self.limits.body_timeout_s
        # Closing tells a route that is reading the body that the client is gone (uvicorn's
        # `connection_lost`), as when a client hangs up.
        self.transport.write(raw_response(
            408, "Request Timeout", f"The request's {part} did not arrive within {limit:g} s.", "request_timeout"))
        self.transport.close()


class RateLimitFilter(logging.Filter):
    """At most `burst` lines at once and `per_second` after that, each cut to `max_chars`; the
    next line that passes says how many were dropped. Attached to the loggers a flood of
    requests writes to, so the log grows by at most a few KB a second whatever arrives."""

    def __init__(self, per_second: float = 20.0, burst: int = 200, max_chars: int = 2000):
        super().__init__()
        self.per_second = per_second
        self.burst = burst
        self.max_chars = max_chars
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.per_second)
        self._last = now
        if self._tokens < 1:
            self._dropped += 1
            return False
        self._tokens -= 1
        message = record.getMessage()
        if self._dropped:
            message = f"({self._dropped} log lines dropped: more than {self.per_second:g} a second) {message}"
            self._dropped = 0
        if len(message) > self.max_chars:
            message = message[: self.max_chars] + f"... ({len(message) - self.max_chars} more characters)"
        record.msg, record.args = message, None
        return True
