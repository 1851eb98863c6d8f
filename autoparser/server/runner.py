"""One prepared request through the worker, as the HTTP routes consume it.

Every endpoint (chat completions, completions, responses, AG-UI) prepares a `PreparedChat`,
hands it to `start`, and then either waits for the result or iterates the events; only the
wire format around them differs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import Request
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import Message, Send

from autoparser.server.errors import APIError, event_api_error
from autoparser.server.service import PreparedChat
from autoparser.server.worker import (
    CHANNEL_BOUND,
    AsyncChannel,
    GenerationJob,
    GenerationResult,
    GenerationWorker,
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


async def prepare_and_start(worker: GenerationWorker, prepare: Callable[[], PreparedChat], stream: bool,
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


def start(worker: GenerationWorker, prepared: PreparedChat, stream: bool, reserved: bool = False,
          tracker: RequestTracker | None = None) -> Run:
    """Queue the generation (503 when the queue is full) and return its handle."""
    request = prepared.request
    paused = threading.Event()
    channel = AsyncChannel(asyncio.get_running_loop(), bound=CHANNEL_BOUND, pressure=paused)
    job = GenerationJob(
        prompt_tokens=prepared.prompt_tokens, max_tokens=prepared.max_tokens,
        sampling=prepared.sampling, grammar=prepared.grammar,
        stop_token_ids=prepared.stop_token_ids, ignore_eos=request.ignore_eos,
        completion=prepared.completion, make_stats=_new_stats, post=channel.post,
        reasoning=prepared.reasoning, stream_deltas=stream, paused=paused)
    if tracker is not None:
        tracker.on_submit(prepared)
    worker.submit(job, reserved=reserved)
    return Run(prepared, job, channel, tracker)


class StreamResponse(EventSourceResponse):
    """sse-starlette's response, without a cancel scope around each write when no send timeout
    is set: entering and leaving one cost about 15 µs, once per piece of a stream."""

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        if self.send_timeout is None:
            await send(message)
        else:
            await super()._send_with_timeout(send, message)


def public(delta: dict[str, Any]) -> dict[str, Any]:
    """A delta without the private keys the completion attaches (`_logprobs`, `_full_text`)."""
    if not any(key.startswith("_") for key in delta):
        return delta
    return {key: value for key, value in delta.items() if not key.startswith("_")}


def _new_stats() -> Any:
    from autoparser.llama.engine import GenerationStats

    return GenerationStats()
