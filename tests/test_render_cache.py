"""The compiled-template cache stays within its bounds and keeps compiling past them."""

from __future__ import annotations

import pytest

from autoparser import render


def test_templates_past_the_cache_size_evict_the_oldest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "_COMPILED", {})
    monkeypatch.setattr(render, "_compiled_chars", 0)
    monkeypatch.setattr(render, "_COMPILE_CACHE_SIZE", 2)
    sources = [f"{{{{ {i} }}}}" for i in range(5)]
    for source in sources:
        assert render.compile_template(source).render() == source[3]
    assert list(render._COMPILED) == sources[-2:]
    assert render._compiled_chars == sum(map(len, sources[-2:]))


def test_templates_past_the_cache_text_bound_evict_the_oldest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "_COMPILED", {})
    monkeypatch.setattr(render, "_compiled_chars", 0)
    monkeypatch.setattr(render, "_COMPILE_CACHE_CHARS", 30)
    sources = [f"{{{{ {i} }}}}" + " " * 10 for i in range(4)]
    for source in sources:
        render.compile_template(source)
    assert render._compiled_chars <= 30 and list(render._COMPILED)[-1] == sources[-1]
