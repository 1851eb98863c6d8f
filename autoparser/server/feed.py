"""The front end's half of a generation: token texts into the request's `Completion`, deltas out.

The tokens are generated elsewhere, by the model worker process (`supervisor`) or an upstream
llama-server (`upstream`), which hand over the texts of the tokens they generated, several at a
time, with their log-probabilities where the request asked for them. What decides the generation
(stop tokens, stop strings, the token budget, the reasoning phase) stays there; here, in the front
end's process, the texts are parsed into the OpenAI deltas, which go to the request's reader as
one `("deltas", list)` event per batch, and the generation's end becomes its `GenerationResult`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autoparser.server.completion import Completion
from autoparser.server.worker import GenerationEnd, GenerationJob, GenerationResult

if TYPE_CHECKING:
    from autoparser.llama.logprobs import TokenLogprob


@dataclass
class CompletionFeed:
    """One job's token texts through its completion; `flush` hands the deltas on together."""

    completion: Completion
    post: Callable[[tuple[str, Any]], None]
    stream_deltas: bool = True
    join: bool = False
    """Feed the texts of a batch without log-probabilities in one parser step where the completion
    joins texts (`Completion.joins_texts`): the same text in fewer, longer deltas, at a fraction
    of the parser's cost per token. Without it, each token text is fed alone, and a stream has
    about a chunk per token."""
    _pending: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, job: GenerationJob, join: bool = False) -> CompletionFeed:
        return cls(job.completion, job.post, job.stream_deltas, join)

    def texts(self, texts: list[str], logprobs: list[TokenLogprob | None] | None = None) -> None:
        """Feed token texts, with their log-probabilities where the request asked for them."""
        completion = self.completion
        if logprobs is not None:
            for text, logprob in zip(texts, logprobs, strict=True):
                self.emit(completion.feed(text, logprob))
        elif self.join and len(texts) > 1:
            self.emit(completion.feed_texts(texts))
        else:
            for text in texts:
                self.emit(completion.feed(text))

    def text(self, text: str, logprob: TokenLogprob | None = None) -> None:
        self.emit(self.completion.feed(text, logprob))

    def emit(self, deltas: list[dict[str, Any]]) -> None:
        """Hold deltas for `flush`."""
        if deltas and self.stream_deltas:
            self._pending += deltas

    def flush(self) -> bool:
        """Hand the held deltas on; whether there were any."""
        if not self._pending:
            return False
        pending, self._pending = self._pending, []
        self.post(("deltas", pending))
        return True

    def result(self, end: GenerationEnd) -> GenerationResult:
        """The generation ended: the held deltas go out, and the completion's final state makes
        the result (its last deltas, the message, OpenAI's finish_reason)."""
        self.flush()
        completion = self.completion
        final = completion.finish()
        return GenerationResult(
            finish_reason=completion.finish_reason(end.finish_reason), prompt_tokens=end.prompt_tokens,
            completion_tokens=end.completion_tokens, prefill_ms=end.prefill_ms, decode_ms=end.decode_ms,
            message=completion.message(), final_deltas=final, cached_tokens=end.cached_tokens,
            started_at=end.started_at)

    def message_so_far(self) -> dict[str, Any]:
        """The generation failed mid-way: every delta of what was generated goes out (the
        parser's held-back text included), and the message of it is returned."""
        self.flush()
        self.emit(self.completion.finish())
        self.flush()
        return self.completion.message()
