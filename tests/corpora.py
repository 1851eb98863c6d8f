"""Where the test suites find real chat templates; none of them are part of the project.

Two corpora:

* llama.cpp's `models/templates/*.jinja`, taken from the pinned llama-cpp-python source package
  by `tools/fetch_corpus.py` into `$AUTOPARSER_CACHE` (default `~/.cache/autoparser`). Fetched on
  first use; tests skip with the reason when that fails (no network, no pip).
* a shared corpus of templates from public repositories plus peer projects' parser test cases,
  in `shared/corpus/` beside the repository checkout, or `$AUTOPARSER_SHARED` (the `shared`
  directory, or its `corpus` directory itself). Tests skip when it is absent.

Peers' parser tests are fetched the same way: llama.cpp's `tests/test-chat.cpp` from the same
sdist, and vLLM's `tests/tool_parsers/*.py` and `tests/reasoning/*.py` from vLLM's pinned sdist on
PyPI by `tools/vllm_parser_cases.py`.

Functions that return lists call `pytest.skip(..., allow_module_level=True)` when the corpus is
unavailable, so they work inside a test and at collection time. For parametrizing, the
`*_params()` variants never skip: they return one skipped parameter instead, so the rest of a
test module still runs.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import sys
import tarfile
from functools import cache
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


@cache
def tool_module(name: str) -> ModuleType:
    """`tools/NAME.py` as a module, loaded once by path: `tools/` is scripts, not a package."""
    module_name = f"_autoparser_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while a class is built
    spec.loader.exec_module(module)
    return module


def make_sdist(path: Path, members: dict[str, bytes]) -> Path:
    """A source package at `path` holding `members` (archive name -> bytes), for the fetchers' tests."""
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def corpus_fetcher() -> ModuleType:
    return tool_module("fetch_corpus")


@cache
def _llamacpp_fetch_error() -> str | None:
    """Fetch llama.cpp's corpus once per session; the reason it failed, or None."""
    fetcher = corpus_fetcher()
    try:
        fetcher.fetch()
    except fetcher.FetchError as exc:
        return f"llama.cpp template corpus unavailable: {exc}"
    return None


def llamacpp_templates() -> list[Path]:
    """llama.cpp's real templates, fetched on first use."""
    reason = _llamacpp_fetch_error()
    if reason:
        pytest.skip(reason, allow_module_level=True)
    return sorted(corpus_fetcher().templates_dir().glob("*.jinja"))


def deepseek_vocab_gguf() -> Path:
    """A weight-less GGUF holding DeepSeek's tokenizer vocabulary."""
    reason = _llamacpp_fetch_error()
    if reason:
        pytest.skip(reason, allow_module_level=True)
    return corpus_fetcher().vocab_path()


def shared_corpus_dir() -> Path | None:
    """The shared corpus directory (holding `templates/` and `peer_cases.jsonl`), or None."""
    configured = os.environ.get("AUTOPARSER_SHARED")
    candidates = [Path(configured), Path(configured) / "corpus"] if configured else []
    candidates.append(REPO.parent / "shared" / "corpus")
    for candidate in candidates:
        if (candidate / "templates").is_dir():
            return candidate
    return None


def _shared_or_skip() -> Path:
    directory = shared_corpus_dir()
    if directory is None:
        pytest.skip("shared corpus not found: set AUTOPARSER_SHARED or place shared/corpus beside the "
                    "repository", allow_module_level=True)
    return directory


def shared_templates() -> list[Path]:
    """The shared corpus's templates from public repositories."""
    return sorted((_shared_or_skip() / "templates").glob("*.jinja"))


def peer_cases() -> list[dict[str, Any]]:
    """Peer projects' parser expectations, one dict per line of `peer_cases.jsonl`."""
    path = _shared_or_skip() / "peer_cases.jsonl"
    if not path.is_file():
        pytest.skip(f"{path.name} missing from the shared corpus", allow_module_level=True)
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def all_templates() -> list[Path]:
    """Both corpora together, whichever are available (possibly empty, never skips)."""
    return _quietly(llamacpp_templates) + _quietly(shared_templates)


def _quietly(source: Any) -> list[Any]:
    try:
        return source()
    except pytest.skip.Exception:
        return []


def _as_params(source: Any) -> list[Any]:
    try:
        items = source()
    except pytest.skip.Exception as exc:
        return [pytest.param(None, id="corpus-unavailable", marks=pytest.mark.skip(reason=str(exc)))]
    if not items:
        return [pytest.param(None, id="corpus-empty", marks=pytest.mark.skip(reason="corpus is empty"))]
    return [pytest.param(item, id=item.stem if isinstance(item, Path) else str(item.get("id"))) for item in items]


def llamacpp_template_params() -> list[Any]:
    """`llamacpp_templates()` as pytest parameters named after the file."""
    return _as_params(llamacpp_templates)


def shared_template_params() -> list[Any]:
    """`shared_templates()` as pytest parameters named after the file."""
    return _as_params(shared_templates)


def peer_case_params() -> list[Any]:
    """`peer_cases()` as pytest parameters named by case id."""
    return _as_params(peer_cases)


def llama_chat_cases_tool() -> ModuleType:
    return tool_module("llama_chat_cases")


def llamacpp_chat_tests() -> Path:
    """llama.cpp's `tests/test-chat.cpp` (its parser expectations), fetched on first use."""
    reason = _llamacpp_fetch_error()
    if reason:
        pytest.skip(reason, allow_module_level=True)
    fetcher = corpus_fetcher()
    try:
        return fetcher.fetch_chat_tests()
    except fetcher.FetchError as exc:
        pytest.skip(f"llama.cpp's test-chat.cpp unavailable: {exc}", allow_module_level=True)


def vllm_parser_cases_tool() -> ModuleType:
    return tool_module("vllm_parser_cases")


@cache
def _vllm_fetch_error(subdir: PurePosixPath, what: str) -> str | None:
    """Fetch one folder of vLLM's tests once per session; the reason it failed, or None."""
    tool = vllm_parser_cases_tool()
    try:
        tool.fetch(subdir=subdir)
    except tool.FetchError as exc:
        return f"vLLM's {what} tests unavailable: {exc}"
    return None


def _vllm_tests(subdir: PurePosixPath, what: str) -> Path:
    reason = _vllm_fetch_error(subdir, what)
    if reason:
        pytest.skip(reason, allow_module_level=True)
    return vllm_parser_cases_tool().tests_dir(subdir)


def vllm_parser_tests() -> Path:
    """vLLM's `tests/tool_parsers/` (its parser expectations), fetched on first use."""
    return _vllm_tests(vllm_parser_cases_tool().TESTS, "tool-parser")


def vllm_reasoning_cases_tool() -> ModuleType:
    return tool_module("vllm_reasoning_cases")


def vllm_reasoning_tests() -> Path:
    """vLLM's `tests/reasoning/` (its reasoning-parser expectations), fetched on first use."""
    return _vllm_tests(vllm_parser_cases_tool().REASONING_TESTS, "reasoning-parser")


_BARE_HY3_MARKERS = re.compile(r"<(/?)(tool_calls|tool_call|tool_sep|arg_key|arg_value)>")


def spell_hy3_markers_as_its_template(cases: list[Any]) -> None:
    """Rewrite peer cases written with another release's bare markers (`<tool_call>`) as Hy3's
    template spells them (`<tool_call:opensource>`), in each case's output and its chunks."""
    def respell(text: str) -> str:
        return _BARE_HY3_MARKERS.sub(r"<\1\2:opensource>", text)

    for case in cases:
        case.model_output = respell(case.model_output)
        if case.chunks:
            case.chunks = [respell(chunk) for chunk in case.chunks]
