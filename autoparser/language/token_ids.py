"""`ReasoningIds`: where reasoning ends in token ids, for engines that work on ids.

A serving engine asks two things of a reasoning parser without detokenizing: whether the tokens
generated so far have ended reasoning (to start enforcing a grammar on the answer), and which of
them are the answer's. Both follow the parser's own reading (`build.reasoning_cut`): reasoning
ends at its end marker, or at a marker that ends reasoning no end marker closed (a call's opener,
which stays in the answer); where the output may open reasoning itself, an output that begins
with anything but the opener has none. Markers are found as the token ids their text encodes to
on its own, which is exact for markers that are one special token. Where the start marker ends
in its channel's word (`build.ReasoningCut.start_bounded`), a word character in the id after it
makes it the tag alone, as the parser reads text; that needs the tokenizer's `decode` (given
only `text -> ids`, the word is not bounded).

Standard library only: the standalone module embeds it with the `Parser`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from autoparser.language.build import ReasoningCut
from autoparser.language.request import CLOSED, OPEN

Encode = Callable[[str], Sequence[int]]
Decode = Callable[[Sequence[int]], str]
# texts whose tokens are whitespace whatever the vocabulary: what may come before a reasoning opener
_WHITESPACE_TEXTS = (" ", "\n", "\n\n", "\t")
# whitespace tokens an output may write before its reasoning opener
_LEADING_WHITESPACE_TOKENS = 4


def encoder(tokenizer: Any) -> Encode:
    """`text -> ids` without BOS or other added tokens, from a Hugging Face style tokenizer
    (`encode(text, add_special_tokens=False)`) or from such a function itself."""
    encode = getattr(tokenizer, "encode", None)
    if callable(encode):
        return lambda text: encode(text, add_special_tokens=False)
    if callable(tokenizer):
        return tokenizer
    raise TypeError("tokenizer must have encode(text, add_special_tokens=...) or be a function text -> ids")


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def decoder(tokenizer: Any) -> Decode | None:
    """`ids -> text` from a Hugging Face style tokenizer (`decode(ids)`), None where it has none."""
    decode = getattr(tokenizer, "decode", None)
    return (lambda ids: decode(list(ids))) if callable(decode) else None


def find_first(ids: Sequence[int], pattern: Sequence[int], start: int = 0) -> int:
    """Start of the first occurrence of `pattern` in `ids[start:]`, or -1."""
    if not pattern:
        return -1
    first, width, wanted = pattern[0], len(pattern), tuple(pattern)
    for at in range(max(start, 0), len(ids) - width + 1):
        if ids[at] == first and tuple(ids[at:at + width]) == wanted:
            return at
    return -1


class ReasoningIds:
    """One request's reasoning bounds as token ids (`Parser.reasoning_ids(tokenizer)`).

    Every method takes the ids the model generated after the prompt, from the first."""

    def __init__(self, cut: ReasoningCut, encode: Encode, decode: Decode | None = None) -> None:
        def ids(text: str) -> tuple[int, ...]:
            return tuple(int(i) for i in encode(text)) if text else ()

        self.start_state = cut.start_state
        self.start = ids(cut.start)
        self.start_alone = ids(cut.start_alone)  # the start marker's tag, opening reasoning by itself too
        self.end = ids(cut.end)
        self.interrupts = tuple(p for p in (ids(m) for m in cut.interrupts) if p)
        self.whitespace = frozenset(i for text in _WHITESPACE_TEXTS for i in ids(text))
        self.implied = cut.implied
        self.answer_openers = tuple(p for p in (ids(m) for m in cut.answer_openers) if p)
        # the start marker's word is no word of it where a word character follows; a marker whose
        # ids do not begin with its tag's is one token, which stands whole (the tag cannot open alone)
        splits = self.start[:len(self.start_alone)] == self.start_alone
        self.decode = decode if cut.start_bounded and _is_word(cut.start[-1:]) and splits else None

    def is_reasoning_end(self, output_ids: Sequence[int]) -> bool:
        """Whether these ids have ended reasoning, or begun an answer with none."""
        return self.content_start(output_ids) is not None

    def extract_content_ids(self, output_ids: Sequence[int]) -> list[int]:
        """The ids after reasoning (a call's opener that ended it included); none while
        reasoning has not ended."""
        at = self.content_start(output_ids)
        return [] if at is None else list(output_ids[at:])

    def content_start(self, output_ids: Sequence[int]) -> int | None:
        """Where the answer starts in these ids, or None while reasoning has not ended."""
        bounds = self._bounds(output_ids)
        if bounds is None:
            return None if self._undecided(output_ids) else 0
        return bounds[1]

    def reasoning_token_count(self, output_ids: Sequence[int]) -> int:
        """How many of these ids are reasoning's text (markers left out)."""
        span = self.reasoning_span(output_ids)
        return 0 if span is None else span[1] - span[0]

    def reasoning_span(self, output_ids: Sequence[int]) -> tuple[int, int] | None:
        """Where reasoning's text lies in these ids (markers left out), or None where there is
        none (yet)."""
        bounds = self._bounds(output_ids)
        if bounds is None:
            return None
        begin = bounds[0]
        ends = [at for at in (find_first(output_ids, p, begin) for p in (self.end, *self.interrupts)) if at >= 0]
        return begin, min(ends) if ends else len(output_ids)

    def ends_within(self, output_ids: Sequence[int], last: int, begin: int = 0) -> bool:
        """Whether reasoning ended within the last `last` of these ids (the streaming check):
        a marker that ends in them, or, where the output may open reasoning itself, a first word
        in them that is not the opener. `begin`: where the output starts in `output_ids`, for an
        engine that passes the prompt's ids before it. It looks only at the ids near the end, so
        checking at each step stays cheap. (An output that implies reasoning without its opener
        counts as an answer here: an engine can open its gate only once.)"""
        for pattern in (self.end, *self.interrupts):
            if pattern and find_first(output_ids, pattern, max(begin, len(output_ids) - last - len(pattern) + 1)) >= 0:
                return True
        if self.start_state in (CLOSED, OPEN) or not self.start:
            return False
        if len(output_ids) - begin > last + len(self.start) + _LEADING_WHITESPACE_TOKENS:
            return False  # the first word came earlier: this was decided before
        output = output_ids[begin:]
        return self._opened(output) is None and not self._undecided(output)

    def _bounds(self, output_ids: Sequence[int]) -> tuple[int, int | None] | None:
        """(where reasoning's text starts, where the answer starts or None while reasoning goes
        on), or None where the output has no reasoning (or has not yet shown whether it has)."""
        if self.start_state == CLOSED:
            return None
        if self.start_state == OPEN or not self.start:
            # inside from the start; the output may still repeat the opener the prompt wrote
            begin = self._opened(output_ids) or 0
            return begin, self._end(output_ids, begin)
        first = self._first_word(output_ids)
        if self.end and tuple(output_ids[first:first + len(self.end)]) == self.end:
            return first, first + len(self.end)  # an empty reasoning block
        begin = self._opened(output_ids)
        if begin is None:
            return self._implied(output_ids)
        return begin, self._end(output_ids, begin)

    def _end(self, output_ids: Sequence[int], begin: int) -> int | None:
        ends = [(at, at + len(self.end)) for at in [find_first(output_ids, self.end, begin)] if at >= 0]
        ends += [(at, at) for at in (find_first(output_ids, p, begin) for p in self.interrupts) if at >= 0]
        return min(ends)[1] if ends else None

    def _opened(self, output_ids: Sequence[int]) -> int | None:
        """After the opener the output begins with (whitespace before it allowed): the start
        marker, else its tag alone; or None."""
        begin = self._first_word(output_ids)
        for opener in (self.start, self.start_alone):
            if opener and tuple(output_ids[begin:begin + len(opener)]) == opener and not (
                    opener == self.start and self._word_follows(output_ids, begin, begin + len(opener))):
                return begin + len(opener)
        return None

    def _word_follows(self, output_ids: Sequence[int], begin: int, end: int) -> bool:
        """Whether the id after the start marker (at `begin:end`) goes on with a word character
        (only where the marker is bounded and the tag alone can open the reasoning: `decode` set)."""
        if self.decode is None or end >= len(output_ids):
            return False
        marker = self.decode(output_ids[begin:end])
        after = self.decode(output_ids[begin:end + 1])
        return after.startswith(marker) and _is_word(after[len(marker):len(marker) + 1])

    def _implied(self, output_ids: Sequence[int]) -> tuple[int, int] | None:
        """Reasoning the output implied by an end marker with no opener, unless a call's opener
        came first."""
        if not self.implied:
            return None
        end = find_first(output_ids, self.end)
        if end < 0 or any(0 <= find_first(output_ids, p) < end for p in self.answer_openers):
            return None
        return self._first_word(output_ids), end + len(self.end)

    def _first_word(self, output_ids: Sequence[int]) -> int:
        at = 0
        while at < len(output_ids) and output_ids[at] in self.whitespace:
            at += 1
        return at

    def _undecided(self, output_ids: Sequence[int]) -> bool:
        """Whether the output may still open reasoning: so far only whitespace and a beginning
        of the opener (or of the end marker, an empty reasoning block)."""
        if self.start_state in (CLOSED, OPEN):
            return False
        words = tuple(output_ids[self._first_word(output_ids):])
        return any(len(words) < len(m) and words == m[:len(words)] for m in (self.start, self.end) if m)
