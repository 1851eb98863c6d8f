"""What the server benchmarks share: the tiny model, starting and stopping a server, its CPU time.

``bench_load.py`` and ``bench_serve.py`` import it from this folder.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tiny_model(out_dir: Path, shape: str = "tiny", vocab_size: int | None = None) -> Path:
    """The tiny random-weight ``deepseek2`` model with llama.cpp's DeepSeek V3.1 template, of
    ``make_tiny_model.SHAPES[shape]``, keeping ``vocab_size`` regular tokens (default: the shape's)."""
    sys.path.insert(0, str(REPO / "tools"))
    import fetch_corpus
    import make_tiny_model

    template = fetch_corpus.templates_dir() / "deepseek-ai-DeepSeek-V3.1.jinja"
    if not template.is_file():
        fetch_corpus.fetch()
    vocab_size = vocab_size or make_tiny_model.SHAPE_VOCAB.get(shape, make_tiny_model.DEFAULT_VOCAB)
    return make_tiny_model.build_tiny_model(out_dir / f"{shape}-{vocab_size}-v3.1.gguf",
                                            template.read_text(encoding="utf-8"), vocab_path=fetch_corpus.vocab_path(),
                                            n_regular_tokens=vocab_size, dims=make_tiny_model.SHAPES[shape])


def start_server(model: Path | None, log_path: Path, *args: str, timeout_s: float = 120.0) -> tuple[subprocess.Popen, str]:
    """``autoparser serve`` on a free port, logging to ``log_path``; returns once ``/health`` answers.
    Without a model, ``args`` name the upstream (``--upstream URL``)."""
    import httpx

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    model_args = ["--model", str(model)] if model is not None else []
    command = [sys.executable, "-m", "autoparser.server", *model_args, "--port", "0",
               "--log-level", "warning", *args]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"the server exited:\n{log_path.read_text()}")
        found = re.search(r"listening on (http://\S+)", log_path.read_text(errors="replace"))
        if found:
            try:
                if httpx.get(found.group(1) + "/health", timeout=2).status_code == 200:
                    return process, found.group(1)
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    process.kill()
    sys.exit("the server did not start")


def stop_server(process: subprocess.Popen) -> None:
    """Ctrl-C, as a user would stop it; killed if it does not stop within 30 s."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def cpu_seconds(pid: int) -> float:
    """CPU time of one process so far, summed over its live threads (Linux; 0 elsewhere).

    Read from each thread's ``schedstat`` (nanoseconds), not ``stat`` (clock ticks of 10 ms:
    too coarse for a round of a few hundred tokens)."""
    try:
        return sum(int((task / "schedstat").read_text().split()[0])
                   for task in Path(f"/proc/{pid}/task").iterdir()) / 1e9
    except (OSError, IndexError, ValueError):  # no schedstat (or the process ended): clock ticks
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux; none elsewhere): the server's model worker."""
    children: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            children += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        return []
    return children


def server_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU time so far of the server's front end and of its child processes (the model worker)."""
    return {"front": cpu_seconds(pid), "worker": sum(cpu_seconds(child) for child in child_pids(pid))}
