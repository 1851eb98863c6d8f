"""Fixtures for tests that run the tiny random-weight ``deepseek2`` model through llama.cpp.

The model is written by ``tools/make_tiny_model.py`` (loaded by path: ``tools/`` holds scripts,
not a package) into a per-session temporary directory, once per (template, seed); building takes
well under a second. Test modules get the fixtures with::

    pytest_plugins = ["tiny_model"]

Everything skips cleanly when llama-cpp-python or the DeepSeek vocabulary is unavailable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
V31_TEMPLATE = "deepseek-ai-DeepSeek-V3.1.jinja"


def builder() -> ModuleType:
    """``tools/make_tiny_model.py`` as a module."""
    import corpora

    return corpora.tool_module("make_tiny_model")


def require_llama() -> None:
    """Skip unless llama-cpp-python imports."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")


def vocab_path() -> Path:
    """The DeepSeek vocabulary GGUF (skips the test when the corpus cannot be fetched)."""
    import corpora

    return corpora.deepseek_vocab_gguf()


def v31_template() -> str | None:
    """DeepSeek V3.1's chat template text from the llama.cpp corpus, or None when unavailable."""
    import corpora

    for path in corpora.llamacpp_templates():
        if path.name == V31_TEMPLATE:
            return path.read_text(encoding="utf-8")
    return None


class TinyModels:
    """Builds tiny models on demand into one directory, each (template, seed) once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.built: dict[tuple[str | None, int], Path] = {}

    def path(self, template: str | None = None, seed: int = 0) -> Path:
        key = (template, seed)
        if key not in self.built:
            out = self.root / f"tiny-{len(self.built)}-seed{seed}.gguf"
            self.built[key] = builder().build_tiny_model(out, template, seed=seed, vocab_path=vocab_path())
        return self.built[key]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """Factory for tiny models: ``tiny_models.path(template_text, seed)``."""
    return TinyModels(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session")
def tiny_template() -> str | None:
    return v31_template()


@pytest.fixture(scope="session")
def tiny_model_path(tiny_models: TinyModels, tiny_template: str | None) -> Path:
    """The tiny model with DeepSeek V3.1's template (no template when the corpus lacks it), seed 0."""
    return tiny_models.path(tiny_template, seed=0)


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_path: Path) -> Iterator[Any]:
    """An :class:`autoparser.llama.engine.Engine` on the tiny model, shared by the session."""
    require_llama()
    from autoparser.llama.engine import Engine

    engine = Engine(str(tiny_model_path), n_ctx=2048)
    yield engine
    engine.close()
