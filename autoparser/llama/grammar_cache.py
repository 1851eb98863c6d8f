"""Grammars compiled once per distinct grammar and copied for each generation.

llama.cpp's grammar constructors parse the GBNF text, build the rule tables and compile the
trigger patterns for every sampler; a server sends the same grammar for every request with the
same tools. :class:`GrammarTemplates` keeps one pristine sampler per grammar, never used to
sample, and hands each generation ``llama_sampler_clone`` of it: a copy of the parsed rules and
of the untouched parse state (lazy grammars with their triggers still armed), with none of the
parsing, checking or capture of llama.cpp's error output a fresh construction needs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import llama_cpp

from autoparser.llama.grammar_check import create_grammar_sampler
from autoparser.llama.sampling import GrammarSpec

MAX_TEMPLATES = 32
"""Distinct grammars kept; the least recently used one is freed past this."""


def grammar_key(grammar: GrammarSpec) -> Hashable:
    return (grammar.gbnf, grammar.root, grammar.lazy, tuple(grammar.trigger_patterns),
            tuple(int(t) for t in grammar.trigger_tokens))


class GrammarTemplates:
    """Pristine grammar samplers by grammar, and what else the engine derives from a grammar's
    text alone (`derived`); safe to use from several threads."""

    def __init__(self, vocab_ptr: Any, max_templates: int = MAX_TEMPLATES):
        self._vocab_ptr = vocab_ptr
        self._max = max_templates
        self._samplers: OrderedDict[Hashable, Any] = OrderedDict()
        self._derived: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def sampler(self, grammar: GrammarSpec) -> Any:
        """A new grammar sampler for `grammar`, owned by the caller (``llama_sampler_free``);
        ``GrammarError`` for a grammar llama.cpp rejects, as `create_grammar_sampler` raises."""
        key = grammar_key(grammar)
        with self._lock:
            template = self._samplers.get(key)
            if template is not None:
                self._samplers.move_to_end(key)
                return llama_cpp.llama_sampler_clone(template)
        template = create_grammar_sampler(self._vocab_ptr, grammar.gbnf, grammar.root, grammar.lazy,
                                          grammar.trigger_patterns, grammar.trigger_tokens)
        with self._lock:
            if key in self._samplers:  # built by another thread meanwhile
                llama_cpp.llama_sampler_free(template)
                template = self._samplers[key]
            else:
                self._samplers[key] = template
                self._evict(self._samplers, llama_cpp.llama_sampler_free)
            return llama_cpp.llama_sampler_clone(template)

    def derived(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """`compute()`'s result, computed once per `key` (kept as long as a template)."""
        with self._lock:
            if key in self._derived:
                self._derived.move_to_end(key)
                return self._derived[key]
        value = compute()
        with self._lock:
            self._derived[key] = value
            self._evict(self._derived, None)
        return value

    def close(self) -> None:
        """Free every template (the clones handed out are their owners' to free)."""
        with self._lock:
            for template in self._samplers.values():
                llama_cpp.llama_sampler_free(template)
            self._samplers.clear()
            self._derived.clear()

    def __len__(self) -> int:
        return len(self._samplers)

    def _evict(self, entries: OrderedDict[Hashable, Any], free: Callable[[Any], None] | None) -> None:
        while len(entries) > self._max:
            _, value = entries.popitem(last=False)
            if free is not None:
                free(value)
