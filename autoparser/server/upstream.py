"""Generation by a running llama-server: the same front end, llama.cpp's C++ server as the engine.

`autoparser serve --upstream http://HOST:PORT` holds no model. Everything that decides what to
answer stays in the front end (the template analysis, the prompt it renders, the grammar with its
lazy triggers, the parser that reads the stream); only the decoding goes to llama-server, through
its native `/completion` endpoint, which takes token ids, a GBNF grammar, lazy-grammar triggers
and `preserved_tokens` (the special tokens the server then writes out as text, so the front end's
parser sees the markers).

Two pieces stand in for the own engine's, behind the interfaces the server already has:

- `UpstreamVocabulary` answers the token questions `ChatService` asks (tokenize, a text's token
  id, the context size) through the upstream's `/tokenize`, `/detokenize`, `/props` and
  `/v1/models`. The upstream does not list its special tokens, so the ones the front end needs
  are found among the template's markers (`learn_special_tokens`): a token that spelled alone
  does not come back as itself is special.
- `UpstreamWorker` is a `ChatWorker` (`submit`, the queue bound, `/health`):
  each job runs as a task on the event loop with one streamed `/completion` request per phase
  (reasoning, then the answer under its grammar, as the own engine runs them), at most one per
  upstream slot at a time, the others waiting here in order. A client that goes away, or a stop
  string the completion finds, closes the upstream stream, which ends the upstream's generation.

The short requests at start-up and `/health` go through httpx, the ones on every request's path
(`/tokenize`) through `http.client` (`JsonPoster`); a token stream's request is written by h11
and its answer read by httptools over asyncio's streams (`stream_events`), at a fraction of
httpx's CPU cost per streamed token.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import h11
import httptools
import httpx

from autoparser.llama.logprobs import TokenLogprob
from autoparser.llama.long_runs import tokenizer_pieces
from autoparser.server.errors import APIError, EventError, bad_request
from autoparser.server.feed import CompletionFeed
from autoparser.server.worker import ChatWorker, GenerationEnd, GenerationJob, GenerationResult, QueueBound

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
CONNECT_TIMEOUT_S = 10.0
STARTUP_WAIT_S = 60.0
"""How long start-up waits for an upstream that is still loading its model (503 on `/health`)."""

# llama.cpp's `common_grammar_trigger_type`: a token id, or a pattern matched against the output
# (searched, or matched whole when anchored `^...$`: the semantics `GrammarSpec` documents).
TRIGGER_TOKEN = 0
TRIGGER_PATTERN = 2


class UpstreamError(APIError):
    """The upstream could not be reached or refused a request: a 502 whose message says why in
    one line (a request that meets it while being prepared gets it as its answer)."""

    def __init__(self, message: str) -> None:
        super().__init__(502, message, code="upstream_error")


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:200]}"
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return f"HTTP {response.status_code}: {error.get('message', error)}"
    return f"HTTP {response.status_code}: {body}"


class UpstreamVocabulary:
    """The token side of `Engine`, answered by the upstream llama-server; generating is the worker's."""

    vocab_ptr = None
    """No local vocabulary: grammars are checked by llama.cpp's parser without one (token
    references by name are checked for syntax; the upstream resolves them)."""
    longest_token_bytes = 0
    """Unknown here: prompt lengths are counted by tokenizing, never estimated from bytes."""
    gpu_offload = False

    def __init__(self, base_url: str, timeout: float = 60.0, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        """What every request to the upstream carries (its API key)."""
        self._http = httpx.Client(base_url=self.base_url, headers=self.headers,
                                  timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S))
        self._posts = JsonPoster(self.base_url, self.headers, timeout)
        self.model_id = ""
        self.chat_template: str | None = None
        self.bos_token = ""
        self.eos_token = ""
        self.n_ctx = 0
        """Tokens per slot: what one request may use."""
        self.n_parallel = 1
        self.n_ctx_total = 0
        self.n_vocab = 0
        self.special_tokens: set[str] = set()
        self.special_ids: dict[str, int] = {}

    # -- start-up ------------------------------------------------------------------------------

    def connect(self, wait_s: float = STARTUP_WAIT_S) -> None:
        """Wait until the upstream has loaded its model, then read what it serves."""
        self._await_ready(wait_s)
        props = self._get("/props")
        settings = props.get("default_generation_settings") or {}
        self.chat_template = props.get("chat_template") or None
        self.bos_token = props.get("bos_token") or ""
        self.eos_token = props.get("eos_token") or ""
        self.n_parallel = int(props.get("total_slots") or 1)
        self.n_ctx = int(settings.get("n_ctx") or 0)
        models = self._get("/v1/models").get("data") or [{}]
        meta = models[0].get("meta") or {}
        self.model_id = str(models[0].get("id") or "")
        self.n_vocab = int(meta.get("n_vocab") or 0)
        self.n_ctx = self.n_ctx or int(meta.get("n_ctx") or 0)
        if self.n_ctx <= 0:
            raise UpstreamError("the upstream did not report its context size")
        self.n_ctx_total = self.n_ctx * self.n_parallel

    def _await_ready(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                response = self._http.get("/health")
            except httpx.HTTPError as exc:
                raise UpstreamError(f"cannot reach {self.base_url}: {exc}") from None
            if response.status_code == 200:
                return
            if response.status_code != 503 or time.monotonic() > deadline:
                raise UpstreamError(f"{self.base_url}/health answered {_error_message(response)}")
            time.sleep(0.5)

    def learn_special_tokens(self, texts: Iterable[str]) -> None:
        """Find the special tokens inside `texts` (`special_token_candidates`).

        A special token is one that `/tokenize` gives for its text only when special tokens are
        parsed: tokenized as plain text, its spelling comes back as other tokens.
        """
        found: dict[str, int] = {}
        plain: set[str] = set()
        for text in dict.fromkeys(t for t in texts if t):
            for token, piece in self._pieces(text):
                if piece in found or piece in plain or not piece:
                    continue
                if self.tokenize(piece, parse_special=False) != [token]:
                    found[piece] = token
                else:
                    plain.add(piece)
        self.special_ids = found
        self.special_tokens = set(found)

    # -- the token methods `ChatService` uses --------------------------------------------------

    def tokenize(self, text: str, parse_special: bool = True, add_bos: bool = False) -> list[int]:
        """As `Engine.tokenize`: `text`'s tokens from the upstream, very long runs of characters
        in pieces: in one piece they crash llama.cpp's pre-tokenizer for some vocabularies,
        llama-server's too (27,000 letters killed it with DeepSeek's). A prompt's beginning
        tokenized before is reused by `ChatService` (`PrefixTokenizer`), not here."""
        tokens: list[int] = []
        for index, piece in enumerate(tokenizer_pieces(text, self.special_tokens if parse_special else ())):
            body = {"content": piece, "add_special": add_bos and index == 0, "parse_special": parse_special}
            tokens += [int(token) for token in self._post("/tokenize", body).get("tokens", [])]
        return tokens

    def token_id(self, text: str) -> int | None:
        """The id of `text` when it is exactly one token (special tokens included), else None."""
        if text in self.special_ids:
            return self.special_ids[text]
        pieces = self._pieces(text)
        return pieces[0][0] if len(pieces) == 1 and pieces[0][1] == text else None

    def detokenize(self, tokens: list[int], special: bool = True) -> str:
        return str(self._post("/detokenize", {"tokens": list(tokens)}).get("content", ""))

    def token_to_piece(self, token: int, special: bool = True) -> bytes:
        return self.detokenize([token], special).encode("utf-8")

    def close(self) -> None:
        self._http.close()

    # -- HTTP ----------------------------------------------------------------------------------

    def _pieces(self, text: str) -> list[tuple[int, str]]:
        """(id, text) of each token of `text`; the text is empty for part of a character."""
        body = {"content": text, "add_special": False, "parse_special": True, "with_pieces": True}
        out = []
        for entry in self._post("/tokenize", body).get("tokens", []):
            piece = entry.get("piece")  # a list of bytes for a piece of a UTF-8 character: no text
            out.append((int(entry["id"]), piece if isinstance(piece, str) else ""))
        return out

    def _get(self, path: str) -> dict[str, Any]:
        try:
            response = self._http.get(path)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"cannot reach {self.base_url}{path}: {exc}") from None
        if response.status_code != 200:
            raise UpstreamError(f"{self.base_url}{path} answered {_error_message(response)}")
        return response.json()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            status, answer = self._posts.post(path, body)
        except (OSError, http.client.HTTPException) as exc:
            raise UpstreamError(f"cannot reach {self.base_url}{path}: {exc or type(exc).__name__}") from None
        if status != 200:
            raise UpstreamError(f"{self.base_url}{path} answered HTTP {status}: {_refusal_text(answer)}")
        return json.loads(answer)


class JsonPoster:
    """JSON POSTs to one server with the standard library's `http.client`, on one connection per
    thread that is kept while the server keeps it. Every chat completion tokenizes its prompt
    through the upstream from the thread pool, and httpx's layers cost three times the CPU of
    this per request (about 290 against 90 µs for a `/tokenize`, measured against llama-server)."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float) -> None:
        url = urlsplit(base_url)
        self._kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        self._address = (url.hostname or "localhost", url.port)
        self._timeout = timeout
        self._prefix = url.path.rstrip("/")
        self._headers = {"Content-Type": "application/json", **headers}
        self._local = threading.local()

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """The status and body of the answer; OSError or HTTPException when there is none."""
        payload = json.dumps(body).encode()
        while True:
            connection = getattr(self._local, "connection", None)
            kept = connection is not None
            if connection is None:
                connection = self._local.connection = self._connect()  # OSError: no server there
            try:
                connection.request("POST", self._prefix + path, body=payload, headers=self._headers)
                response = connection.getresponse()
                answer = response.read()
            except (OSError, http.client.HTTPException):
                self._drop(connection)
                if kept:
                    continue  # the server closed the kept connection meanwhile: once more on a new one
                raise
            if response.will_close:
                self._drop(connection)
            return response.status, answer

    def _connect(self) -> http.client.HTTPConnection:
        connection = self._kind(*self._address, timeout=CONNECT_TIMEOUT_S)
        connection.connect()
        connection.sock.settimeout(self._timeout)
        return connection

    def _drop(self, connection: http.client.HTTPConnection) -> None:
        connection.close()
        self._local.connection = None


PROBE_CONVERSATIONS: tuple[list[dict[str, Any]], ...] = (
    [{"role": "system", "content": "a"}, {"role": "user", "content": "b"},
     {"role": "assistant", "content": "c"}, {"role": "user", "content": "d"}],
    [{"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}, {"role": "user", "content": "d"}],
)
"""Conversations rendered once at start-up: the turn markers in their prompts are where the
special tokens a client must not be able to spell are."""


def special_token_candidates(analysis: Any, bos_token: str = "", eos_token: str = "") -> list[str]:
    """Texts where the template's special tokens are: every marker of the analysis (what the
    output is read by), its stops, BOS/EOS, and the prompts of short probe conversations (the
    turn markers)."""
    texts = [value for part in (analysis.reasoning, analysis.content, analysis.tools)
             for value in vars(part).values() if isinstance(value, str)]
    markers = getattr(analysis.tools, "markers", None)
    if markers is not None:
        texts += [value for value in vars(markers).values() if isinstance(value, str)]
    texts += list(analysis.stop) + list(analysis.preserved_tokens) + list(analysis.triggers)
    for conversation in PROBE_CONVERSATIONS:
        try:
            texts.append(analysis.render(conversation, add_generation_prompt=True))
        except Exception:  # noqa: BLE001 - a template that refuses this conversation shows nothing here
            continue
    return [text for text in (*texts, bos_token, eos_token) if text]


# -- generation -------------------------------------------------------------------------------------


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


SEED_LIMIT = 2**32 - 1
"""llama-server's seeds are unsigned 32-bit numbers, and this one means "random"."""


def refuse_unsupported(job: GenerationJob) -> None:
    """A 400 for a request llama-server would fail in the middle of its stream."""
    seed = job.sampling.seed
    if seed is not None and not 0 <= seed < SEED_LIMIT:
        raise bad_request(f"seed must be between 0 and {SEED_LIMIT - 1} when llama-server generates; "
                          f"got {seed}.", param="seed")


def sampling_fields(sampling: Any, max_tokens: int) -> dict[str, Any]:
    """The engine's `SamplingParams` as `/completion` fields, its penalty window included."""
    fields: dict[str, Any] = {
        "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
        "min_p": sampling.min_p, "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty, "repeat_penalty": sampling.repetition_penalty,
        "repeat_last_n": max(64, max_tokens),
        "typical_p": 1.0, "dry_multiplier": 0.0, "xtc_probability": 0.0, "mirostat": 0,
    }
    if sampling.seed is not None:
        fields["seed"] = sampling.seed
    if sampling.logprobs is not None:
        fields["n_probs"] = max(1, sampling.logprobs)  # 0 would report no log-probability at all
    return fields


def grammar_fields(grammar: Any, token_texts: dict[int, str]) -> dict[str, Any]:
    """The engine's `GrammarSpec` as `/completion` fields (`grammar`, lazy triggers)."""
    if grammar is None:
        return {}
    gbnf = grammar.gbnf if grammar.root == "root" else f"{grammar.gbnf}\nroot ::= {grammar.root}\n"
    fields: dict[str, Any] = {"grammar": gbnf, "grammar_lazy": bool(grammar.lazy)}
    if grammar.lazy:
        triggers = [{"type": TRIGGER_PATTERN, "value": pattern} for pattern in grammar.trigger_patterns]
        triggers += [{"type": TRIGGER_TOKEN, "value": token_texts.get(token, ""), "token": token}
                     for token in grammar.trigger_tokens]
        fields["grammar_triggers"] = triggers
    return fields


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
            events, failure = _parsed(complete)
            if events:
                started = True
                yield events
            if failure is not None:
                raise failure
        if answer.status != 200:
            raise UpstreamError(f"the upstream answered HTTP {answer.status}: {_refusal_text(refusal)}")
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


def _parsed(raw_events: list[bytes]) -> tuple[list[dict[str, Any]], UpstreamError | None]:
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


def _refusal_text(body: bytes) -> str:
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace")
    return str(error.get("message", error)) if isinstance(error, dict) else str(error)
