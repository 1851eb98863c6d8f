"""One generation's state between the engine's steps, and the tokens it yields.

A :class:`Generation` holds its prompt, sampler, lazy-grammar guard, slot and statistics. The
engine decodes its ``pending`` tokens and hands it the logits (or the token its device chain
sampled); the generation picks the next token, keeping the output whole UTF-8 and clear of a
lazy grammar's rejected triggers, and records it.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import llama_cpp
import numpy as np

from autoparser.llama.device_sampling import DeviceSampler
from autoparser.llama.lazy_guard import LazyTriggerGuard
from autoparser.llama.logprobs import TokenLogprob, token_logprobs
from autoparser.llama.sampling import TokenSampler
from autoparser.llama.utf8 import continuation_state, incomplete_tail

if TYPE_CHECKING:
    from autoparser.llama.batch import Slot
    from autoparser.llama.engine import Engine

#: "No first pick drawn yet" (token ids are never negative; None means nothing could be drawn).
NOT_DRAWN = -1
#: Tokens tried per step before giving up when every pick would fire a lazy trigger the grammar rejects.
_MAX_TRIGGER_RETRIES = 64


@dataclass(slots=True)
class GeneratedToken:
    """One sampled token. ``text`` keeps special tokens; it is "" while a UTF-8 sequence is incomplete."""

    token_id: int
    text: str
    elapsed_ms: float
    logprobs: TokenLogprob | None = None
    """Set when the sampling parameters ask for ``logprobs``."""


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


class Generation:
    """One generation's state between steps: its prompt, sampler, slot and statistics.

    Made by :meth:`Engine.new_generation`; :meth:`Engine.step` feeds it logits. ``pending``
    holds the tokens still to decode in its slot: the prompt's uncached part, then each sampled
    token in turn.
    """

    def __init__(self, engine: Engine, prompt: list[int], budget: int, sampler: TokenSampler | DeviceSampler,
                 guard: LazyTriggerGuard | None, stop_ids: frozenset[int], ignore_eos: bool,
                 should_stop: Callable[[], bool] | None, stats: GenerationStats) -> None:
        self.engine = engine
        self.prompt = prompt
        self.budget = budget
        self.sampler = sampler
        self.on_device = isinstance(sampler, DeviceSampler)
        """Is this generation's token sampled inside ``llama_decode``?"""
        self.guard = guard
        self.stop_ids = stop_ids
        self.ignore_eos = ignore_eos
        self.should_stop = should_stop
        self.stats = stats
        self.slot: Slot | None = None
        self.pending: list[int] = []
        self.utf8_tail = b""
        self.finished = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._decoder_empty = True  # the decoder holds no bytes of an unfinished character
        self._breaking: dict[tuple[int, int, int], np.ndarray | None] = {}
        self._breaking_masks: dict[tuple[int, int, int], np.ndarray] = {}
        self._started = 0.0
        self._mark: float | None = None
        self._closed = False
        self.logprobs: int | None = None  # how many alternatives to report per token, when asked

    def utf8_breaking(self) -> np.ndarray | None:
        """Tokens to leave out of the next pick because they would break UTF-8 (stop tokens
        stay after complete text: they end the output); None when there are none."""
        state = continuation_state(self.utf8_tail)
        if state not in self._breaking:
            found = self.engine.tokens_breaking_utf8(self.utf8_tail)
            if self.stop_ids and not self.utf8_tail:
                found = found[~np.isin(found, list(self.stop_ids))]
            self._breaking[state] = found if found.size else None
        return self._breaking[state]

    def utf8_breaking_mask(self) -> np.ndarray:
        """A boolean per vocabulary entry: True for the tokens that cannot come next without
        breaking UTF-8 (inside a character: end-of-generation and stop tokens too, since the
        output would end with half of it). Read-only: shared by generations without stop tokens."""
        state = continuation_state(self.utf8_tail)
        mask = self._breaking_masks.get(state)
        if mask is None:
            mask = self.engine.utf8_breaking_mask(self.utf8_tail)
            if self.stop_ids:
                mask = mask.copy()
                mask[list(self.stop_ids)] = bool(self.utf8_tail)
            self._breaking_masks[state] = mask
        return mask

    def begin(self, slot: Slot, cached: int) -> None:
        self.slot = slot
        self.stats.cached_tokens = cached
        self.pending = self.prompt[cached:]
        self.sampler.feed_prompt(self.prompt)
        self._started = time.perf_counter()

    def draws_next_in_numpy(self) -> bool:
        """Will :meth:`sample` draw its first pick in numpy (rather than end on its budget)?"""
        return self.sampler.draws_in_numpy and not self.finished and self.stats.completion_tokens < self.budget

    def sample(self, logits: np.ndarray, first: int | None = NOT_DRAWN) -> GeneratedToken | None:
        """The next token from the logits after ``pending`` was decoded; None when the generation ends.

        ``first``: the first pick, when the engine drew it for the whole batch (else ``NOT_DRAWN``)."""
        if not self._budget_left():
            return None
        return self._take(self._next_token(logits, first), logits)

    def _next_token(self, logits: np.ndarray, first: int | None = NOT_DRAWN) -> int | None:
        """Sample a token; with a lazy grammar, resample while the token would make its trigger abort.

        End-of-generation and stop tokens end the run without reaching the grammar, so they pass
        (once the text is complete UTF-8: inside a character only its next byte may come).
        ``first`` is the first pick when it was drawn already (``Engine._draw_together``).
        """
        sampler, guard, stop_ids = self.sampler, self.guard, self.stop_ids
        breaking = self.utf8_breaking()
        token = first if first != NOT_DRAWN else sampler.sample(logits, exclude=breaking if breaking is not None else ())
        if token is None and breaking is not None:  # only such tokens are allowed
            breaking = None
            token = sampler.sample(logits)
        excluded: list[int] = []
        fallback: int | None = None  # allowed, but breaks UTF-8: better than stopping
        while token is not None and token not in stop_ids and token not in self.engine.eog_set:
            safe = guard is None or guard.is_safe(token)
            tail = incomplete_tail(self.utf8_tail + self.engine.pieces[token])
            if safe and tail is not None:
                self.utf8_tail = tail
                return token
            if safe and fallback is None:
                fallback = token
            excluded.append(token)
            if len(excluded) > _MAX_TRIGGER_RETRIES:
                self.utf8_tail = b""
                return fallback
            token = sampler.sample(logits, exclude=excluded if breaking is None
                                   else np.concatenate((breaking, excluded)))
        return token

    def sample_on_device(self, row: int) -> GeneratedToken | None:
        """:meth:`sample` for a generation whose chain sampled batch position ``row`` in the step.

        The pick is checked as the host checks its own: one that would break UTF-8 is drawn
        again without such tokens from what the chain kept; when nothing else is left, it stays
        (better than stopping, as on the host)."""
        if self._mark is None or self.stats.completion_tokens >= self.budget:
            if not self._budget_left():
                return None
        engine = self.engine
        token = llama_cpp.llama_get_sampled_token_ith(engine.context, row)
        if token < 0:
            raise RuntimeError("llama.cpp sampled no token for a generation with a device chain")
        if self._decoder_empty and not self.utf8_tail and token not in engine.eog_set and token not in self.stop_ids:
            text = engine.texts[token]
            if text is not None:  # whole characters after whole ones: nothing to check or decode
                return self._take_whole(token, text)
        if token in self.stop_ids or token in engine.eog_set:
            if self.utf8_tail:  # the output would end inside a character
                redrawn = self.sampler.redraw(engine.context, row, self.utf8_breaking_mask())
                token = token if redrawn is None else self._follow_utf8(redrawn)
            return self._take(token, None)
        tail = incomplete_tail(self.utf8_tail + engine.pieces[token])
        if tail is None:
            redrawn = self.sampler.redraw(engine.context, row, self.utf8_breaking_mask())
            token = token if redrawn is None else redrawn
            self._follow_utf8(token)
        else:
            self.utf8_tail = tail
        return self._take(token, None)

    def _follow_utf8(self, token: int) -> int:
        """Move the unfinished-character state past ``token`` (reset where it breaks UTF-8)."""
        if token not in self.stop_ids and token not in self.engine.eog_set:
            tail = incomplete_tail(self.utf8_tail + self.engine.pieces[token])
            self.utf8_tail = tail if tail is not None else b""
        return token

    def _budget_left(self) -> bool:
        """Record the end of the prefill; False (and finished) when the token budget is spent."""
        if self._mark is None:
            now = time.perf_counter()
            self.stats.prefill_ms = (now - self._started) * 1000.0
            self._mark = now
        if self.stats.completion_tokens >= self.budget:
            self.finish("length")
            return False
        return True

    def _take(self, token: int | None, logits: np.ndarray | None) -> GeneratedToken | None:
        """Count and record the sampled token; None when it ends the generation."""
        if token is None:  # the grammar allows nothing more (complete, and end-of-generation is banned)
            self.finish("stop")
            return None
        self.stats.completion_tokens += 1
        if token in self.stop_ids or (not self.ignore_eos and token in self.engine.eog_set):
            self.stats.stop_token_id = token
            self.finish("stop")
            return None
        self.sampler.accept(token)
        if self.guard is not None:
            self.guard.accept(token)
        text = self.engine.texts[token] if self._decoder_empty else None
        if text is None:
            text = self._decoder.decode(self.engine.pieces[token])
            self._decoder_empty = not self._decoder.getstate()[0]
        info = None if self.logprobs is None or logits is None else token_logprobs(
            logits, token, self.logprobs, self.engine.token_to_piece)
        now = time.perf_counter()
        elapsed = (now - self._mark) * 1000.0
        self._mark = now
        self.stats.decode_ms.append(elapsed)
        if self.stats.completion_tokens >= self.budget:
            self.finish("length")
        else:
            self.pending = [token]
        return GeneratedToken(token, text, elapsed, info)

    def _take_whole(self, token: int, text: str) -> GeneratedToken | None:
        """:meth:`_take` for a device-sampled token that is neither a stop nor an end-of-generation
        token and whose text is whole characters after whole ones (the usual token): no sampler or
        guard to tell, nothing to decode."""
        stats = self.stats
        stats.completion_tokens += 1
        now = time.perf_counter()
        elapsed = (now - self._mark) * 1000.0  # type: ignore[operator]
        self._mark = now
        stats.decode_ms.append(elapsed)
        if stats.completion_tokens >= self.budget:
            self.finish("length")
        else:
            self.pending = [token]
        return GeneratedToken(token, text, elapsed)

    def finish(self, reason: str) -> None:
        """End the generation (``"stop"``, ``"length"``, ``"cancelled"``) and give its slot back."""
        if not self.stats.finish_reason:
            self.stats.finish_reason = reason
        self.finished = True
        self.pending = []
        if self.slot is not None and self.slot.owner is self:
            self.engine.release(self.slot)

    def close(self) -> None:
        """Finish (as cancelled, unless it ended already) and free the sampler."""
        if self._closed:
            return
        self._closed = True
        self.finish("cancelled")
        self.stats.grammar_fallbacks = self.sampler.grammar_fallbacks
        self.sampler.close()
