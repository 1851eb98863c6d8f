"""The model in a supervised worker process, so that a native crash never takes the server down.

llama.cpp is native code fed untrusted input; a crash in it (a stack overflow in a tokenizer,
an assertion in a sampler) kills whatever process runs it. The HTTP front end therefore keeps
only the model's vocabulary (`Vocabulary`) and prepares requests; a worker process loads the
weights and runs `GenerationWorker` over its `Engine`. `SupervisedWorker` takes the routes'
jobs (`GenerationJob`) on the front end's side:

- `submit` sends a picklable description of the job (`JobSpec`: prompt tokens, sampling,
  grammar, the stop strings, ...) down a pipe. Little comes back per token: the worker process
  sends each job's token texts (with their log-probabilities where the request asked for them),
  then how it ended (`GenerationEnd`), or `error`; the events of all running jobs in one message,
  at most every `FLUSH_S` while tokens stream and at once when a job ends: one crossing and one
  wake-up for several tokens. A stream's tokens go out with the step that made them until its
  first delta (the parser may hold its first tokens back, a marker's beginning, say): the
  supervisor then tells the worker (`shown`), for the time to first token. The worker only decodes, samples and decides
  where the generation ends (stop tokens and strings, the token budget, the reasoning phase);
  the texts are parsed here, on the supervisor's thread, by the request's `Completion`
  (`CompletionFeed`), which the routes read: the worker's time per token is what bounds the
  tokens a second on a fast device, and the front end is another process on another core.
- A cancelled job (the client went away) is cancelled in the worker process too, and a job
  whose reader fell behind (`AsyncChannel`'s backpressure) is paused there until it catches up. A job that
  is still running `CANCEL_GRACE_S` after its cancellation, or one step of the generation
  (a batch's next tokens, grammars included) or a job's set-up that takes over `STEP_LIMIT_S`,
  means the worker is stuck inside native code: it is killed and restarted, the only way to
  free a thread inside llama.cpp.
- Jobs wait here, in order, and the worker gets one only when it has a free slot, so it never
  holds more than the running jobs. When the worker process dies, each running job ends with
  an error event (a stream gets `finish_reason: "error"` and `[DONE]`, a plain request a 500),
  a new worker loads the model again, and the waiting jobs, and those submitted meanwhile, run
  once it is up. `/health` reports `worker: restarting` until then, and counts the restarts.

The queue bound (`max_queue`, then 503) is kept here, by the same `QueueBound` as in-process.

The worker process (and multiprocessing's resource tracker) start as `python -c ...`, which puts
the current directory first on `sys.path` until the parent's path replaces it: a `pickle.py` in
the folder the server was started from would run. They are started with `PYTHONSAFEPATH=1`.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

from autoparser.server.errors import APIError, shutting_down
from autoparser.server.feed import CompletionFeed
from autoparser.server.worker import (
    ChatWorker,
    GenerationJob,
    GenerationResult,
    JobSpec,
    QueueBound,
    TokenJob,
)

log = logging.getLogger("autoparser.server")

CANCEL_GRACE_S = 60.0
"""How long a cancelled job may keep running before the worker is deemed stuck and restarted
(a step, which ends a cancelled job, takes milliseconds to a few seconds even on a CPU)."""
STEP_LIMIT_S = 300.0
"""Longest one generation step or job set-up may take; beyond it the worker is deemed stuck."""
POLL_S = 0.05
"""How often the supervisor looks at cancellations and the step clock."""
RESTART_PAUSE_S = 2.0
"""Wait between failed attempts to start the worker again."""
SHUTTING_DOWN = "The server is shutting down; the request was not run. Retry on another server or later."
FLUSH_S = 0.01
"""Longest the worker process holds streamed text to send it together with later tokens: a
stream then arrives in pieces of up to 10 ms of tokens, with a fraction of the per-token
crossings, wake-ups and socket writes of the front end and the clients."""


@dataclass(frozen=True)
class EngineSettings:
    """What the worker process needs to load the engine (picklable)."""

    model_path: str
    n_ctx: int
    """The whole context, shared by the slots."""
    n_parallel: int
    n_gpu_layers: int = 0
    n_threads: int | None = None
    reuse_prefix: bool = True
    log_level: str = "info"
    device_sampling: bool | None = None
    """Sample inside `llama_decode` (None: where the model is on a GPU)."""


@dataclass(frozen=True)
class EngineFacts:
    """What the worker reports once its engine has loaded."""

    pid: int
    n_ctx: int
    n_parallel: int
    gpu_offload: bool
    device_sampling: bool = False


class WorkerStartError(RuntimeError):
    """The worker process could not load the model."""


@dataclass
class _Entry:
    job: GenerationJob
    feed: CompletionFeed
    sent: bool = False
    cancel_sent_at: float | None = None
    submitted: float = 0.0
    paused_sent: bool = False
    shown: bool = False
    """The stream's first delta went out (and the worker was told)."""


class SupervisedWorker(ChatWorker):
    """A `ChatWorker` whose generation runs in a worker process it restarts."""

    def __init__(self, settings: EngineSettings, max_queue: int, cancel_grace_s: float = CANCEL_GRACE_S,
                 step_limit_s: float = STEP_LIMIT_S, target: Callable[[EngineSettings, Connection, Any], None]
                 | None = None):
        self.settings = settings
        self._target = target or worker_main
        """The worker process' entry point (module-level, for `spawn`)."""
        self.n_parallel = settings.n_parallel
        self._bound = QueueBound(max_queue, settings.n_parallel)
        self._cancel_grace_s = cancel_grace_s
        self._step_limit_s = step_limit_s
        self._busy_since: Any = None
        self._context = multiprocessing.get_context("spawn")  # never fork a threaded server
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._entries: dict[int, _Entry] = {}
        self._next_id = 0
        self._process: Any = None
        self._conn: Connection | None = None
        self._state = "starting"
        self._stopping = False
        self._draining = False
        self.restarts = 0
        self.facts: EngineFacts | None = None
        self._thread = threading.Thread(target=self._supervise, name="autoparser-supervisor", daemon=True)

    # -- front-end side ------------------------------------------------------------------------

    def start(self, timeout: float | None = None) -> EngineFacts:
        """Start the worker and wait until its model has loaded; raises `WorkerStartError`."""
        self.facts = self._launch(timeout)
        self._state = "ok"
        self._thread.start()
        return self.facts

    def submit(self, job: GenerationJob, reserved: bool = False) -> None:
        """Queue a job, or raise a 503 `APIError` when `max_queue` jobs are already waiting
        (`QueueBound`); with `reserved`, the job takes the place `reserve` kept for it."""
        if not reserved:
            self.reserve()
        with self._lock:
            if self._draining:  # prepared while the server began to shut down
                self._bound.release()
                raise APIError(503, SHUTTING_DOWN, code="server_shutting_down")
            job_id = self._next_id
            self._next_id += 1
            # A stream keeps about a chunk per token; a reply not streamed shows no deltas, and its
            # texts are parsed together (the same message for any split of the text)
            feed = CompletionFeed.of(job, join=not job.stream_deltas)
            self._entries[job_id] = _Entry(job, feed, submitted=time.perf_counter())
            self._send_waiting()

    def drain(self) -> None:
        """The server is shutting down: new requests get 503, so do the waiting ones, and the
        running ones end now with an error (a stream with its error chunk and `[DONE]`), so
        that every client gets an answer before the connections close."""
        with self._lock:
            self._draining = True  # nothing more is handed to the worker
            entries = list(self._entries.items())
        self._bound.close(SHUTTING_DOWN)
        for job_id, entry in entries:
            if entry.sent:
                # Ended before the worker hears of it: the worker answers a cancel with a finish
                # of its own, which must find the job gone rather than end its stream as "stop".
                self._end(job_id, shutting_down("The server is shutting down; this generation was stopped."))
                self._send(("cancel", job_id))
            else:
                self._end(job_id, shutting_down(SHUTTING_DOWN))

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        with self._lock:
            entries = list(self._entries.values())
        for entry in entries:
            entry.job.cancel()
        self._send(("stop",))
        process = self._process
        if process is not None:
            process.join(timeout)
            if process.is_alive():
                process.kill()
                process.join(timeout)
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._fail_waiting("The server is shutting down.")

    @property
    def running(self) -> int:
        return min(len(self._entries), self.n_parallel)

    @property
    def busy(self) -> bool:
        return bool(self._entries)

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None else None

    def health(self) -> dict[str, Any]:
        return {"worker": "draining" if self._draining else self._state, "worker_pid": self.pid, "worker_restarts": self.restarts}

    # -- the supervisor thread -----------------------------------------------------------------

    def _launch(self, timeout: float | None) -> EngineFacts:
        parent, child = self._context.Pipe()
        # When the worker's current step began (`time.monotonic()`, the same clock in every
        # process), 0 while it waits: shared memory, readable while the worker is stuck.
        self._busy_since = self._context.Value("d", 0.0, lock=False)
        process = self._context.Process(target=self._target, args=(self.settings, child, self._busy_since),
                                        name="autoparser-model", daemon=True)
        with _safe_path_environment():
            process.start()
        child.close()
        try:
            facts = _await_ready(parent, process, timeout)
        except BaseException:
            parent.close()
            if process.is_alive():
                process.kill()
            process.join(5)
            raise
        self._process, self._conn = process, parent
        return facts

    def _supervise(self) -> None:
        checked = time.monotonic()
        while not self._stopping:
            conn = self._conn
            assert conn is not None
            try:
                if conn.poll(POLL_S):
                    for job_id, event in conn.recv():
                        self._dispatch(job_id, event)
            except (EOFError, OSError):
                if self._stopping:
                    return
                self._restart()
                continue
            if time.monotonic() - checked >= POLL_S:  # also while events stream in
                checked = time.monotonic()
                self._forward_cancellations()
                self._forward_pauses()
                self._check_step_time()

    def _dispatch(self, job_id: int, event: tuple[str, Any]) -> None:
        kind, payload = event
        with self._lock:
            entry = self._entries.get(job_id)
            if entry is not None and kind in ("done", "error"):
                del self._entries[job_id]
                self._bound.ended(time.perf_counter() - entry.submitted)
                self._send_waiting()
        if entry is None:
            return
        try:
            if kind == "tokens":
                entry.feed.texts(*payload)
                if entry.feed.flush() and not entry.shown:
                    entry.shown = True
                    self._send(("shown", job_id))
                return
            if kind == "done":
                payload = entry.feed.result(payload)
        except Exception as exc:  # noqa: BLE001 - a bug in reading the output fails its request only
            log.exception("reading the generated text failed")
            failure = f"generation failed: {type(exc).__name__}: {exc}"
            if kind == "tokens":
                self._send(("cancel", job_id))
                self._end(job_id, failure)
                return
            kind, payload = "error", failure
        entry.job.post((kind, payload))

    def _forward_cancellations(self) -> None:
        now = time.monotonic()
        stuck = False
        with self._lock:
            cancelled = [(job_id, entry) for job_id, entry in self._entries.items() if entry.job.cancelled.is_set()]
        for job_id, entry in cancelled:
            if not entry.sent:  # still waiting for a worker: ends here
                self._end(job_id, "cancelled")
            elif entry.cancel_sent_at is None:
                entry.cancel_sent_at = now
                self._send(("cancel", job_id))
            elif now - entry.cancel_sent_at > self._cancel_grace_s:
                stuck = True
        if stuck:
            log.error("a cancelled request kept the model busy for over %g s: restarting the model worker",
                      self._cancel_grace_s)
            self._kill()

    def _forward_pauses(self) -> None:
        """Tell the worker which jobs' readers fell behind (backpressure), and which caught up."""
        with self._lock:
            changed = [(job_id, entry) for job_id, entry in self._entries.items()
                       if entry.sent and entry.job.paused.is_set() != entry.paused_sent]
        for job_id, entry in changed:
            entry.paused_sent = not entry.paused_sent
            self._send(("pause", job_id, entry.paused_sent))

    def _check_step_time(self) -> None:
        began = self._busy_since.value if self._busy_since is not None else 0.0
        if began and time.monotonic() - began > self._step_limit_s:
            log.error("one generation step has taken over %g s: restarting the model worker", self._step_limit_s)
            self._busy_since.value = 0.0
            self._kill()

    def _kill(self) -> None:
        process = self._process
        if process is not None and process.is_alive():
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGKILL)

    def _restart(self) -> None:
        """The worker died: fail the jobs it held, start another, then send the jobs that waited."""
        with self._lock:  # from now on, new jobs wait for the next worker
            self._state = "restarting"
        process = self._process
        process.join(5)
        self.restarts += 1
        reason = _exit_reason(process.exitcode)
        log.error("the model worker (pid %s) stopped: %s; restarting it", process.pid, reason)
        message = (f"The model worker stopped ({reason}) while generating this response; "
                   "it is being restarted. Retry the request.")
        with self._lock:
            held = [job_id for job_id, entry in self._entries.items() if entry.sent]
        for job_id in held:
            self._end(job_id, message)
        if self._conn is not None:
            self._conn.close()
        while not self._stopping:
            try:
                started = time.monotonic()
                self.facts = self._launch(None)
                break
            except WorkerStartError as exc:
                log.error("the model worker could not start again: %s", exc)
                self._fail_waiting(f"The model worker is restarting and could not load the model: {exc}")
                time.sleep(RESTART_PAUSE_S)
        else:
            return
        log.info("model worker restarted (pid %s) in %.1f s", self.facts.pid, time.monotonic() - started)
        with self._lock:
            self._state = "ok"
            self._send_waiting()

    def _fail_waiting(self, message: str) -> None:
        with self._lock:
            waiting = list(self._entries)
        for job_id in waiting:
            self._end(job_id, message)

    def _end(self, job_id: int, message: str) -> None:
        with self._lock:
            entry = self._entries.pop(job_id, None)
            if entry is not None:
                self._bound.release()
            self._send_waiting()
        if entry is not None:
            entry.job.post(("error", message))

    def _send_waiting(self) -> None:
        """Under `_lock`: hand waiting jobs to the worker, in order, while it has free slots.

        Jobs wait here rather than in the worker, so the worker holds only running jobs: when it
        dies, the jobs still waiting run on the next one instead of failing with it."""
        if self._state != "ok" or self._draining:
            return
        free = self.n_parallel - sum(entry.sent for entry in self._entries.values())
        for job_id, entry in list(self._entries.items()):
            if free <= 0:
                return
            if not entry.sent and self._send_job(job_id, entry):
                free -= 1

    def _send_job(self, job_id: int, entry: _Entry) -> bool:
        """Under `_lock`. A job that cannot be pickled fails alone; if the worker is gone, the
        supervisor fails the job with the others it held."""
        try:
            data = bytes(ForkingPickler.dumps(("job", job_id, JobSpec.of(entry.job))))
        except Exception as exc:  # noqa: BLE001 - a bug in what a request carries, reported to it
            log.exception("cannot hand a request to the model worker")
            del self._entries[job_id]
            self._bound.release()
            entry.job.post(("error", f"generation failed: {type(exc).__name__}: {exc}"))
            return False
        entry.sent = True
        self._send(data)
        return True

    def _send(self, message: tuple[Any, ...] | bytes) -> bool:
        conn = self._conn
        if conn is None:
            return False
        try:
            with self._send_lock:
                if isinstance(message, bytes):
                    conn.send_bytes(message)
                else:
                    conn.send(message)
        except (OSError, ValueError):  # the worker died; the supervisor sees it on its next read
            return False
        return True


_ENVIRONMENT_LOCK = threading.Lock()


@contextlib.contextmanager
def _safe_path_environment() -> Iterator[None]:
    """`PYTHONSAFEPATH=1` while child interpreters start: they then leave the current directory
    off `sys.path` (the variable is read at their start-up, so it is restored afterwards)."""
    with _ENVIRONMENT_LOCK:
        before = os.environ.get("PYTHONSAFEPATH")
        os.environ["PYTHONSAFEPATH"] = "1"
        try:
            yield
        finally:
            if before is None:
                del os.environ["PYTHONSAFEPATH"]
            else:
                os.environ["PYTHONSAFEPATH"] = before


def _await_ready(conn: Connection, process: Any, timeout: float | None) -> EngineFacts:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if conn.poll(0.1):
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):
                break
            if kind == "ready":
                return payload
            raise WorkerStartError(payload)
        if not process.is_alive() and not conn.poll(0):
            break
        if deadline is not None and time.monotonic() > deadline:
            raise WorkerStartError("the model did not load in time")
    process.join(5)
    raise WorkerStartError(f"the model worker stopped while loading the model ({_exit_reason(process.exitcode)})")


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


# -- the worker process -------------------------------------------------------------------------


def worker_main(settings: EngineSettings, conn: Connection, busy_since: Any) -> None:
    """Load the engine, report `ready`, then run jobs until told to stop or the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the front end's to handle; it stops us
    from autoparser.server.startup import _configure_logging

    _configure_logging(settings.log_level)
    try:
        from autoparser.llama.engine import Engine

        engine = Engine(settings.model_path, n_ctx=settings.n_ctx,
                        n_gpu_layers=settings.n_gpu_layers, n_threads=settings.n_threads,
                        n_parallel=settings.n_parallel, reuse_prefix=settings.reuse_prefix,
                        device_sampling=settings.device_sampling)
    except Exception as exc:  # noqa: BLE001 - reported to the front end as one line
        conn.send(("failed", f"cannot load the model {settings.model_path}: {exc}"))
        return
    conn.send(("ready", EngineFacts(os.getpid(), engine.n_ctx, engine.n_parallel, engine.gpu_offload,
                                    engine.device_sampling)))
    _time_steps(engine, busy_since)
    _serve_jobs(engine, conn)


def _time_steps(engine: Any, busy_since: Any) -> None:
    """Record in `busy_since` when each step and each generation's set-up begins, for the
    supervisor's watchdog."""
    def timed(method: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            busy_since.value = time.monotonic()
            try:
                return method(*args, **kwargs)
            finally:
                busy_since.value = 0.0
        return run

    engine.step = timed(engine.step)
    engine.new_generation = timed(engine.new_generation)


def _serve_jobs(engine: Any, conn: Connection) -> None:
    from autoparser.llama.engine import GenerationStats
    from autoparser.server.worker import GenerationWorker

    jobs: dict[int, TokenJob] = {}
    unshown: set[int] = set()
    """Streams whose first delta the front end has not shown yet: their tokens are urgent."""
    outbox = _Outbox(conn)
    worker = GenerationWorker(engine, max_queue=1 << 30, after_round=outbox.flush_when_due)
    worker.start()

    def poster(job_id: int) -> Any:
        def post(event: tuple[str, Any]) -> None:
            kind = event[0]
            outbox.add(job_id, event, urgent=kind != "tokens" or job_id in unshown)
            if kind in ("done", "error"):
                jobs.pop(job_id, None)
                unshown.discard(job_id)
        return post

    try:
        while True:
            message = conn.recv()
            if message[0] == "stop":
                break
            if message[0] == "cancel":
                job = jobs.get(message[1])
                if job is not None:
                    job.cancel()
                continue
            if message[0] == "shown":
                unshown.discard(message[1])
                continue
            if message[0] == "pause":
                job = jobs.get(message[1])
                if job is not None:
                    (job.paused.set if message[2] else job.paused.clear)()
                continue
            _, job_id, spec = message
            job = jobs[job_id] = TokenJob(spec, make_stats=GenerationStats, post=poster(job_id))
            if spec.stream:
                unshown.add(job_id)
            worker.submit(job)
    except (EOFError, OSError):  # the front end went away
        pass
    finally:
        worker.stop()
        with contextlib.suppress(OSError, ValueError):
            outbox.flush()
        engine.close(timeout=5)


class _Outbox:
    """The worker process' events for the front end, sent together: at the end of a round of
    the generation thread when one is urgent (a stream's tokens before its first delta, for the
    time to first token; a job's end, which frees a slot the supervisor fills), else once
    `FLUSH_S` has passed."""

    def __init__(self, conn: Connection):
        self._conn = conn
        self._lock = threading.Lock()
        self._events: list[tuple[int, tuple[str, Any]]] = []
        self._open: dict[int, tuple[list[str], list[Any] | None]] = {}
        """Each job's token texts (and log-probabilities) not yet sent, when its last event is
        tokens: later ones join them, so the front end handles one event per job and send."""
        self._urgent = False
        self._sent = time.monotonic()

    def add(self, job_id: int, event: tuple[str, Any], urgent: bool) -> None:
        """`urgent`: send with this round, not after `FLUSH_S`."""
        kind, payload = event
        with self._lock:
            if kind != "tokens":
                self._open.pop(job_id, None)
                self._events.append((job_id, event))
            elif (joined := self._open.get(job_id)) is not None and (joined[1] is None) == (payload[1] is None):
                joined[0].extend(payload[0])
                if joined[1] is not None:
                    joined[1].extend(payload[1])
            else:
                texts, logprobs = payload
                joined = self._open[job_id] = (list(texts), None if logprobs is None else list(logprobs))
                self._events.append((job_id, ("tokens", joined)))
            self._urgent = self._urgent or urgent

    def flush_when_due(self) -> None:
        if self._urgent or time.monotonic() - self._sent >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            events, self._events, self._urgent = self._events, [], False
            self._open.clear()
            self._sent = time.monotonic()
            if events:
                self._conn.send(events)


__all__ = ["EngineFacts", "EngineSettings", "GenerationResult", "SupervisedWorker", "WorkerStartError"]
