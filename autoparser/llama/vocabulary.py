"""A model's vocabulary without its weights: tokenize and detokenize, nothing else.

The server's HTTP process prepares requests (tokenizing prompts, checking grammars against the
vocabulary) while the model itself runs in a worker process (`autoparser.server.supervisor`).
`Vocabulary` loads the GGUF with `vocab_only`, which reads the tokenizer and the metadata but
no tensors, and offers the token side of `Engine` with the same methods, so the code that
prepares requests takes either.
"""

from __future__ import annotations

import threading
from typing import Any

from autoparser.llama import _native
from autoparser.llama.engine import Engine


class Vocabulary(Engine):
    """`Engine`'s tokenizer methods on a vocab-only model; generating raises.

    `n_ctx`, `n_parallel` and `gpu_offload` describe the engine that generates elsewhere; the
    caller sets them once that engine has loaded.
    """

    def __init__(self, model_path: str, n_ctx: int = 0, n_parallel: int = 1) -> None:  # noqa: D107
        # Engine.__init__ would load the weights and create a context; only its token methods
        # (which read what `_read_vocabulary` sets, and `_local`) are reused here.
        _native.ensure_backend(False)
        self.model_path = str(model_path)
        self._lock = threading.Lock()
        self._ctx = None
        self._local = threading.local()
        self._model = _native.load_model(model_path, vocab_only=True)
        self._read_vocabulary()
        self.n_ctx = n_ctx
        self.n_ctx_total = n_ctx * n_parallel
        self.n_parallel = n_parallel
        self.gpu_offload = False

    def new_generation(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a vocabulary cannot generate; the engine runs in the worker process")

    def step(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a vocabulary cannot generate; the engine runs in the worker process")
