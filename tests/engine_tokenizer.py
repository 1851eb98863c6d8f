"""An offline tokenizer folder for a chat template, for running the engine plugins without weights.

The vocabulary is the 256 byte-level symbols with no merges (every byte one token), plus the
template's BOS, EOS and the given markers as added tokens, special or not. That is enough for a
serving engine to load the tokenizer, render prompts, turn text into ids and back, and tell
special tokens apart, which is all the parser plugins use. Nothing is downloaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path


def write_tokenizer(folder: Path, template: str, bos: str, eos: str, specials: Iterable[str] = (),
                    plain: Iterable[str] = ()) -> Path:
    """Write tokenizer files and a minimal config.json into `folder` and return it."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={symbol: i for i, symbol in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    special = [t for t in dict.fromkeys([bos, eos, *specials]) if t]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    added = [t for t in dict.fromkeys(plain) if t and t not in special]
    if added:
        tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=bos or None, eos_token=eos or None)
    fast.chat_template = template
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(folder))
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab_size,
        "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2, "num_hidden_layers": 1,
        "num_key_value_heads": 2, "max_position_embeddings": 4096, "torch_dtype": "float32",
        "bos_token_id": fast.bos_token_id, "eos_token_id": fast.eos_token_id,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return folder
