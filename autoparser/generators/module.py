"""`generate_module(analysis)`: one self-contained Python file that parses a model's output.

The file is the output language and the parser runtime themselves (`autoparser/language/*.py`,
`autoparser/runtime/*.py`, standard library only) with
its modules concatenated in dependency order, plus the analysis embedded as a dict literal and
two entry points, `parse(text, tools=None)` and `stream(tools=None)`. Reusing the runtime's own
source, rather than a second implementation, is what guarantees the module behaves exactly like
`Analysis.parser()`. The runtime is written so this works: it imports nothing outside the
standard library, its intra-package imports are plain `from autoparser.runtime.X import ...`
statements (dropped here), and no two of its modules define the same top-level name (checked).
"""

from __future__ import annotations

import ast
import pprint
import re
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parents[1]
# the output language first, then the runtime that interprets it, in dependency order
RUNTIME_MODULES = ("language/request", "language/values", "runtime/jsonscan", "runtime/markers",
                   "runtime/channels", "runtime/messages", "runtime/spec", "runtime/steps", "runtime/calls_tagged",
                   "runtime/calls_json", "runtime/engine", "runtime/parser")

_PACKAGE_IMPORT = re.compile(r"^from autoparser\.(?:runtime|language)\.\w+ import (?:\([^)]*\)|[^\n]*)\n",
                             re.MULTILINE)
_STDLIB_IMPORT = re.compile(r"^(?:import [\w.]+|from [\w.]+ import (?:\([^)]*\)|[^\n]*))\n", re.MULTILINE)

_ENTRY_POINTS = '''

# ---- entry points ---------------------------------------------------------------------------


def parser(tools=None, **options):
    """A `Parser` for this model; options: thinking, parallel_tool_calls, tool_choice,
    tool_call_policy (as `autoparser.Analysis.parser`)."""
    return Parser(ANALYSIS, tools=tools, **options)


def parse(text, tools=None, **options):
    """The OpenAI assistant message for a complete model output."""
    return parser(tools, **options).parse(text)


def stream(tools=None, **options):
    """An incremental parser: feed(chunk) -> deltas, finish() -> deltas, message()."""
    return parser(tools, **options).stream()


def _main(argv=None):
    import argparse
    import sys

    options = argparse.ArgumentParser(description="Parse model output read from stdin.")
    options.add_argument("--tools", help="a JSON file holding the request's tools")
    options.add_argument("--stream", action="store_true", help="print the deltas, one per line")
    args = options.parse_args(argv)
    tools = None
    if args.tools:
        with open(args.tools, encoding="utf-8") as handle:
            tools = json.load(handle)
    text = sys.stdin.read()
    if args.stream:
        incremental = stream(tools)
        for delta in incremental.feed(text) + incremental.finish():
            print(json.dumps(delta, ensure_ascii=False))
    else:
        print(json.dumps(parse(text, tools), ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
'''


def runtime_source() -> str:
    """The runtime's modules as one source text, without intra-package imports."""
    imports: list[str] = []
    bodies: list[str] = []
    defined: dict[str, str] = {}
    for name in RUNTIME_MODULES:
        source = (PACKAGE_DIR / f"{name}.py").read_text(encoding="utf-8")
        _check_unique_names(name, source, defined)
        source = _PACKAGE_IMPORT.sub("", source)
        source = source.replace("from __future__ import annotations\n", "")
        for statement in _STDLIB_IMPORT.findall(source):
            if statement not in imports:
                imports.append(statement)
        source = _STDLIB_IMPORT.sub("", source)
        bodies.append(f"# ---- {name}.py " + "-" * (88 - len(name)) + "\n" + source.strip() + "\n")
    return "".join(imports) + "\n\n" + "\n\n".join(bodies)


def _check_unique_names(module: str, source: str, defined: dict[str, str]) -> None:
    """Concatenation must not let one module's name shadow another's."""
    for node in ast.parse(source).body:
        names: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        for name in names:
            if name in defined and defined[name] != module:
                raise RuntimeError(f"runtime modules {defined[name]} and {module} both define {name}")
            defined[name] = module


def generate_module(analysis: Any) -> str:
    """The source of a standalone parser module for `analysis` (an `Analysis` or its dict)."""
    data = analysis.to_dict() if hasattr(analysis, "to_dict") else dict(analysis)
    header = (
        '"""Standalone parser for one chat model\'s output, generated by autoparser.\n\n'
        "Use `parse(text, tools=None)` for a complete output and `stream(tools=None)` for an\n"
        "incremental parser (`feed(chunk)` returns OpenAI delta dicts, `finish()` flushes,\n"
        "`message()` gives the assistant message). Standard library only; run it as a script to\n"
        'parse standard input.\n"""\n\n'
        "from __future__ import annotations\n\n"
    )
    analysis_literal = "ANALYSIS = " + pprint.pformat(data, width=100, sort_dicts=False) + "\n"
    return header + runtime_source() + "\n\n# ---- the analysis " + "-" * 74 + "\n\n" + \
        analysis_literal + _ENTRY_POINTS
