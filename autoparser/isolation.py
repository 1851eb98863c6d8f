"""Analysis of an untrusted template in a child process under hard memory and CPU limits.

The renderer prices every operation it knows to multiply size or time, but a template is
arbitrary code, and one bound the sandbox misses would take the whole process down with it
(or wedge it). The command line and the server's start-up therefore analyze in a child process
whose address space and CPU time the kernel caps (`setrlimit`), with a wall-clock limit on top.
Whatever happens there, the caller gets an `Analysis` or a one-line `TemplateRenderError`.

A fresh interpreter (`python -m autoparser.isolation`) rather than `multiprocessing`: the child
sets its limits before it imports anything, a threaded parent (the server) is never forked, and
the exchange is plain JSON on stdin/stdout. It costs about 0.3 s of start-up per analysis.
The child runs with `-P` (and `PYTHONSAFEPATH`): `python -m` would otherwise put the current
directory first on `sys.path`, and a `json.py` in the folder a user analyzes would run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoparser.analysis import Analysis
from autoparser.render import (
    RenderLimitExceeded,
    SandboxViolation,
    TemplateCompileError,
    TemplateRaisedError,
    TemplateRenderError,
)

__all__ = ["HardLimits", "analyze_isolated"]


@dataclass(frozen=True)
class HardLimits:
    """What the child process may use: address space, CPU seconds, wall-clock seconds."""

    memory_bytes: int = 1 << 30
    cpu_seconds: int = 60
    wall_seconds: float = 90.0


DEFAULT_HARD_LIMITS = HardLimits()

_ERRORS: dict[str, type[TemplateRenderError]] = {
    "compile": TemplateCompileError, "raised": TemplateRaisedError, "sandbox": SandboxViolation,
    "limit": RenderLimitExceeded, "other": TemplateRenderError,
}


def analyze_isolated(source: str, bos_token: str = "", eos_token: str = "",
                     limits: HardLimits = DEFAULT_HARD_LIMITS, **template_kwargs: Any) -> Analysis:
    """`autoparser.analyze` in a child process under `limits`; raises `TemplateRenderError`."""
    request = json.dumps({"source": source, "bos_token": bos_token, "eos_token": eos_token,
                          "kwargs": template_kwargs, "memory_bytes": limits.memory_bytes,
                          "cpu_seconds": limits.cpu_seconds})
    try:
        done = subprocess.run([sys.executable, "-P", "-m", "autoparser.isolation"], input=request.encode(),
                              capture_output=True, timeout=limits.wall_seconds, env=_child_environment())
    except subprocess.TimeoutExpired:
        raise RenderLimitExceeded(f"template analysis took longer than {limits.wall_seconds:g} s "
                                  "and was stopped") from None
    try:
        reply = json.loads(done.stdout)
    except ValueError:
        raise _child_failure(done, limits) from None
    if "error" in reply:
        raise _ERRORS.get(reply.get("kind"), TemplateRenderError)(reply["error"])
    return Analysis.from_dict(reply["analysis"], source=source, bos_token=bos_token, eos_token=eos_token)


def _child_environment() -> dict[str, str]:
    """The parent's environment, with this package importable however the parent found it and
    nothing on the child's path that names the current directory."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(safe_python_path(env.get("PYTHONPATH", "")))
    env["PYTHONSAFEPATH"] = "1"
    return env


def safe_python_path(inherited: str) -> list[str]:
    """This package's root, then the absolute entries of `inherited`: an empty or relative
    entry would be resolved against the current directory."""
    root = str(Path(__file__).resolve().parent.parent)
    entries = [root, *(entry for entry in inherited.split(os.pathsep) if os.path.isabs(entry))]
    return list(dict.fromkeys(entries))


def _child_failure(done: subprocess.CompletedProcess[bytes], limits: HardLimits) -> TemplateRenderError:
    """A child that died without answering: killed at its CPU limit, out of memory, or broken."""
    code = done.returncode
    if code in (-getattr(signal, "SIGXCPU", 24), -signal.SIGKILL):
        return RenderLimitExceeded(f"template analysis used more than {limits.cpu_seconds} s of CPU "
                                   f"or {limits.memory_bytes >> 20} MB of memory and was stopped")
    last = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
    return TemplateRenderError(f"template analysis failed (exit {code}): {last[:200]}")


# -- the child --------------------------------------------------------------------------------


def _set_limits(memory_bytes: int, cpu_seconds: int) -> None:
    try:
        import resource
    except ImportError:  # not a POSIX system: the wall-clock limit is all there is
        return
    for kind, value in ((resource.RLIMIT_AS, memory_bytes), (resource.RLIMIT_CPU, cpu_seconds)):
        soft, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(kind, (value, hard))


def _error_kind(exc: BaseException) -> str:
    for kind, cls in _ERRORS.items():
        if type(exc) is cls:
            return kind
    if isinstance(exc, MemoryError | RecursionError):
        return "limit"
    return "other"


def _child_main() -> int:
    request = json.loads(sys.stdin.buffer.read())
    _set_limits(int(request["memory_bytes"]), int(request["cpu_seconds"]))
    try:
        from autoparser.analyzers import analyze

        analysis = analyze(request["source"], bos_token=request["bos_token"], eos_token=request["eos_token"],
                           **request["kwargs"])
        reply: dict[str, Any] = {"analysis": analysis.to_dict()}
    except MemoryError:
        reply = {"error": f"template analysis ran out of memory (limit {int(request['memory_bytes']) >> 20} MB)",
                 "kind": "limit"}
    except Exception as exc:  # every failure is reported to the parent as one line
        message = str(exc) if isinstance(exc, TemplateRenderError) else f"{type(exc).__name__}: {exc}"
        reply = {"error": " ".join(message.split())[:2000], "kind": _error_kind(exc)}
    sys.stdout.write(json.dumps(reply))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
