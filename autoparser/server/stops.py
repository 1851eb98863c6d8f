"""Stop strings on streamed text, with hold-back: a partial stop string is never released.

Stop strings are matched on the decoded text, not on tokens, because a stop string can span
tokens and a token can carry more than the stop string. The output ends at the earliest place
in the whole text where a stop string occurs (the longest one when several start there), and
that answer does not depend on how the text was cut into tokens: text that could still be, or
still become, the start of a stop string is held back until the next piece decides it, and
`flush` settles what is held when generation ends. Only the undecided tail is ever held, at
most the longest stop string, so each `feed` costs time proportional to the new text.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StopMatch:
    text: str
    """Text to release, including the stop string when it is to be kept."""
    stop: str | None = None
    """The stop string that ended the output, if one did."""


@dataclass
class StopMatcher:
    """`kept` are the stop strings that stay in the released text (`include_stop_str_in_output`)."""

    stops: list[str]
    kept: frozenset[str] = frozenset()
    _held: str = field(default="", init=False)
    _done: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.stops = [stop for stop in dict.fromkeys(self.stops) if stop]

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, text: str) -> StopMatch:
        """Add decoded text; release what can no longer be part of a stop string."""
        if self._done:
            return StopMatch("")
        if not self.stops:
            return StopMatch(text)
        buffer = self._held + text
        hit = self._earliest_stop(buffer)
        undecided = self._first_open_start(buffer, limit=hit[0] if hit else len(buffer) - 1)
        if undecided is not None:  # a stop may still begin here: wait for more text
            self._held = buffer[undecided:]
            return StopMatch(buffer[:undecided])
        if hit is not None:
            return self._end(buffer, *hit)
        self._held = ""
        return StopMatch(buffer)

    def flush(self) -> StopMatch:
        """Generation ended: a complete stop string in the held text still ends the output."""
        if self._done:
            return StopMatch("")
        held, self._held = self._held, ""
        hit = self._earliest_stop(held)
        return self._end(held, *hit) if hit is not None else StopMatch(held)

    def _end(self, buffer: str, index: int, stop: str) -> StopMatch:
        self._done = True
        self._held = ""
        end = index + len(stop) if stop in self.kept else index
        return StopMatch(buffer[:end], stop)

    def _earliest_stop(self, buffer: str) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for stop in self.stops:
            index = buffer.find(stop)
            if index >= 0 and (best is None or index < best[0] or (index == best[0] and len(stop) > len(best[1]))):
                best = (index, stop)
        return best

    def _first_open_start(self, buffer: str, limit: int) -> int | None:
        """The first position <= `limit` where the rest of `buffer` is a proper prefix of a stop
        string, i.e. where a stop string could still turn up once more text arrives."""
        longest = max(len(stop) for stop in self.stops)
        for start in range(max(0, len(buffer) - longest + 1), min(limit, len(buffer) - 1) + 1):
            rest = buffer[start:]
            if any(len(stop) > len(rest) and stop.startswith(rest) for stop in self.stops):
                return start
        return None


class TokenStops:
    """Stop strings over token texts as the output sees them: the text of a token in `dropped`
    (special tokens the output leaves out) never reaches the matcher.

    The request's `Completion` runs one to cut its output; the model worker, which ends the
    generation, runs another with the same rules (`Completion.stop_check`) over the same texts,
    so both find the same end."""

    def __init__(self, stops: list[str], kept: frozenset[str] = frozenset(), dropped: frozenset[str] = frozenset()):
        self._matcher = StopMatcher(stops, kept=kept)
        self.dropped = dropped

    @property
    def stops(self) -> list[str]:
        return self._matcher.stops

    @property
    def done(self) -> bool:
        return self._matcher.done

    def feed(self, token_text: str) -> StopMatch | None:
        """The text released by one token's text; None for a dropped token."""
        if token_text in self.dropped:
            return None
        return self._matcher.feed(token_text)

    def flush(self) -> StopMatch:
        return self._matcher.flush()

    def fresh(self) -> TokenStops:
        """The same rules, nothing fed yet."""
        return TokenStops(self._matcher.stops, self._matcher.kept, self.dropped)
