"""`generate_module(analysis)`: one self-contained Python file that parses a model's output.

The file embeds the output language and its reader: the source of `autoparser.language.reading`
(the `Parser`) and of every autoparser module it imports, found by following their imports (the
builder, the IR, the reader and its support modules). Each is embedded as text and run as a
module of a private package when the file is imported, so the file's `parse` and `stream` run the
very code `Analysis.parser()` runs, and behave exactly alike. The analysis is embedded as a dict
literal, with the end-of-generation token's text, which its dict form leaves out; the parser reads
it back with `AnalysisData.from_dict` (`autoparser.analysis_data`, embedded with the builder).

The embedded modules may import only the standard library and each other: both are checked here,
so a module that does not qualify fails generation rather than the generated file.
"""

from __future__ import annotations

import ast
import hashlib
import pprint
import sys
from pathlib import Path
from typing import Any

PACKAGE = "autoparser"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
ENTRY_MODULE = "autoparser.language.reading"

_LOADER = '''

# ---- the embedded modules, run as a private package -----------------------------------------

_PACKAGE = {package!r}


def _load_embedded():
    """Run the embedded sources as modules of `_PACKAGE` (once per process) and return the entry."""
    import linecache
    import sys
    import types

    entry = _PACKAGE + {entry!r}
    if entry in sys.modules:
        return sys.modules[entry]
    created = []
    try:
        for name, source in _SOURCES.items():
            parts = (_PACKAGE + "." + name).split(".")
            for depth in range(1, len(parts) + 1):
                dotted = ".".join(parts[:depth])
                if dotted in sys.modules:
                    continue
                module = types.ModuleType(dotted)
                if depth < len(parts):
                    module.__path__ = []
                sys.modules[dotted] = module
                created.append(dotted)
                if depth > 1:
                    setattr(sys.modules[".".join(parts[:depth - 1])], parts[depth - 1], module)
            filename = "<" + _PACKAGE + "/" + name.replace(".", "/") + ".py>"
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            module = sys.modules[_PACKAGE + "." + name]
            module.__file__ = filename
            exec(compile(source, filename, "exec"), module.__dict__)
    except BaseException:
        for dotted in created:
            sys.modules.pop(dotted, None)
        raise
    return sys.modules[entry]


Parser = _load_embedded().Parser
'''

_ENTRY_POINTS = '''

# ---- entry points ---------------------------------------------------------------------------


def parser(tools=None, **options):
    """A `Parser` for this model; options: thinking, parallel_tool_calls, tool_choice,
    tool_call_policy, prompt (as `autoparser.Analysis.parser`)."""
    return Parser(ANALYSIS, tools=tools, eos_token=EOS_TOKEN, **options)


def parse(text, tools=None, **options):
    """The OpenAI assistant message for a complete model output."""
    return parser(tools, **options).parse(text)


def stream(tools=None, **options):
    """An incremental parser: feed(chunk) -> deltas, finish() -> deltas, message()."""
    return parser(tools, **options).stream()


def _main(argv=None):
    import argparse
    import json
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


def _module_path(dotted: str) -> Path:
    return PACKAGE_DIR.joinpath(*dotted.split(".")[1:]).with_suffix(".py")


def package_imports(dotted: str, tree: ast.Module) -> list[str]:
    """The autoparser modules `dotted` imports, anywhere in it; raises for any import outside the
    standard library and for names taken from a package's `__init__` (those are not embedded)."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [(node.module, [alias.name for alias in node.names])]
        elif isinstance(node, ast.ImportFrom):
            raise RuntimeError(f"{dotted}: relative imports cannot be embedded")
        else:
            continue
        for module, names in targets:
            top = module.partition(".")[0]
            if top != PACKAGE:
                if top not in sys.stdlib_module_names and top != "__future__":
                    raise RuntimeError(f"{dotted} imports {module}, which is not in the standard library")
                continue
            if _module_path(module).is_file():
                found.append(module)
                continue
            # `from autoparser.language import ir`: each name must be a module of that package
            for name in names or ["?"]:
                if not _module_path(f"{module}.{name}").is_file():
                    raise RuntimeError(f"{dotted} imports {name} from the package {module}, which is not embedded")
                found.append(f"{module}.{name}")
    return found


def embedded_modules(entry: str = ENTRY_MODULE) -> dict[str, str]:
    """The source of `entry` and of every autoparser module it needs, each after the modules it
    imports (the order they are run in)."""
    ordered: dict[str, str] = {}
    visiting: set[str] = set()

    def visit(dotted: str) -> None:
        if dotted in ordered:
            return
        if dotted in visiting:
            raise RuntimeError(f"{dotted} is part of an import cycle, which cannot be embedded")
        visiting.add(dotted)
        source = _module_path(dotted).read_text(encoding="utf-8")
        for needed in package_imports(dotted, ast.parse(source)):
            visit(needed)
        visiting.discard(dotted)
        ordered[dotted] = source

    visit(entry)
    return ordered


def _renamed_imports(source: str, package: str) -> str:
    """`source` with its imports of autoparser modules taken from `package` instead."""
    lines = source.splitlines(keepends=True)
    for node in ast.walk(ast.parse(source)):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
            [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
        if any(name.partition(".")[0] == PACKAGE for name in names):
            line = lines[node.lineno - 1]
            head, keyword, rest = line.partition("from " if isinstance(node, ast.ImportFrom) else "import ")
            lines[node.lineno - 1] = head + keyword + rest.replace(PACKAGE, package)
    return "".join(lines)


def _string_literal(text: str) -> str:
    """`text` as a readable triple-quoted literal: raw where it can be, escaped otherwise."""
    if "'''" not in text and not text.endswith(("\\", "'")):
        return "r'''" + text + "'''"
    return "'''" + text.replace("\\", "\\\\").replace("'''", "\\'\\'\\'") + "'''"


def generate_module(analysis: Any) -> str:
    """The source of a standalone parser module for `analysis` (an `Analysis` or its dict)."""
    data = analysis.to_dict() if hasattr(analysis, "to_dict") else dict(analysis)
    modules = embedded_modules()
    digest = hashlib.sha256("".join(f"{k}\0{v}\0" for k, v in modules.items()).encode("utf-8")).hexdigest()
    package = f"_autoparser_{digest[:16]}"
    sources = "".join(f"    {name.partition('.')[2]!r}: {_string_literal(_renamed_imports(source, package))},\n"
                      for name, source in modules.items())
    header = (
        '"""Standalone parser for one chat model\'s output, generated by autoparser.\n\n'
        "Use `parse(text, tools=None)` for a complete output and `stream(tools=None)` for an\n"
        "incremental parser (`feed(chunk)` returns OpenAI delta dicts, `finish()` flushes,\n"
        "`message()` gives the assistant message). Standard library only; run it as a script to\n"
        'parse standard input.\n"""\n\n'
    )
    analysis_literal = ("ANALYSIS = " + pprint.pformat(data, width=100, sort_dicts=False) + "\n"
                        + f"EOS_TOKEN = {getattr(analysis, 'eos_token', '') or ''!r}\n")
    return (header + "# ---- the analysis " + "-" * 74 + "\n\n" + analysis_literal
            + "\n\n# ---- the output language and its reader (autoparser's own modules) " + "-" * 24 + "\n\n"
            + "_SOURCES = {\n" + sources + "}\n"
            + _LOADER.format(package=package, entry="." + ENTRY_MODULE.partition(".")[2])
            + _ENTRY_POINTS)
