"""Rendering one template in child processes that can be stopped.

The renderer checks its deadline between template operations and prices the operations it knows
to multiply size or time, but one C-level call runs to its end once started, and a template is
arbitrary code: an operation nobody priced could hold a server thread for seconds or fill its
memory. `RenderPool` therefore renders in a few long-lived child processes, each under a memory
cap (`RLIMIT_AS`); a render that has not answered shortly after the render deadline has its
child killed, the request gets a one-line `RenderLimitExceeded`, and a fresh child replaces it.

The exchange is one JSON line each way: the template, tokens and limits once when a child
starts, then the messages, tools and variables of each render, answered by the text or an
error. A render costs the JSON round trip (about 1 ms for an ordinary conversation) on top of
rendering; a child takes about 0.3 s to start, once, and again only after a kill.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoparser.render import (
    DEFAULT_LIMITS,
    RenderLimitExceeded,
    RenderLimits,
    SandboxViolation,
    TemplateCompileError,
    TemplateRaisedError,
    TemplateRenderError,
)

__all__ = ["ProcessLimits", "RenderPool"]

_ERRORS: dict[str, type[TemplateRenderError]] = {
    "compile": TemplateCompileError, "raised": TemplateRaisedError, "sandbox": SandboxViolation,
    "limit": RenderLimitExceeded, "other": TemplateRenderError,
}


@dataclass(frozen=True)
class ProcessLimits:
    """A render child's bounds: its address space, and how long past the render deadline the
    parent waits for an answer before it kills the child."""

    memory_bytes: int = 1 << 30
    grace_seconds: float = 1.0
    kill_after: float | None = None
    """Seconds a render may take before its child is killed; default: the render deadline plus
    `grace_seconds`."""
    start_seconds: float = 60.0
    """How long a child may take to start and compile the template (a loaded machine is slow)."""


class _Child:
    """One render process and its pipes; used by one thread at a time."""

    def __init__(self, setup: dict[str, Any], start_seconds: float):
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", "autoparser.render_process"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_child_environment())
        self._buffer = b""
        try:
            self.send(setup)
            ready = self.receive(start_seconds)
        except OSError:
            ready = None
        if ready is None:
            self.kill()
            raise TemplateRenderError(f"the template renderer did not start within {start_seconds:g} s")

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next reply, or None when none came within `timeout` seconds or the child died."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        pieces = [self._buffer]
        while b"\n" not in pieces[-1]:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._buffer = b"".join(pieces)
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            pieces.append(chunk)
        line, self._buffer = b"".join(pieces).split(b"\n", 1)
        return json.loads(line)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


def _child_environment() -> dict[str, str]:
    """The parent's environment, with this package importable however the parent found it."""
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


class RenderPool:
    """Renders `source` in up to `size` child processes; `render` is `Analysis.render`'s
    signature and raises the same `TemplateRenderError` subclasses."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "", size: int = 2,
                 limits: RenderLimits = DEFAULT_LIMITS, process_limits: ProcessLimits = ProcessLimits()):
        self._setup = {"source": source, "bos_token": bos_token, "eos_token": eos_token,
                       "seconds": limits.seconds, "max_chars": limits.max_chars,
                       "memory_bytes": process_limits.memory_bytes}
        self._timeout = (process_limits.kill_after if process_limits.kill_after is not None
                         else limits.seconds + process_limits.grace_seconds)
        self._start_seconds = process_limits.start_seconds
        self._memory_mb = process_limits.memory_bytes >> 20
        self._idle: queue.LifoQueue[_Child | None] = queue.LifoQueue()
        for _ in range(size):
            self._idle.put(None)  # a slot whose child starts on first use
        self._children: set[_Child] = set()
        self._lock = threading.Lock()
        self._closed = False
        atexit.register(self.close)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = True, **template_kwargs: Any) -> str:
        request = {"messages": messages, "tools": tools, "add_generation_prompt": add_generation_prompt,
                   "kwargs": template_kwargs}
        child = self._idle.get()
        try:
            if child is None or child.process.poll() is not None:
                child = self._start()
            try:
                child.send(request)
            except (BrokenPipeError, OSError):
                child = self._restart(child)
                child.send(request)
            reply = child.receive(self._timeout)
            if reply is None:
                died = child.process.poll() is not None
                self._discard(child)
                child = None
                raise self._failure(died)
        finally:
            self._idle.put(child)
        if "error" in reply:
            raise _ERRORS.get(reply.get("kind", ""), TemplateRenderError)(reply["error"])
        return str(reply["text"])

    def start(self) -> None:
        """Start every child now rather than on first use (a server's first requests then wait
        for no start-up). A child that fails to start is left to start on first use, where its
        failure is that render's error."""
        for _ in range(self._idle.qsize()):
            child = self._idle.get()
            try:
                if child is None:
                    child = self._start()
            except TemplateRenderError:
                pass
            finally:
                self._idle.put(child)

    def close(self) -> None:
        atexit.unregister(self.close)
        with self._lock:
            self._closed = True
            children, self._children = list(self._children), set()
        for child in children:
            child.kill()

    def __enter__(self) -> RenderPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> _Child:
        if self._closed:
            raise TemplateRenderError("the template renderer is shut down")
        try:
            child = _Child(self._setup, self._start_seconds)
        except OSError as exc:  # no process or pipe to be had (descriptors or memory exhausted)
            raise TemplateRenderError(f"cannot start the template renderer: {exc}") from None
        with self._lock:
            if self._closed:
                child.kill()
                raise TemplateRenderError("the template renderer is shut down")
            self._children.add(child)
        return child

    def _restart(self, child: _Child) -> _Child:
        self._discard(child)
        return self._start()

    def _discard(self, child: _Child) -> None:
        with self._lock:
            self._children.discard(child)
        child.kill()

    def _failure(self, died: bool) -> RenderLimitExceeded:
        if died:
            return RenderLimitExceeded(f"template rendering used more than {self._memory_mb} MB of memory "
                                       "or crashed, and was stopped")
        return RenderLimitExceeded(f"template rendering took longer than {self._timeout:g} s and was stopped")


# -- the child --------------------------------------------------------------------------------


def _error_kind(exc: BaseException) -> str:
    for kind, cls in _ERRORS.items():
        if type(exc) is cls:
            return kind
    return "other"


def _child_main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the server's terminal is the server's
    setup = json.loads(sys.stdin.buffer.readline())
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(setup["memory_bytes"]), resource.getrlimit(resource.RLIMIT_AS)[1]))
    except (ImportError, ValueError, OSError):
        pass  # not a POSIX system, or a lower hard limit: the wall-clock kill still holds
    from autoparser.render import TemplateRenderError, compile_template, render_template

    try:
        compile_template(setup["source"])  # once, before the first render's clock starts
    except TemplateRenderError:
        pass  # every render reports it
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    limits = RenderLimits(seconds=float(setup["seconds"]), max_chars=int(setup["max_chars"]))
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            text = render_template(setup["source"], request["messages"], tools=request["tools"],
                                   add_generation_prompt=request["add_generation_prompt"],
                                   bos_token=setup["bos_token"], eos_token=setup["eos_token"],
                                   render_limits=limits, **request["kwargs"])
            reply: dict[str, Any] = {"text": text}
        except TemplateRenderError as exc:
            reply = {"error": str(exc), "kind": _error_kind(exc)}
        except Exception as exc:  # noqa: BLE001 - one line to the parent, whatever it was
            reply = {"error": " ".join(f"template failed: {type(exc).__name__}: {exc}".split())[:2000],
                     "kind": "other"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
