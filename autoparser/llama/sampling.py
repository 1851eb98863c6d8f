"""Token sampling on llama.cpp's sampler API, with grammar checked *after* sampling.

llama-cpp-python puts the grammar sampler at the front of its chain, so every token pays for
matching the whole vocabulary against the grammar before top-k even runs. llama.cpp's own server
does it the other way round, and so does :class:`TokenSampler`:

1. run the ordinary chain (penalties, top-k, top-p, min-p, temperature, random pick) over the
   full logits;
2. ask the grammar about that single token (a one-element candidate array);
3. only when the grammar rejects it, sample again from the grammar-filtered distribution.

Step 3 goes further than llama.cpp, which matches the whole vocabulary against the grammar
there. It first matches only the best few candidates; when they hold ``top_k`` allowed tokens,
that is all top-k, top-p and min-p will ever look at. Otherwise it finds every allowed token by
walking a prefix tree of the vocabulary (:mod:`autoparser.llama.token_trie`): a grammar that
rejects ``"`` rejects every token starting with ``"``, so in a restrictive state a few hundred
checks replace a vocabulary's worth. Either way the candidates are exactly those grammar-first
sampling would keep (``tests/llama/test_engine.py`` compares with a full check). Accepted tokens go
into both the grammar and the penalty history.

A token the grammar has not allowed is never passed to ``llama_sampler_accept`` on the grammar:
llama.cpp aborts the process on that.

Without a grammar, penalties, top-k or top-p, sampling is a softmax over the whole vocabulary
(min-p and temperature applied) and one random draw. llama.cpp's chain sorts the vocabulary for
that; :func:`draw_tokens` does it in a few numpy passes instead, for one row or for every row of
a batch step at once, with the sampler's own seeded generator (:attr:`TokenSampler.draws_in_numpy`).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from autoparser.llama.token_trie import TokenTrie

#: How many recent prompt tokens feed the repetition penalty (llama.cpp's default window).
REPETITION_WINDOW = 64


@dataclass
class SamplingParams:
    """OpenAI/vLLM-style sampling settings. ``temperature <= 0`` means greedy; ``seed=None`` a random seed."""

    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logprobs: int | None = None
    """Report each sampled token's log-probability and this many alternatives (None: none)."""


@dataclass
class GrammarSpec:
    """A GBNF grammar for one generation; ``lazy`` grammars stay inactive until a trigger is seen.

    ``trigger_patterns`` are regular expressions (ECMAScript subset, see
    ``grammar_check.validate_trigger_patterns``) matched against the generated text; ``^...$``
    patterns must match all of it, others anywhere. When one matches, the grammar is fed the text
    from the first non-empty capturing group (or the match start) to the end of the current
    token, so it must accept whatever may follow the trigger inside that token. A token in
    ``trigger_tokens`` starts the grammar with that token itself. The engine resamples a token
    whose trigger text the grammar would reject (llama.cpp would abort the process on it).
    """

    gbnf: str
    root: str = "root"
    lazy: bool = False
    trigger_patterns: list[str] = field(default_factory=list)
    trigger_tokens: list[int] = field(default_factory=list)


class _Candidates:
    """A reusable ``llama_token_data`` buffer with a numpy view, sized for the whole vocabulary."""

    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self.buffer = (llama_cpp.llama_token_data * n_vocab)()
        self.view = np.ctypeslib.as_array(self.buffer)
        self.all_ids = np.arange(n_vocab, dtype=np.int32)
        self.array = llama_cpp.llama_token_data_array(
            data=ctypes.cast(self.buffer, llama_cpp.llama_token_data_p),
            size=n_vocab,
            selected=-1,
            sorted=False,
        )
        self.ref = ctypes.byref(self.array)

    def load(self, ids: np.ndarray, logits: np.ndarray) -> None:
        """Make the buffer hold exactly these candidates (samplers sort and shrink it in place)."""
        n = len(ids)
        view = self.view
        view["id"][:n] = ids
        view["logit"][:n] = logits
        view["p"][:n] = 0.0
        self.array.size = n
        self.array.selected = -1
        self.array.sorted = False

    def load_all(self, logits: np.ndarray) -> None:
        self.load(self.all_ids, logits)

    def logits(self) -> np.ndarray:
        return self.view["logit"][: self.array.size]

    def selected_token(self) -> int | None:
        index = self.array.selected
        if index < 0 or not math.isfinite(self.buffer[index].logit):
            return None
        return int(self.buffer[index].id)


class CandidateBuffers:
    """The candidate buffers of samplers that have finished, for the next ones to take: making a
    pair for a 100,000-token vocabulary costs about 2 ms, on the way to a request's first token."""

    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self.zeros = np.zeros(n_vocab, dtype=np.float32)
        self._free: list[tuple[_Candidates, _Candidates]] = []

    def take(self) -> tuple[_Candidates, _Candidates]:
        return self._free.pop() if self._free else (_Candidates(self.n_vocab), _Candidates(self.n_vocab))

    def give_back(self, pair: tuple[_Candidates, _Candidates]) -> None:
        self._free.append(pair)


class TokenSampler:
    """Penalties, a picking chain and an optional grammar for one generation; free with :meth:`close`."""

    def __init__(
        self,
        n_vocab: int,
        params: SamplingParams,
        grammar=None,  # type: ignore[no-untyped-def]  # llama_sampler_p from grammar_check.create_grammar_sampler
        banned_tokens: Sequence[int] = (),
        penalty_window: int = REPETITION_WINDOW,
        trie: TokenTrie | None = None,
        direct_tokens: Sequence[int] | None = None,
        buffers: CandidateBuffers | None = None,
    ) -> None:
        """``buffers``: where to take the candidate buffers from and give them back on :meth:`close`
        (by default the sampler makes its own). ``trie`` (built without special tokens) and ``direct_tokens`` (special tokens plus every id
        the grammar references as a token) enable the prefix-tree search for allowed tokens; pass
        ``direct_tokens=None`` to keep it off (needed for grammars with negated token references,
        ``!<...>``, which can allow a token without allowing its prefixes)."""
        self.n_vocab = n_vocab
        self.grammar = grammar
        self.trie = trie if direct_tokens is not None else None
        self.direct = np.array(sorted({t for t in direct_tokens or () if 0 <= t < n_vocab}), dtype=np.int32)
        self._buffers = buffers if buffers is not None else CandidateBuffers(n_vocab)
        self._zeros = self._buffers.zeros
        # referenced ordinary tokens are both in the tree and checked directly: deduplicate then
        self._direct_in_trie = bool(self.trie is not None and (self.trie.position[self.direct] >= 0).any())
        self.greedy = params.temperature <= 0.0
        self.top_k = int(params.top_k) if params.top_k and params.top_k > 0 and not self.greedy else 0
        self.min_p = (
            float(params.min_p) if params.min_p and 0.0 < params.min_p <= 1.0 and not self.greedy else 0.0
        )
        self.temperature = float(params.temperature)
        # Plain whole-vocabulary sampling is drawn in numpy (see the module's docstring).
        self.draws_in_numpy = (grammar is None and not self.greedy and not self.top_k
                               and not 0.0 < params.top_p < 1.0 and params.repetition_penalty == 1.0
                               and not params.presence_penalty and not params.frequency_penalty)
        self.rng = np.random.default_rng(None if params.seed is None else int(params.seed) & 0xFFFFFFFF)
        self.candidates, self.scratch = self._buffers.take()
        self.banned = np.array(sorted(set(banned_tokens)), dtype=np.int64) if banned_tokens else None
        self._single = llama_cpp.llama_token_data(0, 0.0, 0.0)
        self._single_array = llama_cpp.llama_token_data_array(
            data=ctypes.pointer(self._single), size=1, selected=-1, sorted=False
        )
        self._single_ref = ctypes.byref(self._single_array)
        self.repetition = None
        self.presence = None
        self._make_penalties(params, penalty_window)
        self.picker = None if self.draws_in_numpy else self._make_picker(params)
        self.grammar_fallbacks = 0  # tokens sampled from the grammar-filtered distribution, not a first pick
        self._exclude: Sequence[int] | np.ndarray = ()
        self._restrictive = False  # did the last grammar state admit fewer tokens than top-k uses?

    def _make_penalties(self, params: SamplingParams, penalty_window: int) -> None:
        # Repetition penalty sees prompt and output, presence/frequency only the output (as vLLM and
        # the OpenAI API define them), so they are two samplers fed different histories.
        if params.repetition_penalty != 1.0:
            self.repetition = llama_cpp.llama_sampler_init_penalties(
                self.n_vocab, REPETITION_WINDOW, float(params.repetition_penalty), 0.0, 0.0
            )
        if params.presence_penalty or params.frequency_penalty:
            self.presence = llama_cpp.llama_sampler_init_penalties(
                self.n_vocab,
                max(1, penalty_window),
                1.0,
                float(params.frequency_penalty),
                float(params.presence_penalty),
            )

    def _make_picker(self, params: SamplingParams):  # type: ignore[no-untyped-def]
        chain_params = llama_cpp.llama_sampler_chain_default_params()
        chain_params.no_perf = True
        chain = llama_cpp.llama_sampler_chain_init(chain_params)
        add = llama_cpp.llama_sampler_chain_add
        if self.greedy:
            add(chain, llama_cpp.llama_sampler_init_greedy())
            return chain
        if self.top_k:
            add(chain, llama_cpp.llama_sampler_init_top_k(self.top_k))
        if 0.0 < params.top_p < 1.0:
            add(chain, llama_cpp.llama_sampler_init_top_p(float(params.top_p), 1))
        if self.min_p:
            add(chain, llama_cpp.llama_sampler_init_min_p(self.min_p, 1))
        add(chain, llama_cpp.llama_sampler_init_temp(float(params.temperature)))
        seed = llama_cpp.LLAMA_DEFAULT_SEED if params.seed is None else int(params.seed) & 0xFFFFFFFF
        add(chain, llama_cpp.llama_sampler_init_dist(seed))
        return chain

    def _penalty_samplers(self) -> list:  # type: ignore[type-arg]
        return [s for s in (self.repetition, self.presence) if s is not None]

    def feed_prompt(self, tokens: Sequence[int]) -> None:
        """Let the repetition penalty see the tail of the prompt."""
        if self.repetition is None:
            return
        for token in tokens[-REPETITION_WINDOW:]:
            llama_cpp.llama_sampler_accept(self.repetition, int(token))

    # ------------------------------------------------------------------ sampling

    def sample(self, logits: np.ndarray, exclude: Sequence[int] | np.ndarray = ()) -> int | None:
        """Pick the next token from ``logits`` (float32, one per vocabulary entry); None if nothing is allowed.

        ``exclude`` bans tokens for this step only (the engine uses it for tokens that would
        break UTF-8 or fire a lazy trigger the grammar rejects).
        """
        if self.draws_in_numpy:
            return draw_token(logits, self.temperature, self.min_p, self.excluded(exclude), self.rng.random())
        cand = self.candidates
        self._exclude = exclude
        self._load_adjusted(logits)
        if self._restrictive:
            # The last state admitted only a few tokens, so a first pick would most likely be
            # rejected: try the exact grammar-filtered distribution straight away.
            ids = self._restrictive_candidates(cand.logits())
            if ids is not None:
                self.grammar_fallbacks += 1
                return self._pick_among(ids, cand.logits())
        llama_cpp.llama_sampler_apply(self.picker, cand.ref)
        token = cand.selected_token()
        if self.grammar is None or (token is not None and self.grammar_allows(token)):
            return token
        self.grammar_fallbacks += 1
        # The picker sorted and truncated the buffer: rebuild the penalised logits (applying the
        # penalties does not change their state, so this gives the same values as before).
        self._load_adjusted(logits)
        adjusted = cand.logits()
        return self._pick_among(self._best_allowed(adjusted), adjusted)

    def excluded(self, exclude: Sequence[int] | np.ndarray = ()) -> np.ndarray | None:
        """The tokens a numpy draw leaves out: the banned ones and ``exclude``."""
        if not len(exclude):
            return self.banned
        exclude = np.asarray(exclude, dtype=np.int64)
        return exclude if self.banned is None else np.concatenate((self.banned, exclude))

    def _pick_among(self, ids: np.ndarray, adjusted: np.ndarray) -> int | None:
        """Run the picking chain over the given candidates (best first)."""
        if ids.size == 0:
            return None
        self.scratch.load(ids, adjusted[ids])
        llama_cpp.llama_sampler_apply(self.picker, self.scratch.ref)
        return self.scratch.selected_token()

    def _restrictive_candidates(self, adjusted: np.ndarray) -> np.ndarray | None:
        """The candidates by a direct prefix-tree walk, or None when the state turns out permissive."""
        want = self._want()
        found = self.trie.allowed_tokens(self._check, self.direct, give_up_above=want)  # type: ignore[union-attr]
        if found is None:
            self._restrictive = False
            return None
        if self._direct_in_trie:
            found = np.unique(found)
        self._restrictive = found.size < want
        return self._finish_candidates(found, adjusted)

    def _want(self) -> int:
        """How many allowed candidates the picking chain can use: top-k's k (1 when greedy)."""
        return 1 if self.greedy else (self.top_k or self.n_vocab)

    def _finish_candidates(self, ids: np.ndarray, adjusted: np.ndarray) -> np.ndarray:
        """Best ``k`` of the allowed ``ids`` by logit, without banned tokens, cut at ``min_p``."""
        ids = ids[adjusted[ids] > -np.inf]
        ids = ids[np.argsort(-adjusted[ids], kind="stable")[: self._want()]]
        if self.min_p and ids.size:
            ids = ids[adjusted[ids] >= adjusted[ids[0]] + math.log(self.min_p)]
        return ids

    def _load_adjusted(self, logits: np.ndarray) -> None:
        """Fill the candidate buffer with all tokens, banned ones at -inf, penalties applied."""
        cand = self.candidates
        cand.load_all(logits)
        if self.banned is not None:
            cand.view["logit"][self.banned] = -np.inf
        if len(self._exclude):
            cand.view["logit"][np.asarray(self._exclude, dtype=np.int64)] = -np.inf
        for penalty in self._penalty_samplers():
            llama_cpp.llama_sampler_apply(penalty, cand.ref)

    def _best_allowed(self, adjusted: np.ndarray) -> np.ndarray:
        """The grammar-allowed tokens the picking chain can choose from, best first.

        The best few candidates (a little more than ``top_k``) are matched first; in permissive
        grammar states that is enough. Otherwise every allowed token is found, through the prefix
        tree when there is one (few checks in restrictive states), else by matching the rest of
        the vocabulary in one call. Tokens below the ``min_p`` cut are dropped, as min-p would.
        When the state admits fewer tokens than ``top_k``, the next token starts with the tree.
        """
        n = adjusted.size
        want = self._want()
        head = _top_indices(adjusted, min(n, max(64, 2 * want)))
        ids = head[self._check(head)]
        if ids.size >= want or head.size >= n:
            return self._finish_candidates(ids, adjusted)
        if self.trie is not None:
            ids = self._all_allowed()
            self._restrictive = ids.size < want
        else:
            ids = np.concatenate([ids, self._allowed_rest(head)])
        return self._finish_candidates(ids, adjusted)

    def _all_allowed(self) -> np.ndarray:
        """Every token the grammar allows now: the prefix-tree walk plus the directly checked tokens."""
        found = self.trie.allowed_tokens(self._check, self.direct)  # type: ignore[union-attr]
        assert found is not None
        return np.unique(found) if self._direct_in_trie else found

    def _allowed_rest(self, head: np.ndarray) -> np.ndarray:
        rest_mask = np.ones(self.n_vocab, dtype=bool)
        rest_mask[head] = False
        rest = np.flatnonzero(rest_mask)
        return rest[self._check(rest)]

    def _check(self, ids: np.ndarray) -> np.ndarray:
        """Boolean mask of the tokens the grammar allows now (its state untouched)."""
        return self._grammar_filter(ids, self._zeros[: ids.size])

    def _grammar_filter(self, ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """Boolean mask of the candidates the grammar allows now (grammar state untouched)."""
        self.scratch.load(ids, logits)
        llama_cpp.llama_sampler_apply(self.grammar, self.scratch.ref)
        return np.isfinite(self.scratch.view["logit"][: len(ids)])

    def grammar_allows(self, token: int) -> bool:
        """Ask the grammar about one token without touching its state."""
        if self.grammar is None:
            return True
        self._single.id = token
        self._single.logit = 1.0
        self._single.p = 0.0
        self._single_array.size = 1
        self._single_array.selected = -1
        llama_cpp.llama_sampler_apply(self.grammar, self._single_ref)
        return self._single.logit != -math.inf

    def accept(self, token: int, *, into_grammar: bool = True) -> None:
        """Record a generated token in the penalty history and, unless told otherwise, the grammar."""
        for penalty in self._penalty_samplers():
            llama_cpp.llama_sampler_accept(penalty, token)
        if self.picker is not None:
            llama_cpp.llama_sampler_accept(self.picker, token)
        if into_grammar and self.grammar is not None:
            llama_cpp.llama_sampler_accept(self.grammar, token)

    def close(self) -> None:
        """Free every llama.cpp sampler this object owns; give the candidate buffers back."""
        for name in ("picker", "grammar", "repetition", "presence"):
            sampler = getattr(self, name, None)
            if sampler is not None:
                llama_cpp.llama_sampler_free(sampler)
                setattr(self, name, None)
        buffers = getattr(self, "_buffers", None)
        if buffers is not None:
            self._buffers = None
            buffers.give_back((self.candidates, self.scratch))

    def __del__(self) -> None:  # pragma: no cover - safety net
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _top_indices(scores: np.ndarray, n: int) -> np.ndarray:
    """Indices of the ``n`` largest scores, largest first (ties by index)."""
    if n >= scores.size:
        return np.argsort(-scores, kind="stable")
    part = np.argpartition(-scores, n - 1)[:n]
    return part[np.argsort(-scores[part], kind="stable")]


def _draw_block(n_vocab: int) -> int:
    """Tokens per block in :func:`draw_tokens`: the draw finds its block from a running sum of the
    blocks' sums, then its token from a running sum over that block only. Running sums are
    sequential in numpy (about 10 ns a value), so both stay short: a power of two near the
    square root of the vocabulary (64 for 4,000 tokens, 512 for 129,000)."""
    return max(64, 1 << math.isqrt(max(n_vocab - 1, 1)).bit_length())


def draw_tokens(logits: np.ndarray | Sequence[np.ndarray], temperature: np.ndarray, min_p: np.ndarray,
                excluded: Sequence[np.ndarray | None], uniforms: np.ndarray) -> list[int | None]:
    """One token per row of ``logits`` (rows × vocabulary, or a list of rows), drawn from the
    softmax of that row.

    Row ``r`` leaves out the tokens ``excluded[r]`` (None: none) and those whose probability is
    below ``min_p[r]`` times the best one's (0: no cut), divides the logits by ``temperature[r]``
    (> 0), and picks the token where the cumulative probability passes ``uniforms[r]`` (in
    [0, 1)) of the total: the inverse-CDF draw, one random number per token. None for a row
    whose tokens are all left out. The input is not modified (llama.cpp owns it).
    """
    n_rows, n_vocab = len(uniforms), len(logits[0])
    size = _draw_block(n_vocab)
    width = -(-n_vocab // size) * size
    weights = np.empty((n_rows, width), dtype=np.float32)
    weights[:, n_vocab:] = -np.inf  # padding to whole blocks: weight 0
    scores = weights[:, :n_vocab]
    for row in range(n_rows):
        scores[row] = logits[row]
    for row, ids in enumerate(excluded):
        if ids is not None and len(ids):
            scores[row, ids] = -np.inf
    best = scores.max(axis=1, keepdims=True)
    empty = ~np.isfinite(best[:, 0])
    best[empty] = 0.0
    min_p = np.asarray(min_p, dtype=np.float32)
    if (min_p > 0).any():
        with np.errstate(divide="ignore"):
            floor = best + np.log(min_p)[:, np.newaxis]
        scores[scores < floor] = -np.inf
    scores -= best
    temperature = np.asarray(temperature, dtype=np.float32)
    if (temperature != 1).any():  # x / 1 is x: skipping the division changes no bit
        scores /= temperature[:, np.newaxis]
    np.exp(weights, out=weights)
    blocks = weights.reshape(n_rows, -1, size)
    running = np.add.accumulate(blocks.sum(axis=2).astype(np.float64), axis=1)
    targets = np.asarray(uniforms, dtype=np.float64) * running[:, -1]
    return [None if empty[row] else _token_in_blocks(blocks[row], running[row], targets[row])
            for row in range(n_rows)]


def _token_in_blocks(blocks: np.ndarray, running: np.ndarray, target: float) -> int:
    """The first token whose running sum passes ``target``, from the row's blocks (blocks ×
    block size weights) and the running sum of their sums: never a token of weight 0."""
    size = blocks.shape[1]
    block = min(int(running.searchsorted(target, side="right")), len(running) - 1)
    while block > 0 and running[block] == running[block - 1]:
        block -= 1  # the target rounded up past the last block with any weight
    left = target - (running[block - 1] if block else 0.0)
    index = int(np.add.accumulate(blocks[block].astype(np.float64)).searchsorted(left, side="right"))
    if index >= size:  # rounding between the block's sum and its running sum
        index = int(np.flatnonzero(blocks[block])[-1])
    return block * size + index


def _best_allowed(logits: np.ndarray, excluded: np.ndarray) -> np.float32:
    """The largest of ``logits`` outside ``excluded`` (indices or a mask), without copying the
    row unless an excluded token holds the largest value."""
    best = logits.max()
    left_out = logits[excluded]
    if left_out.size and left_out.max() >= best:
        kept = logits.copy()
        kept[excluded] = -np.inf
        best = kept.max()
    return best


def draw_token(logits: np.ndarray, temperature: float, min_p: float, excluded: np.ndarray | None,
               uniform: float) -> int | None:
    """:func:`draw_tokens` for one row, with the same arithmetic step for step (so the same
    token), without the per-row bookkeeping that costs more than the work on a small vocabulary."""
    n_vocab = len(logits)
    size = _draw_block(n_vocab)
    weights = np.empty(-(-n_vocab // size) * size, dtype=np.float32)
    weights[n_vocab:] = -np.inf
    scores = weights[:n_vocab]
    excluding = excluded is not None and len(excluded) > 0
    best = _best_allowed(logits, excluded) if excluding else logits.max()
    if not math.isfinite(best):
        return None
    np.subtract(logits, best, out=scores)  # the copy and the shift in one pass: the same values
    if excluding:
        scores[excluded] = -np.inf
    if min_p > 0:
        scores[logits < best + np.log(np.float32(min_p))] = -np.inf
    if temperature != 1:
        scores /= np.float32(temperature)
    np.exp(weights, out=weights)
    blocks = weights.reshape(-1, size)
    running = np.add.accumulate(blocks.sum(axis=1).astype(np.float64))
    return _token_in_blocks(blocks, running, np.float64(uniform) * running[-1])
