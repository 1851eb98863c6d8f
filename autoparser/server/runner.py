"""One prepared request through the worker, as the HTTP routes consume it.

Every endpoint (chat completions, completions, responses, AG-UI) prepares a `PreparedChat`,
hands it to `start`, and then either waits for the result or iterates the events; only the
wire format around them differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from autoparser.server.errors import APIError, event_api_error
from autoparser.server.service import PreparedChat
from autoparser.server.worker import (
    CHANNEL_BOUND,
    AsyncChannel,
    ChatWorker,
    GenerationJob,
    GenerationResult,
)

if TYPE_CHECKING:
    from autoparser.server.metrics import RequestTracker

DISCONNECT_POLL_S = 0.25


@dataclass
class Run:
    prepared: PreparedChat
    job: GenerationJob
    channel: AsyncChannel
    tracker: RequestTracker | None = None

    async def batches(self) -> AsyncIterator[list[tuple[str, Any]]]:
        """The events as they arrive, in batches: `("deltas", list)` events, then one
        `("done", GenerationResult)` or `("error", str)`, which ends the last batch.

        Writing a batch at once means a client that fell behind costs one write per batch
        rather than one per token."""
        try:
            while True:
                batch = await self.channel.take()
                end = next((i for i, (kind, _) in enumerate(batch) if kind != "deltas"), None)
                if end is not None:
                    self._ended(*batch[end])
                    yield batch[: end + 1]
                    return
                yield batch
        finally:
            self.job.cancel()  # a no-op after a normal end; frees the slot when the client went away
            self._ended("cancelled", None)

    async def events(self) -> AsyncIterator[tuple[str, Any]]:
        async for batch in self.batches():
            for event in batch:
                yield event

    async def result(self, request: Request) -> GenerationResult:
        """The finished generation; cancels it if the client disconnects while waiting."""
        try:
            while True:
                try:
                    events = await asyncio.wait_for(self.channel.take(), DISCONNECT_POLL_S)
                except TimeoutError:
                    if await request.is_disconnected():
                        self.job.cancel()
                        self._ended("cancelled", None)
                        raise APIError(499, "The client closed the connection.", code="client_closed") from None
                    continue
                for kind, payload in events:
                    if kind in ("done", "error"):
                        self._ended(kind, payload)
                    if kind == "done":
                        return payload
                    if kind == "error":
                        raise event_api_error(payload)
        finally:
            self.job.cancel()
            self._ended("cancelled", None)

    async def on_close(self, _message: Any) -> None:
        self.job.cancel()

    def _ended(self, kind: str, payload: Any) -> None:
        """Tell the tracker how the request ended (once: later calls are ignored)."""
        if self.tracker is None:
            return
        if kind == "done":
            self.tracker.on_done(self.prepared, payload)
        else:
            self.tracker.on_end("error" if kind == "error" and payload != "cancelled" else "cancelled")


async def prepare_and_start(worker: ChatWorker, prepare: Callable[[], PreparedChat], stream: bool,
                            tracker: RequestTracker | None = None) -> Run:
    """Prepare a request on the thread pool (render, tokenize, grammar), then queue it.

    The request holds a place in the queue from the start: preparing a large prompt costs CPU
    too, so a burst of requests meets the queue bound (503) before it is prepared, not after."""
    worker.reserve()
    try:
        prepared = await run_in_threadpool(prepare)
    except BaseException:
        worker.release()
        raise
    return start(worker, prepared, stream, reserved=True, tracker=tracker)


def start(worker: ChatWorker, prepared: PreparedChat, stream: bool, reserved: bool = False,
          tracker: RequestTracker | None = None) -> Run:
    """Queue the generation (503 when the queue is full) and return its handle."""
    request = prepared.request
    paused = threading.Event()
    channel = AsyncChannel(asyncio.get_running_loop(), bound=CHANNEL_BOUND, pressure=paused)
    job = GenerationJob(
        prompt_tokens=prepared.prompt_tokens, max_tokens=prepared.max_tokens,
        sampling=prepared.sampling, grammar=prepared.grammar,
        stop_token_ids=prepared.stop_token_ids, ignore_eos=request.ignore_eos,
        completion=prepared.completion, post=channel.post,
        reasoning=prepared.reasoning, stream_deltas=stream, paused=paused)
    if tracker is not None:
        tracker.on_submit(prepared)
    worker.submit(job, reserved=reserved)
    return Run(prepared, job, channel, tracker)


class StreamResponse(Response):
    """A server-sent-event stream of the bytes (or text) that `content` yields, each piece one
    write, with sse-starlette's behaviour for what the routes use: the headers (`no-store`
    cache control, keep-alive, no proxy buffering), a `: ping` comment every `ping` seconds,
    and on the client's disconnect the stream cancelled and `client_close_handler_callable`
    awaited. An end of the stream (an error chunk and `[DONE]` on drain) is what `content`
    yields last.

    sse-starlette's `EventSourceResponse` runs each response as four tasks in an anyio task
    group and passes every piece through its encoder, a debug log call and a cancel scope; on
    the streaming routes, whose pieces are already bytes, that machinery cost more CPU than the
    pieces' own encoding. Here one task watches for the disconnect, the ping is a timer, and a
    piece that ends in `[DONE]` ends the response in the same message (one write with the end of
    the chunked body, instead of a later one)."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes | str], ping: float = 15.0, sep: str = "\n",
                 media_type: str | None = None,
                 client_close_handler_callable: Callable[[Message], Awaitable[None]] | None = None):
        self.body_iterator = content
        self.status_code = 200
        self.media_type = media_type or self.media_type
        self.background = None
        self.init_headers({"Cache-Control": "no-store", "Connection": "keep-alive", "X-Accel-Buffering": "no"})
        self._ping_s = ping
        self._sep = sep
        self._on_close = client_close_handler_callable
        self._ended = False
        self._client_gone = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        loop = asyncio.get_running_loop()
        writer = asyncio.current_task()
        assert writer is not None
        watcher = loop.create_task(self._watch(receive, writer))
        pinger = _Pinger(loop, self._ping_s, lambda: self._ping(send)) if self._ping_s > 0 else None
        try:
            async for piece in self.body_iterator:
                body = piece if isinstance(piece, bytes) else piece.encode()
                last = body.endswith(b"data: [DONE]\n\n")
                self._ended = last
                await send({"type": "http.response.body", "body": body, "more_body": not last})
                if last:
                    break
            if not self._ended:
                self._ended = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not self._client_gone:
                raise
            writer.uncancel()  # the client went away: the response ends here, quietly
        finally:
            self._ended = True
            if pinger is not None:
                pinger.cancel()
            watcher.cancel()
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _watch(self, receive: Receive, writer: asyncio.Task[Any]) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
        if self._ended:
            return
        self._client_gone = True
        writer.cancel()
        if self._on_close is not None:
            await self._on_close(message)

    async def _ping(self, send: Send) -> None:
        if self._ended:
            return
        comment = f": ping - {datetime.now(UTC)}{self._sep}{self._sep}".encode()
        with contextlib.suppress(RuntimeError):  # the stream ended while this waited to write
            await send({"type": "http.response.body", "body": comment, "more_body": True})


class _Pinger:
    """Calls `ping` (a coroutine, as a task of its own) every `seconds`, until cancelled."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float, ping: Callable[[], Awaitable[None]]):
        self._loop = loop
        self._seconds = seconds
        self._ping = ping
        self._task: asyncio.Task[None] | None = None
        self._timer = loop.call_later(seconds, self._fire)

    def _fire(self) -> None:
        if self._task is None or self._task.done():
            self._task = self._loop.create_task(self._ping())  # type: ignore[arg-type]
        self._timer = self._loop.call_later(self._seconds, self._fire)

    def cancel(self) -> None:
        self._timer.cancel()
        if self._task is not None:
            self._task.cancel()


def public(delta: dict[str, Any]) -> dict[str, Any]:
    """A delta without the private keys the completion attaches (`_logprobs`, `_full_text`)."""
    if not any(key.startswith("_") for key in delta):
        return delta
    return {key: value for key, value in delta.items() if not key.startswith("_")}
