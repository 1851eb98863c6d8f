#!/usr/bin/env python3
"""Write a tiny random-weight GGUF of llama.cpp's ``deepseek2`` architecture.

There are no small downloadable DeepSeek-V3/R1 weights, yet the grammar and the server have to be
proven through the real llama.cpp runtime. This tool builds a model with the same *layout* as
DeepSeek-V3 (multi-head latent attention with q/kv LoRA ranks, a leading dense block, then
mixture-of-experts blocks with a shared expert and sigmoid gating) but with tiny dimensions and
random weights, so it loads in milliseconds and decodes hundreds of tokens per second on a CPU.
Its output is noise, which is exactly what a grammar has to tame.

The vocabulary is the real DeepSeek byte-level BPE tokenizer (``ggml-vocab-deepseek-llm.gguf``
from the llama-cpp-python source package) cut down to its first few thousand tokens, with merges
kept consistent, plus the DeepSeek-V3 chat special tokens appended (control tokens) and
``<think>``/``</think>`` as user-defined tokens, as real DeepSeek GGUFs have them.

Facts about the loader this file relies on (llama.cpp as vendored by llama-cpp-python 0.3.36):

- the loader refuses any tensor it does not expect, so exactly the MLA tensors are written
  (split ``attn_k_b``/``attn_v_b``, no legacy ``attn_kv_b``);
- ``attention.key_length_mla``/``value_length_mla`` switch the loader into MLA mode, and
  ``rope.dimension_count`` gives the rotary part of each head; both are effectively required;
- every weight is stored as F32: F16 ``attn_k_b``/``attn_v_b`` abort on CPUs with AMX, and at
  these sizes F32 costs nothing.

Usage::

    python tools/make_tiny_model.py OUT.gguf --chat-template-file T.jinja [--seed N] [--vocab PATH]
                                    [--vocab-size N] [--shape tiny|aligned|medium]
"""

from __future__ import annotations

import argparse
import functools
import os
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    sys.exit("make_tiny_model.py needs the 'gguf' package (pip install gguf)")

ARCH = "deepseek2"
# the value of the embedding dimension favoured tokens read (`favour_tokens`)
_FAVOUR_DIMENSION = 4.0

#: Marker tokens of the DeepSeek-V3 chat format, added as CONTROL tokens.
CONTROL_TOKENS: tuple[str, ...] = (
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁outputs▁begin｜>",
    "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
)
#: Reasoning markers: real DeepSeek GGUFs carry these as USER_DEFINED tokens.
USER_DEFINED_TOKENS: tuple[str, ...] = ("<think>", "</think>")
BOS_TEXT = "<｜begin▁of▁sentence｜>"
EOS_TEXT = "<｜end▁of▁sentence｜>"

VOCAB_ENV = "AUTOPARSER_VOCAB_GGUF"
VOCAB_FILE = "ggml-vocab-deepseek-llm.gguf"


@dataclass(frozen=True)
class TinyDims:
    """Model dimensions; small enough to write in well under a second, shaped like DeepSeek-V3."""

    n_embd: int = 64
    n_layer: int = 3
    n_dense_lead: int = 1
    n_head: int = 4
    q_lora_rank: int = 32
    kv_lora_rank: int = 32
    qk_rope_dim: int = 16
    qk_nope_dim: int = 16
    v_head_dim: int = 16
    n_ff: int = 128
    n_ff_expert: int = 32
    n_expert: int = 4
    n_expert_used: int = 2
    n_expert_shared: int = 1
    context_length: int = 16384


#: Model shapes by name. ``tiny`` is the default the tests use. ``aligned`` keeps it but gives
#: attention DeepSeek-V3's alignment: the cached key (latent plus rotary part, 128 values) and the
#: latent value (64) are whole multiples of the CPU's vector width, as DeepSeek-V3's 576 and 512
#: are. The tiny key of 48 values and value of 32 fall in the scalar tails of ggml's vectorised
#: loops, which makes attention over the cache the largest cost of a decode step on a CPU.
SHAPES: dict[str, TinyDims] = {
    "tiny": TinyDims(),
    "aligned": TinyDims(kv_lora_rank=64, qk_rope_dim=64, qk_nope_dim=64, v_head_dim=64),
    # 1.2 B parameters (4.6 GB in F32 with the 100k vocabulary): on a GPU it is bandwidth-bound like
    # a 2 B F16 model, so the host's work per token shows beside a realistic decode step.
    "medium": TinyDims(n_embd=2048, n_layer=12, n_dense_lead=1, n_head=16, q_lora_rank=512, kv_lora_rank=512,
                       qk_rope_dim=64, qk_nope_dim=128, v_head_dim=128, n_ff=5632, n_ff_expert=512,
                       n_expert=16, n_expert_used=4, n_expert_shared=1),
}
#: Regular BPE tokens kept by default per shape: the medium model has DeepSeek's whole vocabulary.
SHAPE_VOCAB: dict[str, int] = {"medium": 100000}
DEFAULT_VOCAB = 4000


@dataclass
class Vocab:
    """A byte-level BPE vocabulary as GGUF stores it."""

    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    pre: str
    bos_id: int
    eos_id: int


# --------------------------------------------------------------------------- vocabulary


def default_vocab_path() -> Path | None:
    """Find the DeepSeek vocab GGUF: ``$AUTOPARSER_VOCAB_GGUF`` or the corpus cache."""
    env = os.environ.get(VOCAB_ENV)
    if env and Path(env).is_file():
        return Path(env)
    cache = Path(os.environ.get("AUTOPARSER_CACHE", "~/.cache/autoparser")).expanduser()
    for candidate in sorted(cache.glob(f"corpus/llama_cpp_python-*/vendor/llama.cpp/models/{VOCAB_FILE}")):
        return candidate
    return None


# GGUF metadata value types (gguf.GGUFValueType) and the struct formats of the fixed-size ones.
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


def read_gguf_metadata(path: Path, wanted: set[str]) -> dict[str, object]:
    """Read selected metadata keys of a GGUF file.

    ``gguf.GGUFReader`` maps every array element to its own numpy view, which takes several
    seconds for a 100k-token vocabulary; this reader decodes only the keys asked for and skips
    the rest, so building a model stays well under a second.
    """
    data = memoryview(path.read_bytes())
    if bytes(data[:4]) != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file")
    version, _n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    if version < 2:
        raise ValueError(f"{path}: GGUF version {version} is not supported")
    offset = 24
    found: dict[str, object] = {}
    for _ in range(n_kv):
        key, offset = _read_string(data, offset)
        (vtype,) = struct.unpack_from("<I", data, offset)
        value, offset = _read_value(data, offset + 4, vtype, key in wanted)
        if key in wanted:
            found[key] = value
    return found


def _read_string(data: memoryview, offset: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", data, offset)
    start = offset + 8
    return bytes(data[start : start + length]).decode("utf-8"), start + length


def _read_value(data: memoryview, offset: int, vtype: int, keep: bool) -> tuple[object, int]:
    if vtype == _STRING:
        return _read_string(data, offset)
    if vtype == _ARRAY:
        etype, count = struct.unpack_from("<IQ", data, offset)
        offset += 12
        if etype == _STRING:
            items = []
            for _ in range(count):
                item, offset = _read_string(data, offset)
                items.append(item)
            return (items if keep else None), offset
        fmt = _SCALAR_FORMATS[etype]
        size = struct.calcsize(fmt) * count
        values = list(struct.unpack_from(f"<{count}{fmt}", data, offset)) if keep else None
        return values, offset + size
    fmt = _SCALAR_FORMATS[vtype]
    (value,) = struct.unpack_from("<" + fmt, data, offset)
    return value, offset + struct.calcsize(fmt)


def _byte_alphabet() -> set[str]:
    """The 256 printable characters byte-level BPE uses for raw bytes (GPT-2's mapping)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return set(chars.values())


def _utf8_impossible_bytes() -> set[str]:
    """Byte characters for 0xC0, 0xC1 and 0xF5..0xFF: these bytes never occur in valid UTF-8.

    All of them lie in the range byte-level BPE maps to itself, so the character is ``chr(byte)``.
    The DeepSeek vocab keeps them only as placeholder user-defined tokens; the tiny vocab drops them.
    """
    return {chr(b) for b in (0xC0, 0xC1, *range(0xF5, 0x100))}


@functools.lru_cache(maxsize=4)
def load_base_vocab(path: Path, n_regular: int) -> Vocab:
    """Read the DeepSeek tokenizer and keep its first ``n_regular`` normal tokens plus every byte token.

    Merges survive only when both parts and their concatenation are kept, so the cut tokenizer
    still produces only tokens it has; the full byte alphabet guarantees every UTF-8 text can be
    tokenized. The file's own special and padding tokens are dropped: the DeepSeek-V3 specials
    are appended afterwards by :func:`add_special_tokens`.
    """
    keys = {
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.pre",
    }
    meta = read_gguf_metadata(path, keys)
    missing = keys - meta.keys()
    if missing:
        raise ValueError(f"vocab file lacks {sorted(missing)}")
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])  # type: ignore[call-overload]
    types: list[int] = [int(t) for t in meta["tokenizer.ggml.token_type"]]  # type: ignore[attr-defined]
    merges: list[str] = list(meta["tokenizer.ggml.merges"])  # type: ignore[call-overload]
    pre = str(meta["tokenizer.ggml.pre"])

    impossible = _utf8_impossible_bytes()
    needed_bytes = _byte_alphabet() - impossible
    kept: list[str] = []
    seen: set[str] = set()
    for text, ttype in zip(tokens, types, strict=True):
        keep_regular = ttype == gguf.TokenType.NORMAL and len(kept) < n_regular
        if (keep_regular or text in needed_bytes) and text not in seen:
            kept.append(text)
            seen.add(text)
    missing = needed_bytes - seen
    if missing:
        raise ValueError(f"vocab file lacks byte tokens: {sorted(missing)[:5]}")

    kept_merges = []
    for merge in merges:
        left, _, right = merge.partition(" ")
        if left in seen and right in seen and (left + right) in seen:
            kept_merges.append(merge)
    return Vocab(
        tokens=kept,
        token_types=[int(gguf.TokenType.NORMAL)] * len(kept),
        merges=kept_merges,
        pre=pre,
        bos_id=-1,
        eos_id=-1,
    )


def add_special_tokens(vocab: Vocab) -> Vocab:
    """Append the DeepSeek-V3 control tokens and the user-defined reasoning markers."""
    tokens = list(vocab.tokens)
    types = list(vocab.token_types)
    for text in CONTROL_TOKENS:
        tokens.append(text)
        types.append(int(gguf.TokenType.CONTROL))
    for text in USER_DEFINED_TOKENS:
        tokens.append(text)
        types.append(int(gguf.TokenType.USER_DEFINED))
    return Vocab(
        tokens=tokens,
        token_types=types,
        merges=vocab.merges,
        pre=vocab.pre,
        bos_id=tokens.index(BOS_TEXT),
        eos_id=tokens.index(EOS_TEXT),
    )


# --------------------------------------------------------------------------- weights


def _tensor_name(kind: gguf.MODEL_TENSOR, suffix: str = "weight", bid: int | None = None) -> str:
    base = gguf.TENSOR_NAMES[kind]
    return (base.format(bid=bid) if bid is not None else base) + "." + suffix


def _matrix(rng: np.random.Generator, rows: int, cols: int, scale: float | None = None) -> np.ndarray:
    """A random ``rows x cols`` numpy matrix (GGUF shape ``{cols, rows}``) scaled like an initialised layer."""
    std = scale if scale is not None else 1.0 / np.sqrt(cols)
    return (rng.standard_normal((rows, cols)) * std).astype(np.float32)


def _stack(rng: np.random.Generator, n: int, rows: int, cols: int) -> np.ndarray:
    return (rng.standard_normal((n, rows, cols)) / np.sqrt(cols)).astype(np.float32)


def _norm(size: int) -> np.ndarray:
    return np.ones(size, dtype=np.float32)


def make_tensors(dims: TinyDims, n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    """All tensors the deepseek2 loader expects in MLA mode, keyed by GGUF name.

    Numpy shapes are the reverse of llama.cpp's ``ne`` order: a llama.cpp ``{n_embd, n_vocab}``
    tensor is a numpy ``(n_vocab, n_embd)`` array.
    """
    rng = np.random.default_rng(seed)
    T = gguf.MODEL_TENSOR
    d = dims
    k_head = d.qk_nope_dim + d.qk_rope_dim
    out: dict[str, np.ndarray] = {
        _tensor_name(T.TOKEN_EMBD): _matrix(rng, n_vocab, d.n_embd, scale=1.0),
        _tensor_name(T.OUTPUT_NORM): _norm(d.n_embd),
        # A larger output scale gives peaked next-token distributions, closer to a trained model's.
        _tensor_name(T.OUTPUT): _matrix(rng, n_vocab, d.n_embd, scale=0.6),
    }
    for i in range(d.n_layer):
        out[_tensor_name(T.ATTN_NORM, bid=i)] = _norm(d.n_embd)
        out[_tensor_name(T.ATTN_Q_A_NORM, bid=i)] = _norm(d.q_lora_rank)
        out[_tensor_name(T.ATTN_KV_A_NORM, bid=i)] = _norm(d.kv_lora_rank)
        out[_tensor_name(T.ATTN_Q_A, bid=i)] = _matrix(rng, d.q_lora_rank, d.n_embd)
        out[_tensor_name(T.ATTN_Q_B, bid=i)] = _matrix(rng, d.n_head * k_head, d.q_lora_rank)
        out[_tensor_name(T.ATTN_KV_A_MQA, bid=i)] = _matrix(rng, d.kv_lora_rank + d.qk_rope_dim, d.n_embd)
        out[_tensor_name(T.ATTN_K_B, bid=i)] = _stack(rng, d.n_head, d.kv_lora_rank, d.qk_nope_dim)
        out[_tensor_name(T.ATTN_V_B, bid=i)] = _stack(rng, d.n_head, d.v_head_dim, d.kv_lora_rank)
        out[_tensor_name(T.ATTN_OUT, bid=i)] = _matrix(rng, d.n_embd, d.n_head * d.v_head_dim)
        out[_tensor_name(T.FFN_NORM, bid=i)] = _norm(d.n_embd)
        if i < d.n_dense_lead:
            out[_tensor_name(T.FFN_GATE, bid=i)] = _matrix(rng, d.n_ff, d.n_embd)
            out[_tensor_name(T.FFN_UP, bid=i)] = _matrix(rng, d.n_ff, d.n_embd)
            out[_tensor_name(T.FFN_DOWN, bid=i)] = _matrix(rng, d.n_embd, d.n_ff)
            continue
        shared = d.n_ff_expert * d.n_expert_shared
        out[_tensor_name(T.FFN_GATE_INP, bid=i)] = _matrix(rng, d.n_expert, d.n_embd)
        out[_tensor_name(T.FFN_EXP_PROBS_B, "bias", bid=i)] = np.zeros(d.n_expert, dtype=np.float32)
        out[_tensor_name(T.FFN_GATE_EXP, bid=i)] = _stack(rng, d.n_expert, d.n_ff_expert, d.n_embd)
        out[_tensor_name(T.FFN_UP_EXP, bid=i)] = _stack(rng, d.n_expert, d.n_ff_expert, d.n_embd)
        out[_tensor_name(T.FFN_DOWN_EXP, bid=i)] = _stack(rng, d.n_expert, d.n_embd, d.n_ff_expert)
        out[_tensor_name(T.FFN_GATE_SHEXP, bid=i)] = _matrix(rng, shared, d.n_embd)
        out[_tensor_name(T.FFN_UP_SHEXP, bid=i)] = _matrix(rng, shared, d.n_embd)
        out[_tensor_name(T.FFN_DOWN_SHEXP, bid=i)] = _matrix(rng, d.n_embd, shared)
    return out


def favour_tokens(tensors: dict[str, np.ndarray], weights: Mapping[int, float]) -> None:
    """Make the model write the given token ids more often, whatever came before: every token's
    embedding gets one positive dimension, which the residual stream carries to the output, and
    each favoured token's output row reads that dimension alone, with its weight."""
    T = gguf.MODEL_TENSOR
    embedding, output = tensors[_tensor_name(T.TOKEN_EMBD)], tensors[_tensor_name(T.OUTPUT)]
    embedding[:, 0] = _FAVOUR_DIMENSION
    for token, weight in weights.items():
        output[token, :] = 0.0
        output[token, 0] = weight


# --------------------------------------------------------------------------- writer


def _write_hparams(writer: gguf.GGUFWriter, dims: TinyDims, n_vocab: int) -> None:
    d = dims
    writer.add_name("autoparser tiny deepseek2")
    writer.add_context_length(d.context_length)
    writer.add_embedding_length(d.n_embd)
    writer.add_block_count(d.n_layer)
    writer.add_feed_forward_length(d.n_ff)
    writer.add_head_count(d.n_head)
    # MLA is stored as multi-query attention over the compressed latent: one KV head whose key is
    # the latent plus the rotary part and whose value is the latent; the *_mla lengths give the
    # per-head sizes after decompression.
    writer.add_head_count_kv(1)
    writer.add_key_length(d.kv_lora_rank + d.qk_rope_dim)
    writer.add_value_length(d.kv_lora_rank)
    writer.add_key_length_mla(d.qk_nope_dim + d.qk_rope_dim)
    writer.add_value_length_mla(d.v_head_dim)
    writer.add_q_lora_rank(d.q_lora_rank)
    writer.add_kv_lora_rank(d.kv_lora_rank)
    writer.add_rope_dimension_count(d.qk_rope_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_leading_dense_block_count(d.n_dense_lead)
    writer.add_expert_count(d.n_expert)
    writer.add_expert_used_count(d.n_expert_used)
    writer.add_expert_shared_count(d.n_expert_shared)
    writer.add_expert_feed_forward_length(d.n_ff_expert)
    writer.add_expert_weights_scale(2.5)
    writer.add_expert_weights_norm(True)
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)


def _write_tokenizer(writer: gguf.GGUFWriter, vocab: Vocab, chat_template: str | None) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.token_types)
    writer.add_token_merges(vocab.merges)
    writer.add_bos_token_id(vocab.bos_id)
    writer.add_eos_token_id(vocab.eos_id)
    writer.add_pad_token_id(vocab.eos_id)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)


def build_tiny_model(
    out_path: str | os.PathLike[str],
    chat_template: str | None = None,
    seed: int = 0,
    vocab_path: str | os.PathLike[str] | None = None,
    n_regular_tokens: int = 4000,
    dims: TinyDims | None = None,
    favoured: Mapping[str, float] | None = None,
) -> Path:
    """Write the tiny model to ``out_path`` and return the path. Weights depend only on ``seed``
    (and ``favoured``: tokens, by text, the model writes more often, the more the larger the
    weight; see `favour_tokens`)."""
    dims = dims or TinyDims()
    source = Path(vocab_path) if vocab_path else default_vocab_path()
    if source is None or not source.is_file():
        raise FileNotFoundError(
            f"DeepSeek vocab GGUF not found (set {VOCAB_ENV} or pass --vocab); looked for {VOCAB_FILE}"
        )
    vocab = add_special_tokens(load_base_vocab(source, n_regular_tokens))
    n_vocab = len(vocab.tokens)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(str(tmp), ARCH)
    _write_hparams(writer, dims, n_vocab)
    _write_tokenizer(writer, vocab, chat_template)
    tensors = make_tensors(dims, n_vocab, seed)
    if favoured:
        favour_tokens(tensors, {vocab.tokens.index(text): weight for text, weight in favoured.items()})
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)  # atomic: a concurrent reader never sees a half-written model
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write a tiny random-weight deepseek2 GGUF for tests and benchmarks."
    )
    parser.add_argument("out", help="output .gguf path")
    parser.add_argument("--chat-template-file", help="Jinja chat template stored as tokenizer.chat_template")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    parser.add_argument("--vocab", help=f"DeepSeek vocab GGUF (default: ${VOCAB_ENV} or the corpus cache)")
    parser.add_argument("--vocab-size", type=int,
                        help=f"regular BPE tokens kept (default {DEFAULT_VOCAB}; 100000 for --shape medium)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny",
                        help="model dimensions (default tiny, which the tests use; aligned: attention "
                             "widths that fill the CPU's vector registers, as a real model's do; medium: "
                             "1.2 B parameters, for GPU measurements)")
    args = parser.parse_args(argv)

    template = None
    if args.chat_template_file:
        try:
            template = Path(args.chat_template_file).read_text(encoding="utf-8")
        except OSError as exc:
            print(f"error: cannot read chat template: {exc}", file=sys.stderr)
            return 2
    try:
        vocab_size = args.vocab_size or SHAPE_VOCAB.get(args.shape, DEFAULT_VOCAB)
        path = build_tiny_model(args.out, template, args.seed, args.vocab, vocab_size, SHAPES[args.shape])
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
