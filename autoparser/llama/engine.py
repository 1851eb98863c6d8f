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

Beside the engine: :mod:`~autoparser.llama.generation` (one generation's state and its picks),
:mod:`~autoparser.llama.batch` (slots, the plan of a step's batch, its logits) and
:mod:`~autoparser.llama.model_tokens` (the token side, shared with the weightless vocabulary).
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

import llama_cpp
import numpy as np

from autoparser.llama import _native
from autoparser.llama.batch import (
    IDLE_CHAIN_STEPS,
    MAX_PARALLEL,
    MIN_FAST_ROWS,
    REREAD_FROM,
    Slot,
    StepLogits,
    chunk_size,
    plan_batch,
    short_tail_reread,
)
from autoparser.llama.device_sampling import (
    ChainKey,
    DeviceSampler,
    build_chain,
    chain_key,
    samples_on_device,
)
from autoparser.llama.generation import NOT_DRAWN, GeneratedToken, Generation, GenerationStats
from autoparser.llama.grammar_cache import GrammarTemplates
from autoparser.llama.model_tokens import ModelTokens
from autoparser.llama.sampling import CandidateBuffers, GrammarSpec, SamplingParams, TokenSampler, draw_tokens

__all__ = [  # the engine, and what callers import from here that lives beside it
    "IDLE_CHAIN_STEPS",
    "MAX_PARALLEL",
    "MIN_FAST_ROWS",
    "REREAD_FROM",
    "Engine",
    "GeneratedToken",
    "Generation",
    "GenerationStats",
    "GrammarSpec",
    "SamplingParams",
    "chunk_size",
    "short_tail_reread",
]


class Engine(ModelTokens):
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
        self._candidate_buffers = CandidateBuffers(self.n_vocab)
        self._step_logits = StepLogits(self.n_vocab)
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
            guard = self.lazy_guard(grammar) if grammar is not None and grammar.lazy else None
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
        banned = self.eog_ids if ignore_eos else ()
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
                                                lambda: self.grammar_token_ids(grammar.gbnf))
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
        plan = plan_batch(generations, live, self.n_batch)
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
            self._step_logits.load(self._ctx, n_outputs)
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

    @property
    def context(self) -> Any:
        """The ``llama_context`` (None once closed): generations read their device-sampled tokens there."""
        return self._ctx

    def release(self, slot: Slot) -> None:
        """Give a slot back (its generation has finished); it keeps its tokens for a later prompt."""
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

    def _logits(self, row: int) -> np.ndarray:
        """The logits of batch position ``row`` (a view of llama.cpp's buffer, valid for this step)."""
        return self._step_logits.row(self._ctx, row)
