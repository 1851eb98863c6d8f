"""Log-probabilities of a sampled token and its best alternatives, from one row of logits.

The values are the model's own distribution (a log-softmax of the raw logits), before
penalties, temperature or a grammar shape it, which is what OpenAI's `logprobs` reports.
Computed only for requests that ask for them: one pass over the vocabulary per token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

#: The most alternatives a request may ask for per token (OpenAI's limit).
MAX_TOP_LOGPROBS = 20


@dataclass
class TokenLogprob:
    token_id: int
    piece: bytes
    logprob: float
    top: list[tuple[int, bytes, float]] = field(default_factory=list)
    """The `k` most likely tokens at this step, best first: (id, bytes, logprob)."""


def token_logprobs(logits: np.ndarray, token: int, k: int, piece: Callable[[int], bytes]) -> TokenLogprob:
    """The log-probability of `token` and the `k` most likely tokens under `logits`."""
    row = logits.astype(np.float64, copy=False)
    peak = float(row.max())
    log_total = peak + float(np.log(np.exp(row - peak).sum()))
    top: list[tuple[int, bytes, float]] = []
    k = max(0, min(int(k), MAX_TOP_LOGPROBS, row.size))
    if k:
        best = np.argpartition(-row, k - 1)[:k]
        best = best[np.argsort(-row[best], kind="stable")]
        top = [(int(t), piece(int(t)), float(row[t]) - log_total) for t in best]
    return TokenLogprob(int(token), piece(int(token)), float(row[token]) - log_total, top)
