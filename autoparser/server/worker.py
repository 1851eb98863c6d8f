"""Up to `n_parallel` generations at once on one model context: a bounded FIFO queue and the
thread that batches them.

Jobs take a slot as soon as one is free; the others wait in a FIFO queue of at most
`max_queue` entries, and a request that finds it full is refused at once with 503
(`Retry-After`), because waiting without bound would only turn overload into timeouts.
The worker thread runs continuous batching: each step, every running job gets one token from
one shared `llama_decode` (`Engine.step`), so a long generation does not hold the others up;
jobs join and leave between steps.

This runs in the model worker process (`supervisor`). It hands each job's output on through the
job's `post` callback as it comes: the token texts (`("tokens", (texts, logprobs))`, the
log-probabilities None unless the request asked for them), then how the generation ended
(`("done", GenerationEnd)`) or `("error", str)`. Parsing them is the front end's work
(`feed.CompletionFeed`), in its own process; here stays only what decides the generation: stop
tokens and, over the same texts as the front end's `Completion`, stop strings (`TokenStops`), the
token budget, the reasoning phase. The worker checks the job's `cancelled` flag before starting
it and, through the engine's `should_stop`, before every token, so a client that goes away frees
its slot within a token or two.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from autoparser.server.completion import Completion
from autoparser.server.errors import APIError, overloaded
from autoparser.server.stops import TokenStops

log = logging.getLogger("autoparser.server")

PAUSED_POLL_S = 0.005
"""How often a worker whose every job is paused looks again."""


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
    cached_tokens: int = 0
    """Prompt tokens whose keys and values were reused from the cache."""
    started_at: float = 0.0
    """`time.monotonic()` when the job took its slot (the same clock in every process)."""


@dataclass
class GenerationEnd:
    """How a generation ended, as the model worker reports it; with the request's `Completion`,
    which read its texts, it makes the `GenerationResult` (`CompletionFeed.result`)."""

    finish_reason: str
    """The generation's: `stop` or `length` (the completion may make it `tool_calls`)."""
    prompt_tokens: int
    completion_tokens: int
    prefill_ms: float
    decode_ms: list[float]
    cached_tokens: int = 0
    started_at: float = 0.0


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
    call_tokens: tuple[int, ...] = ()
    """The calls' openers (single tokens) that end reasoning where the model writes them inside
    it, as the parser reads them: reasoning stops before the token, and the answer continues from
    there under `call_grammar`, which begins with it. So a call begun in reasoning is generated
    under the grammar, as a lazy grammar woken by that token would generate it."""
    call_grammar: Any = None

    def answer_grammar_after(self, stop_token: int | None) -> Any:
        """The answer's grammar, after reasoning that stopped at `stop_token` (or not at a token)."""
        if stop_token is not None and stop_token in self.call_tokens and self.call_grammar is not None:
            return self.call_grammar
        return self.answer_grammar

    def stops(self) -> tuple[int, ...]:
        """The tokens that end the reasoning phase: a one-token end marker, the calls' openers."""
        single_end = (self.end_tokens[0],) if len(self.end_tokens) == 1 else ()
        return single_end + self.call_tokens


@dataclass(kw_only=True)
class Pausable:
    """A job the client may cancel, or hold back while it reads slowly."""

    cancelled: threading.Event = field(default_factory=threading.Event)
    paused: threading.Event = field(default_factory=threading.Event)
    """Set while the reader is behind (`AsyncChannel`): the job keeps its slot but takes no steps."""

    def cancel(self) -> None:
        self.cancelled.set()

    @property
    def held_back(self) -> bool:
        """Paused, and not cancelled (a cancelled job runs on to its end, which frees the slot)."""
        return self.paused.is_set() and not self.cancelled.is_set()


@dataclass
class Generation:
    """What a generation is asked for: the prompt, the budget, sampling, grammar, stop tokens."""

    prompt_tokens: list[int]
    max_tokens: int
    sampling: Any
    grammar: Any
    stop_token_ids: tuple[int, ...]
    ignore_eos: bool


@dataclass
class GenerationJob(Generation, Pausable):
    completion: Completion
    post: Callable[[tuple[str, Any]], None]
    """Delivers `("deltas", list)`, `("done", GenerationResult)` or `("error", str)`."""
    reasoning: ReasoningPhase | None = None
    stream_deltas: bool = True


@dataclass
class JobSpec(Generation):
    """What the model worker needs of a `GenerationJob` (picklable: it crosses the pipe)."""

    stops: TokenStops
    """The completion's stop strings (`Completion.stop_check`), which end the generation."""
    reasoning: ReasoningPhase | None = None
    stream: bool = True
    """The reply is streamed: its time to first token counts (see `supervisor`)."""

    @classmethod
    def of(cls, job: GenerationJob) -> JobSpec:
        return cls(list(job.prompt_tokens), job.max_tokens, job.sampling, job.grammar, tuple(job.stop_token_ids),
                   job.ignore_eos, job.completion.stop_check(), job.reasoning, job.stream_deltas)


@dataclass
class TokenJob(Pausable):
    """A job as the model worker runs it: its `JobSpec`, and `post`, which takes its token texts
    and its end (see the module docstring)."""

    spec: JobSpec
    make_stats: Callable[[], Any]
    """Creates the engine's `GenerationStats`, which the engine fills in."""
    post: Callable[[tuple[str, Any]], None]


@dataclass
class _Totals:
    """Token counts and timings summed over the phases of one generation."""

    completion_tokens: int = 0
    prefill_ms: float | None = None
    decode_ms: list[float] = field(default_factory=list)
    finish_reason: str = "stop"
    cached_tokens: int = 0

    def add(self, stats: Any, extra_tokens: int = 0) -> None:
        if self.prefill_ms is None:
            self.prefill_ms = stats.prefill_ms
            self.cached_tokens = getattr(stats, "cached_tokens", 0)
        else:  # a later phase's prefill decodes tokens the server appended: decode time
            self.decode_ms.append(stats.prefill_ms)
        self.completion_tokens += stats.completion_tokens + extra_tokens
        self.decode_ms.extend(stats.decode_ms)
        self.finish_reason = stats.finish_reason or "stop"


CHANNEL_BOUND = 256
"""Events a request's reader may fall behind by before its generation pauses."""


class AsyncChannel:
    """Events from the worker thread into one request's coroutine, taken in batches.

    The worker may produce tokens faster than one wake-up of the event loop each (a small model
    makes over a thousand a second), so `post` schedules a wake-up only when none is pending, and
    `take` returns everything that has arrived since. The wake-ups of all channels on one loop go
    through one `LoopWaker`, so a decode step that feeds several requests wakes the loop once.

    The buffer is bounded with backpressure: once `bound` events wait (the reader, a slow
    client's socket, is behind), `pressure` is set, which pauses the job's generation; the next
    `take` clears it. A `deltas` event counts as many as the deltas it carries (the model worker
    joins a job's deltas into one event per send). The tokens already on their way still arrive,
    so the bound is approximate.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, bound: int | None = None,
                 pressure: threading.Event | None = None):
        self._loop = loop
        self._waker = LoopWaker.of(loop)
        self._lock = threading.Lock()
        self._events: list[tuple[str, Any]] = []
        self._wake_pending = False
        self._waiter: asyncio.Future[None] | None = None
        self._bound = bound if pressure is not None else None
        self._pressure = pressure
        self._waiting = 0  # the weight of the events waiting

    def post(self, event: tuple[str, Any]) -> None:
        """From any thread."""
        with self._lock:
            self._events.append(event)
            if self._bound is not None:
                payload = event[1]
                self._waiting += len(payload) if event[0] == "deltas" and isinstance(payload, list) else 1
                if self._waiting >= self._bound:
                    self._pressure.set()  # type: ignore[union-attr]
            if self._wake_pending:
                return
            self._wake_pending = True
        self._waker.schedule(self)

    def wake(self) -> None:
        """On the loop."""
        with self._lock:
            self._wake_pending = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def take(self) -> list[tuple[str, Any]]:
        """Every event posted since the last call, waiting for at least one."""
        while True:
            with self._lock:
                if self._events:
                    events, self._events, self._waiting = self._events, [], 0
                    if self._pressure is not None:
                        self._pressure.clear()
                    return events
                self._waiter = self._loop.create_future()
            await self._waiter


class LoopWaker:
    """Wakes the channels of one event loop with one `call_soon_threadsafe` per round (each one
    writes to the loop's wake-up pipe) rather than one per channel."""

    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWaker] = weakref.WeakKeyDictionary()
    _registry_lock = threading.Lock()

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._lock = threading.Lock()
        self._due: list[AsyncChannel] = []

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> LoopWaker:
        with cls._registry_lock:
            waker = cls._by_loop.get(loop)
            if waker is None:
                waker = cls._by_loop[loop] = cls(loop)
            return waker

    def schedule(self, channel: AsyncChannel) -> None:
        """From any thread: wake `channel` on the loop's next round."""
        with self._lock:
            self._due.append(channel)
            if len(self._due) > 1:
                return
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening any more
            self._loop.call_soon_threadsafe(self._wake_due)

    def _wake_due(self) -> None:
        with self._lock:
            due, self._due = self._due, []
        for channel in due:
            channel.wake()


class QueueBound:
    """The bounded queue in front of `n_parallel` slots: at most `max_queue` requests wait, and
    the next one is refused at once with 503 and a `Retry-After` estimate.

    A request counts from `reserve` (still being prepared) until `ended` (or `release`, for a
    reservation given back): so jobs that free slots will take at once never count as waiting,
    even before the worker has picked them up."""

    def __init__(self, max_queue: int, n_parallel: int):
        self.max_queue = max_queue
        self.n_parallel = n_parallel
        self._lock = threading.Lock()
        self._held = 0
        self._average_s = 5.0
        """Recent job durations, for `Retry-After`."""
        self._closed: str | None = None

    def reserve(self) -> None:
        """Keep a place (503 `APIError` when `max_queue` requests are already waiting)."""
        with self._lock:
            if self._closed is not None:
                raise APIError(503, self._closed, code="server_shutting_down")
            if self._held - self.n_parallel >= self.max_queue:
                raise overloaded(self._retry_after(self._held))
            self._held += 1

    def close(self, message: str) -> None:
        """Refuse every later request with a 503 carrying `message` (the server is shutting down)."""
        with self._lock:
            self._closed = message

    def release(self) -> None:
        """Give back a place without a finished job (its preparation failed, it never ran)."""
        with self._lock:
            self._held -= 1

    def ended(self, seconds: float) -> None:
        """A job that held a place finished after `seconds`."""
        with self._lock:
            self._held -= 1
            self._average_s = 0.8 * self._average_s + 0.2 * seconds

    @property
    def waiting(self) -> int:
        return max(0, self._held - self.n_parallel)

    def retry_after_s(self) -> int:
        return self._retry_after(self._held)

    def _retry_after(self, held: int) -> int:
        """A rough wait: the requests ahead times the recent average job time, over the slots."""
        waiting = max(0, held - self.n_parallel)
        return max(1, round(self._average_s * (waiting + 1) / (2 * self.n_parallel)))


class QueuedWorker:
    """What every generation worker (in process, supervised, upstream) answers from its
    `QueueBound`, kept in `self._bound`."""

    _bound: QueueBound

    def reserve(self) -> None:
        """Keep a place in the queue (503 when there is none) for a request still being prepared."""
        self._bound.reserve()

    def release(self) -> None:
        """Give back a place `reserve` kept, for a request whose preparation failed."""
        self._bound.release()

    def retry_after_s(self) -> int:
        return self._bound.retry_after_s()

    @property
    def waiting(self) -> int:
        return self._bound.waiting

    @property
    def max_queue(self) -> int:
        return self._bound.max_queue


class ChatWorker(QueuedWorker):
    """What the routes hand a request's `GenerationJob` to: the model worker process's
    supervisor (`SupervisedWorker`) or an upstream llama-server's (`UpstreamWorker`). Both parse
    the job's token texts in the front end's process (`feed.CompletionFeed`)."""

    n_parallel: int

    def submit(self, job: GenerationJob, reserved: bool = False) -> None:
        raise NotImplementedError

    @property
    def running(self) -> int:
        raise NotImplementedError

    @property
    def busy(self) -> bool:
        raise NotImplementedError

    def health(self) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """The worker's part of `/health`; awaitable where it asks another server."""
        raise NotImplementedError


class GenerationWorker(QueuedWorker):
    """Runs up to `n_parallel` jobs at once on one engine, one decode step for all of them at a time."""

    def __init__(self, engine: Any, max_queue: int, n_parallel: int | None = None,
                 after_round: Callable[[], None] | None = None):
        """`after_round` runs on the worker thread after each round (new jobs started, one step),
        before it waits for work: the worker process sends the round's events there, together."""
        self._engine = engine
        self._after_round = after_round
        self.n_parallel = n_parallel or int(getattr(engine, "n_parallel", 1))
        self._bound = QueueBound(max_queue, self.n_parallel)
        self._jobs: queue.Queue[TokenJob | None] = queue.Queue()
        self._lock = threading.Lock()
        self._runs: list[JobRun] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="autoparser-generation", daemon=True)

    # -- event-loop side -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: TokenJob, reserved: bool = False) -> None:
        """Queue a job, or raise a 503 `APIError` when `max_queue` jobs are already waiting
        (`QueueBound`). With `reserved`, the job takes the place `reserve` kept for it."""
        if not reserved:
            self.reserve()
        self._jobs.put(job)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        for run in list(self._runs):
            run.job.cancel()
        self._jobs.put(None)
        self._thread.join(timeout)

    @property
    def running(self) -> int:
        return len(self._runs)

    @property
    def busy(self) -> bool:
        return bool(self._runs)

    def health(self) -> dict[str, Any]:
        """What `/health` says about the generation: this thread runs in the server's own process."""
        return {"worker": "ok" if self._thread.is_alive() else "stopped", "worker_pid": os.getpid(),
                "worker_restarts": 0}

    # -- worker thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping:
            if not self._admit(block=not self._runs):
                break
            if self._runs:
                self._step()
            if self._after_round is not None:
                self._after_round()

    def _admit(self, block: bool) -> bool:
        """Start queued jobs while slots are free; False once told to stop."""
        while len(self._runs) < self.n_parallel:
            try:
                job = self._jobs.get(block=block)
            except queue.Empty:
                return True
            if job is None:
                return False
            block = False
            if job.cancelled.is_set():
                self._bound.release()
                job.post(("error", "cancelled"))
                continue
            run = JobRun(job, self._engine)
            with self._lock:
                self._runs.append(run)
            self._guarded(run, run.begin)
        return True

    def _step(self) -> None:
        runs = [run for run in self._runs if run.generation is not None and not run.job.held_back]
        if not runs:  # every running job waits for its reader
            time.sleep(PAUSED_POLL_S)
            return
        try:
            tokens = self._engine.step([run.generation for run in runs])
        except Exception as exc:  # llama_decode failed: every running job fails, the server stays up
            log.exception("generation step failed")
            for run in runs:
                self._fail(run, exc)
            return
        for run, token in zip(runs, tokens, strict=True):
            self._guarded(run, lambda run=run, token=token: run.advance(token))

    def _guarded(self, run: JobRun, action: Callable[[], None]) -> None:
        """Run one job's own work; its failure ends that job only."""
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - reported to the client, logged here
            log.exception("generation failed")
            self._fail(run, exc)
            return
        if run.done:
            self._remove(run)

    def _fail(self, run: JobRun, exc: Exception) -> None:
        run.abandon()
        run.job.post(("error", f"generation failed: {type(exc).__name__}: {exc}"))
        self._remove(run)

    def _remove(self, run: JobRun) -> None:
        with self._lock:
            if run not in self._runs:
                return
            self._runs.remove(run)
        self._bound.ended(time.perf_counter() - run.started)


class JobRun:
    """One job inside the batch: its phases (reasoning, then answer), the texts it hands on.

    `begin` starts the first generation; `advance` takes each step's result. A phase ends when
    the engine finishes it or the output does (a stop string, the reasoning's end); the next
    phase continues from the prompt plus everything generated, in the slot the engine picks for
    the longest shared prefix (the one just left, normally).
    """

    def __init__(self, job: TokenJob, engine: Any):
        self.job = job
        self.spec = job.spec
        self.engine = engine
        self.totals = _Totals()
        self.generation: Any = None
        self.done = False
        self.started = time.perf_counter()
        self.started_at = time.monotonic()
        self._stops = job.spec.stops
        self._phase = "answer"
        self._stats: Any = None
        self._generated: list[int] = []
        self._tail = ""
        self._end_seen = False
        self._answer_grammar = job.spec.reasoning.answer_grammar if job.spec.reasoning else job.spec.grammar

    def begin(self) -> None:
        spec = self.spec
        if spec.reasoning is None:
            self._start(spec.prompt_tokens, spec.max_tokens, spec.grammar, spec.stop_token_ids, spec.ignore_eos)
            return
        phase = spec.reasoning
        self._phase = "reasoning"
        limit = spec.max_tokens if phase.budget is None else min(phase.budget, spec.max_tokens)
        self._start(spec.prompt_tokens, limit, None, spec.stop_token_ids + phase.stops(),
                    spec.ignore_eos or phase.no_eos)

    def _start(self, prompt: list[int], max_tokens: int, grammar: Any, stop_ids: tuple[int, ...],
               ignore_eos: bool) -> None:
        self._stats = self.job.make_stats()
        self._generated, self._tail, self._end_seen = [], "", False
        self.generation = self.engine.new_generation(
            prompt, max_tokens, self.spec.sampling, grammar=grammar, stop_token_ids=stop_ids,
            ignore_eos=ignore_eos, should_stop=self.job.cancelled.is_set, stats=self._stats)

    def advance(self, token: Any) -> None:
        """Take one step's result: a token to hand on, or the end of the current phase."""
        if token is not None:
            self._generated.append(token.token_id)
            self._hand_on(token.text, token.logprobs)
            if self._stops.done or self._reasoning_end_in(token.text):
                self.generation.finish("cancelled")  # ended here, not by the engine
        if self.generation.finished:
            self._end_phase()

    def _hand_on(self, text: str, logprob: Any = None) -> None:
        self._stops.feed(text)
        self.job.post(("tokens", ([text], None if logprob is None else [logprob])))

    def _reasoning_end_in(self, text: str) -> bool:
        reasoning = self.spec.reasoning
        end_text = reasoning.end_text if self._phase == "reasoning" and reasoning else ""
        if not end_text:
            return False
        self._tail = (self._tail + text)[-2 * len(end_text):]
        self._end_seen = end_text in self._tail
        return self._end_seen

    def _end_phase(self) -> None:
        self.generation.close()
        self.generation = None
        self.totals.add(self._stats)
        if self._phase == "reasoning":
            continuation = self._after_reasoning()
            if continuation is not None:
                self._answer(continuation)
                return
        self._finish()

    def _after_reasoning(self) -> list[int] | None:
        """The tokens the answer continues from, or None when the job ends with its reasoning."""
        spec, phase, stats = self.spec, self.spec.reasoning, self._stats
        assert phase is not None
        generated = self._generated
        if self.job.cancelled.is_set() or self._stops.done:
            return None
        single_end = phase.end_tokens[0] if len(phase.end_tokens) == 1 else None
        limit = spec.max_tokens if phase.budget is None else min(phase.budget, spec.max_tokens)
        if single_end is not None and stats.stop_token_id == single_end:
            appended = [single_end]  # the model closed its reasoning; the stop token was not yielded
        elif stats.stop_token_id is not None and stats.stop_token_id in phase.call_tokens:
            self._answer_grammar = phase.call_grammar  # a call begun in reasoning: the answer makes it
            return list(spec.prompt_tokens) + generated
        elif self._end_seen:
            return list(spec.prompt_tokens) + generated  # a multi-token end marker, already generated
        elif stats.finish_reason == "length" and limit < spec.max_tokens:
            appended = list(phase.end_tokens)  # the budget is spent: close the reasoning
            self.totals.completion_tokens += len(appended)
        else:
            return None  # end of generation, a stop token, or max_tokens
        self._hand_on(phase.end_text)
        self._generated = generated + appended
        return list(spec.prompt_tokens) + self._generated

    def _answer(self, prompt: list[int]) -> None:
        spec = self.spec
        budget = spec.max_tokens - (len(prompt) - len(spec.prompt_tokens))
        self._phase = "answer"
        if budget <= 0:
            self.totals.finish_reason = "length"
            self._finish()
        elif self._stops.done or self.job.cancelled.is_set():
            self._finish()
        else:
            self._start(prompt, budget, self._answer_grammar, spec.stop_token_ids, spec.ignore_eos)

    def abandon(self) -> None:
        """Free the current generation after a failure."""
        if self.generation is not None:
            self.generation.close()
            self.generation = None
        self.done = True

    def _finish(self) -> None:
        self.done = True
        totals = self.totals
        self.job.post(("done", GenerationEnd(
            finish_reason=totals.finish_reason,
            prompt_tokens=len(self.spec.prompt_tokens),
            completion_tokens=totals.completion_tokens,
            prefill_ms=totals.prefill_ms or 0.0,
            decode_ms=totals.decode_ms,
            cached_tokens=totals.cached_tokens,
            started_at=self.started_at,
        )))
