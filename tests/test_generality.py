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
    Path(__file__).resolve().parents[1] / "autoparser" / "analysis.py"]
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
