"""The tiny deepseek2 model: it builds fast, loads in llama.cpp, carries the DeepSeek-V3 special
tokens with the right types, and its grammar-relevant vocabulary facts hold (token references)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest_plugins = ["tiny_model"]  # the tiny-model fixtures (imported by pytest, so not imported here)


def builder():  # type: ignore[no-untyped-def]
    import tiny_model

    return tiny_model.builder()


def vocab_path() -> Path:
    import tiny_model

    return tiny_model.vocab_path()


def require_llama() -> None:
    import tiny_model

    tiny_model.require_llama()


def control_tokens() -> list[str]:
    """The DeepSeek-V3 markers the builder writes as CONTROL tokens (its own list, not a copy)."""
    return list(builder().CONTROL_TOKENS)


def user_defined_tokens() -> list[str]:
    """The reasoning markers the builder writes as USER_DEFINED tokens."""
    return list(builder().USER_DEFINED_TOKENS)


def metadata(path: Path, *keys: str) -> dict[str, object]:
    return builder().read_gguf_metadata(path, set(keys))


def test_builds_in_seconds_with_deepseek2_layout(tiny_models, tmp_path: Path) -> None:
    start = time.perf_counter()
    path = builder().build_tiny_model(tmp_path / "m.gguf", "{{ messages }}", seed=3, vocab_path=vocab_path())
    assert time.perf_counter() - start < 10
    meta = metadata(
        path,
        "general.architecture",
        "tokenizer.chat_template",
        "deepseek2.attention.key_length_mla",
        "deepseek2.attention.value_length_mla",
        "deepseek2.rope.dimension_count",
        "deepseek2.leading_dense_block_count",
        "deepseek2.expert_shared_count",
        "deepseek2.attention.kv_lora_rank",
        "deepseek2.attention.q_lora_rank",
    )
    assert meta["general.architecture"] == "deepseek2"
    assert meta["tokenizer.chat_template"] == "{{ messages }}"
    assert len(meta) == 9, "every MLA / MoE key is written"


def test_loads_in_llama_cpp_python_and_generates(tiny_model_path: Path) -> None:
    require_llama()
    from llama_cpp import Llama

    llm = Llama(str(tiny_model_path), n_ctx=512, verbose=False, seed=1)
    assert llm.metadata["general.architecture"] == "deepseek2"
    out = llm.create_completion("<｜User｜>Hi<｜Assistant｜>", max_tokens=16, seed=1)
    assert out["usage"]["completion_tokens"] > 0


def test_tests_use_the_tiny_shape_and_the_aligned_one_generates_with_vector_wide_attention(tmp_path: Path) -> None:
    """`--shape aligned` (a benchmark option) changes only attention widths, to whole multiples
    of 64 values as a real DeepSeek-V3's are; the builder's default stays the tiny shape."""
    require_llama()
    from autoparser.llama.engine import Engine, SamplingParams

    module = builder()
    assert module.SHAPES["tiny"] == module.TinyDims()
    path = module.build_tiny_model(tmp_path / "aligned.gguf", None, vocab_path=vocab_path(),
                                   dims=module.SHAPES["aligned"])
    meta = metadata(path, "deepseek2.attention.key_length", "deepseek2.attention.value_length",
                    "deepseek2.embedding_length")
    assert meta["deepseek2.attention.key_length"] % 64 == 0
    assert meta["deepseek2.attention.value_length"] % 64 == 0
    assert meta["deepseek2.embedding_length"] == module.TinyDims().n_embd
    with Engine(str(path), n_ctx=256, n_threads=1) as engine:
        tokens = list(engine.generate(engine.tokenize("<｜User｜>Hi<｜Assistant｜>"), 8,
                                      SamplingParams(seed=1), ignore_eos=True))
    assert len(tokens) == 8


def test_engine_reports_template_and_markers(tiny_engine, tiny_template) -> None:
    assert tiny_engine.bos_token == "<｜begin▁of▁sentence｜>"
    assert tiny_engine.eos_token == "<｜end▁of▁sentence｜>"
    assert tiny_engine.chat_template == tiny_template
    assert set(control_tokens() + user_defined_tokens()) <= tiny_engine.special_tokens


def test_special_tokens_have_deepseek_types_and_are_single_tokens(tiny_engine) -> None:
    import llama_cpp

    control = control_tokens()
    for text in control + user_defined_tokens():
        token = tiny_engine.token_id(text)
        assert token is not None, text
        assert tiny_engine.tokenize(text) == [token]
        attrs = llama_cpp.llama_vocab_get_attr(tiny_engine.vocab_ptr, token)
        wanted = (
            llama_cpp.LLAMA_TOKEN_ATTR_CONTROL if text in control else llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
        )
        assert attrs & wanted, text
    assert tiny_engine.is_eog(tiny_engine.token_id("<｜end▁of▁sentence｜>"))
    assert not tiny_engine.is_eog(tiny_engine.token_id("<｜tool▁sep｜>"))


@pytest.mark.parametrize(
    "text", ["Hello, world!", "  indented\n\tcode()", "naïve café — 東京 🙂", '{"a": [1, 2.5]}']
)
def test_cut_vocabulary_round_trips_text(tiny_engine, text: str) -> None:
    tokens = tiny_engine.tokenize(text, parse_special=False)
    assert tiny_engine.detokenize(tokens) == text


def test_user_defined_markers_inside_text_become_their_tokens(tiny_engine) -> None:
    think = tiny_engine.token_id("<think>")
    tokens = tiny_engine.tokenize("a<think>b")
    assert think in tokens


def test_weights_depend_on_seed(tiny_models) -> None:
    a = tiny_models.path(None, seed=1).read_bytes()
    b = tiny_models.path(None, seed=2).read_bytes()
    assert a != b
    assert (
        builder()
        .build_tiny_model(tiny_models.root / "again.gguf", None, seed=1, vocab_path=vocab_path())
        .read_bytes()
        == a
    )


# -- GBNF token references, as the grammar generator relies on them ----------------------------------


def test_grammar_token_references_resolve_against_the_model_vocab(tiny_engine) -> None:
    from autoparser.llama.grammar_check import GrammarError, validate_gbnf

    sep = tiny_engine.token_id("<｜tool▁sep｜>")
    validate_gbnf('root ::= <｜tool▁sep｜> "x"', vocab=tiny_engine)
    validate_gbnf("root ::= <think> [a-z]* </think>", vocab=tiny_engine)
    validate_gbnf(f"root ::= <[{sep}]> !<[{sep}]>*", vocab=tiny_engine)
    with pytest.raises(GrammarError, match="invalid token"):
        validate_gbnf("root ::= <｜no▁such▁token｜>", vocab=tiny_engine)
    with pytest.raises(GrammarError, match="outside the vocabulary"):
        validate_gbnf(f"root ::= <[{tiny_engine.n_vocab + 5}]>", vocab=tiny_engine)


def test_token_reference_forces_the_special_token(tiny_engine) -> None:
    """A ``<think>`` reference makes the model emit the real special token, never its spelling."""
    from autoparser.llama.engine import GenerationStats, GrammarSpec, SamplingParams

    think, end = tiny_engine.token_id("<think>"), tiny_engine.token_id("</think>")
    grammar = GrammarSpec(gbnf='root ::= <think> [a-z]{1,8} </think> "."')
    prompt = tiny_engine.tokenize("<｜User｜>Think<｜Assistant｜>")
    for seed in range(3):
        stats = GenerationStats()
        tokens = list(
            tiny_engine.generate(prompt, 40, SamplingParams(seed=seed), grammar=grammar, stats=stats)
        )
        ids = [t.token_id for t in tokens]
        assert ids[0] == think and end in ids
        text = "".join(t.text for t in tokens)
        assert text.startswith("<think>") and text.endswith("</think>.")
