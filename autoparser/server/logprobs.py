"""The engine's per-token log-probabilities in the wire formats of the OpenAI endpoints."""

from __future__ import annotations

from typing import Any

from autoparser.llama.logprobs import TokenLogprob


def _text(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def chat_entry(entry: TokenLogprob, top: int) -> dict[str, Any]:
    """One token of chat completions' `logprobs.content` (also the Responses API's shape)."""
    return {"token": _text(entry.piece), "logprob": entry.logprob, "bytes": list(entry.piece),
            "top_logprobs": [{"token": _text(piece), "logprob": value, "bytes": list(piece)}
                             for _, piece, value in entry.top[:top]]}


def chat_logprobs(entries: list[TokenLogprob], top: int) -> dict[str, Any]:
    return {"content": [chat_entry(entry, top) for entry in entries], "refusal": None}


def completion_logprobs(entries: list[TokenLogprob], top: int, offset: int) -> dict[str, Any]:
    """The legacy completions shape: parallel lists, `text_offset` counted from `offset`."""
    tokens, values, tops, offsets = [], [], [], []
    for entry in entries:
        text = _text(entry.piece)
        tokens.append(text)
        values.append(entry.logprob)
        tops.append({_text(piece): value for _, piece, value in entry.top[:top]})
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}
