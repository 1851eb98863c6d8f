"""A prefix tree over a vocabulary's token pieces, to find grammar-allowed tokens without checking them all.

llama.cpp's grammar check accepts a token when its text can be *started* from the current
grammar state; a complete match is not required. So if a token is allowed, every token whose
text is a prefix of it is allowed too. Contrapositive: when the grammar rejects ``"`` then no token
starting with ``"`` needs checking. :class:`TokenTrie` organises the vocabulary by that prefix
relation (each token's parent is the longest other token its text starts with) and walks it top
down, asking the grammar only about children of allowed tokens. In a state that admits a handful
of tokens (after ``{`` in JSON, only whitespace and ``"``), that is a few hundred checks instead of
the whole vocabulary; small subtrees are checked in one go to keep the number of rounds low.

Tokens a grammar can match by id rather than by text (special tokens and tokens the grammar
references as ``<...>``) break the prefix rule and are checked separately by the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

#: Subtrees at most this large are checked whole instead of being expanded level by level.
SMALL_SUBTREE = 256

_EMPTY = np.empty(0, dtype=np.int32)


class TokenTrie:
    """Prefix structure of token pieces; tokens with ``excluded`` set are left out of it."""

    def __init__(self, pieces: Sequence[bytes], excluded: np.ndarray) -> None:
        ids = [t for t, piece in enumerate(pieces) if piece and not excluded[t]]
        order = sorted(ids, key=lambda t: pieces[t])
        n_vocab = len(pieces)
        self.lex = np.array(order, dtype=np.int32)  # member tokens sorted by piece bytes
        self.position = np.full(n_vocab, -1, dtype=np.int64)
        self.position[self.lex] = np.arange(len(order))
        self.subtree_end = np.zeros(len(order), dtype=np.int64)  # lex index after the last descendant
        parent_pos = np.full(len(order), -1, dtype=np.int64)
        stack: list[int] = []
        for i, token in enumerate(order):
            piece = pieces[token]
            while stack and not piece.startswith(pieces[order[stack[-1]]]):
                self.subtree_end[stack.pop()] = i
            if stack:
                parent_pos[i] = stack[-1]
            stack.append(i)
        for i in stack:
            self.subtree_end[i] = len(order)
        self.subtree_size = self.subtree_end - np.arange(len(order)) - 1  # descendants, by lex position
        self.roots = self.lex[parent_pos < 0]
        # children in CSR form, indexed by lex position of the parent
        has_parent = np.flatnonzero(parent_pos >= 0)
        by_parent = has_parent[np.argsort(parent_pos[has_parent], kind="stable")]
        self.child_ids = self.lex[by_parent]
        counts = np.bincount(parent_pos[has_parent], minlength=len(order))
        self.child_count = counts
        self.child_start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)

    def allowed_tokens(
        self,
        check: Callable[[np.ndarray], np.ndarray],
        extra: np.ndarray = _EMPTY,
        give_up_above: int | None = None,
    ) -> np.ndarray | None:
        """All member tokens ``check`` allows, asking it only where an allowed prefix makes it necessary.

        ``check(ids)`` returns a boolean mask; it is called once per level of the walk. ``extra``
        tokens are checked along with the first level and included when allowed. With
        ``give_up_above``, the walk returns None as soon as more first-level tokens than that are
        allowed: the state is permissive and the walk would cover most of the vocabulary.
        """
        found: list[np.ndarray] = []
        frontier = self.roots
        whole = extra  # tokens checked without expanding: the extras, then small allowed subtrees
        first = True
        while frontier.size or whole.size:
            batch = np.concatenate([frontier, whole]) if whole.size else frontier
            ok = check(batch)
            allowed_frontier = frontier[ok[: frontier.size]]
            if first and give_up_above is not None and allowed_frontier.size > give_up_above:
                return None
            first = False
            if whole.size:
                found.append(whole[ok[frontier.size :]])
            found.append(allowed_frontier)
            if not allowed_frontier.size:
                break
            positions = self.position[allowed_frontier]
            sizes = self.subtree_size[positions]
            big_mask = sizes > SMALL_SUBTREE
            small = positions[(sizes > 0) & ~big_mask]
            big = positions[big_mask]
            whole = self._descendants(small) if small.size else _EMPTY
            frontier = self._children(big) if big.size else _EMPTY
        return np.concatenate(found) if found else np.empty(0, dtype=np.int32)

    def _descendants(self, positions: np.ndarray) -> np.ndarray:
        starts = positions + 1
        return self.lex[_ranges(starts, self.subtree_end[positions])]

    def _children(self, positions: np.ndarray) -> np.ndarray:
        starts = self.child_start[positions]
        return self.child_ids[_ranges(starts, starts + self.child_count[positions])]


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, e)`` for each pair, vectorised."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return offsets + np.arange(total)
