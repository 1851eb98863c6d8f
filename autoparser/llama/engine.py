"""A token-level generation engine on llama.cpp's low-level API (through llama-cpp-python).

``llama_cpp.Llama`` cannot do what the server needs: lazy grammars with triggers, detokenized
pieces with special tokens kept, cancellation between tokens, per-token timings, and grammar
checking that does not slow every token down. :class:`Engine` owns one model and one context and
runs its own loop: ``llama_decode`` on a batch, then :class:`~autoparser.llama.sampling.TokenSampler`.

One generation runs at a time per engine (the server queues requests); starting a second one
while the first is still running raises ``RuntimeError`` instead of deadlocking.
The KV cache keeps the previous request's tokens; a new prompt sharing a prefix with them only
decodes the rest (``reuse_prefix=True``, the default). Results can then differ in the last float
bits from a cold run, as with any prompt cache; pass ``reuse_prefix=False`` for bit-exact replays.
"""

from __future__ import annotations

import codecs
import ctypes
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from autoparser.llama import _native
from autoparser.llama.grammar_check import create_grammar_sampler, find_token_refs
from autoparser.llama.lazy_guard import LazyTriggerGuard
from autoparser.llama.long_runs import tokenizer_pieces
from autoparser.llama.sampling import GrammarSpec, SamplingParams, TokenSampler
from autoparser.llama.token_trie import TokenTrie
from autoparser.llama.utf8 import incomplete_tail

__all__ = ["Engine", "GeneratedToken", "GenerationStats", "GrammarSpec", "SamplingParams"]

_SPECIAL_ATTRS = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
#: Tokens tried per step before giving up when every pick would fire a lazy trigger the grammar rejects.
_MAX_TRIGGER_RETRIES = 64


@dataclass
class GeneratedToken:
    """One sampled token. ``text`` keeps special tokens; it is "" while a UTF-8 sequence is incomplete."""

    token_id: int
    text: str
    elapsed_ms: float


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
    ) -> None:
        _native.ensure_backend(verbose)
        self.model_path = str(model_path)
        self.reuse_prefix = reuse_prefix
        self._lock = threading.Lock()
        self._model = _native.load_model(model_path, n_gpu_layers=n_gpu_layers)
        self._ctx = None
        try:
            self._init_context(n_ctx, n_threads, n_batch)
        except BaseException:
            llama_cpp.llama_model_free(self._model)
            raise
        self._local = threading.local()
        self._utf8_tail = b""
        self.vocab_ptr: int = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self.vocab_ptr)
        self.n_ctx: int = llama_cpp.llama_n_ctx(self._ctx)
        self.gpu_offload: bool = bool(llama_cpp.llama_supports_gpu_offload()) and n_gpu_layers != 0
        self.chat_template: str | None = self._read_chat_template()
        self.bos_token: str = self._special_text(llama_cpp.llama_vocab_bos(self.vocab_ptr))
        self.eos_token: str = self._special_text(llama_cpp.llama_vocab_eos(self.vocab_ptr))
        self.special_tokens: set[str] = self._collect_special_tokens()
        self._eog_ids = [t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab_ptr, t)]
        self._cached: list[int] = []  # tokens whose keys/values are in the KV cache, in order
        self._trie: TokenTrie | None = None

    # ------------------------------------------------------------------ setup

    def _init_context(self, n_ctx: int, n_threads: int | None, n_batch: int) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = 1
        cores = multiprocessing.cpu_count()
        # Same defaults as llama_cpp.Llama, so benchmarks against it compare like with like.
        params.n_threads = n_threads or max(cores // 2, 1)
        params.n_threads_batch = n_threads or cores
        params.no_perf = True
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
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab_ptr, token))

    # ------------------------------------------------------------------ generation

    def generate(
        self,
        prompt_tokens: list[int],
        max_tokens: int,
        sampling: SamplingParams,
        grammar: GrammarSpec | None = None,
        stop_token_ids: Sequence[int] = (),
        ignore_eos: bool = False,
        should_stop: Callable[[], bool] | None = None,
        stats: GenerationStats | None = None,
    ) -> Iterator[GeneratedToken]:
        """Yield sampled tokens until end of generation, a stop token, ``max_tokens``, the context end or cancellation.

        Validation (prompt length, grammar) happens before the first token is yielded and raises
        ``ValueError`` (``GrammarError`` for grammars). ``should_stop`` is polled before every
        token; closing the iterator also stops generation. End-of-generation and stop tokens end
        the run without being yielded.
        """
        prompt = [int(t) for t in prompt_tokens]
        self._check_prompt(prompt)
        stats = stats if stats is not None else GenerationStats()
        stats.prompt_tokens = len(prompt)
        sampler = self._make_sampler(sampling, grammar, ignore_eos, max_tokens)
        guard = self._lazy_guard(grammar) if grammar is not None and grammar.lazy else None
        steps = self._loop(prompt, max_tokens, sampler, guard, set(stop_token_ids), ignore_eos, should_stop, stats)
        return self._run(steps, sampler, stats)

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
    ) -> TokenSampler:
        grammar_sampler = None
        referenced: list[int] | None = None
        if grammar is not None:
            referenced = self._referenced_tokens(grammar.gbnf)
            grammar_sampler = create_grammar_sampler(
                self.vocab_ptr,
                grammar.gbnf,
                grammar.root,
                grammar.lazy,
                grammar.trigger_patterns,
                grammar.trigger_tokens,
            )
        banned = self._eog_ids if ignore_eos else ()
        return TokenSampler(
            self.n_vocab,
            sampling,
            grammar_sampler,
            banned,
            penalty_window=max(64, max_tokens),
            trie=self._token_trie() if grammar_sampler is not None else None,
            direct_tokens=None if referenced is None else [*self._special_ids, *referenced],
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
            self._trie = TokenTrie([self.token_to_piece(t) for t in range(self.n_vocab)], excluded)
        return self._trie

    def _run(
        self, steps: Iterator[GeneratedToken], sampler: TokenSampler, stats: GenerationStats
    ) -> Iterator[GeneratedToken]:
        """Runs `steps` (a `_loop`, not yet started) holding the engine, then frees the sampler."""
        if not self._lock.acquire(blocking=False):
            sampler.close()
            raise RuntimeError("the engine is already generating; one generation at a time")
        try:
            yield from steps
        finally:
            if not stats.finish_reason:
                stats.finish_reason = "cancelled"
            stats.grammar_fallbacks = sampler.grammar_fallbacks
            sampler.close()
            self._lock.release()

    def _loop(
        self,
        prompt: list[int],
        max_tokens: int,
        sampler: TokenSampler,
        guard: LazyTriggerGuard | None,
        stop_ids: set[int],
        ignore_eos: bool,
        should_stop: Callable[[], bool] | None,
        stats: GenerationStats,
    ) -> Iterator[GeneratedToken]:
        start = time.perf_counter()
        stats.cached_tokens = self._prefill(prompt)
        self._utf8_tail = b""
        sampler.feed_prompt(prompt)
        mark = time.perf_counter()
        stats.prefill_ms = (mark - start) * 1000.0
        budget = min(max_tokens, self.n_ctx - len(prompt))
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        for step in range(budget):
            if should_stop is not None and should_stop():
                stats.finish_reason = "cancelled"
                return
            token = self._next_token(sampler, guard, stop_ids)
            if token is None:  # the grammar allows nothing more (complete, and end-of-generation is banned)
                stats.finish_reason = "stop"
                return
            stats.completion_tokens += 1
            if (token in stop_ids) or (not ignore_eos and self.is_eog(token)):
                stats.stop_token_id = token
                stats.finish_reason = "stop"
                return
            sampler.accept(token)
            if guard is not None:
                guard.accept(token)
            text = decoder.decode(self.token_to_piece(token))
            elapsed = (time.perf_counter() - mark) * 1000.0
            stats.decode_ms.append(elapsed)
            yield GeneratedToken(token, text, elapsed)
            mark = time.perf_counter()  # the consumer's own time between tokens is not the model's
            if step + 1 < budget:
                self._decode([token])
        stats.finish_reason = "length"

    def _next_token(
        self, sampler: TokenSampler, guard: LazyTriggerGuard | None, stop_ids: set[int]
    ) -> int | None:
        """Sample a token; with a lazy grammar, resample while the token would make its trigger abort.

        End-of-generation and stop tokens end the run without reaching the grammar, so they pass.
        """
        logits = self._logits()
        token = sampler.sample(logits)
        excluded: list[int] = []
        fallback: int | None = None  # allowed, but breaks UTF-8: better than stopping
        while token is not None and token not in stop_ids and not self.is_eog(token):
            safe = guard is None or guard.is_safe(token)
            tail = incomplete_tail(self._utf8_tail + self.token_to_piece(token))
            if safe and tail is not None:
                self._utf8_tail = tail
                return token
            if safe and fallback is None:
                fallback = token
            excluded.append(token)
            if len(excluded) > _MAX_TRIGGER_RETRIES:
                self._utf8_tail = b""
                return fallback
            token = sampler.sample(logits, exclude=excluded)
        return token

    # ------------------------------------------------------------------ model calls

    def _prefill(self, prompt: list[int]) -> int:
        """Decode the prompt, reusing the cached prefix it shares with the previous run; return the reused count."""
        keep = self._reusable_prefix(prompt)
        if keep < len(self._cached):
            if keep == 0 or not llama_cpp.llama_memory_seq_rm(self._memory, 0, keep, -1):
                llama_cpp.llama_memory_clear(self._memory, True)
                keep = 0
            del self._cached[keep:]
        self._decode(prompt[keep:])
        return keep

    def _reusable_prefix(self, prompt: list[int]) -> int:
        if not self.reuse_prefix:
            return 0
        n = 0
        limit = min(len(self._cached), len(prompt) - 1)  # always decode at least one token for fresh logits
        while n < limit and self._cached[n] == prompt[n]:
            n += 1
        return n

    def _decode(self, tokens: list[int]) -> None:
        n_batch = llama_cpp.llama_n_batch(self._ctx)
        for begin in range(0, len(tokens), n_batch):
            chunk = tokens[begin : begin + n_batch]
            arr = (llama_cpp.llama_token * len(chunk))(*chunk)
            batch = llama_cpp.llama_batch_get_one(arr, len(chunk))
            status = llama_cpp.llama_decode(self._ctx, batch)
            if status != 0:
                # The failed batch may have left partial state: forget the cache entirely.
                llama_cpp.llama_memory_clear(self._memory, True)
                self._cached.clear()
                raise RuntimeError(f"llama_decode failed with status {status}")
            self._cached.extend(chunk)

    def _logits(self) -> np.ndarray:
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, -1)
        if not ptr:
            raise RuntimeError("llama.cpp returned no logits")
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
