"""`tools/fetch_corpus.py` on a synthetic sdist: only the wanted files, safely, once."""

from __future__ import annotations

from pathlib import Path

import pytest
from corpora import corpus_fetcher, make_sdist

fetcher = corpus_fetcher()
TOP = fetcher.SDIST_STEM
MODELS = f"{TOP}/vendor/llama.cpp/models"


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("AUTOPARSER_CACHE", str(root))
    return root


def test_extracts_only_templates_and_vocabulary(tmp_path: Path, cache: Path) -> None:
    sdist = make_sdist(tmp_path / "s.tar.gz", {
        f"{MODELS}/templates/A.jinja": b"{{ a }}",
        f"{MODELS}/templates/README.md": b"not a template",
        f"{MODELS}/templates/nested/B.jinja": b"nested is not taken",
        f"{MODELS}/ggml-vocab-deepseek-llm.gguf": b"GGUF",
        f"{MODELS}/ggml-vocab-other.gguf": b"GGUF",
        f"{TOP}/setup.py": b"",
        f"{MODELS}/templates/../../../../../escape.jinja": b"outside",
    })
    templates = fetcher.fetch(sdist)
    assert templates == cache / "corpus" / TOP / "vendor/llama.cpp/models/templates"
    assert sorted(p.name for p in templates.iterdir()) == ["A.jinja"]
    assert fetcher.vocab_path().read_bytes() == b"GGUF"
    assert sorted(p.name for p in fetcher.models_dir().iterdir()) == ["ggml-vocab-deepseek-llm.gguf", "templates"]
    assert not list(tmp_path.rglob("escape.jinja"))


def test_second_fetch_is_a_no_op(tmp_path: Path, cache: Path) -> None:
    sdist = make_sdist(tmp_path / "s.tar.gz", {f"{MODELS}/templates/A.jinja": b"1",
                                               f"{MODELS}/ggml-vocab-deepseek-llm.gguf": b"GGUF"})
    fetcher.fetch(sdist)
    sdist.unlink()  # would fail if it were opened again
    assert fetcher.is_fetched()
    assert (fetcher.fetch(sdist) / "A.jinja").read_bytes() == b"1"


def test_sdist_without_templates_is_an_error(tmp_path: Path, cache: Path) -> None:
    sdist = make_sdist(tmp_path / "s.tar.gz", {f"{TOP}/setup.py": b""})
    with pytest.raises(fetcher.FetchError, match="holds no"):
        fetcher.fetch(sdist)
    assert not fetcher.is_fetched()


def test_broken_archive_is_an_error(tmp_path: Path, cache: Path) -> None:
    broken = tmp_path / "s.tar.gz"
    broken.write_bytes(b"not a tarball")
    with pytest.raises(fetcher.FetchError, match="cannot extract"):
        fetcher.fetch(broken)


def test_chat_tests_are_extracted_beside_the_models(tmp_path: Path, cache: Path) -> None:
    sdist = make_sdist(tmp_path / "s.tar.gz", {
        f"{MODELS}/templates/A.jinja": b"1",
        f"{MODELS}/ggml-vocab-deepseek-llm.gguf": b"GGUF",
        f"{TOP}/vendor/llama.cpp/tests/test-chat.cpp": b"// cases",
        f"{TOP}/vendor/llama.cpp/tests/other.cpp": b"// not taken",
    })
    path = fetcher.fetch_chat_tests(sdist)
    assert path == cache / "corpus" / TOP / "vendor/llama.cpp/tests/test-chat.cpp"
    assert path.read_bytes() == b"// cases"
    assert sorted(p.name for p in path.parent.iterdir()) == ["test-chat.cpp"]
    sdist.unlink()  # a second call does not open the archive again
    assert fetcher.fetch_chat_tests(sdist) == path


def test_sdist_without_chat_tests_is_an_error(tmp_path: Path, cache: Path) -> None:
    sdist = make_sdist(tmp_path / "s.tar.gz", {f"{MODELS}/templates/A.jinja": b"1"})
    with pytest.raises(fetcher.FetchError, match="holds no"):
        fetcher.fetch_chat_tests(sdist)
    assert not fetcher.chat_tests_path().exists()
