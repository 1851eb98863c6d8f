"""Sampling inside llama.cpp's graph: only the picked token comes back to Python.

llama.cpp 0.3.36 runs a sampler chain attached to a sequence (``llama_set_sampler``) as part of
``llama_decode``: logit bias, top-k, top-p, min-p, temperature and the random pick are graph
operations, on the GPU when the model is there, and ``llama_get_sampled_token_ith`` returns the
token. That takes the per-token pass over the whole vocabulary off the host. It serves the
requests whose sampling those samplers describe completely (:func:`samples_on_device`): no
grammar, no penalties (ours see two different histories), no log-probabilities (they need the
raw logits on the host).

The engine keeps one chain per slot and checks each pick after the step: a token that would break
UTF-8 is rejected and the pick is drawn again on the host from the chain's own candidates and
logits, leaving out every token that would (the distribution is that of the allowed tokens). Changing
a slot's chain makes llama.cpp plan its graph again, so a slot keeps its chain between requests
and a request with the same settings only reseeds it (``llama_sampler_copy``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp
import numpy as np

from autoparser.llama.sampling import SamplingParams, draw_token


@dataclass(frozen=True)
class ChainKey:
    """What a device chain computes, apart from its random state."""

    greedy: bool
    top_k: int
    top_p: float
    min_p: float
    temperature: float
    banned: tuple[int, ...]


def samples_on_device(params: SamplingParams, has_grammar: bool) -> bool:
    """Can a device chain sample this request exactly as the host sampler would?"""
    return (not has_grammar and params.logprobs is None and params.repetition_penalty == 1.0
            and not params.presence_penalty and not params.frequency_penalty)


def chain_key(params: SamplingParams, banned: Sequence[int]) -> ChainKey:
    """The chain for these settings: the same samplers, in the same order, as the host's picker."""
    greedy = params.temperature <= 0.0
    return ChainKey(
        greedy=greedy,
        top_k=int(params.top_k) if params.top_k and params.top_k > 0 and not greedy else 0,
        top_p=float(params.top_p) if 0.0 < params.top_p < 1.0 and not greedy else 1.0,
        min_p=float(params.min_p) if params.min_p and 0.0 < params.min_p <= 1.0 and not greedy else 0.0,
        temperature=float(params.temperature),
        banned=tuple(sorted(set(banned))),
    )


def build_chain(key: ChainKey, n_vocab: int, seed: int | None):  # type: ignore[no-untyped-def]
    """A new llama.cpp sampler chain for ``key``; the caller frees it (or hands it to llama.cpp)."""
    chain_params = llama_cpp.llama_sampler_chain_default_params()
    chain_params.no_perf = True
    chain = llama_cpp.llama_sampler_chain_init(chain_params)
    add = llama_cpp.llama_sampler_chain_add
    if key.banned:
        biases = (llama_cpp.llama_logit_bias * len(key.banned))(
            *[llama_cpp.llama_logit_bias(token, -math.inf) for token in key.banned])
        add(chain, llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(key.banned), biases))
    if key.greedy:
        add(chain, llama_cpp.llama_sampler_init_greedy())
        return chain
    if key.top_k:
        add(chain, llama_cpp.llama_sampler_init_top_k(key.top_k))
    if key.top_p < 1.0:
        add(chain, llama_cpp.llama_sampler_init_top_p(key.top_p, 1))
    if key.min_p:
        add(chain, llama_cpp.llama_sampler_init_min_p(key.min_p, 1))
    if key.temperature != 1.0:  # dividing by 1 changes nothing but costs a pass
        add(chain, llama_cpp.llama_sampler_init_temp(key.temperature))
    add(chain, llama_cpp.llama_sampler_init_dist(llama_cpp.LLAMA_DEFAULT_SEED if seed is None
                                                 else int(seed) & 0xFFFFFFFF))
    return chain


class DeviceSampler:
    """One generation's side of device sampling: its chain settings and seed, the slot's chain
    it drives once attached, and a host generator for the rare pick drawn again."""

    draws_in_numpy = False
    grammar_fallbacks = 0

    def __init__(self, key: ChainKey, seed: int | None, params: SamplingParams, max_tokens: int) -> None:
        self.key = key
        self.seed = seed
        self.params = params
        self.max_tokens = max_tokens
        self.chain = None  # the slot's chain, set by the engine when the generation takes a slot
        self.rng = np.random.default_rng(None if seed is None else int(seed) & 0xFFFFFFFF)

    def feed_prompt(self, tokens: Sequence[int]) -> None:
        """Nothing to see: device chains have no penalties."""

    def accept(self, token: int) -> None:
        """Nothing to record: the chain drew its random number as it sampled (the engine's
        context allows one output per sequence a step, so llama.cpp does not wait for this)."""

    def redraw(self, ctx, row: int, excluded: np.ndarray) -> int | None:  # type: ignore[no-untyped-def]
        """A pick among the chain's candidates at batch position ``row`` that ``excluded`` (a
        boolean per vocabulary entry) leaves in, drawn on the host from the chain's logits; None
        when the chain kept none of them.

        The draw is from the chain's distribution (its logits are final: temperature applied)
        restricted to the allowed tokens, in a few vectorised passes over the candidates (greedy:
        the best allowed, the first of equal bests as llama.cpp's argmax)."""
        count = llama_cpp.llama_get_sampled_logits_count_ith(ctx, row)
        logits_ptr = llama_cpp.llama_get_sampled_logits_ith(ctx, row)
        if not count or not logits_ptr:
            return None
        logits = np.ctypeslib.as_array(logits_ptr, shape=(count,))
        ids_ptr = llama_cpp.llama_get_sampled_candidates_ith(ctx, row)
        ids = np.ctypeslib.as_array(ids_ptr, shape=(count,)) if ids_ptr else np.arange(count)
        left_out = excluded[ids]
        if self.key.greedy:
            kept = logits.copy()
            kept[left_out] = -np.inf
            best = int(np.argmax(kept))
            return int(ids[best]) if np.isfinite(kept[best]) else None
        index = draw_token(logits, 1.0, 0.0, left_out, self.rng.random())
        return None if index is None else int(ids[index])

    def close(self) -> None:
        """The chain belongs to the slot: nothing to free here."""
        self.chain = None
