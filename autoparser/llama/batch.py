"""Planning one step's batch, and reading the logits it leaves.

A :class:`Slot` is one sequence of the shared KV cache. Each step puts every running
generation's next token, and chunks of the prompts still being read, into one ``llama_decode``
(:func:`plan_batch`, :func:`chunk_size`); a reused prefix may be shortened so that the rest
decodes as a fast batch (:func:`short_tail_reread`). :class:`StepLogits` views the step's logits
rows as numpy arrays.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import llama_cpp
import numpy as np

from autoparser.llama.device_sampling import ChainKey

if TYPE_CHECKING:
    from autoparser.llama.generation import Generation

#: Most slots one engine runs; llama.cpp's own limit on sequences is higher.
MAX_PARALLEL = 64

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


def plan_batch(generations: Sequence[Generation], live: list[int],
               n_batch: int) -> list[tuple[int, Generation, list[int]]]:
    """What each of the ``live`` generations (indices into ``generations``) decodes in this
    batch of ``n_batch`` rows: running generations first (one token each, with logits), then
    prompt chunks in the room left (with logits for the last one of the prompt). Entries:
    (index, generation, chunk)."""
    plan: list[tuple[int, Generation, list[int]]] = []
    for index in live:  # the usual step: every generation running, one token each
        generation = generations[index]
        if len(generation.pending) != 1:
            break
        plan.append((index, generation, generation.pending))
    else:
        return plan
    room = n_batch
    plan = []
    for index in sorted(live, key=lambda i: len(generations[i].pending) > 1):
        generation = generations[index]
        chunk = generation.pending[: chunk_size(len(generation.pending), max(room, 0))]
        if not chunk:
            continue
        room -= len(chunk)
        plan.append((index, generation, chunk))
    return plan


class StepLogits:
    """The logits of the last batch, viewed as one numpy array of rows."""

    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self._step_rows = np.empty((0, n_vocab), dtype=np.float32)
        self._step_base = 0
        self._logits_views: dict[tuple[int, int], np.ndarray] = {}

    def load(self, ctx: Any, n_outputs: int) -> None:
        """View the last batch's logits as one array, once per step rather than once per row."""
        self._step_rows = np.empty((0, self.n_vocab), dtype=np.float32)
        if not n_outputs:
            return
        ptr = llama_cpp.llama_get_logits(ctx)
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

    def row(self, ctx: Any, row: int) -> np.ndarray:
        """The logits of batch position ``row`` (a view of llama.cpp's buffer, valid for this step)."""
        return self._step_rows[self._row_index(ctx, row)]

    def _row_index(self, ctx: Any, row: int) -> int:
        """Where the logits of batch position ``row`` are in the step's array: llama.cpp says."""
        ptr = llama_cpp.llama_get_logits_ith(ctx, row)
        if not ptr:
            raise RuntimeError("llama.cpp returned no logits")
        return (ctypes.addressof(ptr.contents) - self._step_base) // (4 * self.n_vocab)
