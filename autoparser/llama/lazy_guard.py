"""Keep a lazy grammar's trigger from aborting the process.

A lazy llama.cpp grammar ignores tokens until a trigger fires. When a trigger *pattern* matches,
llama.cpp replays the text from the pattern's first capture group (or the match start) to the
end of the triggering token into the grammar; when a trigger *token* is generated, that token is
fed to the fresh grammar. If the grammar rejects what is replayed, llama.cpp throws a C++
exception through its C API and the process dies. That happens whenever the model writes a
trigger followed, inside the same token, by text the grammar does not allow right after it
(``<tool_call>.`` when the grammar wants a newline or ``{``), something a random or confused
model does readily.

:class:`LazyTriggerGuard` mirrors llama.cpp's trigger bookkeeping in Python (same buffer of
token pieces, same pattern semantics: ``^...$`` patterns must match the whole buffer, others are
searched; the grammar starts at the first non-empty capture group). Before a token is accepted it
predicts whether the token fires a trigger and, if so, replays the same text into a separate,
non-lazy copy of the grammar, checking every token before accepting it, which cannot crash.
The engine resamples instead of accepting a token that would fail.

Patterns run here with Python's ``re`` on bytes, as llama.cpp's ``std::regex`` runs on the
UTF-8 bytes; ``grammar_check.validate_trigger_patterns`` limits them to syntax both read alike.
"""

from __future__ import annotations

import ctypes
import math
import re
from collections.abc import Callable, Sequence

import llama_cpp


class LazyTriggerGuard:
    """Predicts, token by token, whether a lazy grammar can accept the token without aborting."""

    def __init__(
        self,
        vocab_ptr: int,
        gbnf: str,
        root: str,
        trigger_patterns: Sequence[str],
        trigger_tokens: Sequence[int],
        piece: Callable[[int], bytes],
        tokenize_text: Callable[[str], list[int]],
        is_special: Callable[[int], bool],
    ) -> None:
        self.vocab_ptr = vocab_ptr
        self.gbnf = gbnf.encode("utf-8")
        self.root = root.encode("utf-8")
        self.patterns = [_CompiledTrigger(p) for p in trigger_patterns]
        self.trigger_tokens = set(trigger_tokens)
        self.piece = piece
        self.tokenize_text = tokenize_text
        self.is_special = is_special
        self.awaiting = True
        self.buffer = b""
        self.spans: list[tuple[int, int, int]] = []  # (token, start, end) within buffer

    # ------------------------------------------------------------------ prediction

    def is_safe(self, token: int) -> bool:
        """Whether the lazy grammar can accept ``token`` now without llama.cpp aborting."""
        if not self.awaiting:
            return True
        if token in self.trigger_tokens:
            return self._replay_ok([(token, None)])
        piece = self.piece(token)
        buffer = self.buffer + piece
        start = self._trigger_start(buffer)
        if start is None:
            return True
        spans = [*self.spans, (token, len(self.buffer), len(buffer))]
        replay: list[tuple[int, bytes | None]] = []
        for tok, tok_start, tok_end in spans:
            if tok_end <= start:
                continue
            partial = buffer[start:tok_end] if tok_start < start else None
            replay.append((tok, partial))
        return self._replay_ok(replay)

    def accept(self, token: int) -> None:
        """Record that ``token`` was accepted (by the real grammar too)."""
        if not self.awaiting:
            return
        if token in self.trigger_tokens:
            self._fire()
            return
        piece = self.piece(token)
        self.spans.append((token, len(self.buffer), len(self.buffer) + len(piece)))
        self.buffer += piece
        if self._trigger_start(self.buffer) is not None:
            self._fire()

    def _fire(self) -> None:
        self.awaiting = False
        self.buffer = b""
        self.spans.clear()

    def _trigger_start(self, buffer: bytes) -> int | None:
        """Where the grammar would start in ``buffer``, as llama.cpp's trigger search decides; None if no trigger."""
        for trigger in self.patterns:
            match = trigger.find(buffer)
            if match is None:
                continue
            for group in range(1, match.re.groups + 1):
                if match.start(group) >= 0 and match.end(group) > match.start(group):
                    return match.start(group)
            return match.start()
        return None

    # ------------------------------------------------------------------ replay check

    def _replay_ok(self, replay: Sequence[tuple[int, bytes | None]]) -> bool:
        """Feed the replay to a fresh non-lazy copy of the grammar, checking each token first."""
        probe = llama_cpp.llama_sampler_init_grammar(self.vocab_ptr, self.gbnf, self.root)
        if not probe:
            return False
        try:
            for token, partial in replay:
                tokens = [token] if partial is None else self._retokenize(token, partial)
                if tokens is None:
                    return False
                for tok in tokens:
                    if not _allows(probe, tok):
                        return False
                    llama_cpp.llama_sampler_accept(probe, tok)
            return True
        finally:
            llama_cpp.llama_sampler_free(probe)

    def _retokenize(self, token: int, partial: bytes) -> list[int] | None:
        """Ordinary tokens spelling the tail of a token the trigger match starts inside, or None.

        llama.cpp feeds such a tail to the grammar as text; outside token references, a grammar
        accepts a text however it is cut into tokens, so any spelling checks the same. A tail of
        a special token, or one that is not whole UTF-8, cannot be checked and counts as unsafe.
        """
        if self.is_special(token):
            return None
        try:
            text = partial.decode("utf-8")
        except UnicodeDecodeError:
            return None
        tokens = self.tokenize_text(text)
        if b"".join(self.piece(t) for t in tokens) != partial:
            return None
        return tokens


class _CompiledTrigger:
    """A trigger pattern with llama.cpp's matching rule: ``^...$`` patterns try a whole match first,
    then every pattern is searched for the leftmost match."""

    def __init__(self, pattern: str) -> None:
        self.regex = re.compile(pattern.encode("utf-8"))
        self.whole = pattern.startswith("^") and pattern.endswith("$")
        # A pattern opening with "match anything" matches at 0 whenever it matches anywhere, so
        # the search can stop after position 0 instead of retrying (quadratically) at every offset.
        self.anchored_by_wildcard = pattern.startswith(("[\\s\\S]*", "[\\S\\s]*"))

    def find(self, buffer: bytes) -> re.Match[bytes] | None:
        if self.whole:
            match = self.regex.fullmatch(buffer)
            if match is not None:
                return match
        if self.anchored_by_wildcard:
            return self.regex.match(buffer)
        return self.regex.search(buffer)


def _allows(sampler, token: int) -> bool:  # type: ignore[no-untyped-def]
    data = llama_cpp.llama_token_data(token, 1.0, 0.0)
    array = llama_cpp.llama_token_data_array(data=ctypes.pointer(data), size=1, selected=-1, sorted=False)
    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
    return data.logit != -math.inf
