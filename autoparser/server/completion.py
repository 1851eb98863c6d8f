"""One request's output, token by token: stop strings, special tokens, parsing, extras.

`Completion` is the sans-IO core of the server. The front end feeds it each token's text as
the generation hands them over (`feed.CompletionFeed`) and forwards the OpenAI deltas it
returns; it knows nothing about HTTP, threads or llama.cpp, so the same object gives the
streamed chunks and the non-streamed message, which therefore agree by construction. Where the
generation runs, a `TokenStops` with the same rules (`stop_check`) ends it at the same stop
string. The steps, in order:

1. tokens whose text is a special token the output language does not use are dropped when
   `skip_special_tokens` is set (markers the parser needs are always kept);
2. stop strings end the output (`StopMatcher`, with hold-back);
3. the parser stream (`Analysis.parser(...).stream()`) turns text into deltas;
4. with `skip_special_tokens`, marker tokens the parser left in `content` or `reasoning_content`
   are removed from them,
   and markup of a tool call the output ended inside (cut off by `max_tokens`, say) is dropped
   rather than returned as content (`full_text` still has it);
5. with `separate_reasoning` off, reasoning deltas go back into `content` between the
   template's reasoning markers; with `hold_reasoning` (`stream_reasoning: false`), they are
   kept back and sent as one delta when the answer begins;
6. the `extensions` record (reasoning chunks, tool-call start/args/end events) is collected.

The parser cannot lose the output: should it raise (output nested deeper than it can read, a
bug), the rest of the output passes through as `content`, the message holds the whole raw text,
and the request's warnings say why (`FailSafeStream`), never a 500 that discards the tokens.

Per-token extras ride on the deltas as private keys the HTTP layer takes off again: `_logprobs`
(the log-probabilities of the tokens since the last delta) and `_full_text` (the text so far).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from autoparser.llama.logprobs import TokenLogprob

from autoparser.server.stops import TokenStops

log = logging.getLogger("autoparser.server")


class DeltaStream(Protocol):
    """The part of the parser runtime's stream the server uses."""

    def feed(self, text: str) -> list[dict[str, Any]]: ...
    def finish(self) -> list[dict[str, Any]]: ...
    def message(self) -> dict[str, Any]: ...


class FailSafeStream:
    """A parser stream that hands its output over raw once the parser fails.

    After the first exception from the parser, every later text is a `content` delta and
    `message()` is the whole raw text as content; `error` says what failed (also appended to
    `warnings`, which the reply carries)."""

    def __init__(self, stream: DeltaStream, warnings: list[str]):
        self._stream = stream
        self._warnings = warnings
        self._raw: list[str] = []
        self.error: str | None = None

    def feed(self, text: str) -> list[dict[str, Any]]:
        self._raw.append(text)
        if self.error is None:
            try:
                return self._stream.feed(text)
            except Exception as exc:  # noqa: BLE001 - any parser failure keeps the output
                self._fail(exc)
        return [{"content": text}] if text else []

    def finish(self) -> list[dict[str, Any]]:
        if self.error is None:
            try:
                return self._stream.finish()
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)
        return []

    def message(self) -> dict[str, Any]:
        if self.error is None:
            try:
                return self._stream.message()
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)
        return {"role": "assistant", "content": "".join(self._raw) or None, "reasoning_content": None,
                "tool_calls": None}

    def _fail(self, exc: Exception) -> None:
        detail = " ".join(str(exc).split())[:200]
        self.error = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
        log.warning("the output could not be parsed (%s); it is returned as raw content", self.error)
        self._warnings.append(f"the output could not be parsed ({self.error}); it is returned as raw "
                              "text in content")


@dataclass
class OutputOptions:
    stops: list[str] = field(default_factory=list)
    kept_stops: frozenset[str] = frozenset()
    """Stop strings that stay in the output (the request's, with `include_stop_str_in_output`)."""
    dropped_tokens: frozenset[str] = frozenset()
    """Token texts removed from the output (special tokens that are not markers)."""
    separate_reasoning: bool = True
    reasoning_start: str = ""
    reasoning_end: str = ""
    collect_extensions: bool = False
    hidden_markers: frozenset[str] = frozenset()
    """Marker texts removed from `content` (special tokens, with `skip_special_tokens`)."""
    cutoff_markers: tuple[str, ...] = ()
    """Texts that open a tool call: content the output ended in from one of them on is dropped."""
    logprobs: bool = False
    full_text: bool = False
    hold_reasoning: bool = False
    """Reasoning goes out as one delta when the answer begins (or the output ends)."""


@dataclass
class ReasoningInliner:
    """Puts reasoning back into content with its markers (`separate_reasoning: false`).

    The start marker opens the first reasoning text; the end marker is written when content or
    a tool call follows reasoning, or at the end when the model did write the end marker.
    """

    start: str
    end: str
    _open: bool = False
    _closed: bool = False

    def convert(self, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for delta in deltas:
            if "reasoning_content" in delta:
                text = delta["reasoning_content"]
                if not self._open:
                    self._open = True
                    text = self.start + text
                out.append({"content": text})
                continue
            if self._open and not self._closed:
                self._closed = True
                out.append({"content": self.end})
            out.append(delta)
        return _merge_content(out)

    def close(self, end_seen: bool) -> list[dict[str, Any]]:
        if self._open and not self._closed and end_seen:
            self._closed = True
            return [{"content": self.end}]
        return []

    def message(self, message: dict[str, Any], end_seen: bool) -> dict[str, Any]:
        """The non-streamed form of the same conversion."""
        reasoning = message.get("reasoning_content")
        if not reasoning:
            return {**message, "reasoning_content": None}
        closed = end_seen or bool(message.get("content")) or bool(message.get("tool_calls"))
        content = self.start + reasoning + (self.end if closed else "") + (message.get("content") or "")
        return {**message, "reasoning_content": None, "content": content}


def _merge_content(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent content deltas become one, so a marker never travels alone."""
    merged: list[dict[str, Any]] = []
    for delta in deltas:
        if merged and set(delta) == {"content"} and set(merged[-1]) == {"content"}:
            merged[-1] = {"content": merged[-1]["content"] + delta["content"]}
        else:
            merged.append(delta)
    return merged


@dataclass
class ExtensionsRecorder:
    """The non-streaming `extensions` record: reasoning chunks and tool-call events."""

    reasoning_chunks: list[str] = field(default_factory=list)
    tool_call_chunks: list[dict[str, Any]] = field(default_factory=list)
    _ids: dict[int, str] = field(default_factory=dict)
    _open: int | None = None

    def record(self, deltas: list[dict[str, Any]]) -> None:
        for delta in deltas:
            if delta.get("reasoning_content"):
                self.reasoning_chunks.append(delta["reasoning_content"])
            for call in delta.get("tool_calls") or []:
                self._record_call(call)

    def _record_call(self, call: dict[str, Any]) -> None:
        index = call.get("index", 0)
        function = call.get("function") or {}
        if index not in self._ids:
            self._end_open_call()
            self._ids[index] = call.get("id") or f"call_{index}"
            self._open = index
            self.tool_call_chunks.append({"type": "start", "tool_call_id": self._ids[index],
                                          "tool_name": function.get("name", "")})
        if function.get("arguments"):
            self.tool_call_chunks.append({"type": "args", "tool_call_id": self._ids[index],
                                          "delta": function["arguments"]})

    def _end_open_call(self) -> None:
        if self._open is not None:
            self.tool_call_chunks.append({"type": "end", "tool_call_id": self._ids[self._open]})
            self._open = None

    def result(self) -> dict[str, Any]:
        self._end_open_call()
        return {"reasoning_chunks": self.reasoning_chunks, "tool_call_chunks": self.tool_call_chunks}


class Completion:
    """Feed token texts, get deltas; then `finish`, `message` and `finish_reason`."""

    def __init__(self, stream: DeltaStream, options: OutputOptions, warnings: list[str] | None = None):
        self.warnings: list[str] = [] if warnings is None else warnings
        self._stream = FailSafeStream(stream, self.warnings)
        self._options = options
        self._stops = TokenStops(options.stops, kept=options.kept_stops, dropped=options.dropped_tokens)
        self._inliner = (None if options.separate_reasoning
                         else ReasoningInliner(options.reasoning_start, options.reasoning_end))
        self._extensions = ExtensionsRecorder() if options.collect_extensions else None
        self._pieces: list[str] = []
        self._held_reasoning: list[str] | None = [] if options.hold_reasoning and options.separate_reasoning else None
        self._finished = False
        self._dropped_tail = ""
        self.stop_string: str | None = None
        self.logprobs: list[TokenLogprob] = []
        self._pending_logprobs: list[TokenLogprob] = []

    @property
    def stopped(self) -> bool:
        """A stop string was found: the generation should end now."""
        return self._stops.done

    @property
    def text(self) -> str:
        """The generated text released so far (markers included, stop string excluded)."""
        return "".join(self._pieces)

    def feed(self, token_text: str, logprob: TokenLogprob | None = None) -> list[dict[str, Any]]:
        if self._stops.done:
            return []
        if logprob is not None and self._options.logprobs:
            self.logprobs.append(logprob)
            self._pending_logprobs.append(logprob)
        match = self._stops.feed(token_text)
        if match is None:
            return []
        if match.stop is not None:
            self.stop_string = match.stop
        return self._annotate(self._parse(match.text))

    def stop_check(self) -> TokenStops:
        """Stop strings with this completion's rules, nothing fed: what the generation loop runs
        over the same token texts to end the generation where this completion ends the output."""
        return self._stops.fresh()

    @property
    def joins_texts(self) -> bool:
        """Whether `feed_texts` may take several token texts in one step: without stop strings,
        where a token ends decides when the generation ends."""
        return not self._stops.stops

    def feed_texts(self, token_texts: list[str]) -> list[dict[str, Any]]:
        """The deltas of several token texts without log-probabilities, fed in one step where
        `joins_texts` (the parser's deltas are the same for any split of a text; fewer of them)."""
        if not self.joins_texts:
            return [delta for text in token_texts for delta in self.feed(text)]
        dropped = self._stops.dropped
        return self._annotate(self._parse("".join(text for text in token_texts if text not in dropped)))

    def take_pending_logprobs(self) -> list[TokenLogprob]:
        """Log-probabilities of tokens no delta has carried yet (marker tokens at the end)."""
        pending, self._pending_logprobs = self._pending_logprobs, []
        return pending

    def finish(self) -> list[dict[str, Any]]:
        """End of generation: release held text and close the parser."""
        if self._finished:
            return []
        self._finished = True
        held = self._stops.flush()
        if held.stop is not None:
            self.stop_string = held.stop
        deltas = self._parse(held.text)
        raw = self._drop_cut_off_markup(self._stream.finish())
        if self._extensions is not None:
            self._extensions.record(raw)
        raw = self._hide_markers(raw)
        if self._held_reasoning is not None:
            raw = self._hold_reasoning(raw) + self._release_reasoning()
        if self._inliner is not None:
            raw = self._inliner.convert(raw) + self._inliner.close(self._reasoning_end_seen())
        return self._annotate(deltas + raw)

    def message(self) -> dict[str, Any]:
        message = dict(self._stream.message())
        message["role"] = "assistant"
        content = message.get("content")
        if content and self._dropped_tail and content.endswith(self._dropped_tail):
            content = content[: -len(self._dropped_tail)]
        if content:
            content = self._without_markers(content)
        message["content"] = content or None
        if message.get("reasoning_content"):
            message["reasoning_content"] = self._without_markers(message["reasoning_content"]) or None
        if self._inliner is not None:
            message = self._inliner.message(message, self._reasoning_end_seen())
        return message

    def finish_reason(self, generation_reason: str) -> str:
        """OpenAI's finish_reason from the generation loop's (`stop`, `length`, ...)."""
        if self.stop_string is not None:
            return "stop"
        if generation_reason == "length":
            return "length"
        if self.message().get("tool_calls"):
            return "tool_calls"
        return "stop"

    def parsed_message(self) -> dict[str, Any]:
        """The parser's own message, before the output cleaning (markers, cut-off markup)."""
        return self._stream.message()

    def reasoning_end_seen(self) -> bool:
        """The template's reasoning end marker is in the generated text."""
        return self._reasoning_end_seen()

    def extensions(self) -> dict[str, Any] | None:
        return None if self._extensions is None else self._extensions.result()

    def _parse(self, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        self._pieces.append(text)
        deltas = self._stream.feed(text)
        if self._extensions is not None:
            self._extensions.record(deltas)
        deltas = self._hide_markers(deltas)
        if self._held_reasoning is not None:
            deltas = self._hold_reasoning(deltas)
        if self._inliner is not None:
            deltas = self._inliner.convert(deltas)
        return deltas

    def _hold_reasoning(self, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Keep reasoning deltas back; the first delta of anything else releases them, as one."""
        held = self._held_reasoning
        assert held is not None
        out: list[dict[str, Any]] = []
        for delta in deltas:
            if "reasoning_content" in delta and len(delta) == 1:
                held.append(delta["reasoning_content"])
                continue
            out += self._release_reasoning()
            out.append(delta)
        return out

    def _release_reasoning(self) -> list[dict[str, Any]]:
        held = self._held_reasoning
        if not held:
            return []
        text = "".join(held)
        held.clear()
        return [{"reasoning_content": text}]

    def _drop_cut_off_markup(self, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The parser releases held-back markup as content when the output ends inside a call it
        cannot complete; that text is the start of a tool call, not an answer, so it goes."""
        markers = self._options.cutoff_markers
        out: list[dict[str, Any]] = []
        for delta in deltas:
            text = delta.get("content")
            if text is None or set(delta) != {"content"}:
                out.append(delta)
                continue
            if not self._dropped_tail:
                cut = min((i for m in markers if m and (i := text.find(m)) >= 0), default=-1)
                if cut < 0:
                    out.append(delta)
                    continue
                text, self._dropped_tail = text[:cut], text[cut:]
                if text:
                    out.append({"content": text})
            else:
                self._dropped_tail += text
        return out

    def _hide_markers(self, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self._options.hidden_markers:
            return deltas
        out = []
        for delta in deltas:
            key = "content" if delta.get("content") else "reasoning_content" if delta.get("reasoning_content") else None
            if key is not None:
                text = self._without_markers(delta[key])
                if not text:
                    continue
                delta = {**delta, key: text}
            out.append(delta)
        return out

    def _without_markers(self, text: str) -> str:
        for marker in self._options.hidden_markers:
            if marker in text:
                text = text.replace(marker, "")
        return text

    def _annotate(self, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Attach the pending log-probabilities and the text so far (see the module docstring)."""
        if not deltas or not (self._pending_logprobs or self._options.full_text):
            return deltas
        deltas = [dict(delta) for delta in deltas]
        if self._pending_logprobs:
            deltas[0]["_logprobs"] = self.take_pending_logprobs()
        if self._options.full_text:
            for delta in deltas:
                delta["_full_text"] = self.text
        return deltas

    def _reasoning_end_seen(self) -> bool:
        end = self._options.reasoning_end
        return bool(end) and end in self.text
