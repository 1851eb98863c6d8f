"""Tokenizing a prompt from the longest beginning tokenized before.

Each turn of a conversation renders the earlier turns again. llama.cpp tokenizes the text
between special tokens piece by piece, each on its own, so a prompt cut right before a special
token tokenizes as its two parts do, one after the other: kept at such cuts, a prompt's
beginning spares the next turn's tokenizing all but its end. `PrefixTokenizer` does this over
any text -> ids function that reads special tokens: the own engine's `tokenize`, or an
upstream llama-server's `/tokenize`.
"""

from __future__ import annotations

import bisect
import re
import sys
import threading
from array import array
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping

TOKEN_BYTES = 4
"""What one kept token costs (`array('i')`)."""


class PrefixTokens:
    """The tokens of prompt beginnings tokenized before, cut where a special token's text begins.

    Bounded by the bytes kept (each beginning's text, as Python holds it, and its tokens), least recently used
    first out; shared by the threads that prepare requests."""

    KEPT_CUTS = 3
    """Cuts kept per prompt, the last ones: where the next turn's prompt goes on from it (before
    the generation prompt, or before the last answer, which some templates render otherwise once
    it is history)."""

    def __init__(self, max_bytes: int = 16 << 20) -> None:
        self.max_bytes = max_bytes
        self._tokens: OrderedDict[str, array[int]] = OrderedDict()
        self._lengths: Counter[int] = Counter()
        """How many kept beginnings have each length: a cut no beginning ends at costs no lookup."""
        self.bytes = 0
        self._lock = threading.Lock()

    def longest(self, text: str, cuts: list[int]) -> tuple[int, list[int]]:
        """(where the longest kept beginning of `text` ends, its tokens); (0, []) without one."""
        with self._lock:
            for cut in reversed(cuts):
                if cut in self._lengths and (tokens := self._tokens.get(prefix := text[:cut])) is not None:
                    self._tokens.move_to_end(prefix)
                    return cut, tokens.tolist()
        return 0, []

    def store(self, text: str, cuts: list[int], tokens: list[int], special_ids: frozenset[int],
              known: tuple[int, int] = (0, 0)) -> None:
        """Keep `text`'s beginnings at its last cuts. Each cut's tokens end before the special
        token its text begins with; where the special tokens among `tokens` are not one for each
        cut (another special token in the text), nothing is kept.

        `known`: (n, length) when `tokens[:length]` are a kept beginning's, which holds the special
        tokens of the first n cuts: only the tokens after it are counted."""
        specials, length = known
        specials += sum(1 for token in tokens[length:] if token in special_ids)
        if specials != len(cuts):
            return
        positions = _last_positions(tokens, special_ids, min(self.KEPT_CUTS, len(cuts)))
        with self._lock:
            for cut, position in zip(cuts[len(cuts) - len(positions):], positions, strict=True):
                if cut > 0:
                    self._keep(text[:cut], tokens[:position])
            while self.bytes > self.max_bytes and self._tokens:
                self._forget(next(iter(self._tokens)))

    def __len__(self) -> int:
        return len(self._tokens)

    def _keep(self, prefix: str, tokens: list[int]) -> None:
        if prefix in self._tokens:
            self._tokens.move_to_end(prefix)
            return
        kept = self._tokens[prefix] = array("i", tokens)
        self._lengths[len(prefix)] += 1
        self.bytes += _weight(prefix, kept)

    def _forget(self, prefix: str) -> None:
        self.bytes -= _weight(prefix, self._tokens.pop(prefix))
        self._lengths[len(prefix)] -= 1
        if not self._lengths[len(prefix)]:
            del self._lengths[len(prefix)]


def _weight(prefix: str, tokens: array[int]) -> int:
    """What a kept beginning costs: its text, as Python holds it, and its tokens."""
    return sys.getsizeof(prefix) + TOKEN_BYTES * len(tokens)


def _last_positions(tokens: list[int], special_ids: frozenset[int], count: int) -> list[int]:
    """Where the last `count` special tokens of `tokens` are, in order."""
    found: list[int] = []
    for index in range(len(tokens) - 1, -1, -1):
        if len(found) == count:
            break
        if tokens[index] in special_ids:
            found.append(index)
    return found[::-1]


class PrefixTokenizer:
    """`tokenize` (text -> ids, special tokens read as such, no BOS added) from the longest
    beginning of the text tokenized before; the same ids as `tokenize` of the whole text.

    `special_ids`: each special token's spelling and id. A prompt whose special tokens are not
    exactly its spellings' (one spelled otherwise, or one whose id is unknown) is tokenized
    whole and kept nowhere."""

    def __init__(self, tokenize: Callable[[str], list[int]], special_ids: Mapping[str, int],
                 max_bytes: int = 16 << 20) -> None:
        self._tokenize = tokenize
        spellings = sorted((text for text in special_ids if text), key=len, reverse=True)
        self._specials = re.compile("|".join(map(re.escape, spellings))) if spellings else None
        self._special_id_set = frozenset(special_ids[text] for text in spellings)
        self.prefixes = PrefixTokens(max_bytes)

    def __call__(self, text: str) -> list[int]:
        if self._specials is None:
            return self._tokenize(text)
        cuts = [found.start() for found in self._specials.finditer(text)]
        done, tokens = self.prefixes.longest(text, cuts)
        known = (bisect.bisect_left(cuts, done), len(tokens))
        if done < len(text):
            tokens += self._tokenize(text[done:])
        self.prefixes.store(text, cuts, tokens, self._special_id_set, known)
        return tokens
