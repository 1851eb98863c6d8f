"""Build llama.cpp's `llama-server` from the llama.cpp vendored in the pinned llama-cpp-python sdist.

The same source package `tools/fetch_corpus.py` downloads for the template corpus carries a whole
llama.cpp tree, so one cmake build of the `llama-server` target gives a server of exactly the
llama.cpp version the project's own engine runs. Built once and kept in the cache beside the corpus:

    python tools/build_llama_server.py               # build if needed, print the binary's path
    python tools/build_llama_server.py --jobs 2      # parallel compile jobs (default: 2)

Cache: `$AUTOPARSER_CACHE` or `~/.cache/autoparser`; layout
`llama-server/llama_cpp_python-<version>/{src,build}`, the binary at `.../build/bin/llama-server`.
A build that fails or is interrupted leaves no binary behind, so running it again starts over the
cmake step (cmake itself reuses what it already compiled).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path, PurePosixPath

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fetch_corpus  # noqa: E402

VENDORED = PurePosixPath("vendor/llama.cpp")
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
)


class BuildError(RuntimeError):
    """llama-server could not be built; the message says why in one line."""


def build_root() -> Path:
    return fetch_corpus.cache_root() / "llama-server" / fetch_corpus.SDIST_STEM


def source_dir() -> Path:
    return build_root() / "src"


def binary_path() -> Path:
    return build_root() / "build" / "bin" / "llama-server"


def is_built() -> bool:
    return binary_path().is_file()


def missing_tools() -> list[str]:
    """The build tools absent from PATH (cmake and a C++ compiler)."""
    missing = [] if shutil.which("cmake") else ["cmake"]
    if not any(shutil.which(name) for name in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler")
    return missing


def _vendored_relative(member: tarfile.TarInfo) -> PurePosixPath | None:
    """The path below `vendor/llama.cpp/` for a regular file of the tree, else None; checked part
    by part so that no archive entry can write outside the source directory."""
    parts = PurePosixPath(member.name).parts
    if not member.isfile() or len(parts) < 2 or any(p in ("", ".", "..") for p in parts):
        return None
    try:
        rel = PurePosixPath(*parts[1:]).relative_to(VENDORED)
    except ValueError:
        return None
    return rel if rel.parts else None


def extract_source(sdist: Path) -> Path:
    """Extract the vendored llama.cpp tree (once; a finished extraction leaves a marker)."""
    target = source_dir()
    marker = target / ".extracted"
    if marker.is_file():
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    try:
        with tarfile.open(sdist, "r:*") as archive:
            for member in archive:
                rel = _vendored_relative(member)
                if rel is None:
                    continue
                source = archive.extractfile(member)
                if source is None:
                    continue
                destination = target.joinpath(*rel.parts)
                destination.parent.mkdir(parents=True, exist_ok=True)
                with source, open(destination, "wb") as out:
                    shutil.copyfileobj(source, out)
                if member.mode & 0o111:
                    destination.chmod(0o755)
    except (OSError, tarfile.TarError) as exc:
        raise BuildError(f"cannot extract llama.cpp from {sdist}: {exc}") from None
    if not (target / "CMakeLists.txt").is_file():
        raise BuildError(f"{sdist} holds no {VENDORED}/CMakeLists.txt")
    marker.touch()
    return target


def _run(command: list[str], log: Path) -> None:
    with open(log, "a", encoding="utf-8") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        # at a low priority: the build takes minutes of every core, on machines that do other work
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, preexec_fn=lambda: os.nice(10))
    if result.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or [""]
        raise BuildError(f"{command[0]} failed ({result.returncode}), see {log}: {tail[0]}")


def build(jobs: int = 2, sdist: Path | None = None) -> Path:
    """Make sure `llama-server` is built; returns the binary's path. Concurrent callers (two
    test sessions) take turns: the second finds the first one's binary."""
    if is_built():
        return binary_path()
    missing = missing_tools()
    if missing:
        raise BuildError(f"cannot build llama-server without {' and '.join(missing)}")
    build_root().mkdir(parents=True, exist_ok=True)
    with open(build_root() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built():
            return binary_path()
        return _build_locked(jobs, sdist)


def _build_locked(jobs: int, sdist: Path | None) -> Path:
    try:
        source = extract_source(sdist if sdist is not None else fetch_corpus.download_sdist())
    except fetch_corpus.FetchError as exc:
        raise BuildError(str(exc)) from None
    build_dir = build_root() / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    log = build_root() / "build.log"
    _run(["cmake", "-S", str(source), "-B", str(build_dir), *CMAKE_OPTIONS], log)
    _run(["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", str(jobs)], log)
    if not is_built():
        raise BuildError(f"the build finished without {binary_path()}")
    return binary_path()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="parallel compile jobs")
    parser.add_argument("--sdist", type=Path, help="use this llama-cpp-python sdist instead of pip download")
    args = parser.parse_args(argv)
    try:
        path = build(args.jobs, args.sdist)
    except BuildError as exc:
        print(f"build_llama_server: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
