"""Fetch llama.cpp's real chat templates (and one small vocabulary) from the llama-cpp-python sdist.

llama.cpp keeps ~70 chat templates of real models in `models/templates/`, and llama-cpp-python's
source package vendors llama.cpp, so one pinned `pip download` gives a reproducible corpus without
cloning anything. Only the templates and `ggml-vocab-deepseek-llm.gguf` (a weight-less GGUF with
a real tokenizer, useful for tokenizing marker strings) are extracted, plus llama.cpp's own
parser expectations `tests/test-chat.cpp` (read as data by `tools/llama_chat_cases.py`). The
files stay in the cache and are never copied into the project.

    python tools/fetch_corpus.py            # fetch if needed, print the templates directory
    python tools/fetch_corpus.py --sdist llama_cpp_python-0.3.36.tar.gz   # use a local tarball

Cache: `$AUTOPARSER_CACHE` or `~/.cache/autoparser`; layout
`corpus/llama_cpp_python-<version>/vendor/llama.cpp/models/{templates/*.jinja,<vocab>.gguf}` and
`corpus/llama_cpp_python-<version>/vendor/llama.cpp/tests/test-chat.cpp`.
Running it again does nothing once the files are there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"
SDIST_STEM = f"llama_cpp_python-{VERSION}"
MODELS = PurePosixPath("vendor/llama.cpp/models")
VOCAB = "ggml-vocab-deepseek-llm.gguf"
CHAT_TESTS = PurePosixPath("vendor/llama.cpp/tests/test-chat.cpp")


class FetchError(RuntimeError):
    """The corpus could not be fetched or extracted; the message says why in one line."""


def cache_root() -> Path:
    return Path(os.environ.get("AUTOPARSER_CACHE") or Path.home() / ".cache" / "autoparser")


def models_dir() -> Path:
    """Where the extracted `models/` subtree lives (it may not exist yet)."""
    return cache_root() / "corpus" / SDIST_STEM / MODELS


def templates_dir() -> Path:
    return models_dir() / "templates"


def vocab_path() -> Path:
    return models_dir() / VOCAB


def chat_tests_path() -> Path:
    """Where llama.cpp's `tests/test-chat.cpp` is extracted (it may not exist yet)."""
    return cache_root() / "corpus" / SDIST_STEM / CHAT_TESTS


def is_fetched() -> bool:
    return vocab_path().is_file() and any(templates_dir().glob("*.jinja"))


def _wanted(member: tarfile.TarInfo) -> PurePosixPath | None:
    """The path below `models/` for members we keep, else None. Checked component by component
    so that no archive entry can write outside the target directory."""
    parts = PurePosixPath(member.name).parts
    if not member.isfile() or len(parts) < 2 or any(p in ("", ".", "..") for p in parts):
        return None
    inner = PurePosixPath(*parts[1:])  # drop the top-level "<name>-<version>/" directory
    try:
        rel = inner.relative_to(MODELS)
    except ValueError:
        return None
    if rel == PurePosixPath(VOCAB):
        return rel
    if len(rel.parts) == 2 and rel.parts[0] == "templates" and rel.suffix == ".jinja":
        return rel
    return None


def extract_members(sdist: Path, target: Path, wanted, what: str) -> int:
    """Copy the members of `sdist` that `wanted` places (a relative path below `target`, or None)
    into `target`; returns how many files were written. `what` names the files in the error where
    none is found.

    Extracts into a temporary directory first and then moves it into place, so an interrupted run
    never leaves a half-filled directory that looks complete.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    count = 0
    try:
        with tarfile.open(sdist, "r:*") as archive:
            for member in archive:
                rel = wanted(member)
                source = archive.extractfile(member) if rel is not None else None
                if source is None:
                    continue
                destination = staging.joinpath(*rel.parts)
                destination.parent.mkdir(parents=True, exist_ok=True)
                with source, open(destination, "wb") as out:
                    shutil.copyfileobj(source, out)
                count += 1
        if count == 0:
            raise FetchError(f"{sdist} holds no {what} files")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except (OSError, tarfile.TarError) as exc:
        raise FetchError(f"cannot extract {sdist}: {exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return count


def extract(sdist: Path) -> int:
    """Extract the templates and the vocabulary from `sdist`; returns how many files were written."""
    return extract_members(sdist, models_dir(), _wanted, f"{MODELS}/templates/*.jinja")


def download_sdist() -> Path:
    """`pip download` the pinned source package into the cache (reused when already there)."""
    downloads = cache_root() / "downloads"
    existing = sorted(downloads.glob(f"{SDIST_STEM}.tar.gz"))
    if existing:
        return existing[0]
    downloads.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               f"{PACKAGE}=={VERSION}", "-d", str(downloads), "--quiet"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FetchError(f"pip download failed: {exc}") from None
    found = sorted(downloads.glob(f"{SDIST_STEM}.tar.gz"))
    if result.returncode != 0 or not found:
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise FetchError(f"pip download of {PACKAGE}=={VERSION} failed: {last[0]}")
    return found[0]


def extract_chat_tests(sdist: Path) -> Path:
    """Extract `tests/test-chat.cpp` from `sdist` into the cache, written whole or not at all."""
    target = chat_tests_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(sdist, "r:*") as archive:
            for member in archive:
                parts = PurePosixPath(member.name).parts
                if not member.isfile() or len(parts) < 2 or PurePosixPath(*parts[1:]) != CHAT_TESTS:
                    continue
                source = archive.extractfile(member)
                if source is None:
                    break
                partial = target.with_suffix(".partial")
                with source, open(partial, "wb") as out:
                    shutil.copyfileobj(source, out)
                partial.replace(target)
                return target
    except (OSError, tarfile.TarError) as exc:
        raise FetchError(f"cannot extract {CHAT_TESTS} from {sdist}: {exc}") from None
    raise FetchError(f"{sdist} holds no {CHAT_TESTS}")


def fetch_chat_tests(sdist: Path | None = None, force: bool = False) -> Path:
    """Make sure llama.cpp's `tests/test-chat.cpp` is in the cache; returns its path."""
    if force or not chat_tests_path().is_file():
        try:
            extract_chat_tests(sdist if sdist is not None else download_sdist())
        except OSError as exc:
            raise FetchError(f"cannot write the corpus cache under {cache_root()}: {exc}") from None
    return chat_tests_path()


def fetch(sdist: Path | None = None, force: bool = False) -> Path:
    """Make sure the corpus is extracted; returns the templates directory."""
    if force or not is_fetched():
        try:
            extract(sdist if sdist is not None else download_sdist())
        except OSError as exc:  # e.g. an unwritable cache directory
            raise FetchError(f"cannot write the corpus cache under {cache_root()}: {exc}") from None
    return templates_dir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, help="use this llama-cpp-python sdist instead of pip download")
    parser.add_argument("--force", action="store_true", help="extract again even if already present")
    args = parser.parse_args(argv)
    try:
        templates = fetch(args.sdist, force=args.force)
        chat_tests = fetch_chat_tests(args.sdist, force=args.force)
    except FetchError as exc:
        print(f"fetch_corpus: {exc}", file=sys.stderr)
        return 1
    print(f"{len(list(templates.glob('*.jinja')))} templates in {templates}")
    print(f"vocabulary: {vocab_path()}")
    print(f"parser expectations: {chat_tests}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
