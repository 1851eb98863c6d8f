"""llama.cpp integration: grammar validation and a token-level generation engine.

Everything here needs the optional ``llama-cpp-python`` dependency (``pip install autoparser[server]``).
The submodules are imported lazily so that ``import autoparser`` never loads llama.cpp's shared
libraries.

- :mod:`autoparser.llama.grammar_check`: ``validate_gbnf`` / ``GrammarError`` (llama.cpp's own
  parser, without risking a crash).
- :mod:`autoparser.llama.engine`: ``Engine``, ``SamplingParams``, ``GrammarSpec``,
  ``GeneratedToken``, ``GenerationStats``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GrammarError": "grammar_check",
    "validate_gbnf": "grammar_check",
    "validate_trigger_patterns": "grammar_check",
    "Engine": "engine",
    "SamplingParams": "sampling",
    "GrammarSpec": "sampling",
    "GeneratedToken": "engine",
    "GenerationStats": "engine",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'autoparser.llama' has no attribute {name!r}")
    return getattr(importlib.import_module(f"autoparser.llama.{module}"), name)
