"""The analysis is general: its code names no template, no vendor and no marker.

Names come from llama.cpp's template file names at test time (`Qwen3.5-4B.jinja` gives `qwen`);
words that are ordinary English or chat vocabulary, and the API name, are left out. A marker is anything the
segmenter itself calls one (`<think>`, `[TOOL_CALLS]`, `<|im_end|>`): a string constant in the
analysis code that is a complete marker would be a known-marker table.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from corpora import llamacpp_templates

from autoparser.analyzers.diff import is_marker

ANALYSIS_CODE = sorted((Path(__file__).resolve().parents[1] / "autoparser" / "analyzers").glob("*.py")) + [
    Path(__file__).resolve().parents[1] / "autoparser" / name for name in ("analysis.py", "analysis_data.py")]
ORDINARY = {"instruct", "chat", "tool", "template", "templates", "fixed", "flash", "base", "thinking",
            "reasoning", "model", "models", "small", "medium", "large", "mini", "nano", "turbo", "preview",
            "function", "calling", "jinja", "edge", "coder", "vision", "think", "plus", "open", "world",
            "seed", "command", "meta", "spark", "ling", "interleaved", "distill", "thinker", "muse",
            "glimmer", "use", "openai"}  # OpenAI is the API the messages follow


def _names() -> set[str]:
    words = set()
    for path in llamacpp_templates():
        words |= {w for w in re.split(r"[^a-z]+", path.stem.lower()) if len(w) >= 4 and w not in ORDINARY}
    return words


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """String constants that are not docstrings, with their line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


@pytest.mark.parametrize("path", ANALYSIS_CODE, ids=lambda p: p.name)
def test_analysis_code_names_no_template_or_vendor(path: Path) -> None:
    text = path.read_text(encoding="utf-8").lower()  # code, comments and docstrings alike
    found = sorted(n for n in _names() if re.search(rf"(?<![a-z]){n}(?![a-z])", text))
    assert not found, f"{path.name} names {found}"


@pytest.mark.parametrize("path", ANALYSIS_CODE, ids=lambda p: p.name)
def test_analysis_code_holds_no_marker_table(path: Path) -> None:
    markers = [(line, text) for line, text in _code_strings(path) if is_marker(text.strip())]
    assert not markers, f"{path.name} holds markers: {markers}"


PACKAGE = Path(__file__).resolve().parents[1] / "autoparser"
ALL_CODE = sorted(PACKAGE.rglob("*.py"))
RUNTIME = {"llama"}  # llama.cpp is the engine the server runs on, not a model


@pytest.mark.parametrize("path", ALL_CODE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_code_string_names_a_template_or_vendor(path: Path) -> None:
    """Beyond the analysis: the builder, the reader, the generators, the server and the plugins
    hold no string that names a model family (their comments may cite one as an example)."""
    names = _names() - RUNTIME
    found = sorted({(line, n) for line, text in _code_strings(path) for n in names
                    if re.search(rf"(?<![a-z]){n}(?![a-z])", text.lower())})
    assert not found, f"{path.name} names {found}"


def _rule_names() -> set[str]:
    """The names the builder gives its rules (`Rule("tool-calls", ...)`, `Rule(f"{name}-arg-{key}", ...)`)."""
    names = set()
    for node in (node for path in sorted((PACKAGE / "language").glob("build*.py"))
                 for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Rule" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant):
                names.add(first.value)
            elif isinstance(first, ast.JoinedStr):
                names |= {part.value for part in first.values if isinstance(part, ast.Constant)}
    return names


def _compared_constants(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants a comparison reads (`x == "a"`, `x in ("a", "b")`), with their line."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                items = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
                found += [(node.lineno, item.value) for item in items
                          if isinstance(item, ast.Constant) and isinstance(item.value, str)]
    return found


READERS = ["language/interpret.py", "language/readings.py", "language/terminals.py", "language/stepping.py",
           "language/passes.py", "language/recovery.py", "language/preference.py", "language/shapes.py",
           "language/mapper.py",
           "generators/lark_ir.py"]


@pytest.mark.parametrize("reader", READERS)
def test_readers_compare_no_rule_names(reader: str) -> None:
    """What a rule is (a section, a call, a later call, a member and its key) is stated on the node
    (`Rule.kind`, `Rule.key`); a reader that matched the builder's names would be a second home of
    formats."""
    names = _rule_names()
    assert "tool-calls" in names and "-arg-" in names
    tree = ast.parse((PACKAGE / reader).read_text(encoding="utf-8"))
    found = sorted({(line, text) for line, text in _compared_constants(tree) for name in names
                    if text == name or ("-" in name and name in text)})
    assert not found, f"{reader} compares rule names: {found}"
    named = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare)
             and any(isinstance(side, ast.Attribute) and side.attr == "name" for side in (node.left, *node.comparators))
             and not any(isinstance(side, ast.Constant) and side.value is None for side in node.comparators)]
    assert not named, f"{reader} compares a node's name on lines {named}"


@pytest.mark.parametrize("reader", READERS[:-1])
def test_the_reader_holds_no_marker_literal(reader: str) -> None:
    """Markers reach the reader through the language (a value's CDATA section included,
    `ir.Language.value_section`); none is written into it."""
    found = [(line, text) for line, text in _code_strings(PACKAGE / reader)
             if is_marker(text.strip()) or "CDATA" in text]
    assert not found, f"{reader} holds markers: {found}"


@pytest.mark.parametrize("reader", READERS[:-1])
def test_the_reader_holds_no_literal_spelling(reader: str) -> None:
    """How literal values are written (their quotes, brackets, escapes and words such as `None`) is
    stated by the builder (`ir.Spelling` on a value node); the reader interprets it and spells none."""
    found = [(line, text) for line, text in _code_strings(PACKAGE / reader)
             if "'" in text or re.search(r"(?<![A-Za-z_])(True|False|None)(?![A-Za-z_])", text)]
    assert not found, f"{reader} spells literals: {found}"
