"""Start the real server as a child process on a loopback port, wait until it answers, stop it.

The server is run the way a user runs it (`autoparser serve`, or `python -m autoparser.server`
when the command line does not have `serve`), with `--port 0`: the server binds a free port
itself and prints "listening on http://HOST:PORT", so there is no race for a port. Its output
goes to a log file that failures quote.

The tiny random-weight DeepSeek model (`tools/make_tiny_model.py`) is built once per chat
template into `$AUTOPARSER_CACHE/tiny-models/` and reused.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
LISTENING = re.compile(r"listening on (http://\S+)")
MODEL_NAME = "tiny"


def cache_root() -> Path:
    return Path(os.environ.get("AUTOPARSER_CACHE") or Path.home() / ".cache" / "autoparser")


# -- models ----------------------------------------------------------------------------------------


def _tiny_model_module() -> Any:
    import corpora

    return corpora.tool_module("make_tiny_model")


def tiny_model(template: Path, seed: int = 0, favoured: dict[str, float] | None = None) -> Path:
    """The tiny deepseek2 GGUF carrying `template` as its chat template, built on first use;
    `favoured`: tokens it writes more often (`make_tiny_model.favour_tokens`)."""
    import corpora

    builder = REPO / "tools" / "make_tiny_model.py"
    source = template.read_text(encoding="utf-8")
    extra = repr(sorted(favoured.items())).encode() if favoured else b""
    digest = hashlib.sha256(builder.read_bytes() + source.encode() + str(seed).encode() + extra).hexdigest()[:16]
    out = cache_root() / "tiny-models" / f"{template.stem}-{digest}.gguf"
    if not out.is_file():
        vocab = corpora.deepseek_vocab_gguf()
        _tiny_model_module().build_tiny_model(out, source, seed=seed, vocab_path=vocab, favoured=favoured)
    return out


def find_template(name: str) -> Path:
    """A template from either corpus by file name; skips the test when it is not available."""
    import corpora

    for path in corpora.all_templates():
        if path.name == name:
            return path
    pytest.skip(f"template {name} not found in the corpora")


# -- the server process ----------------------------------------------------------------------------


def serve_command() -> list[str]:
    """`autoparser serve` when the command line has it, else the server package's own entry.

    `$AUTOPARSER_SERVER_PYTHON` runs the server with another interpreter than the tests (a client
    whose dependencies conflict with the server's is tested from its own environment)."""
    python = os.environ.get("AUTOPARSER_SERVER_PYTHON") or sys.executable
    cli = REPO / "autoparser" / "cli.py"
    if cli.is_file() and "run_server" in cli.read_text(encoding="utf-8"):
        return [python, "-m", "autoparser.cli", "serve"]
    return [python, "-m", "autoparser.server"]


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("AUTOPARSER_API_KEY", None)
    return env


@dataclass
class ServerProcess:
    process: subprocess.Popen
    base_url: str
    log_path: Path
    api_key: str | None = None
    upstream: str | None = None
    """The llama-server this one is in front of (`serve --upstream`), if any."""

    def client(self, **kwargs: Any):  # type: ignore[no-untyped-def]
        """The official OpenAI client pointed at this server (no retries: tests see every status)."""
        import openai

        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 60.0)
        return openai.OpenAI(base_url=self.base_url + "/v1", api_key=self.api_key or "unused", **kwargs)

    def http(self, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=kwargs.pop("timeout", 60.0),
                            **kwargs)

    def health(self) -> dict[str, Any]:
        return httpx.get(self.base_url + "/health", timeout=5.0).json()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode


def start_server(model: Path | None, *args: str, log_dir: Path, api_key: str | None = None,
                 timeout: float = 120.0, cwd: Path = REPO, serve: list[str] | None = None) -> ServerProcess:
    """Start `serve --model MODEL --port 0 ARGS` (`serve`: the command, default `serve_command()`)
    in `cwd`; return once `/health` answers. Without a model, ARGS say where generation happens
    (`--upstream URL`).

    The model is served as `tiny` (the name tests send) unless ARGS name it otherwise."""
    log_path = log_dir / "server.log"
    if "--served-model-name" not in args:
        args = (*args, "--served-model-name", MODEL_NAME)
    model_args = ["--model", str(model)] if model is not None else []
    command = [*(serve or serve_command()), *model_args, "--host", "127.0.0.1", "--port", "0", *args]
    if api_key:
        command += ["--api-key", api_key]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=server_env(),
                                   cwd=cwd, start_new_session=True)
    server = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}:\n{_tail(log_path)}")
            if server is None:
                found = LISTENING.search(log_path.read_text(encoding="utf-8", errors="replace"))
                if found:
                    server = ServerProcess(process, found.group(1), log_path, api_key)
            if server is not None and _answers(server.base_url):
                return server
            time.sleep(0.1)
        raise RuntimeError(f"the server did not answer within {timeout:.0f} s:\n{_tail(log_path)}")
    except BaseException:
        if process.poll() is None:
            process.kill()
            process.wait(5)
        raise


def run_serve(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Run `serve ARGS` to completion (for start-up failures), capturing its output."""
    return subprocess.run([*serve_command(), *args], capture_output=True, text=True, env=server_env(),
                          cwd=REPO, timeout=timeout)


def _answers(base_url: str) -> bool:
    try:
        return httpx.get(base_url + "/health", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
