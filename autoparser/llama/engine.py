"""A token-level generation engine on llama.cpp's low-level API (through llama-cpp-python).

``llama_cpp.Llama`` cannot do what the server needs: lazy grammars with triggers, detokenized
pieces with special tokens kept, cancellation between tokens, per-token timings, and grammar
checking that does not slow every token down. :class:`Engine` owns one model and one context and
runs its own loop: ``llama_decode`` on a batch, then :class:`~autoparser.llama.sampling.TokenSampler`.

The context holds ``n_parallel`` slots (sequences of one KV cache), each with an equal share of
its tokens. :meth:`Engine.step` runs continuous batching: every running :class:`Generation`
puts its next token (or a chunk of its prompt) into one ``llama_batch``, one ``llama_decode``
computes them all, and each samples with its own sampler chain and grammar. Generations join
and leave between steps. With layers on a GPU, a generation without grammar, penalties or
log-probabilities is sampled inside ``llama_decode`` by a chain attached to its slot
(:mod:`autoparser.llama.device_sampling`), and only its token comes back. :meth:`Engine.generate` runs one generation alone; a second one while
the first is still running raises ``RuntimeError`` instead of deadlocking.

Each slot keeps its tokens' keys and values after its generation ends. A new prompt takes the
free slot sharing the longest prefix with it and only decodes the rest (``reuse_prefix=True``,
the default); where a running generation's slot holds a longer prefix (one prompt's several
answers), the free slot shares those cells instead, and a generation whose prompt another is
still reading waits for it to finish, so the prompt is read once. Results can then differ in the last float bits from a cold run, as they can for a
generation batched with others, since llama.cpp's kernels group the arithmetic by batch; pass
``reuse_prefix=False`` and run alone for bit-exact replays.
"""

from __future__ import annotations

import codecs
import ctypes
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import llama_cpp
import numpy as np

from autoparser.llama import _native
from autoparser.llama.device_sampling import (
    ChainKey,
    DeviceSampler,
    build_chain,
    chain_key,
    samples_on_device,
)
from autoparser.llama.grammar_cache import GrammarTemplates
from autoparser.llama.grammar_check import find_token_refs
from autoparser.llama.lazy_guard import LazyTriggerGuard
from autoparser.llama.logprobs import TokenLogprob, token_logprobs
from autoparser.llama.long_runs import tokenizer_pieces
from autoparser.llama.sampling import CandidateBuffers, GrammarSpec, SamplingParams, TokenSampler, draw_tokens
from autoparser.llama.token_trie import TokenTrie
from autoparser.llama.utf8 import continuation_state, incomplete_tail

__all__ = ["Engine", "GeneratedToken", "Generation", "GenerationStats", "GrammarSpec", "SamplingParams"]

_SPECIAL_ATTRS = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
#: Most slots one engine runs; llama.cpp's own limit on sequences is higher.
MAX_PARALLEL = 64
#: "No first pick drawn yet" (token ids are never negative; None means nothing could be drawn).
NOT_DRAWN = -1
#: Tokens tried per step before giving up when every pick would fire a lazy trigger the grammar rejects.
_MAX_TRIGGER_RETRIES = 64


@dataclass(slots=True)
class GeneratedToken:
    """One sampled token. ``text`` keeps special tokens; it is "" while a UTF-8 sequence is incomplete."""

    token_id: int
    text: str
    elapsed_ms: float
    logprobs: TokenLogprob | None = None
    """Set when the sampling parameters ask for ``logprobs``."""


@dataclass
class GenerationStats:
    """Filled in by :meth:`Engine.generate` as it runs.

    ``completion_tokens`` counts every sampled token including a final end-of-generation or stop
    token, which is not yielded; that token's id is in ``stop_token_id``. ``decode_ms`` holds the
    time from the previous token (or the end of the prefill) to each yielded token.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    prefill_ms: float = 0.0
    decode_ms: list[float] = field(default_factory=list)
    finish_reason: str = ""  # "stop" | "length" | "cancelled"
    cached_tokens: int = 0
    stop_token_id: int | None = None
    grammar_fallbacks: int = 0  # tokens sampled from the grammar-filtered distribution (no first pick kept)



# llama.cpp's CPU attention reads a batch of fewer query rows than this one row at a time, each
# over the whole cache; from this many rows on it reads them together. On the tiny model with
# 2,014 tokens cached, a batch of 33 new tokens took 64 ms and one of 64 tokens 9 ms. So a
# prompt's short tail deep in the cache is decoded with enough cached tokens again to fill
# such a batch (`short_tail_reread`, `chunk_size`).
MIN_FAST_ROWS = 64
REREAD_FROM = 8  # a batch of MIN_FAST_ROWS costs about as much as five rows read one by one

# A free slot's device chain still samples a dummy row at every step, so it is taken off; but
# changing the chains makes llama.cpp plan its graph again, and a request that takes the slot
# later attaches a new chain, planning once more. On the tiny model with a 100,000-token
# vocabulary on the CPU, a step of 8 rows after a chain was swapped took 35 ms against 24 (one
# dummy pass: about 1.3 ms), and a server's next request usually comes within a few steps. So
# a free slot keeps its chain for this many steps; a request with the same settings reseeds it.
IDLE_CHAIN_STEPS = 16


def short_tail_reread(keep: int, length: int) -> int:
    """A reused prefix of `keep` of `length` prompt tokens, shortened where the tokens left to
    decode would be a slow batch of REREAD_FROM to MIN_FAST_ROWS - 1 rows: decoding some cached
    tokens again costs less than reading those rows one at a time."""
    tail = length - keep
    return length - MIN_FAST_ROWS if keep and length >= MIN_FAST_ROWS and REREAD_FROM <= tail < MIN_FAST_ROWS else keep


def chunk_size(pending: int, room: int) -> int:
    """How many of a prompt's `pending` tokens to decode in a batch with `room` rows left; where
    the rest would be a short last chunk, this one leaves it MIN_FAST_ROWS tokens."""
    if pending <= room:
        return pending
    if 0 < pending - room < MIN_FAST_ROWS and room > MIN_FAST_ROWS:
        return pending - MIN_FAST_ROWS
    return room


class Engine:
    """One GGUF model with one context, generating token by token."""

    def __init__(
        self,
        model_path: str,
        n_ctx: int = 4096,
        n_gpu_layers: int = 0,
        n_threads: int | None = None,
        verbose: bool = False,
        *,
        n_batch: int = 512,
        reuse_prefix: bool = True,
        n_parallel: int = 1,
        device_sampling: bool | None = None,
    ) -> None:
        """``device_sampling``: sample inside ``llama_decode`` where the request allows it
        (:mod:`autoparser.llama.device_sampling`); off, every token is sampled on the host. The
        default (None) turns it on when layers are offloaded to a GPU: on a CPU the graph's
        passes over the vocabulary cost more than the host's single one."""
        if not 1 <= n_parallel <= min(n_batch, MAX_PARALLEL):
            raise ValueError(f"n_parallel must be between 1 and {min(n_batch, MAX_PARALLEL)}, got {n_parallel}")
        _native.ensure_backend(verbose)
        self.model_path = str(model_path)
        self.reuse_prefix = reuse_prefix
        self._lock = threading.Lock()
        self._model = _native.load_model(model_path, n_gpu_layers=n_gpu_layers)
        self._ctx = None
        try:
            self._init_context(n_ctx, n_threads, n_batch, n_parallel)
        except BaseException:
            llama_cpp.llama_model_free(self._model)
            raise
        self._local = threading.local()
        self.n_parallel = n_parallel
        self.n_batch: int = llama_cpp.llama_n_batch(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        # the batch's arrays, read out of the struct once: each attribute read makes a new pointer
        batch = self._batch
        self._batch_arrays = (batch.token, batch.pos, batch.logits)
        self._batch_seq_ids = [batch.seq_id[i] for i in range(self.n_batch)]
        for i in range(self.n_batch):  # every token belongs to one sequence: set once
            batch.n_seq_id[i] = 1
        self._slots = [Slot(seq_id) for seq_id in range(n_parallel)]
        self._steps = 0
        self._detach_due: int | None = None
        """The step from which a free slot's device chain is taken off (None: no free slot has one)."""
        self._uses = 0
        self._read_vocabulary()
        self.n_ctx_total: int = llama_cpp.llama_n_ctx(self._ctx)
        self.n_ctx: int = self.n_ctx_total // n_parallel
        """What one generation may use, prompt included: the context split between the slots."""
        self.gpu_offload: bool = bool(llama_cpp.llama_supports_gpu_offload()) and n_gpu_layers != 0
        self.device_sampling: bool = self.gpu_offload if device_sampling is None else device_sampling
        self._utf8_breaking: dict[tuple[int, int, int], np.ndarray] = {}
        self._utf8_masks: dict[tuple[int, int, int], np.ndarray] = {}
        self._candidate_buffers = CandidateBuffers(self.n_vocab)
        self._step_rows = np.empty((0, self.n_vocab), dtype=np.float32)
        self._step_base = 0
        self._logits_views: dict[tuple[int, int], np.ndarray] = {}
        self._grammars = GrammarTemplates(self.vocab_ptr)

    # ------------------------------------------------------------------ setup

    def _init_context(self, n_ctx: int, n_threads: int | None, n_batch: int, n_parallel: int) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = n_parallel
        # One cache for all sequences: a batch then mixes them freely (separate per-sequence
        # caches make llama.cpp split batches into equal per-sequence parts). Each slot's share
        # of the context is enforced here, by the prompt check and the token budget.
        params.kv_unified = True
        # A sequence never asks for more than one row of logits a step. Saying so lets a device
        # chain draw its random number as it samples, rather than when the pick is accepted.
        params.n_outputs_max_per_seq = 1
        cores = multiprocessing.cpu_count()
        # Same defaults as llama_cpp.Llama, so benchmarks against it compare like with like.
        params.n_threads = n_threads or max(cores // 2, 1)
        params.n_threads_batch = n_threads or cores
        params.no_perf = True
        self._threads = (params.n_threads, params.n_threads_batch)
        self._threads_set = self._threads
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            raise ValueError(f"llama.cpp could not create a context of {n_ctx} tokens for {self.model_path}")
        self._memory = llama_cpp.llama_get_memory(self._ctx)

    def _read_chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def _special_text(self, token: int) -> str:
        return self.token_to_piece(token).decode("utf-8", errors="replace") if token >= 0 else ""

    def _collect_special_tokens(self) -> set[str]:
        """Texts of CONTROL and USER_DEFINED tokens; also records the ids of those and of EOG tokens."""
        specials = set()
        ids = []
        for token in range(self.n_vocab):
            attrs = llama_cpp.llama_vocab_get_attr(self.vocab_ptr, token)
            if attrs & _SPECIAL_ATTRS or llama_cpp.llama_vocab_is_eog(self.vocab_ptr, token):
                ids.append(token)
            if attrs & _SPECIAL_ATTRS:
                text = self._special_text(token)
                if text:
                    specials.add(text)
        self._special_ids = ids
        return specials

    def close(self, timeout: float = 30.0) -> None:
        """Free the context and the model, waiting up to ``timeout`` s for a running generation."""
        if not self._lock.acquire(timeout=timeout):
            raise RuntimeError("the engine is still generating")
        try:
            if self._ctx:
                for slot in self._slots:
                    self._set_slot_chain(slot, None, None)
                llama_cpp.llama_batch_free(self._batch)
                self._grammars.close()
                llama_cpp.llama_free(self._ctx)
                self._ctx = None
            if self._model:
                llama_cpp.llama_model_free(self._model)
                self._model = None
        finally:
            self._lock.release()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - safety net
        try:
            self.close(timeout=0)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # ------------------------------------------------------------------ tokens

    def tokenize(self, text: str, parse_special: bool = True, add_bos: bool = False) -> list[int]:
        """Token ids of ``text``; with ``parse_special`` special-token texts become their tokens.

        Very long runs of characters are tokenized in pieces (:mod:`autoparser.llama.long_runs`):
        in one piece they can crash llama.cpp's pre-tokenizer.
        """
        if not self._model:
            raise RuntimeError("the engine is closed")
        pieces = tokenizer_pieces(text, self.special_tokens if parse_special else ())
        tokens = self._tokenize_piece(pieces[0], parse_special, add_bos)
        for piece in pieces[1:]:
            tokens += self._tokenize_piece(piece, parse_special, False)
        return tokens

    def _tokenize_piece(self, text: str, parse_special: bool, add_bos: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        while True:
            buf = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(
                self.vocab_ptr, data, len(data), buf, capacity, add_bos, parse_special
            )
            if n >= 0:
                return list(buf[:n])
            capacity = -n

    def token_id(self, text: str) -> int | None:
        """The id of ``text`` when it is exactly one token (special tokens included), else None."""
        tokens = self.tokenize(text, parse_special=True)
        if len(tokens) != 1:
            return None
        return tokens[0] if self.token_to_piece(tokens[0]) == text.encode("utf-8") else None

    def _read_vocabulary(self) -> None:
        """What the token methods read from the loaded model (also all a vocab-only model has)."""
        self.vocab_ptr: int = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self.vocab_ptr)
        self.chat_template: str | None = self._read_chat_template()
        self.bos_token: str = self._special_text(llama_cpp.llama_vocab_bos(self.vocab_ptr))
        self.eos_token: str = self._special_text(llama_cpp.llama_vocab_eos(self.vocab_ptr))
        self.special_tokens: set[str] = self._collect_special_tokens()
        self._eog_ids = [t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab_ptr, t)]
        self._eog_set = frozenset(self._eog_ids)
        # every token's bytes, looked up once: the generation loop needs them for each token
        self._pieces: list[bytes] = [self.token_to_piece(t) for t in range(self.n_vocab)]
        # and their text where the bytes are whole characters: after complete text such a token
        # needs no UTF-8 check and no incremental decoder
        self._texts: list[str | None] = [_whole_text(piece) for piece in self._pieces]
        self._trie: TokenTrie | None = None

    def token_to_piece(self, token: int, special: bool = True) -> bytes:
        """The bytes of one token; special tokens rendered as their text when ``special``."""
        buf = getattr(self._local, "piece_buf", None)
        if buf is None:  # one buffer per thread: the server tokenizes while the worker generates
            buf = self._local.piece_buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_token_to_piece(self.vocab_ptr, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab_ptr, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int], special: bool = True) -> str:
        """Text of a token sequence (special tokens kept when ``special``)."""
        return b"".join(self.token_to_piece(t, special) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return token in self._eog_set

    # ------------------------------------------------------------------ generation

    def generate(self, *args: Any, **kwargs: Any) -> Iterator[GeneratedToken]:
        """Yield sampled tokens until end of generation, a stop token, ``max_tokens``, the context end or cancellation.

        Takes the arguments of :meth:`new_generation` (``prompt_tokens``, ``max_tokens``,
        ``sampling``, then ``grammar``, ``stop_token_ids``, ``ignore_eos``, ``should_stop`` and
        ``stats``). Validation (prompt length, grammar) happens before the first token is yielded
        and raises ``ValueError`` (``GrammarError`` for grammars). ``should_stop`` is polled
        before every token; closing the iterator also stops generation. End-of-generation and
        stop tokens end the run without being yielded. The generation runs alone; several at once
        go through :meth:`new_generation` and :meth:`step`.
        """
        return self._run_alone(self.new_generation(*args, **kwargs))

    def new_generation(
        self,
        prompt_tokens: Sequence[int],
        max_tokens: int,
        sampling: SamplingParams,
        grammar: GrammarSpec | None = None,
        stop_token_ids: Sequence[int] = (),
        ignore_eos: bool = False,
        should_stop: Callable[[], bool] | None = None,
        stats: GenerationStats | None = None,
    ) -> Generation:
        """A checked generation, ready to join :meth:`step` (it takes a slot at its first step).

        Raises ``ValueError`` for a prompt that does not fit a slot and ``GrammarError`` for a bad
        grammar. The caller closes it (:meth:`Generation.close`) when done.
        """
        prompt = [int(t) for t in prompt_tokens]
        self._check_prompt(prompt)
        stats = stats if stats is not None else GenerationStats()
        stats.prompt_tokens = len(prompt)
        sampler = self._make_sampler(sampling, grammar, ignore_eos, max_tokens)
        try:
            guard = self._lazy_guard(grammar) if grammar is not None and grammar.lazy else None
        except BaseException:
            sampler.close()
            raise
        generation = Generation(self, prompt, min(max_tokens, self.n_ctx - len(prompt)), sampler, guard,
                                frozenset(stop_token_ids), ignore_eos, should_stop, stats)
        generation.logprobs = sampling.logprobs
        return generation

    def step(self, generations: Sequence[Generation]) -> list[GeneratedToken | None]:
        """Advance every unfinished generation by one ``llama_decode`` of one shared batch.

        Each one gets the token it sampled, or None: still reading its prompt, or finished now
        (``generation.finished``). Generations without a slot take a free one first (the slot
        whose cached tokens share the longest prefix with the prompt). Prompts are read in
        chunks so that the batch holds at most ``n_batch`` tokens and running generations
        still get their token at every step. A failed ``llama_decode`` clears the whole cache
        and raises ``RuntimeError``; the generations are then unusable.
        """
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("the engine is already generating alone")
        try:
            return self._step(generations)
        finally:
            self._lock.release()

    def free_slots(self) -> int:
        return sum(slot.owner is None for slot in self._slots)

    def _check_prompt(self, prompt: list[int]) -> None:
        if not prompt:
            raise ValueError("the prompt is empty")
        if self._ctx is None:
            raise RuntimeError("the engine is closed")
        if len(prompt) >= self.n_ctx:
            raise ValueError(f"the prompt has {len(prompt)} tokens; the context holds {self.n_ctx}")
        bad = [t for t in prompt if not 0 <= t < self.n_vocab]
        if bad:
            raise ValueError(f"token ids outside the vocabulary: {bad[:5]}")

    def _make_sampler(
        self, sampling: SamplingParams, grammar: GrammarSpec | None, ignore_eos: bool, max_tokens: int
    ) -> TokenSampler | DeviceSampler:
        banned = self._eog_ids if ignore_eos else ()
        if self.device_sampling and samples_on_device(sampling, grammar is not None):
            return DeviceSampler(chain_key(sampling, banned), sampling.seed, sampling, max_tokens)
        return self._host_sampler(sampling, grammar, banned, max_tokens)

    def _host_sampler(self, sampling: SamplingParams, grammar: GrammarSpec | None, banned: Sequence[int],
                      max_tokens: int) -> TokenSampler:
        grammar_sampler = None
        referenced: list[int] | None = None
        if grammar is not None:
            # both computed once per grammar: a server sends the same one for the same tools
            referenced = self._grammars.derived(("referenced", grammar.gbnf),
                                                lambda: self._referenced_tokens(grammar.gbnf))
            grammar_sampler = self._grammars.sampler(grammar)
        return TokenSampler(
            self.n_vocab,
            sampling,
            grammar_sampler,
            banned,
            penalty_window=max(64, max_tokens),
            trie=self._token_trie() if grammar_sampler is not None else None,
            direct_tokens=None if referenced is None else [*self._special_ids, *referenced],
            buffers=self._candidate_buffers,
        )

    def _lazy_guard(self, grammar: GrammarSpec) -> LazyTriggerGuard:
        special = set(self._special_ids)
        return LazyTriggerGuard(
            self.vocab_ptr,
            grammar.gbnf,
            grammar.root,
            grammar.trigger_patterns,
            grammar.trigger_tokens,
            piece=self.token_to_piece,
            tokenize_text=lambda text: self.tokenize(text, parse_special=False),
            is_special=special.__contains__,
        )

    def _referenced_tokens(self, gbnf: str) -> list[int] | None:
        """Ids the grammar references as tokens; None when it negates one (the prefilter must stay off)."""
        ids: list[int] = []
        for ref in find_token_refs(gbnf):
            if ref.negated:
                return None
            if ref.token_id is not None:
                ids.append(ref.token_id)
            else:
                tokens = self.tokenize(f"<{ref.body}>", parse_special=True)
                if len(tokens) == 1:
                    ids.append(tokens[0])
        return ids

    def _token_trie(self) -> TokenTrie:
        """The vocabulary's prefix tree (built once), without special tokens: those match by id."""
        if self._trie is None:
            excluded = np.zeros(self.n_vocab, dtype=bool)
            excluded[self._special_ids] = True
            self._trie = TokenTrie(self._pieces, excluded)
        return self._trie

    def _run_alone(self, generation: Generation) -> Iterator[GeneratedToken]:
        """Steps one generation (not yet started) holding the engine, then closes it."""
        if not self._lock.acquire(blocking=False):
            generation.close()
            raise RuntimeError("the engine is already generating; one generation at a time")
        try:
            while not generation.finished:
                token = self._step([generation])[0]
                if token is not None:
                    yield token
        finally:
            generation.close()
            self._lock.release()

    # ------------------------------------------------------------------ slots and batches

    def _step(self, generations: Sequence[Generation]) -> list[GeneratedToken | None]:
        self._steps += 1
        usual = self._device_step(generations)
        if usual is not None:
            return usual
        results: list[GeneratedToken | None] = [None] * len(generations)
        live: list[int] = []
        for index, generation in enumerate(generations):
            if generation.finished:
                continue
            if generation.should_stop is not None and generation.should_stop():
                generation.finish("cancelled")
                continue
            if generation.slot is None:
                if self._prefill_to_share(generation):
                    continue  # another generation is reading the same prompt: it waits to share it
                self._attach(generation)
            live.append(index)
        if self._detach_due is not None and self._steps >= self._detach_due:
            self._detach_idle_chains()
        # the plan reorders generations and leaves out those with no room in this batch
        plan = self._plan(generations, live)
        rows = self._decode_plan(plan)
        on_host: list[tuple[int, Generation, int]] = []  # (index in `generations`, generation, logits row)
        n_outputs = 0
        for (index, generation, _chunk), row in zip(plan, rows, strict=True):
            if row < 0:
                continue
            n_outputs += 1
            if generation.on_device:
                results[index] = generation.sample_on_device(row)
            else:
                on_host.append((index, generation, row))
        if on_host:  # llama.cpp copies the raw logits only for a batch with host-sampled rows
            self._load_step_logits(n_outputs)
            sampling = [(generation, self._logits(row)) for _index, generation, row in on_host]
            firsts = self._draw_together(sampling)
            for (index, _generation, _row), (generation, logits), first in zip(on_host, sampling, firsts, strict=True):
                results[index] = generation.sample(logits, first)
        return results

    def _device_step(self, generations: Sequence[Generation]) -> list[GeneratedToken | None] | None:
        """The usual step of generations sampled inside ``llama_decode``, in one pass: each one
        running and decoding its last token. None, with nothing decoded, when the step is not
        that one (the general path then plans it); a generation cancelled meanwhile is finished."""
        if not generations or len(generations) > self.n_batch or (
                self._detach_due is not None and self._steps >= self._detach_due):
            return None
        tokens, positions, logits = self._batch_arrays
        seq_ids = self._batch_seq_ids
        for row, generation in enumerate(generations):
            slot, pending = generation.slot, generation.pending
            if generation.finished or not generation.on_device or slot is None or len(pending) != 1:
                return None
            if generation.should_stop is not None and generation.should_stop():
                generation.finish("cancelled")
                return None
            tokens[row] = pending[0]
            positions[row] = len(slot.cached)
            seq_ids[row][0] = slot.seq_id
            logits[row] = 1
        self._batch.n_tokens = len(generations)
        self._use_threads(generating_only=True)
        status = llama_cpp.llama_decode(self._ctx, self._batch)
        if status != 0:
            self._decode_failed(status)
        results: list[GeneratedToken | None] = []
        for row, generation in enumerate(generations):
            generation.slot.cached.append(generation.pending.pop())  # type: ignore[union-attr]
            results.append(generation.sample_on_device(row))
        return results

    def _draw_together(self, sampling: list[tuple[Generation, np.ndarray]]) -> list[int | None]:
        """For (generation, its logits): the first picks of the generations that draw in numpy,
        for all of them in one pass over their rows; ``NOT_DRAWN`` for the others (they sample
        one by one). Each generation
        uses its own seeded generator and leaves out what it would alone, so a pick is the one a
        lone step on the same logits makes."""
        firsts: list[int | None] = [NOT_DRAWN] * len(sampling)
        chosen = [i for i, (generation, _row) in enumerate(sampling) if generation.draws_next_in_numpy()]
        if len(chosen) < 2:  # one row is drawn the same way by its own sampler
            return firsts
        generations = [sampling[i][0] for i in chosen]
        rows = [sampling[i][1] for i in chosen]
        samplers = [generation.sampler for generation in generations]
        excluded = [g.sampler.excluded(() if (b := g.utf8_breaking()) is None else b) for g in generations]
        picks = draw_tokens(rows, np.array([s.temperature for s in samplers]), np.array([s.min_p for s in samplers]),
                            excluded, np.array([s.rng.random() for s in samplers]))
        for i, token in zip(chosen, picks, strict=True):
            firsts[i] = token
        return firsts

    def _attach(self, generation: Generation) -> None:
        """Give the generation the free slot sharing the longest prefix; drop that slot's other
        tokens. Where a busy slot holds a longer prefix of the prompt (another generation of the
        same prompt), the free slot shares that one's cells for it instead (`llama_memory_seq_cp`:
        in the unified cache the cells are not copied, only marked as the slot's too)."""
        free = [slot for slot in self._slots if slot.owner is None]
        if not free:
            raise RuntimeError(f"all {self.n_parallel} slots are in use")
        prompt = generation.prompt
        slot = max(free, key=lambda s: (self._reusable_prefix(s.cached, prompt), -s.last_used))
        own = self._reusable_prefix(slot.cached, prompt)
        source, shared = self._busy_prefix(prompt)
        if shared > own:
            keep = short_tail_reread(shared, len(prompt))
            llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
            llama_cpp.llama_memory_seq_cp(self._memory, source.seq_id, slot.seq_id, 0, keep)
            slot.cached[:] = source.cached[:keep]
        else:
            keep = short_tail_reread(own, len(prompt))
            if keep < len(slot.cached):
                if keep == 0 or not llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, keep, -1):
                    llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
                    keep = 0
                del slot.cached[keep:]
        slot.owner = generation
        self._bind_chain(slot, generation)
        generation.begin(slot, keep)

    def _busy_prefix(self, prompt: list[int]) -> tuple[Slot, int]:
        """The busy slot holding the longest prefix of `prompt`, and that prefix's length (0: none)."""
        busy = [slot for slot in self._slots if slot.owner is not None]
        if not busy:
            return self._slots[0], 0
        source = max(busy, key=lambda s: self._reusable_prefix(s.cached, prompt))
        return source, self._reusable_prefix(source.cached, prompt)

    def _prefill_to_share(self, generation: Generation) -> bool:
        """Whether a generation still reading a prompt that begins as this one's (the choices of
        one request, say) will hold at least MIN_FAST_ROWS more of it than any slot holds now:
        this one then waits for it, and shares its cells instead of reading the prompt again."""
        if not self.reuse_prefix or not any(slot.owner is None for slot in self._slots):
            return False
        prompt = generation.prompt
        now = max([self._reusable_prefix(slot.cached, prompt) for slot in self._slots], default=0)
        for slot in self._slots:
            owner = slot.owner
            if owner is None or owner.stats.completion_tokens or not owner.pending:
                continue  # free, or past its prompt
            coming = self._reusable_prefix(owner.prompt, prompt)
            if coming >= now + MIN_FAST_ROWS and len(slot.cached) < coming:
                return True
        return False

    def _bind_chain(self, slot: Slot, generation: Generation) -> None:
        """Give the slot the generation's device chain: reseed the one it has when the settings
        match (llama.cpp then keeps its graph plan), else attach a new one. A host-sampled
        generation takes the chain off (llama.cpp would sample its rows and not copy their logits)."""
        sampler = generation.sampler
        if not isinstance(sampler, DeviceSampler):
            self._set_slot_chain(slot, None, None)
            return
        fresh = build_chain(sampler.key, self.n_vocab, sampler.seed)
        if slot.chain is not None and slot.chain_key == sampler.key:
            llama_cpp.llama_sampler_copy(fresh, slot.chain)
            llama_cpp.llama_sampler_free(fresh)
        elif not self._set_slot_chain(slot, fresh, sampler.key):
            llama_cpp.llama_sampler_free(fresh)
            self.device_sampling = False  # this backend cannot run the samplers: sample on the host
            generation.sampler = self._host_sampler(sampler.params, None, sampler.key.banned, sampler.max_tokens)
            generation.on_device = False
            return
        sampler.chain = slot.chain

    def _detach_idle_chains(self) -> None:
        """Take the chains off slots free for ``IDLE_CHAIN_STEPS`` steps: llama.cpp runs an attached
        chain at every step, on a dummy row when its sequence has none."""
        self._detach_due = None
        for slot in self._slots:
            if slot.owner is not None or slot.chain is None:
                continue
            due = slot.free_since + IDLE_CHAIN_STEPS
            if self._steps >= due:
                self._set_slot_chain(slot, None, None)
            else:
                self._detach_due = due if self._detach_due is None else min(self._detach_due, due)

    def _set_slot_chain(self, slot: Slot, chain: Any, key: ChainKey | None) -> bool:
        """Attach ``chain`` (None: none) to the slot's sequence and free the one it replaces;
        False when llama.cpp cannot run it (the slot then has none)."""
        if chain is None and slot.chain is None:
            return True
        attached = bool(llama_cpp.llama_set_sampler(self._ctx, slot.seq_id, chain))
        old, slot.chain, slot.chain_key = slot.chain, (chain if attached else None), (key if attached else None)
        if old is not None:
            llama_cpp.llama_sampler_free(old)
        return attached or chain is None

    def _release(self, slot: Slot) -> None:
        self._uses += 1
        slot.owner = None
        slot.last_used = self._uses
        slot.free_since = self._steps
        if slot.chain is not None:
            due = self._steps + IDLE_CHAIN_STEPS
            self._detach_due = due if self._detach_due is None else min(self._detach_due, due)

    def _reusable_prefix(self, cached: list[int], prompt: list[int]) -> int:
        if not self.reuse_prefix:
            return 0
        n = 0
        limit = min(len(cached), len(prompt) - 1)  # always decode at least one token for fresh logits
        while n < limit and cached[n] == prompt[n]:
            n += 1
        return n

    def _plan(self, generations: Sequence[Generation], live: list[int]) -> list[tuple[int, Generation, list[int]]]:
        """What each of the ``live`` generations (indices into ``generations``) decodes in this
        batch: running generations first (one token each, with logits), then prompt chunks in the
        room left (with logits for the last one of the prompt). Entries: (index, generation, chunk)."""
        plan: list[tuple[int, Generation, list[int]]] = []
        for index in live:  # the usual step: every generation running, one token each
            generation = generations[index]
            if len(generation.pending) != 1:
                break
            plan.append((index, generation, generation.pending))
        else:
            return plan
        room = self.n_batch
        plan = []
        for index in sorted(live, key=lambda i: len(generations[i].pending) > 1):
            generation = generations[index]
            chunk = generation.pending[: chunk_size(len(generation.pending), max(room, 0))]
            if not chunk:
                continue
            room -= len(chunk)
            plan.append((index, generation, chunk))
        return plan

    def _decode_plan(self, plan: list[tuple[int, Generation, list[int]]]) -> list[int]:
        """Decode the planned tokens as one batch; each entry's logits row, -1 where none (a
        chunk that leaves part of its prompt for later)."""
        if not plan:
            return []
        batch = self._batch
        tokens, positions, logits = self._batch_arrays
        seq_ids = self._batch_seq_ids
        n = 0
        rows = []
        for _index, generation, chunk in plan:
            slot = generation.slot
            assert slot is not None
            first = len(slot.cached)
            seq_id = slot.seq_id
            if len(chunk) == 1 and len(generation.pending) == 1:  # a running generation's token
                tokens[n] = chunk[0]
                positions[n] = first
                seq_ids[n][0] = seq_id
                logits[n] = 1
                rows.append(n)
                n += 1
                continue
            for offset, token in enumerate(chunk):
                tokens[n] = token
                positions[n] = first + offset
                seq_ids[n][0] = seq_id
                logits[n] = 0
                n += 1
            if len(chunk) == len(generation.pending):
                logits[n - 1] = 1
                rows.append(n - 1)
            else:
                rows.append(-1)
        batch.n_tokens = n
        self._use_threads(generating_only=n == len(plan))
        status = llama_cpp.llama_decode(self._ctx, batch)
        if status != 0:
            self._decode_failed(status)
        for _index, generation, chunk in plan:
            generation.slot.cached.extend(chunk)  # type: ignore[union-attr]
            del generation.pending[: len(chunk)]
        return rows

    def _decode_failed(self, status: int) -> NoReturn:
        """The failed batch may have left partial state: forget the cache entirely."""
        llama_cpp.llama_memory_clear(self._memory, True)
        for slot in self._slots:
            slot.cached.clear()
        raise RuntimeError(f"llama_decode failed with status {status}")

    def _use_threads(self, generating_only: bool) -> None:
        """A step of one new token per generation runs on the generation thread count, as a lone
        token does: llama.cpp would take the prompt count for any batch over one token, and those
        threads synchronise at every layer, which costs more than it saves for a few rows (and a
        lot on a busy machine). Prompt chunks keep the prompt count."""
        n_threads, n_threads_batch = self._threads
        wanted = (n_threads, n_threads) if generating_only else self._threads
        if wanted != self._threads_set:
            llama_cpp.llama_set_n_threads(self._ctx, *wanted)
            self._threads_set = wanted

    def prepare_utf8_tables(self) -> None:
        """Build now the tables :meth:`_tokens_breaking_utf8` and :meth:`_utf8_breaking_mask` would
        build on first use, for every kind of unfinished character (a pass over the vocabulary each)."""
        leads = (b"\xc3", b"\xe0", b"\xe1", b"\xed", b"\xf0", b"\xf1", b"\xf4")
        for tail in (b"", *leads, b"\xe1\x80", b"\xf1\x80", b"\xf1\x80\x80"):
            self._utf8_breaking_mask(tail)

    def _tokens_breaking_utf8(self, tail: bytes) -> np.ndarray:
        """The tokens whose bytes cannot follow ``tail``: a lone continuation byte after complete
        text; inside a character, anything but its next byte, end-of-generation tokens included
        (the output would end with half a character). Computed once per
        :func:`~autoparser.llama.utf8.continuation_state`, so that sampling leaves them out in one
        pass instead of rejecting them one pick at a time."""
        state = continuation_state(tail)
        found = self._utf8_breaking.get(state)
        if found is None:
            ends = self._eog_set if not tail else frozenset()
            found = np.array([t for t, piece in enumerate(self._pieces)
                              if t not in ends and incomplete_tail(tail + piece) is None], dtype=np.int64)
            self._utf8_breaking[state] = found
        return found

    def _utf8_breaking_mask(self, tail: bytes) -> np.ndarray:
        """:meth:`_tokens_breaking_utf8` as a boolean per vocabulary entry, end-of-generation
        tokens included inside a character; made once per kind of state and never written to."""
        state = continuation_state(tail)
        mask = self._utf8_masks.get(state)
        if mask is None:
            mask = np.zeros(self.n_vocab, dtype=bool)
            mask[self._tokens_breaking_utf8(tail)] = True
            if tail:
                mask[self._eog_ids] = True
            mask.flags.writeable = False
            self._utf8_masks[state] = mask
        return mask

    def _load_step_logits(self, n_outputs: int) -> None:
        """View the last batch's logits as one array, once per step rather than once per row."""
        self._step_rows = np.empty((0, self.n_vocab), dtype=np.float32)
        if not n_outputs:
            return
        ptr = llama_cpp.llama_get_logits(self._ctx)
        if not ptr:
            raise RuntimeError("llama.cpp returned no logits")
        self._step_base = ctypes.addressof(ptr.contents)
        self._step_rows = self._logits_view(self._step_base, n_outputs)

    def _logits_view(self, address: int, n_outputs: int) -> np.ndarray:
        """A numpy view of `n_outputs` rows of logits at `address`, made once per address and row
        count: building a view costs more than the rest of a small model's sampling step. The
        memory is llama.cpp's output buffer while llama.cpp hands out that address."""
        key = (address, n_outputs)
        view = self._logits_views.get(key)
        if view is None:
            if len(self._logits_views) >= 4 * MAX_PARALLEL:  # the buffer moved: forget old views
                self._logits_views.clear()
            array = (ctypes.c_float * (n_outputs * self.n_vocab)).from_address(address)
            view = self._logits_views[key] = np.frombuffer(array, dtype=np.float32).reshape(n_outputs, self.n_vocab)
        return view

    def _row_index(self, row: int) -> int:
        """Where the logits of batch position ``row`` are in the step's array: llama.cpp says."""
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, row)
        if not ptr:
            raise RuntimeError("llama.cpp returned no logits")
        return (ctypes.addressof(ptr.contents) - self._step_base) // (4 * self.n_vocab)

    def _logits(self, row: int) -> np.ndarray:
        """The logits of batch position ``row`` (a view of llama.cpp's buffer, valid for this step)."""
        return self._step_rows[self._row_index(row)]

    def _next_token(self, generation: Generation, logits: np.ndarray, first: int | None = NOT_DRAWN) -> int | None:
        """Sample a token; with a lazy grammar, resample while the token would make its trigger abort.

        End-of-generation and stop tokens end the run without reaching the grammar, so they pass
        (once the text is complete UTF-8: inside a character only its next byte may come).
        ``first`` is the first pick when it was drawn already (:meth:`_draw_together`).
        """
        sampler, guard, stop_ids = generation.sampler, generation.guard, generation.stop_ids
        breaking = generation.utf8_breaking()
        token = first if first != NOT_DRAWN else sampler.sample(logits, exclude=breaking if breaking is not None else ())
        if token is None and breaking is not None:  # only such tokens are allowed
            breaking = None
            token = sampler.sample(logits)
        excluded: list[int] = []
        fallback: int | None = None  # allowed, but breaks UTF-8: better than stopping
        while token is not None and token not in stop_ids and token not in self._eog_set:
            safe = guard is None or guard.is_safe(token)
            tail = incomplete_tail(generation.utf8_tail + self._pieces[token])
            if safe and tail is not None:
                generation.utf8_tail = tail
                return token
            if safe and fallback is None:
                fallback = token
            excluded.append(token)
            if len(excluded) > _MAX_TRIGGER_RETRIES:
                generation.utf8_tail = b""
                return fallback
            token = sampler.sample(logits, exclude=excluded if breaking is None
                                   else np.concatenate((breaking, excluded)))
        return token


def _whole_text(piece: bytes) -> str | None:
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return None


@dataclass
class Slot:
    """One sequence of the shared KV cache, and the tokens it holds (positions 0, 1, ...)."""

    seq_id: int
    cached: list[int] = field(default_factory=list)
    owner: Generation | None = None
    last_used: int = 0
    chain: Any = None
    """The device sampler chain attached to this sequence (``llama_set_sampler``), if any."""
    chain_key: ChainKey | None = None
    free_since: int = 0
    """The engine's step count when the slot was last given back."""


class Generation:
    """One generation's state between steps: its prompt, sampler, slot and statistics.

    Made by :meth:`Engine.new_generation`; :meth:`Engine.step` feeds it logits. ``pending``
    holds the tokens still to decode in its slot: the prompt's uncached part, then each sampled
    token in turn.
    """

    def __init__(self, engine: Engine, prompt: list[int], budget: int, sampler: TokenSampler | DeviceSampler,
                 guard: LazyTriggerGuard | None, stop_ids: frozenset[int], ignore_eos: bool,
                 should_stop: Callable[[], bool] | None, stats: GenerationStats) -> None:
        self.engine = engine
        self.prompt = prompt
        self.budget = budget
        self.sampler = sampler
        self.on_device = isinstance(sampler, DeviceSampler)
        """Is this generation's token sampled inside ``llama_decode``?"""
        self.guard = guard
        self.stop_ids = stop_ids
        self.ignore_eos = ignore_eos
        self.should_stop = should_stop
        self.stats = stats
        self.slot: Slot | None = None
        self.pending: list[int] = []
        self.utf8_tail = b""
        self.finished = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._decoder_empty = True  # the decoder holds no bytes of an unfinished character
        self._breaking: dict[tuple[int, int, int], np.ndarray | None] = {}
        self._breaking_masks: dict[tuple[int, int, int], np.ndarray] = {}
        self._started = 0.0
        self._mark: float | None = None
        self._closed = False
        self.logprobs: int | None = None  # how many alternatives to report per token, when asked

    def utf8_breaking(self) -> np.ndarray | None:
        """Tokens to leave out of the next pick because they would break UTF-8 (stop tokens
        stay after complete text: they end the output); None when there are none."""
        state = continuation_state(self.utf8_tail)
        if state not in self._breaking:
            found = self.engine._tokens_breaking_utf8(self.utf8_tail)
            if self.stop_ids and not self.utf8_tail:
                found = found[~np.isin(found, list(self.stop_ids))]
            self._breaking[state] = found if found.size else None
        return self._breaking[state]

    def utf8_breaking_mask(self) -> np.ndarray:
        """A boolean per vocabulary entry: True for the tokens that cannot come next without
        breaking UTF-8 (inside a character: end-of-generation and stop tokens too, since the
        output would end with half of it). Read-only: shared by generations without stop tokens."""
        state = continuation_state(self.utf8_tail)
        mask = self._breaking_masks.get(state)
        if mask is None:
            mask = self.engine._utf8_breaking_mask(self.utf8_tail)
            if self.stop_ids:
                mask = mask.copy()
                mask[list(self.stop_ids)] = bool(self.utf8_tail)
            self._breaking_masks[state] = mask
        return mask

    def begin(self, slot: Slot, cached: int) -> None:
        self.slot = slot
        self.stats.cached_tokens = cached
        self.pending = self.prompt[cached:]
        self.sampler.feed_prompt(self.prompt)
        self._started = time.perf_counter()

    def draws_next_in_numpy(self) -> bool:
        """Will :meth:`sample` draw its first pick in numpy (rather than end on its budget)?"""
        return self.sampler.draws_in_numpy and not self.finished and self.stats.completion_tokens < self.budget

    def sample(self, logits: np.ndarray, first: int | None = NOT_DRAWN) -> GeneratedToken | None:
        """The next token from the logits after ``pending`` was decoded; None when the generation ends.

        ``first``: the first pick, when the engine drew it for the whole batch (else ``NOT_DRAWN``)."""
        if not self._budget_left():
            return None
        return self._take(self.engine._next_token(self, logits, first), logits)

    def sample_on_device(self, row: int) -> GeneratedToken | None:
        """:meth:`sample` for a generation whose chain sampled batch position ``row`` in the step.

        The pick is checked as the host checks its own: one that would break UTF-8 is drawn
        again without such tokens from what the chain kept; when nothing else is left, it stays
        (better than stopping, as on the host)."""
        if self._mark is None or self.stats.completion_tokens >= self.budget:
            if not self._budget_left():
                return None
        engine = self.engine
        token = llama_cpp.llama_get_sampled_token_ith(engine._ctx, row)
        if token < 0:
            raise RuntimeError("llama.cpp sampled no token for a generation with a device chain")
        if self._decoder_empty and not self.utf8_tail and token not in engine._eog_set and token not in self.stop_ids:
            text = engine._texts[token]
            if text is not None:  # whole characters after whole ones: nothing to check or decode
                return self._take_whole(token, text)
        if token in self.stop_ids or token in engine._eog_set:
            if self.utf8_tail:  # the output would end inside a character
                redrawn = self.sampler.redraw(engine._ctx, row, self.utf8_breaking_mask())
                token = token if redrawn is None else self._follow_utf8(redrawn)
            return self._take(token, None)
        tail = incomplete_tail(self.utf8_tail + engine._pieces[token])
        if tail is None:
            redrawn = self.sampler.redraw(engine._ctx, row, self.utf8_breaking_mask())
            token = token if redrawn is None else redrawn
            self._follow_utf8(token)
        else:
            self.utf8_tail = tail
        return self._take(token, None)

    def _follow_utf8(self, token: int) -> int:
        """Move the unfinished-character state past ``token`` (reset where it breaks UTF-8)."""
        if token not in self.stop_ids and token not in self.engine._eog_set:
            tail = incomplete_tail(self.utf8_tail + self.engine._pieces[token])
            self.utf8_tail = tail if tail is not None else b""
        return token

    def _budget_left(self) -> bool:
        """Record the end of the prefill; False (and finished) when the token budget is spent."""
        if self._mark is None:
            now = time.perf_counter()
            self.stats.prefill_ms = (now - self._started) * 1000.0
            self._mark = now
        if self.stats.completion_tokens >= self.budget:
            self.finish("length")
            return False
        return True

    def _take(self, token: int | None, logits: np.ndarray | None) -> GeneratedToken | None:
        """Count and record the sampled token; None when it ends the generation."""
        if token is None:  # the grammar allows nothing more (complete, and end-of-generation is banned)
            self.finish("stop")
            return None
        self.stats.completion_tokens += 1
        if token in self.stop_ids or (not self.ignore_eos and token in self.engine._eog_set):
            self.stats.stop_token_id = token
            self.finish("stop")
            return None
        self.sampler.accept(token)
        if self.guard is not None:
            self.guard.accept(token)
        text = self.engine._texts[token] if self._decoder_empty else None
        if text is None:
            text = self._decoder.decode(self.engine._pieces[token])
            self._decoder_empty = not self._decoder.getstate()[0]
        info = None if self.logprobs is None or logits is None else token_logprobs(
            logits, token, self.logprobs, self.engine.token_to_piece)
        now = time.perf_counter()
        elapsed = (now - self._mark) * 1000.0
        self._mark = now
        self.stats.decode_ms.append(elapsed)
        if self.stats.completion_tokens >= self.budget:
            self.finish("length")
        else:
            self.pending = [token]
        return GeneratedToken(token, text, elapsed, info)

    def _take_whole(self, token: int, text: str) -> GeneratedToken | None:
        """:meth:`_take` for a device-sampled token that is neither a stop nor an end-of-generation
        token and whose text is whole characters after whole ones (the usual token): no sampler or
        guard to tell, nothing to decode."""
        stats = self.stats
        stats.completion_tokens += 1
        now = time.perf_counter()
        elapsed = (now - self._mark) * 1000.0  # type: ignore[operator]
        self._mark = now
        stats.decode_ms.append(elapsed)
        if stats.completion_tokens >= self.budget:
            self.finish("length")
        else:
            self.pending = [token]
        return GeneratedToken(token, text, elapsed)

    def finish(self, reason: str) -> None:
        """End the generation (``"stop"``, ``"length"``, ``"cancelled"``) and give its slot back."""
        if not self.stats.finish_reason:
            self.stats.finish_reason = reason
        self.finished = True
        self.pending = []
        if self.slot is not None and self.slot.owner is self:
            self.engine._release(self.slot)

    def close(self) -> None:
        """Finish (as cancelled, unless it ended already) and free the sampler."""
        if self._closed:
            return
        self._closed = True
        self.finish("cancelled")
        self.stats.grammar_fallbacks = self.sampler.grammar_fallbacks
        self.sampler.close()
