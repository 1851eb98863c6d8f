"""One model context, one generation at a time: a bounded FIFO queue and its worker thread.

llama.cpp's context is not shareable between concurrent generations, so a single thread runs
them one after another. Requests wait in a FIFO queue of at most `max_queue` entries; a request
that finds it full is refused at once with 503 (`Retry-After`), because waiting without bound
would only turn overload into timeouts.

The worker talks to the event loop through a `post` callback per job (thread-safe, usually
`AsyncChannel.post`). It checks the job's `cancelled` flag before starting it and, through the
engine's `should_stop`, after every token, so a client that goes away frees the slot within a
token or two. Token texts are run through the job's `Completion` here, on the worker thread,
because stop strings must end the generation loop itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoparser.server.completion import Completion
from autoparser.server.errors import overloaded

log = logging.getLogger("autoparser.server")


@dataclass
class GenerationResult:
    finish_reason: str
    """OpenAI's finish_reason: `stop`, `length` or `tool_calls`."""
    prompt_tokens: int
    completion_tokens: int
    prefill_ms: float
    decode_ms: list[float]
    message: dict[str, Any]
    final_deltas: list[dict[str, Any]]


@dataclass
class ReasoningPhase:
    """Generate the reasoning first, without a grammar, then the answer under `answer_grammar`.

    Used when the prompt opens reasoning and the answer is constrained or the reasoning has a
    budget. Reasoning is free text either way; running it unconstrained keeps lazy triggers
    from firing inside it, and lets the server close it after `budget` tokens by appending the
    end marker itself, as a model that stopped thinking would have. The answer phase continues
    from the prompt plus everything generated (the engine reuses its cache for that prefix).
    """

    end_text: str
    end_tokens: list[int]
    answer_grammar: Any
    budget: int | None = None
    no_eos: bool = False
    """The answer is required (forced tool call, JSON): the model may not end inside reasoning."""


@dataclass
class GenerationJob:
    prompt_tokens: list[int]
    max_tokens: int
    sampling: Any
    grammar: Any
    stop_token_ids: tuple[int, ...]
    ignore_eos: bool
    completion: Completion
    make_stats: Callable[[], Any]
    """Creates the engine's `GenerationStats`, which `Engine.generate` fills in."""
    post: Callable[[tuple[str, Any]], None]
    """Delivers `("deltas", list)`, `("done", GenerationResult)` or `("error", str)`."""
    reasoning: ReasoningPhase | None = None
    stream_deltas: bool = True
    cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancelled.set()


@dataclass
class _Totals:
    """Token counts and timings summed over the phases of one generation."""

    completion_tokens: int = 0
    prefill_ms: float | None = None
    decode_ms: list[float] = field(default_factory=list)
    finish_reason: str = "stop"

    def add(self, stats: Any, extra_tokens: int = 0) -> None:
        if self.prefill_ms is None:
            self.prefill_ms = stats.prefill_ms
        else:  # a later phase's prefill decodes tokens the server appended: decode time
            self.decode_ms.append(stats.prefill_ms)
        self.completion_tokens += stats.completion_tokens + extra_tokens
        self.decode_ms.extend(stats.decode_ms)
        self.finish_reason = stats.finish_reason or "stop"


class AsyncChannel:
    """Events from the worker thread into one request's coroutine, taken in batches.

    The worker may produce tokens faster than one wake-up of the event loop each (a small model
    makes over a thousand a second), so `post` schedules a wake-up only when none is pending, and
    `take` returns everything that has arrived since. The buffer needs no bound: one request
    produces at most a context's worth of tokens.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._lock = threading.Lock()
        self._events: list[tuple[str, Any]] = []
        self._wake_pending = False
        self._waiter: asyncio.Future[None] | None = None

    def post(self, event: tuple[str, Any]) -> None:
        """From any thread."""
        with self._lock:
            self._events.append(event)
            if self._wake_pending:
                return
            self._wake_pending = True
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening any more
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        with self._lock:
            self._wake_pending = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def take(self) -> list[tuple[str, Any]]:
        """Every event posted since the last call, waiting for at least one."""
        while True:
            with self._lock:
                if self._events:
                    events, self._events = self._events, []
                    return events
                self._waiter = self._loop.create_future()
            await self._waiter


class GenerationWorker:
    def __init__(self, engine: Any, max_queue: int):
        self._engine = engine
        self._max_queue = max_queue
        self._jobs: queue.Queue[GenerationJob | None] = queue.Queue()
        self._lock = threading.Lock()
        self._waiting = 0
        self._running: GenerationJob | None = None
        self._thread = threading.Thread(target=self._loop, name="autoparser-generation", daemon=True)
        self._average_s = 5.0

    # -- event-loop side -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: GenerationJob) -> None:
        """Queue a job, or raise a 503 `APIError` when `max_queue` jobs are already waiting."""
        with self._lock:
            if self._waiting >= self._max_queue:
                raise overloaded(self.retry_after_s())
            self._waiting += 1
        self._jobs.put(job)

    def retry_after_s(self) -> int:
        """A rough wait: the jobs ahead times the recent average generation time."""
        return max(1, round(self._average_s * (self._waiting + 1) / 2))

    def stop(self, timeout: float = 5.0) -> None:
        running = self._running
        if running is not None:
            running.cancel()
        self._jobs.put(None)
        self._thread.join(timeout)

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def busy(self) -> bool:
        return self._running is not None

    # -- worker thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            with self._lock:
                self._waiting -= 1
                self._running = job
            try:
                if job.cancelled.is_set():
                    job.post(("error", "cancelled"))
                    continue
                started = time.perf_counter()
                self._run(job)
                self._average_s = 0.8 * self._average_s + 0.2 * (time.perf_counter() - started)
            except Exception as exc:  # the request fails; the server stays up
                log.exception("generation failed")
                job.post(("error", f"generation failed: {type(exc).__name__}: {exc}"))
            finally:
                with self._lock:
                    self._running = None

    def _run(self, job: GenerationJob) -> None:
        completion = job.completion
        totals = _Totals()
        prompt, grammar, budget = list(job.prompt_tokens), job.grammar, job.max_tokens
        if job.reasoning is not None:
            generated, closed = self._reasoning_phase(job, totals)
            if not closed:
                return self._finish(job, totals)
            prompt += generated
            budget -= len(generated)
            grammar = job.reasoning.answer_grammar
        if budget > 0 and not completion.stopped and not job.cancelled.is_set():
            self._generate(job, prompt, budget, grammar, job.stop_token_ids, job.ignore_eos, totals)
        elif budget <= 0:
            totals.finish_reason = "length"
        self._finish(job, totals)

    def _reasoning_phase(self, job: GenerationJob, totals: _Totals) -> tuple[list[int], bool]:
        """Generate up to the end of reasoning; the tokens to continue from, and whether to go on."""
        phase = job.reasoning
        assert phase is not None
        single_end = phase.end_tokens[0] if len(phase.end_tokens) == 1 else None
        limit = job.max_tokens if phase.budget is None else min(phase.budget, job.max_tokens)
        stops = job.stop_token_ids + ((single_end,) if single_end is not None else ())
        stats = job.make_stats()
        generated, end_seen = self._generate(job, job.prompt_tokens, limit, None, stops,
                                             job.ignore_eos or phase.no_eos, totals, stats,
                                             end_text=phase.end_text)
        if job.cancelled.is_set() or job.completion.stopped:
            return generated, False
        if single_end is not None and stats.stop_token_id == single_end:
            appended = [single_end]  # the model closed its reasoning; the stop token was not yielded
        elif end_seen:
            return generated, True  # a multi-token end marker, already generated
        elif stats.finish_reason == "length" and limit < job.max_tokens:
            appended = list(phase.end_tokens)  # the budget is spent: close the reasoning
            totals.completion_tokens += len(appended)
        else:
            return generated, False  # end of generation, a stop token, or max_tokens
        self._emit(job, job.completion.feed(phase.end_text))
        return generated + appended, True

    def _generate(self, job: GenerationJob, prompt: list[int], max_tokens: int, grammar: Any,
                  stop_ids: tuple[int, ...], ignore_eos: bool, totals: _Totals, stats: Any = None,
                  end_text: str = "") -> tuple[list[int], bool]:
        """One engine run, feeding the completion: the tokens, and whether `end_text` ended it.

        Stops early on a stop string, or once `end_text` (a multi-token reasoning end) appears."""
        completion = job.completion
        stats = stats if stats is not None else job.make_stats()
        generated: list[int] = []
        tail, end_seen = "", False
        tokens = self._engine.generate(prompt, max_tokens, job.sampling, grammar=grammar,
                                       stop_token_ids=stop_ids, ignore_eos=ignore_eos,
                                       should_stop=job.cancelled.is_set, stats=stats)
        try:
            for token in tokens:
                generated.append(token.token_id)
                self._emit(job, completion.feed(token.text, token.logprobs))
                if completion.stopped:
                    break
                if end_text:
                    tail = (tail + token.text)[-2 * len(end_text):]
                    if end_text in tail:
                        end_seen = True
                        break
        finally:
            close = getattr(tokens, "close", None)
            if close is not None:
                close()
        totals.add(stats)
        return generated, end_seen

    @staticmethod
    def _emit(job: GenerationJob, deltas: list[dict[str, Any]]) -> None:
        if deltas and job.stream_deltas:
            job.post(("deltas", deltas))

    @staticmethod
    def _finish(job: GenerationJob, totals: _Totals) -> None:
        completion = job.completion
        final = completion.finish()
        job.post(("done", GenerationResult(
            finish_reason=completion.finish_reason(totals.finish_reason),
            prompt_tokens=len(job.prompt_tokens),
            completion_tokens=totals.completion_tokens,
            prefill_ms=totals.prefill_ms or 0.0,
            decode_ms=totals.decode_ms,
            message=completion.message(),
            final_deltas=final,
        )))
