"""Generation by a running llama-server: the same front end, llama.cpp's C++ server as the engine.

`autoparser serve --upstream http://HOST:PORT` holds no model. Everything that decides what to
answer stays in the front end (the template analysis, the prompt it renders, the grammar with its
lazy triggers, the parser that reads the stream); only the decoding goes to llama-server, through
its native `/completion` endpoint, which takes token ids, a GBNF grammar, lazy-grammar triggers
and `preserved_tokens` (the special tokens the server then writes out as text, so the front end's
parser sees the markers).

Two pieces stand in for the own engine's, behind the interfaces the server already has:

- `UpstreamVocabulary` (`upstream_client`, the llama-server client) answers the token questions
  `ChatService` asks through the upstream's own endpoints, and finds its special tokens.
- `UpstreamWorker` (here) is a `ChatWorker` (`submit`, the queue bound, `/health`):
  each job runs as a task on the event loop with one streamed `/completion` request per phase
  (reasoning, then the answer under its grammar, as the own engine runs them), at most one per
  upstream slot at a time, the others waiting here in order. A client that goes away, or a stop
  string the completion finds, closes the upstream stream, which ends the upstream's generation.

A phase's request body is mapped from the job in `upstream_request`; its stream is read as
server-sent events by `upstream_stream` (`stream_events`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from autoparser.llama.logprobs import TokenLogprob
from autoparser.server.errors import APIError, EventError
from autoparser.server.feed import CompletionFeed
from autoparser.server.upstream_client import (
    JsonPoster,
    UpstreamError,
    UpstreamVocabulary,
    special_token_candidates,
)
from autoparser.server.upstream_request import grammar_fields, refuse_unsupported, sampling_fields
from autoparser.server.upstream_stream import stream_events
from autoparser.server.worker import ChatWorker, GenerationEnd, GenerationJob, GenerationResult, QueueBound

__all__ = [  # the worker, and what callers import from here that lives beside it
    "READ_MARGIN_S",
    "READ_PACE_S",
    "JsonPoster",
    "ReadPace",
    "UpstreamError",
    "UpstreamVocabulary",
    "UpstreamWorker",
    "special_token_candidates",
    "stream_events",
]

log = logging.getLogger("autoparser.server")

CANCEL_POLL_S = 0.05
"""How often a running job looks whether its client went away."""
READ_PACE_S = 0.01
"""How often a streaming job reads its upstream socket at most: the tokens that arrived meanwhile
are parsed and handed on together, one wake-up of the response and one socket write for several
tokens (the own engine's worker sends every 10 ms likewise)."""
READ_MARGIN_S = 0.001
"""Added to the expected time to a phase's token limit (`ReadPace`): a read a little late takes
the last tokens at once, where one a little early costs another wake-up and read."""


@dataclass
class _Phase:
    """What one `/completion` request produced."""

    generated: list[int] = field(default_factory=list)
    """The generated ids the upstream streamed. It leaves out the id of a token that ends inside
    a UTF-8 character (its text comes with the next token's), so they may be incomplete."""
    count: int = 0
    """Tokens generated (the upstream's `tokens_predicted`, the stop token excluded)."""
    text: str = ""
    ids_complete: bool = True
    finish_reason: str = "stop"
    stop_token_id: int | None = None
    end_seen: bool = False
    prefill_ms: float | None = None
    decode_ms: list[float] = field(default_factory=list)
    cached_tokens: int = 0
    started: float = field(default_factory=time.perf_counter)
    last_token_at: float = 0.0


@dataclass
class _Totals:
    completion_tokens: int = 0
    prefill_ms: float | None = None
    decode_ms: list[float] = field(default_factory=list)
    finish_reason: str = "stop"
    cached_tokens: int = 0

    def add(self, phase: _Phase) -> None:
        if self.prefill_ms is None:
            self.prefill_ms = phase.prefill_ms or 0.0
            self.cached_tokens = phase.cached_tokens
        elif phase.prefill_ms is not None:
            self.decode_ms.append(phase.prefill_ms)
        self.completion_tokens += phase.count
        self.decode_ms.extend(phase.decode_ms)
        self.finish_reason = phase.finish_reason




class UpstreamJob:
    """One job's phases against the upstream, as `JobRun` runs them on the own engine."""

    def __init__(self, worker: UpstreamWorker, job: GenerationJob):
        self.worker = worker
        self.job = job
        self.totals = _Totals()
        self.feed = CompletionFeed.of(job, join=True)
        self._tail = ""

    async def run(self) -> GenerationResult:
        """The generation's result; an `UpstreamError` raised mid-way carries the message
        generated until then, whose deltas have all been handed on (the parser's held-back text
        included), as a stream the own engine fails ends."""
        try:
            return await self._phases()
        except UpstreamError as exc:
            exc.generated = self.feed.message_so_far()
            raise

    async def _phases(self) -> GenerationResult:
        job = self.job
        if job.reasoning is None:
            self.totals.add(await self._phase(job.prompt_tokens, job.max_tokens, job.grammar,
                                              job.stop_token_ids, job.ignore_eos))
            return self._result()
        phase = job.reasoning
        single_end = phase.end_tokens[0] if len(phase.end_tokens) == 1 else None
        limit = job.max_tokens if phase.budget is None else min(phase.budget, job.max_tokens)
        thought = await self._phase(job.prompt_tokens, limit, None, job.stop_token_ids + phase.stops(),
                                    job.ignore_eos or phase.no_eos, reasoning_end=phase.end_text)
        continuation = await self._after_reasoning(thought, single_end, limit)
        self.totals.add(thought)
        if continuation is None:
            return self._result()
        budget = job.max_tokens - thought.count
        if budget <= 0:
            self.totals.finish_reason = "length"
        elif not (job.completion.stopped or job.cancelled.is_set()):
            self.totals.add(await self._phase(continuation, budget, phase.answer_grammar_after(thought.stop_token_id),
                                              job.stop_token_ids, job.ignore_eos))
        return self._result()

    async def _after_reasoning(self, thought: _Phase, single_end: int | None, limit: int) -> list[int] | None:
        """The prompt the answer continues from, or None when the job ends with its reasoning.
        Tokens appended here count as generated, as the own engine counts them."""
        job, phase = self.job, self.job.reasoning
        assert phase is not None
        if job.cancelled.is_set() or job.completion.stopped:
            return None
        if single_end is not None and thought.stop_token_id == single_end:
            appended = [single_end]  # the model closed its reasoning; its stop token was held back
        elif thought.stop_token_id is not None and thought.stop_token_id in phase.call_tokens:
            appended = []  # a call begun in reasoning: the answer makes it, under the grammar
        elif thought.end_seen:
            appended = []
        elif thought.finish_reason == "length" and limit < job.max_tokens:
            appended = list(phase.end_tokens)  # the budget is spent: close the reasoning
        else:
            return None
        if appended:
            self.feed.text(phase.end_text)
            self.feed.flush()
        thought.count += len(appended)
        # The ids the upstream gave, or where it left some out, the text tokenized again
        generated = thought.generated if thought.ids_complete else await asyncio.to_thread(
            self.worker.vocabulary.tokenize, thought.text)
        return [*job.prompt_tokens, *generated, *appended]

    async def _phase(self, prompt: list[int], max_tokens: int, grammar: Any, stop_ids: tuple[int, ...],
                     ignore_eos: bool, reasoning_end: str = "") -> _Phase:
        job, worker = self.job, self.worker
        body: dict[str, Any] = {
            "prompt": list(prompt), "n_predict": max_tokens, "stream": True, "cache_prompt": True,
            "return_tokens": True, "ignore_eos": ignore_eos, "preserved_tokens": worker.preserved_tokens,
            **sampling_fields(job.sampling, max_tokens), **grammar_fields(grammar, worker.token_texts)}
        top = job.sampling.logprobs
        result = _Phase()
        stops = set(stop_ids)
        self._tail = ""
        pace = ReadPace(max_tokens, result)
        async with contextlib.aclosing(worker.stream_completion(body, pace)) as batches:
            async for chunks in batches:
                if self._take_all(chunks, result, stops, top, reasoning_end):
                    break
        return result

    def _take_all(self, chunks: list[dict[str, Any]], result: _Phase, stops: set[int], top: int | None,
                  reasoning_end: str) -> bool:
        """Feed the events of one read to the completion; True when the phase ends with them.

        Where the completion takes several token texts as one (`Completion.joins_texts`) and no
        log-probabilities are wanted, the texts of the events are fed together, up to and
        including the one that ends the phase: one parser step for the read instead of one per
        token, the front end's largest cost per token after the socket."""
        completion = self.job.completion
        if top is not None or len(chunks) == 1 or not completion.joins_texts:
            ended = any(self._take(chunk, result, stops, top, reasoning_end) for chunk in chunks)
        else:
            texts: list[str] = []
            ended = any(self._take(chunk, result, stops, top, reasoning_end, texts.append) for chunk in chunks)
            self.feed.texts(texts)
        self.feed.flush()
        return ended

    def _take(self, chunk: dict[str, Any], result: _Phase, stops: set[int], top: int | None,
              reasoning_end: str, feed: Callable[[str], Any] | None = None) -> bool:
        """Feed one upstream event to the completion (or its text to `feed`, which feeds it
        later); True when the phase ends with it."""
        tokens = [int(t) for t in chunk.get("tokens") or ()]
        if tokens:
            now = time.perf_counter()
            if result.prefill_ms is None:
                result.prefill_ms = (now - result.started) * 1000
            else:
                result.decode_ms.append((now - result.last_token_at) * 1000)
            result.last_token_at = now
        predicted = int(chunk.get("tokens_predicted") or result.count + len(tokens))
        if predicted > result.count + len(tokens):
            result.ids_complete = False
        stop_at = next((i for i, token in enumerate(tokens) if token in stops), None)
        text = chunk.get("content") or ""
        if stop_at is not None:  # the own engine never hands a stop token over
            result.stop_token_id = tokens[stop_at]
            text = self._before_stop_token(text, tokens[stop_at])
            predicted -= len(tokens) - stop_at
            tokens = tokens[:stop_at]
        result.generated += tokens
        result.count = max(result.count, predicted)
        result.text += text
        if feed is None:
            self._feed(text, _logprobs(chunk, top))
        else:
            feed(text)
        if chunk.get("stop"):
            self._finish_phase(result, chunk)
        if stop_at is not None or self.job.completion.stopped:
            result.finish_reason = "stop"
            return True
        if reasoning_end and self._reasoning_end_in(text, reasoning_end):
            result.end_seen = True
            return True
        return bool(chunk.get("stop"))

    def _before_stop_token(self, text: str, token: int) -> str:
        spelled = self.worker.token_texts.get(token, "")
        return text[: -len(spelled)] if spelled and text.endswith(spelled) else text

    def _feed(self, text: str, logprobs: list[TokenLogprob]) -> None:
        """One event's text; where it carries several tokens' log-probabilities, the text comes
        with the first."""
        if not logprobs:
            self.feed.text(text)
            return
        self.feed.texts([text] + [""] * (len(logprobs) - 1), list(logprobs))

    def _reasoning_end_in(self, text: str, end_text: str) -> bool:
        self._tail = (self._tail + text)[-2 * len(end_text):]
        return end_text in self._tail

    @staticmethod
    def _finish_phase(result: _Phase, chunk: dict[str, Any]) -> None:
        timings = chunk.get("timings") or {}
        if "prompt_ms" in timings:
            result.prefill_ms = float(timings["prompt_ms"])
        # `cache_n`: the prompt tokens reused (`tokens_cached` counts the whole cache after it)
        result.cached_tokens = int(timings.get("cache_n") or 0)
        limited = chunk.get("stop_type") == "limit" or chunk.get("truncated")
        result.finish_reason = "length" if limited else "stop"

    def _result(self) -> GenerationResult:
        totals = self.totals
        return self.feed.result(GenerationEnd(
            finish_reason=totals.finish_reason, prompt_tokens=len(self.job.prompt_tokens),
            completion_tokens=totals.completion_tokens, prefill_ms=totals.prefill_ms or 0.0,
            decode_ms=totals.decode_ms, cached_tokens=totals.cached_tokens))


class ReadPace:
    """How long a phase's reader leaves the socket unread before its next read: `READ_PACE_S`,
    or less when the phase's token limit is nearer than that at the rate the tokens come.

    The upstream's last event is only seen at the read after it; without this, a reply that
    ends at its limit would wait up to `READ_PACE_S` for nothing (5 ms a request on average:
    a sixth of a 96-token reply of the tiny model, on one client). Waiting out the expected
    time to the limit (and `READ_MARGIN_S`) instead reads its last tokens about when they come,
    mostly in one read."""

    def __init__(self, limit: int, phase: _Phase) -> None:
        self.limit = limit
        self.phase = phase
        self._first: tuple[float, int] | None = None

    def __call__(self) -> float:
        phase = self.phase
        if phase.count == 0:
            return READ_PACE_S
        if self._first is None:  # the rate is timed from the first read that brought tokens
            self._first = (phase.last_token_at, phase.count)
            return READ_PACE_S
        started_at, started_count = self._first
        tokens = phase.count - started_count
        if tokens <= 0:
            return READ_PACE_S
        per_token = (phase.last_token_at - started_at) / tokens
        left = self.limit - phase.count
        return min(READ_PACE_S, left * per_token + READ_MARGIN_S) if left > 0 else 0.0


def _logprobs(chunk: dict[str, Any], top: int | None) -> list[TokenLogprob]:
    if top is None:
        return []
    out = []
    for entry in chunk.get("completion_probabilities") or ():
        alternatives = [(int(alt["id"]), bytes(alt.get("bytes") or b""), float(alt["logprob"]))
                        for alt in (entry.get("top_logprobs") or ())[:top]]
        out.append(TokenLogprob(int(entry["id"]), bytes(entry.get("bytes") or b""), float(entry["logprob"]),
                                alternatives))
    return out


class UpstreamWorker(ChatWorker):
    """A `ChatWorker` whose generations are streamed from the upstream llama-server."""

    def __init__(self, vocabulary: UpstreamVocabulary, max_queue: int, timeout: float = 600.0):
        self.vocabulary = vocabulary
        self.base_url = vocabulary.base_url
        self.n_parallel = vocabulary.n_parallel
        self.preserved_tokens = sorted(vocabulary.special_tokens)
        self.token_texts = {token: text for text, token in vocabulary.special_ids.items()}
        self._read_timeout_s = timeout
        self._bound = QueueBound(max_queue, self.n_parallel)
        self._client: httpx.AsyncClient | None = None
        self._slots: asyncio.Semaphore | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._running = 0

    # -- the interface the routes use ----------------------------------------------------------

    def start(self) -> None:
        """Nothing to start: the client and the slot count are made on the serving event loop."""

    def submit(self, job: GenerationJob, reserved: bool = False) -> None:
        """Queue a job (503 when the queue is full); 400 for what llama-server cannot do."""
        try:
            refuse_unsupported(job)
        except APIError:
            if reserved:
                self.release()
            raise
        if not reserved:
            self.reserve()
        task = asyncio.get_running_loop().create_task(self._run(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop(self, timeout: float = 5.0) -> None:
        for task in list(self._tasks):
            with contextlib.suppress(RuntimeError):  # its loop has closed already
                task.cancel()
        self.vocabulary.close()

    @property
    def running(self) -> int:
        return self._running

    @property
    def busy(self) -> bool:
        return bool(self._tasks)

    @property
    def pid(self) -> None:
        """No model process of our own: the upstream runs the model."""
        return None

    async def health(self) -> dict[str, Any]:
        """The upstream's state: `ok`, `loading` (its model) or `unreachable`, and its slots."""
        info: dict[str, Any] = {"worker": "ok", "worker_pid": None, "worker_restarts": 0,
                                "upstream": {"url": self.base_url, "slots": {"total": self.n_parallel}}}
        client = self._http()
        try:
            response = await client.get("/health", timeout=5.0)
            if response.status_code != 200:
                info["worker"] = "loading" if response.status_code == 503 else "error"
                return info
            slots = await client.get("/slots", timeout=5.0)
        except httpx.HTTPError:
            info["worker"] = "unreachable"
            return info
        if slots.status_code == 200 and isinstance(slots.json(), list):
            states = slots.json()
            info["upstream"]["slots"] = {"total": len(states),
                                         "busy": sum(bool(s.get("is_processing")) for s in states)}
        return info

    # -- running a job -------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self.base_url, headers=self.vocabulary.headers, timeout=10.0)
        return self._client

    async def _run(self, job: GenerationJob) -> None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.n_parallel)
        started = time.perf_counter()
        work = asyncio.ensure_future(self._generate(job))
        try:
            while not work.done():
                if job.cancelled.is_set():
                    work.cancel()
                await asyncio.wait({work}, timeout=CANCEL_POLL_S)
            if work.cancelled():
                job.post(("error", "cancelled"))
            elif isinstance(exc := work.exception(), UpstreamError):
                log.warning("generation failed: %s", exc.message)
                job.post(("error", EventError(f"generation failed: {exc.message}", status=exc.status,
                                              code=exc.code or "upstream_error", generated=exc.generated)))
            elif exc is not None:
                log.error("generation failed", exc_info=exc)
                job.post(("error", f"generation failed: {exc}"))
            else:
                job.post(("done", work.result()))
        except asyncio.CancelledError:  # the server is shutting down
            work.cancel()
            job.post(("error", "The server is shutting down."))
            raise
        finally:
            self._bound.ended(time.perf_counter() - started)

    async def _generate(self, job: GenerationJob) -> GenerationResult:
        assert self._slots is not None
        async with self._slots:
            self._running += 1
            try:
                return await UpstreamJob(self, job).run()
            finally:
                self._running -= 1

    async def stream_completion(self, body: dict[str, Any], pace: Callable[[], float] | float = READ_PACE_S,
                                ) -> AsyncIterator[list[dict[str, Any]]]:
        """The upstream's streamed `/completion` events, in the batches one read brings; leaving
        the loop early closes the connection, which ends the upstream's generation."""
        async for events in stream_events(self.base_url, "/completion", body, self._read_timeout_s,
                                          pace_s=pace, headers=self.vocabulary.headers):
            yield events
