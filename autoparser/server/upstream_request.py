"""The engine's sampling and grammar settings as llama-server's `/completion` fields.

What the front end decided (the sampler's settings, the grammar with its lazy triggers) is
mapped onto the request body here; a request llama-server would fail in the middle of its
stream is refused before it is sent.
"""

from __future__ import annotations

from typing import Any

from autoparser.server.errors import bad_request
from autoparser.server.worker import GenerationJob

# llama.cpp's `common_grammar_trigger_type`: a token id, or a pattern matched against the output
# (searched, or matched whole when anchored `^...$`: the semantics `GrammarSpec` documents).
TRIGGER_TOKEN = 0
TRIGGER_PATTERN = 2


SEED_LIMIT = 2**32 - 1
"""llama-server's seeds are unsigned 32-bit numbers, and this one means "random"."""


def refuse_unsupported(job: GenerationJob) -> None:
    """A 400 for a request llama-server would fail in the middle of its stream."""
    seed = job.sampling.seed
    if seed is not None and not 0 <= seed < SEED_LIMIT:
        raise bad_request(f"seed must be between 0 and {SEED_LIMIT - 1} when llama-server generates; "
                          f"got {seed}.", param="seed")


def sampling_fields(sampling: Any, max_tokens: int) -> dict[str, Any]:
    """The engine's `SamplingParams` as `/completion` fields, its penalty window included."""
    fields: dict[str, Any] = {
        "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
        "min_p": sampling.min_p, "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty, "repeat_penalty": sampling.repetition_penalty,
        "repeat_last_n": max(64, max_tokens),
        "typical_p": 1.0, "dry_multiplier": 0.0, "xtc_probability": 0.0, "mirostat": 0,
    }
    if sampling.seed is not None:
        fields["seed"] = sampling.seed
    if sampling.logprobs is not None:
        fields["n_probs"] = max(1, sampling.logprobs)  # 0 would report no log-probability at all
    return fields


def grammar_fields(grammar: Any, token_texts: dict[int, str]) -> dict[str, Any]:
    """The engine's `GrammarSpec` as `/completion` fields (`grammar`, lazy triggers)."""
    if grammar is None:
        return {}
    gbnf = grammar.gbnf if grammar.root == "root" else f"{grammar.gbnf}\nroot ::= {grammar.root}\n"
    fields: dict[str, Any] = {"grammar": gbnf, "grammar_lazy": bool(grammar.lazy)}
    if grammar.lazy:
        triggers = [{"type": TRIGGER_PATTERN, "value": pattern} for pattern in grammar.trigger_patterns]
        triggers += [{"type": TRIGGER_TOKEN, "value": token_texts.get(token, ""), "token": token}
                     for token in grammar.trigger_tokens]
        fields["grammar_triggers"] = triggers
    return fields
