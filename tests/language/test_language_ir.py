"""The output-language IR: plain frozen data built in one place, printable, and the grammar's source."""

from __future__ import annotations

import dataclasses

import pytest
from gbnf_fixtures import ANALYSES, SEARCH, TOOLS, WEATHER

from autoparser.generators.gbnf import write_gbnf
from autoparser.language import ir
from autoparser.language.build import Request, build_language


def _language(name: str, **request) -> ir.Language:
    analysis = ANALYSES[name]()
    return build_language(analysis, Request(**{"tools": (WEATHER, SEARCH), **request}))


def _walk(node: ir.Node):
    yield node
    children: tuple = ()
    if isinstance(node, ir.Seq):
        children = node.items
    elif isinstance(node, ir.Choice):
        children = node.options
    elif isinstance(node, ir.Repeat):
        children = (node.item,)
    elif isinstance(node, ir.Capture | ir.Rule | ir.Lazy):
        children = (node.body,)
    elif isinstance(node, ir.Members):
        children = tuple(m for m, _ in node.items) + ((node.extra,) if node.extra is not None else ()) \
            + (node.separator,)
    elif isinstance(node, ir.RawString):
        children = (node.text,)
    for child in children:
        yield from _walk(child)


def test_nodes_are_frozen() -> None:
    node = ir.Lit("<think>", special=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.text = "x"  # type: ignore[misc]


def test_the_language_prints_readably() -> None:
    analysis = ANALYSES["deepseek-v3.1"]()
    language = build_language(analysis, Request(tools=(WEATHER,), thinking=True,
                                                special_tokens=tuple(analysis.preserved_tokens)))
    text = str(language)
    first = text.splitlines()[0]
    # lazy on the section opener, which does not count inside the reasoning the prompt opened
    assert first.startswith("language ::= lazy on '<｜tool▁calls▁begin｜>', not inside '<think>'..'</think>'")
    assert "<tool_name: 'get_weather'>" in text
    assert "'<｜tool▁sep｜>' special" in text
    assert "<arguments: json-schema get_weather>" in text


def test_roles_mark_the_message_parts() -> None:
    language = _language("qwen3-coder", tool_choice="auto", lazy=False, thinking=True)
    roles = {node.role for node in _walk(language.root) if isinstance(node, ir.Capture)}
    assert roles == {ir.CONTENT, ir.TOOL_NAME, ir.ARGUMENTS}
    reasoning = _language("deepseek-r1", tool_choice="none", thinking=True)
    assert {n.role for n in _walk(reasoning.root) if isinstance(n, ir.Capture)} == {ir.REASONING, ir.CONTENT}


def test_a_call_index_is_digits_outside_special_tokens() -> None:
    language = _language("kimi-k2", tool_choice="required")
    assert ir.Chars("0-9", 1, 4) in list(_walk(language.root))


def test_weak_comma_in_python_call_syntax() -> None:
    language = _language("llama3.2-pythonic", tool_choice="required")
    weak = [n.weak for n in _walk(language.root) if isinstance(n, ir.Text) and n.weak is not None]
    assert weak and all(w == ir.Weak(",", "=", cut=True) for w in weak)


@pytest.mark.parametrize("choice", ["auto", "required", "none"])
@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_llama_cpp_reads_the_grammar_written_from_the_language(name: str, choice: str) -> None:
    """llama.cpp's own grammar parser accepts what the language writes, and the grammar is lazy
    exactly where the language waits for a trigger."""
    grammar_check = pytest.importorskip("autoparser.llama.grammar_check")
    analysis = ANALYSES[name]()
    specials = tuple(analysis.preserved_tokens)
    language = build_language(analysis, Request(tools=tuple(TOOLS), tool_choice=choice, thinking=True,
                                                special_tokens=specials,
                                                end_tokens=(analysis.eos_token,)))
    written = write_gbnf(language, specials)
    grammar_check.validate_gbnf(written.gbnf, written.root)
    assert written.lazy == isinstance(language.root, ir.Lazy)
    assert not written.lazy or written.trigger_patterns or written.trigger_words


@pytest.mark.parametrize("name", ["deepseek-v3.1", "qwen3-coder", "llama3.2-pythonic", "gpt-oss", "mistral-nemo"])
def test_language_snapshot(name: str, snapshot) -> None:  # type: ignore[no-untyped-def]
    analysis = ANALYSES[name]()
    language = build_language(analysis, Request(tools=(WEATHER,), tool_choice="auto", thinking=True,
                                                lazy=False, special_tokens=tuple(analysis.preserved_tokens)))
    assert str(language) == snapshot
