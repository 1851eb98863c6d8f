"""Shared plumbing around llama-cpp-python's low-level ctypes bindings.

Three things every llama.cpp caller in this package needs, kept in one place:

- one-time backend initialisation;
- routing of llama.cpp's log output: by default it is dropped (llama.cpp is very chatty on
  every model load), forwarded to the ``autoparser.llama`` logger, and error lines can be captured
  while a caller is interested in them (the grammar validator turns them into exception messages);
- capturing text llama.cpp writes straight to the C ``stderr`` (the GBNF parser reports syntax
  errors with ``fprintf(stderr, ...)``, bypassing the log callback).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import llama_cpp

logger = logging.getLogger("autoparser.llama")

_LEVEL_ERROR = 4  # ggml_log_level: NONE, DEBUG, INFO, WARN, ERROR, CONT
_LEVEL_CONT = 5

_init_lock = threading.Lock()
_backend_ready = False
_verbose = False
_captures: list[list[str]] = []
_capture_lock = threading.RLock()
_last_level = 0


@llama_cpp.llama_log_callback
def _log_callback(
    level: int, text: bytes, user_data: ctypes.c_void_p
) -> None:  # pragma: no cover - C callback
    """Receive every llama.cpp/ggml log line; keep errors for active captures, print only when verbose."""
    global _last_level
    if level != _LEVEL_CONT:
        _last_level = level
    effective = _last_level
    message = text.decode("utf-8", errors="replace") if text else ""
    if effective == _LEVEL_ERROR and _captures:
        _captures[-1].append(message)
    if _verbose:
        sys.stderr.write(message)
    elif effective == _LEVEL_ERROR:
        logger.debug("llama.cpp: %s", message.rstrip())


def ensure_backend(verbose: bool | None = None) -> None:
    """Initialise llama.cpp once and install the log router; ``verbose`` turns log printing on or off."""
    global _backend_ready, _verbose
    with _init_lock:
        if verbose is not None:
            _verbose = verbose
        if _backend_ready:
            return
        llama_cpp.llama_backend_init()
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        _backend_ready = True


@contextlib.contextmanager
def capture_errors(c_stderr: bool = True) -> Iterator[list[str]]:
    """Collect llama.cpp error log lines (and, with ``c_stderr``, C-level stderr output) inside the block.

    With ``c_stderr`` the C ``stderr`` file descriptor is redirected to a temporary file for the
    duration, so the block must be a short call: output other threads write to stderr meanwhile
    lands in the capture instead of the terminal. A lock serialises captures.
    """
    lines: list[str] = []
    with _capture_lock:
        _captures.append(lines)
        try:
            if not c_stderr:
                yield lines
                return
            with _redirect_c_stderr() as read_back:
                yield lines
            lines.extend(read_back())
        finally:
            _captures.pop()


@contextlib.contextmanager
def _redirect_c_stderr() -> Iterator:  # type: ignore[type-arg]
    """Point file descriptor 2 at a temp file; yield a function reading what was written."""
    captured: list[str] = []
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError):
        pass
    try:
        saved = os.dup(2)
    except OSError:  # no usable fd 2 (embedded interpreters): capture nothing, still run
        yield lambda: captured
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lambda: captured
        finally:
            _flush_c_stdio()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read().decode("utf-8", errors="replace"))


def _flush_c_stdio() -> None:
    """fflush(NULL) so text still buffered in the C library reaches the redirected descriptor."""
    try:
        libc = ctypes.CDLL(None)
        libc.fflush(None)
    except (OSError, AttributeError):
        pass


def load_model(path: str | os.PathLike[str], *, vocab_only: bool = False, n_gpu_layers: int = 0):  # type: ignore[no-untyped-def]
    """Load a GGUF through the C API; raise ``FileNotFoundError``/``ValueError`` instead of returning NULL."""
    ensure_backend()
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"model file not found: {file}")
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = vocab_only
    params.n_gpu_layers = n_gpu_layers
    with capture_errors(c_stderr=False) as errors:
        model = llama_cpp.llama_model_load_from_file(str(file).encode("utf-8"), params)
    if not model:
        detail = " ".join(line.strip() for line in errors if line.strip())
        raise ValueError(f"llama.cpp could not load {file}" + (f": {detail}" if detail else ""))
    return model
