"""List the corpus templates our renderer cannot render with the standard probe conversations.

A template counts as renderable when at least one probe shape gives a prompt
(`add_generation_prompt=True`): a user message alone or after a system message, with content
as a string or as a list of text parts, without and then with a tool offered. Templates that
refuse every shape are printed with the error from the simplest shape (a lone user message with
string content), without tools and, when it differs, with a tool.

    python tools/list_unrenderable.py              # plain list
    python tools/list_unrenderable.py --markdown   # a Markdown table for the README
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autoparser.render import TemplateRenderError, render_template  # noqa: E402

BOS, EOS = "<s>", "</s>"
USER_TEXT = "What is the weather in Paris?"
SYSTEM_TEXT = "You are a helpful assistant."
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def probe_shapes() -> list[tuple[str, list[dict[str, Any]]]]:
    """The standard probe conversations, simplest first."""
    shapes = []
    for system in (False, True):
        for as_list in (False, True):
            def text(value: str, as_list: bool = as_list) -> Any:
                return [{"type": "text", "text": value}] if as_list else value
            messages = [{"role": "system", "content": text(SYSTEM_TEXT)}] if system else []
            messages.append({"role": "user", "content": text(USER_TEXT)})
            label = ("system+user" if system else "user") + (", list content" if as_list else "")
            shapes.append((label, messages))
    return shapes


def first_failure(source: str) -> str | None:
    """None when some probe shape renders; otherwise the simplest shape's error, without tools
    and (when different) with a tool offered."""
    first_error: dict[str, str] = {}
    for label, tools in (("without tools", None), ("with an empty tool list", []), ("with a tool", TOOLS)):
        for _shape, messages in probe_shapes():
            try:
                render_template(source, messages, tools=tools, add_generation_prompt=True,
                                bos_token=BOS, eos_token=EOS)
                return None
            except TemplateRenderError as exc:
                first_error.setdefault(label, str(exc))
    if len(set(first_error.values())) == 1:
        return next(iter(first_error.values()))
    return "; ".join(f"{label}: {error}" for label, error in first_error.items())


def _corpora() -> Any:
    """`tests/corpora.py`, which knows where the corpora live (and fetches llama.cpp's)."""
    spec = importlib.util.spec_from_file_location("_autoparser_corpora", REPO / "tests" / "corpora.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def corpus_files() -> list[tuple[str, Path]]:
    import pytest

    corpora = _corpora()
    files: list[tuple[str, Path]] = []
    for label, source in (("llama.cpp", corpora.llamacpp_templates), ("shared", corpora.shared_templates)):
        try:
            files += [(label, path) for path in source()]
        except pytest.skip.Exception as exc:
            print(f"skipping the {label} corpus: {exc}", file=sys.stderr)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    files = corpus_files()
    failures = []
    for corpus, path in files:
        reason = first_failure(path.read_text(encoding="utf-8"))
        if reason is not None:
            failures.append((corpus, path.name, reason))
    if args.markdown:
        print("| corpus | template | why it does not render |")
        print("|---|---|---|")
        for corpus, name, reason in failures:
            print(f"| {corpus} | `{name}` | {reason.replace('|', '&#124;')} |")
    else:
        for corpus, name, reason in failures:
            print(f"{corpus}/{name}: {reason}")
    sys.stdout.flush()
    print(f"{len(failures)} of {len(files)} templates do not render with any probe shape", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
