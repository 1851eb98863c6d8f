"""A real llama-server for the tests of `autoparser serve --upstream`.

The binary is built once from the llama.cpp vendored in the pinned llama-cpp-python source
package (`tools/build_llama_server.py`, cached under `$AUTOPARSER_CACHE` like the corpus); the
first build takes several minutes. Tests skip with the reason when it cannot be built (no cmake
or compiler, no source package), or when `AUTOPARSER_BUILD_LLAMA_SERVER=0` forbids building one
that is not there yet.

`start_llama_server` runs it on a free loopback port with a model and returns once its model has
loaded; `front_end_on_llama_server` puts `serve --upstream` in front of one.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import httpx
import pytest
from server_harness import ServerProcess

BUILD_ENV = "AUTOPARSER_BUILD_LLAMA_SERVER"


def _builder():  # type: ignore[no-untyped-def]
    import corpora

    return corpora.tool_module("build_llama_server")


@cache
def _binary_or_reason() -> tuple[Path | None, str]:
    builder = _builder()
    if builder.is_built():
        return builder.binary_path(), ""
    if os.environ.get(BUILD_ENV) == "0":
        return None, f"llama-server is not built and {BUILD_ENV}=0 forbids building it"
    missing = builder.missing_tools()
    if missing:
        return None, f"cannot build llama-server: missing {' and '.join(missing)}"
    try:
        return builder.build(jobs=max(1, (os.cpu_count() or 2))), ""
    except builder.BuildError as exc:
        return None, f"llama-server could not be built: {exc}"


def llama_server_binary() -> Path:
    """The built binary (building it on first use); skips the test when that is impossible."""
    path, reason = _binary_or_reason()
    if path is None:
        pytest.skip(reason)
    return path


@dataclass
class LlamaServer:
    process: subprocess.Popen
    base_url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_llama_server(model: Path, *args: str, log_dir: Path, parallel: int = 4, n_ctx: int = 4096,
                       timeout: float = 120.0) -> LlamaServer:
    """llama-server on `model`, `parallel` slots of `n_ctx` tokens each, on a loopback port."""
    binary = llama_server_binary()
    port = free_port()
    log_path = log_dir / "llama-server.log"
    command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
               "--parallel", str(parallel), "--ctx-size", str(n_ctx * parallel), "--threads", "1",
               "--no-webui", "--no-warmup", *args]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    server = LlamaServer(process, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {process.returncode}:\n{_tail(log_path)}")
            try:
                if httpx.get(server.base_url + "/health", timeout=2.0).status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"llama-server did not load its model within {timeout:.0f} s:\n{_tail(log_path)}")
    except BaseException:
        server.stop()
        raise


@contextmanager
def front_end_on_llama_server(model: Path, *front_args: str, log_dir: Path, parallel: int = 1,
                              n_ctx: int = 4096) -> Iterator[ServerProcess]:
    """`serve --upstream` in front of a llama-server on `model`; both stopped at the end."""
    from server_harness import start_server

    upstream = start_llama_server(model, log_dir=log_dir, parallel=parallel, n_ctx=n_ctx)
    try:
        front = start_server(None, "--upstream", upstream.base_url, *front_args, log_dir=log_dir)
        front.upstream = upstream.base_url
        try:
            yield front
        finally:
            front.stop()
    finally:
        upstream.stop()


@contextmanager
def serving(way: str, model: Path, *front_args: str, log_dir: Path, n_ctx: int = 4096,
            parallel: int | None = None) -> Iterator[ServerProcess]:
    """The server on `model` the way a test names: "engine", its own engine with `n_ctx` tokens of
    context (in `parallel` slots, or its default); "upstream", `serve --upstream` in front of a
    llama-server with as many slots, sharing as much context. `front_args` go to `serve`."""
    if way == "upstream":
        slots = parallel or 1
        with front_end_on_llama_server(model, *front_args, log_dir=log_dir, parallel=slots,
                                       n_ctx=n_ctx // slots) as front:
            yield front
        return
    from server_harness import start_server

    slots_args = ("--parallel", str(parallel)) if parallel else ()
    process = start_server(model, "--n-ctx", str(n_ctx), *slots_args, *front_args, log_dir=log_dir)
    try:
        yield process
    finally:
        process.stop()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
