"""vLLM's tool-parser expectations, read from its `tests/tool_parsers/` modules, run against autoparser.

vLLM tests each hand-written tool parser with model outputs and the calls and content it must
return: literals in `pytest.mark.parametrize` rows, in a `ToolParserTestConfig` for its shared
suite, and in the asserts of single tests. This script reads those modules as data, by Python's
`ast` and literals only (nothing of vLLM is imported or run, so vLLM need not be installed): the
pinned source package's `tests/tool_parsers/*.py` are fetched from PyPI into the cache and never
copied into the project. An expression that is no literal (a fixture calling a tokenizer, a
loop building chunks) is reported as not extracted, never guessed.

Our own script rather than vLLM's test runner, because those tests drive vLLM's parser classes
and its tokenizers; what they state is the output and what it must parse to, which is what the
analysis of the family's real template (`TEMPLATES` below, from the shared corpus or llama.cpp's)
is measured against here. Each case is parsed whole and then streamed (a character at a time,
in vLLM's own chunks where the test has them, and in random cuts); streamed must equal whole.
Comparison: call count, names exact, arguments equal as JSON, content stripped of surrounding
whitespace. A failure is marked debatable where the test's name says it probes malformed or
unusual output, or vLLM itself marks it xfail, and where the difference is one the project
chooses (text around calls kept, values typed without a schema).

    python tools/vllm_parser_cases.py --fetch-only           # fetch if needed, print the directory
    python tools/vllm_parser_cases.py --sdist vllm-0.33.0.tar.gz   # use a local sdist
    python tools/vllm_parser_cases.py --report               # pass counts per family and in total
    python tools/vllm_parser_cases.py --failures FAMILY      # failing cases with what was parsed
    python tools/vllm_parser_cases.py --json                 # the extracted cases

Cache: `$AUTOPARSER_CACHE` or `~/.cache/autoparser`; the sdist is kept in `downloads/` (its
sha256 checked against PyPI's) and `tests/tool_parsers/*.py` extracted to
`corpus/vllm-0.33.0/tests/tool_parsers/`. Running it again does nothing once they are there.
`tests/language/test_vllm_parser_cases.py` fetches on first use, so CI fetches too (one 47 MB
download, about a second from a fast mirror), and skips when PyPI cannot be reached.
"""

from __future__ import annotations

import argparse
import ast
import collections
import functools
import hashlib
import json
import os
import random
import re
import shutil
import sys
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Generic, TypeVar
from urllib.parse import urljoin

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/ is scripts, not a package
import fetch_corpus  # noqa: E402
from fetch_corpus import FetchError, cache_root, extract_members  # noqa: E402

PACKAGE = "vllm"
VERSION = "0.33.0"
SDIST_STEM = f"{PACKAGE}-{VERSION}"
TESTS = PurePosixPath("tests/tool_parsers")
REASONING_TESTS = PurePosixPath("tests/reasoning")  # read by tools/vllm_reasoning_cases.py
RELEASE_JSON = f"https://pypi.org/pypi/{PACKAGE}/{VERSION}/json"
PROJECT_JSON = f"https://pypi.org/pypi/{PACKAGE}/json"
TIMEOUT_S = 60
REPO = Path(__file__).resolve().parents[1]

# -- fetching ---------------------------------------------------------------------------------------


def tests_dir(subdir: PurePosixPath = TESTS) -> Path:
    """Where vLLM's `tests/tool_parsers/` (or another tests folder) is extracted (it may not exist yet)."""
    return cache_root() / "corpus" / SDIST_STEM / subdir


def is_fetched(subdir: PurePosixPath = TESTS) -> bool:
    return any(tests_dir(subdir).glob("test_*.py"))


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        return json.load(response)


def sdist_entry() -> tuple[str, str]:
    """(URL, sha256) of the pinned sdist from PyPI's JSON API. A mirror that serves only the
    project's document (no per-version one) is read through its `releases`."""
    try:
        try:
            base, files = RELEASE_JSON, _get_json(RELEASE_JSON)["urls"]
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            base, files = PROJECT_JSON, _get_json(PROJECT_JSON)["releases"].get(VERSION, [])
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        raise FetchError(f"cannot read {PACKAGE} {VERSION} from PyPI: {exc}") from None
    for entry in files:
        if entry.get("packagetype") == "sdist":
            return urljoin(base, entry["url"]), entry["digests"]["sha256"]
    raise FetchError(f"PyPI lists no sdist for {PACKAGE} {VERSION}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_sdist() -> Path:
    """Download the pinned sdist into the cache (reused when there), its sha256 checked."""
    target = cache_root() / "downloads" / f"{SDIST_STEM}.tar.gz"
    if target.is_file():
        return target
    url, sha256 = sdist_entry()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise FetchError(f"cannot download {url}: {exc}") from None
    if _sha256(partial) != sha256:
        partial.unlink()
        raise FetchError(f"{url} does not have the sha256 PyPI gives ({sha256})")
    partial.replace(target)
    return target


def _wanted(member: tarfile.TarInfo, subdir: PurePosixPath = TESTS) -> PurePosixPath | None:
    """The file name of a `tests/tool_parsers/*.py` (or `subdir/*.py`) member, else None (no
    subdirectory, no component that could write outside the target)."""
    parts = PurePosixPath(member.name).parts
    depth = len(subdir.parts)
    if not member.isfile() or len(parts) != depth + 2 or any(p in ("", ".", "..") for p in parts):
        return None
    if PurePosixPath(*parts[1:-1]) != subdir or not parts[-1].endswith(".py"):
        return None
    return PurePosixPath(parts[-1])


def extract(sdist: Path, subdir: PurePosixPath = TESTS) -> int:
    """Extract `tests/tool_parsers/*.py` (or `subdir/*.py`) from `sdist` into the cache; returns
    the file count."""
    return extract_members(sdist, tests_dir(subdir), functools.partial(_wanted, subdir=subdir), f"{subdir}/*.py")


def fetch(sdist: Path | None = None, force: bool = False, subdir: PurePosixPath = TESTS) -> Path:
    """Make sure vLLM's tool-parser tests (or those of `subdir`) are in the cache; returns their
    directory."""
    if force or not is_fetched(subdir):
        try:
            extract(sdist if sdist is not None else download_sdist(), subdir)
        except OSError as exc:
            raise FetchError(f"cannot write the corpus cache under {cache_root()}: {exc}") from None
    return tests_dir(subdir)


# -- the families and their templates ---------------------------------------------------------------

# test module -> (family, template). The template is the one vLLM serves the family with (its example
# template where it ships one), as `tests/language/test_peer_cases.py` chooses; "" where no
# published template writes the format. "shared:" is the shared corpus, "llamacpp:" llama.cpp's.
TEMPLATES: dict[str, tuple[str, str]] = {
    "test_granite_tool_parser.py": ("granite", "shared:vllm__tool_chat_template_granite.jinja"),
    "test_granite4_tool_parser.py": ("granite4", "llamacpp:ibm-granite-granite-4.0.jinja"),
    "test_granite_20b_fc_tool_parser.py": ("granite_20b_fc", "shared:vllm__tool_chat_template_granite_20b_fc.jinja"),
    "test_phi4mini_tool_parser.py": ("phi4mini", "shared:vllm__tool_chat_template_phi4_mini.jinja"),
    "test_internlm2_tool_parser.py": ("internlm2", "shared:vllm__tool_chat_template_internlm2_tool.jinja"),
    "test_jamba_tool_parser.py": ("jamba", "shared:hfjs-e2e__ai21labs-AI21-Jamba-Large-1.6.jinja"),
    "test_xlam_tool_parser.py": ("xlam", "shared:vllm__tool_chat_template_xlam_llama.jinja"),
    "test_pythonic_tool_parser.py": ("pythonic", "shared:vllm__tool_chat_template_llama3.2_pythonic.jinja"),
    "test_llama4_pythonic_tool_parser.py": ("llama4_pythonic",
                                            "shared:vllm__tool_chat_template_llama3.2_pythonic.jinja"),
    "test_lfm2_tool_parser.py": ("lfm2", "llamacpp:LFM2.5-8B-A1B.jinja"),
    "test_step3p5_tool_parser.py": ("step3p5", "llamacpp:StepFun3.5-Flash.jinja"),
    "test_step3_tool_parser.py": ("step3", ""),
    "test_longcat_tool_parser.py": ("longcat", ""),
    "test_olmo3_tool_parser.py": ("olmo3", ""),
    "test_functiongemma_tool_parser.py": ("functiongemma", ""),
    "test_hunyuan_a13b_tool_parser.py": ("hunyuan_a13b", "shared:vllm__tool_chat_template_hunyuan_a13b.jinja"),
    "test_hy_v3_tool_parser.py": ("hy_v3", "llamacpp:tencent-Hy3.jinja"),
    "test_ernie45_moe_tool_parser.py": ("ernie45", "shared:xinference__Ernie4.5.jinja"),
    "test_minimax_m2_tool_parser.py": ("minimax_m2", "llamacpp:MiniMax-M2.jinja"),
    "test_minimax_m3_tool_parser.py": ("minimax_m3", "llamacpp:MiniMax-M3.jinja"),
    "test_glm47_moe_tool_parser.py": ("glm47", "llamacpp:GLM-4.7-Flash.jinja"),
    "test_gigachat3_tool_parser.py": ("gigachat3", "llamacpp:GigaChat3-10B-A1.8B.jinja"),
    "test_gemma4_tool_parser.py": ("gemma4", "llamacpp:google-gemma-4-31B-it.jinja"),
    "test_apertus_tool_parser.py": ("apertus", "llamacpp:Apertus-8B-Instruct.jinja"),
    "test_qwen3coder_tool_parser.py": ("qwen3coder", "llamacpp:Qwen3-Coder.jinja"),
    "test_minicpm5xml_tool_parser.py": ("minicpm5xml", "llamacpp:openbmb-MiniCPM5-1B.jinja"),
    "test_poolside_v1_tool_parser.py": ("poolside_v1", "llamacpp:poolside-Laguna-XS.2.jinja"),
}
# Cases whose test name holds the key use another template: GigaChat 3.1 writes `<|function_call|>`.
TEMPLATE_BY_TEST = {"gigachat31": "llamacpp:GigaChat3.1-10B-A1.8B.jinja"}
# The end-of-sequence token a template needs to render, where it uses one.
EOS_TOKENS = {"llamacpp:GigaChat3-10B-A1.8B.jinja": "</s>", "llamacpp:GigaChat3.1-10B-A1.8B.jinja": "</s>"}

DEBATABLE_NAME = re.compile(
    r"malformed|invalid|incomplete|partial|truncat|unclosed|broken|missing|repair|corrupt|unterminat|"
    r"unfinished|cut_?off|bad_|_bad|garbage|error|mismatch|recover|fallback|unknown|not_in_tools|hallucinat|"
    r"wrapped|alias|ignore|extra_arg|duplicate|case_sensitive|validate|tokenizer_space|regex_timeout",
    re.I)


@dataclass
class Case:
    id: str
    family: str
    test: str  # "module.py::Class::test[param-id]"
    template: str
    model_output: str
    expected: dict[str, Any]  # "tool_calls" (name, arguments or arguments_subset), "content"
    chunks: list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    notes: list[str] = field(default_factory=list)
    debatable: bool = False


# -- literal evaluation -----------------------------------------------------------------------------

class Unresolvable(Exception):
    """An expression that is no literal; the case is reported as not extracted."""


@dataclass
class Param:
    """A `pytest.param(...)` row."""
    values: list[Any]
    id: str | None
    marks: str


# Constructors of vLLM's protocol types: their keyword arguments are the fields.
RECORD_TYPES = {"ToolCall", "FunctionCall", "DeltaToolCall", "DeltaFunctionCall", "dict",
                "ChatCompletionToolsParam", "FunctionDefinition", "ChatCompletionToolParam", "Tool", "FunctionTool",
                "Function"}


def _callee(node: ast.Call) -> str:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return ""


def evaluate(node: ast.AST, env: dict[str, Any]) -> Any:
    """The value of a literal expression: constants, containers, f-strings, names bound in `env`,
    `json.dumps`, `pytest.param`, the protocol types and module helpers made of assignments."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_formatted(v, env) for v in node.values)
    if isinstance(node, ast.BinOp):
        return _binary(node, env)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -evaluate(node.operand, env)
    if isinstance(node, ast.List):
        return _elements(node.elts, env)
    if isinstance(node, ast.Tuple):
        return tuple(evaluate(e, env) for e in node.elts)
    if isinstance(node, ast.Set):
        return {evaluate(e, env) for e in node.elts}
    if isinstance(node, ast.Dict):
        return _mapping(node, env)
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise Unresolvable(node.id)
    if isinstance(node, ast.Call):
        return _call(node, env)
    if isinstance(node, ast.Subscript):
        return evaluate(node.value, env)[evaluate(node.slice, env)]
    raise Unresolvable(type(node).__name__)


def _formatted(part: ast.expr, env: dict[str, Any]) -> str:
    if isinstance(part, ast.Constant):
        return str(part.value)
    assert isinstance(part, ast.FormattedValue)
    spec = evaluate(part.format_spec, env) if part.format_spec else ""
    return format(evaluate(part.value, env), spec)


def _binary(node: ast.BinOp, env: dict[str, Any]) -> Any:
    left, right = evaluate(node.left, env), evaluate(node.right, env)
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Mult):
        return left * right
    if isinstance(node.op, ast.Mod) and isinstance(left, str):
        return left % right
    raise Unresolvable("operator")


def _elements(nodes: list[ast.expr], env: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for element in nodes:
        if isinstance(element, ast.Starred):
            out.extend(evaluate(element.value, env))
        else:
            out.append(evaluate(element, env))
    return out


def _mapping(node: ast.Dict, env: dict[str, Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if key is None:
            out.update(evaluate(value, env))
        else:
            out[evaluate(key, env)] = evaluate(value, env)
    return out


def _keywords(node: ast.Call, env: dict[str, Any], names: tuple[str, ...] | None = None) -> dict[str, Any]:
    return {k.arg: evaluate(k.value, env) for k in node.keywords if k.arg and (names is None or k.arg in names)}


def _call(node: ast.Call, env: dict[str, Any]) -> Any:
    name = _callee(node)
    if name == "dumps":
        return json.dumps(evaluate(node.args[0], env), **_keywords(node, env, ("ensure_ascii", "separators", "indent")))
    if name == "param":
        pid = next((evaluate(k.value, env) for k in node.keywords if k.arg == "id"), None)
        marks = next((ast.unparse(k.value) for k in node.keywords if k.arg == "marks"), "")
        return Param([evaluate(a, env) for a in node.args], pid, marks)
    if name == "join" and isinstance(node.func, ast.Attribute):
        return evaluate(node.func.value, env).join(evaluate(node.args[0], env))
    if name in RECORD_TYPES:
        return _record(name, node, env)
    if name == "str" and node.args:
        return str(evaluate(node.args[0], env))
    helper = env.get("__helpers__", {}).get(name) if isinstance(node.func, ast.Name) else None
    if helper is not None:
        return call_helper(helper, [evaluate(a, env) for a in node.args], _keywords(node, env), env)
    raise Unresolvable(f"call {name}")


def _record(name: str, node: ast.Call, env: dict[str, Any]) -> dict[str, Any]:
    record = _keywords(node, env)
    if name == "FunctionCall" and node.args:
        record.setdefault("name", evaluate(node.args[0], env))
        if len(node.args) > 1:
            record.setdefault("arguments", evaluate(node.args[1], env))
    if name in ("ChatCompletionToolsParam", "ChatCompletionToolParam"):
        record.setdefault("type", "function")
    return record


def call_helper(fn: ast.FunctionDef, args: list[Any], kwargs: dict[str, Any], env: dict[str, Any]) -> Any:
    """A module-level helper whose body is assignments and one return (`make_tool_call(name, args)`)."""
    params = [a.arg for a in fn.args.args]
    local = dict(env)
    defaults = fn.args.defaults
    for param, default in zip(params[len(params) - len(defaults):], defaults, strict=True):
        local[param] = evaluate(default, env)
    local.update(zip(params, args, strict=False))
    local.update(kwargs)
    bind_assignments(fn.body, local)
    for statement in fn.body:
        if isinstance(statement, ast.Return) and statement.value is not None:
            return evaluate(statement.value, local)
    raise Unresolvable(fn.name)


def bind_assignments(statements: list[ast.stmt], env: dict[str, Any]) -> None:
    """Bind the names `statements` assign to literal values (and forget those they rebind to
    anything else); follows `if` branches whose test is literal and `+=`."""
    for statement in statements:
        if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    _bind(env, target.id, lambda v=statement.value: evaluate(v, env))
        elif isinstance(statement, ast.If):
            try:
                bind_assignments(statement.body if evaluate(statement.test, env) else statement.orelse, env)
            except Unresolvable:
                pass
        elif (isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name)
              and isinstance(statement.op, ast.Add)):
            name, value = statement.target.id, statement.value
            _bind(env, name, lambda n=name, v=value: env[n] + evaluate(v, env))


def _bind(env: dict[str, Any], name: str, compute: Any) -> None:
    try:
        env[name] = compute()
    except Exception:  # noqa: BLE001  (anything not literal leaves the name unbound)
        env.pop(name, None)


# -- calls, tools and roles -------------------------------------------------------------------------

def normalized_call(value: Any) -> dict[str, Any]:
    """`{"name", "arguments"}` of an expected call written as a ToolCall, a dict or a pair."""
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        value = value["function"]
    if isinstance(value, tuple) and len(value) == 2:
        value = {"name": value[0], "arguments": value[1]}
    if not isinstance(value, dict):
        raise Unresolvable("call shape")
    out: dict[str, Any] = {}
    if "name" in value:
        out["name"] = value["name"]
    arguments = value.get("arguments", value.get("parameters"))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise Unresolvable("arguments are no JSON") from None
    if arguments is not None:
        out["arguments"] = arguments
    return out


def normalized_tools(value: Any) -> list[dict[str, Any]] | None:
    """OpenAI tools from the tool declarations a test passes, or None."""
    if not isinstance(value, list) or not value:
        return None
    tools = []
    for tool in value:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or "name" not in fn:
            return None
        tools.append({"type": "function", "function": {"name": fn["name"],
                                                       "parameters": fn.get("parameters") or {"type": "object"}}})
    return tools


OUTPUT_NAMES = re.compile(r"^(model_output|output|text|model_text|input_text|response|raw_output|model_response|"
                          r"input_str|full_text|llm_output|content_and_calls|raw|input|model_out)$|model_output|_output$")
CHUNK_NAMES = {"chunks", "deltas", "delta_texts", "stream_chunks", "text_chunks"}


def role_of(argname: str) -> str:
    """What a parametrized argument holds, by its name: output, chunks or an expectation."""
    name = argname.lower()
    if name in CHUNK_NAMES:
        return "chunks"
    if not name.startswith(("expected", "expect_")):
        return "output" if OUTPUT_NAMES.search(name) else "?"
    if "content" in name:
        return "content"
    if "count" in name or name.startswith("expected_num") or name.endswith("_len"):
        return "count"
    if "tool_call" in name or name.endswith(("_calls", "tools")):
        return "calls"
    if name in ("expected_name", "expected_function_name", "expected_tool_name"):
        return "name"
    if name in ("expected_names", "expected_tool_names", "expected_function_names"):
        return "names"
    return "args" if "arg" in name else "?"


def _is_fixture(fn: ast.FunctionDef) -> bool:
    return any("fixture" in ast.unparse(d) for d in fn.decorator_list)


class Module:
    """One test module: its literal module-level names, helpers and fixtures."""

    def __init__(self, path: Path) -> None:
        self.tree = ast.parse(path.read_text(encoding="utf-8"))
        self.env: dict[str, Any] = {"__helpers__": {
            n.name: n for n in self.tree.body
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("test") and not _is_fixture(n)}}
        bind_assignments(self.tree.body, self.env)
        self.fixtures = {n.name: n for n in ast.walk(self.tree) if isinstance(n, ast.FunctionDef) and _is_fixture(n)}

    def fixture_env(self, fixture: ast.FunctionDef, depth: int = 0) -> dict[str, Any]:
        env = dict(self.env)
        for arg in fixture.args.args:
            if arg.arg in self.fixtures and arg.arg != fixture.name:
                _bind(env, arg.arg, lambda a=arg.arg: self.fixture_value(a, depth + 1))
        bind_assignments(fixture.body, env)
        return env

    def fixture_value(self, name: str, depth: int = 0) -> Any:
        fixture = self.fixtures.get(name)
        if fixture is None or depth > 3:
            raise Unresolvable(name)
        env = self.fixture_env(fixture, depth)
        for statement in fixture.body:
            if isinstance(statement, ast.Return) and statement.value is not None:
                return evaluate(statement.value, env)
        raise Unresolvable(name)

    def tools_for(self, fn: ast.FunctionDef, env: dict[str, Any]) -> list[dict[str, Any]] | None:
        """Tools the test declares: a tool fixture it takes, or a `tools=` keyword in its body or
        in a fixture it uses."""
        bodies: list[tuple[ast.AST, dict[str, Any]]] = [(fn, env)]
        for arg in fn.args.args:
            fixture = self.fixtures.get(arg.arg)
            if fixture is None:
                continue
            bodies.append((fixture, self.fixture_env(fixture)))
            if "tool" in arg.arg:
                try:
                    tools = normalized_tools(self.fixture_value(arg.arg))
                except Exception:  # noqa: BLE001
                    tools = None
                if tools:
                    return tools
        for body, body_env in bodies:
            for node in ast.walk(body):
                if isinstance(node, ast.keyword) and node.arg == "tools":
                    try:
                        tools = normalized_tools(evaluate(node.value, body_env))
                    except Exception:  # noqa: BLE001
                        continue
                    if tools:
                        return tools
        return None


def test_functions(tree: ast.Module) -> Iterator[tuple[ast.ClassDef | None, ast.FunctionDef]]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            yield None, node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef) and sub.name.startswith("test"):
                    yield node, sub


def parametrize_sets(fn: ast.FunctionDef, env: dict[str, Any]) -> list[tuple[list[str], list[Any], list[str]]]:
    """(argument names, rows, ids) of each literal `pytest.mark.parametrize` of `fn`."""
    out = []
    for decorator in fn.decorator_list:
        if not (isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("parametrize")):
            continue
        keywords = {k.arg: k.value for k in decorator.keywords}
        names_node = decorator.args[0] if decorator.args else keywords.get("argnames")
        values_node = decorator.args[1] if len(decorator.args) > 1 else keywords.get("argvalues")
        try:
            names, values = evaluate(names_node, env), evaluate(values_node, env)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        try:
            ids = list(evaluate(keywords["ids"], env)) if "ids" in keywords else []
        except Exception:  # noqa: BLE001
            ids = []
        out.append((list(names), list(values), ids))
    return out


# -- expectations read from asserts ----------------------------------------------------------------

def _index_of(text: str) -> int | None:
    match = re.search(r"\[(\d+)\]", text)
    return int(match.group(1)) if match else None


def _is_calls_expr(text: str, call_vars: set[str]) -> bool:
    return "tool_call" in text or text in call_vars or text.split("[")[0] in call_vars


@dataclass
class Asserted:
    """What a test's asserts state, by call index."""
    count: int | None = None
    min_count: int | None = None
    calls: list[dict[str, Any]] | None = None
    content: Any = ...  # Ellipsis: not asserted
    names: dict[int, str] = field(default_factory=dict)
    args: dict[int, Any] = field(default_factory=dict)
    subset: dict[int, dict[str, Any]] = field(default_factory=lambda: collections.defaultdict(dict))


def _result_variables(fn: ast.FunctionDef) -> tuple[set[str], dict[str, int]]:
    """Names bound to the parsed calls, and names bound to one call's parsed arguments (by index)."""
    call_vars: set[str] = set()
    args_vars: dict[str, int] = {}
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, source = node.targets[0], ast.unparse(node.value)
        names = [e.id for e in (target.elts if isinstance(target, ast.Tuple) else [target]) if isinstance(e, ast.Name)]
        if "tool_call" in source and "json.loads" not in source:
            call_vars.update(n for n in names if n != "content")
        if source.startswith("json.loads(") and "argument" in source and isinstance(target, ast.Name):
            args_vars[target.id] = _index_of(source) or 0
    return call_vars, args_vars


def asserted(fn: ast.FunctionDef, env: dict[str, Any]) -> Asserted:
    """Expectations read from the function's assert statements (their common shapes only)."""
    call_vars, args_vars = _result_variables(fn)
    out = Asserted()
    for node in ast.walk(fn):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and _callee(node.value).startswith("assert") and "call" in _callee(node.value)
                and len(node.value.args) == 2):
            try:
                out.calls = [normalized_call(c) for c in evaluate(node.value.args[1], env)]
            except Exception:  # noqa: BLE001
                pass
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            _read_assert(node.test, env, call_vars, args_vars, out)
    return out


def _read_assert(test: ast.expr, env: dict[str, Any], call_vars: set[str], args_vars: dict[str, int],
                 out: Asserted) -> None:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        text = ast.unparse(test.operand)
        if text.endswith("tools_called") or (_is_calls_expr(text, call_vars) and "[" not in text):
            out.count = 0
        return
    if isinstance(test, ast.Attribute) and test.attr == "tools_called":
        out.min_count = 1 if out.min_count is None else out.min_count
        return
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return
    left, op = test.left, test.ops[0]
    try:
        right = evaluate(test.comparators[0], env)
    except Exception:  # noqa: BLE001
        return
    text = ast.unparse(left)
    if isinstance(op, ast.GtE) and text.startswith("len(") and _is_calls_expr(text[4:-1], call_vars):
        out.min_count = right
    elif isinstance(op, ast.Is | ast.Eq):
        _read_equality(left, text, right, env, call_vars, args_vars, out)


def _read_equality(left: ast.expr, text: str, right: Any, env: dict[str, Any], call_vars: set[str],
                   args_vars: dict[str, int], out: Asserted) -> None:
    bare_calls = _is_calls_expr(text, call_vars) and "[" not in text
    if text.startswith("len(") and _is_calls_expr(text[4:-1], call_vars) and isinstance(right, int):
        out.count = right
    elif text.endswith("tools_called") and isinstance(right, bool):
        if right:
            out.min_count = 1 if out.min_count is None else out.min_count
        else:
            out.count = 0
    elif bare_calls and right == []:
        out.count = 0
    elif re.search(r"\]\s*(\.function)?\.name$|\[\s*['\"]name['\"]\s*\]$", text) and isinstance(right, str):
        out.names[_index_of(text) or 0] = right
    elif text.startswith("json.loads(") and "argument" in text and isinstance(right, dict):
        out.args[_index_of(text) or 0] = right
    elif text in args_vars and isinstance(right, dict):
        out.args[args_vars[text]] = right
    elif isinstance(left, ast.Subscript) and ast.unparse(left.value) in args_vars:
        try:
            out.subset[args_vars[ast.unparse(left.value)]][evaluate(left.slice, env)] = right
        except Exception:  # noqa: BLE001
            pass
    elif (text.endswith(".content") or text == "content" or "collect_content" in text
          or text.endswith("content_text")) and (isinstance(right, str) or right is None):
        out.content = right
    elif bare_calls and isinstance(right, list) and right:
        try:
            out.calls = [normalized_call(c) for c in right]
        except Unresolvable:
            pass


def expectation(found: Asserted) -> dict[str, Any] | None:
    """The case's expectation: content and calls (`tool_calls_at_least` where only a minimum is
    asserted), or None when the asserts state nothing this script reads."""
    out: dict[str, Any] = {} if found.content is ... else {"content": found.content}
    if found.calls is not None:
        return dict(out, tool_calls=found.calls)
    indices = set(found.names) | set(found.args) | set(found.subset)
    if found.count is None and not indices and found.min_count is None:
        return out or None
    count = found.count
    if count is None:
        count = max([*indices, (found.min_count or 1) - 1]) + 1
    calls = []
    for i in range(count):
        call: dict[str, Any] = {}
        if i in found.names:
            call["name"] = found.names[i]
        if i in found.args:
            call["arguments"] = found.args[i]
        if i in found.subset:
            call["arguments_subset"] = dict(found.subset[i])
        calls.append(call)
    out["tool_calls"] = calls
    if found.count is None:
        out["tool_calls_at_least"] = True
    return out


def outputs_fed(fn: ast.FunctionDef, env: dict[str, Any]) -> list[tuple[str, list[str] | None]]:
    """Model outputs the function feeds a parser: (text, chunks or None), distinct texts."""
    found: dict[str, list[str] | None] = {}
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        name = _callee(node)
        candidates: list[ast.expr] = []
        if name == "extract_tool_calls" and node.args:
            candidates = [node.args[0]]
        elif name.startswith("run_tool_extraction") and len(node.args) > 1:
            candidates = [node.args[1]]
        elif "stream" in name.lower() or "feed" in name.lower():
            candidates = list(node.args) + [k.value for k in node.keywords]
        for candidate in candidates:
            try:
                value = evaluate(candidate, env)
            except Exception:  # noqa: BLE001
                continue
            if isinstance(value, str) and value:
                found.setdefault(value, None)
            elif isinstance(value, list) and value and all(isinstance(x, str) for x in value):
                found.setdefault("".join(value), value)
    return list(found.items())


# -- extraction -------------------------------------------------------------------------------------

# The shared suite's tests (`common_tests.py`): the config field holding the output, and what the
# test asserts of it.
def _named_calls(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    names = cfg.get("parallel_tool_calls_names", ["get_weather", "get_time"])
    return [{"name": n} for n in names][:cfg.get("parallel_tool_calls_count", 2)]


def _with_content(expected: dict[str, Any], cfg: dict[str, Any], key: str) -> dict[str, Any]:
    return expected if cfg.get(key) is None else dict(expected, content=cfg[key])


COMMON_SUITE = {
    "no_tool_calls": ("no_tool_calls_output", lambda cfg: {"content": cfg["no_tool_calls_output"], "tool_calls": []}),
    "single_tool_call_simple_args": ("single_tool_call_output", lambda cfg: _with_content(
        {"tool_calls": [{"name": cfg.get("single_tool_call_expected_name", "get_weather"),
                         "arguments_subset": cfg.get("single_tool_call_expected_args", {"city": "Tokyo"})}]},
        cfg, "single_tool_call_expected_content")),
    "parallel_tool_calls": ("parallel_tool_calls_output", lambda cfg: _with_content(
        {"tool_calls": _named_calls(cfg)}, cfg, "parallel_tool_calls_expected_content")),
    "various_data_types": ("various_data_types_output", lambda cfg: {"tool_calls": [{}]}),
    "empty_arguments": ("empty_arguments_output", lambda cfg: {"tool_calls": [{"arguments": {}}]}),
    "surrounding_text": ("surrounding_text_output", lambda cfg: {"tool_calls": [{}], "tool_calls_at_least": True}),
    "escaped_strings": ("escaped_strings_output", lambda cfg: {"tool_calls": [{}]}),
}


CaseT = TypeVar("CaseT")


@dataclass
class Extraction(Generic[CaseT]):
    """The cases read from one test module, and why the rest of its items were not."""
    cases: list[CaseT] = field(default_factory=list)
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)


def _new_case(family: str, module: str, test: str, output: str, expected: dict[str, Any],
              chunks: list[str] | None = None, tools: list[dict[str, Any]] | None = None,
              notes: list[str] | None = None) -> Case:
    notes = list(notes or [])
    debatable = bool(DEBATABLE_NAME.search(test)) or any("xfail" in n for n in notes)
    return Case(id=f"vllm-{family}-{test}", family=family, test=f"{module}::{test}", template="",
                model_output=output, expected=expected, chunks=chunks or None, tools=tools, notes=notes,
                debatable=debatable)


def common_suite_cases(module: Module, family: str, name: str, out: Extraction[Case]) -> None:
    """Cases of vLLM's shared suite, from the module's `ToolParserTestConfig(...)`."""
    for node in ast.walk(module.tree):
        if not (isinstance(node, ast.Call) and _callee(node) == "ToolParserTestConfig"):
            continue
        cfg: dict[str, Any] = {}
        for keyword in node.keywords:
            _bind(cfg, keyword.arg, lambda v=keyword.value: evaluate(v, module.env))
        xfails = {**cfg.get("xfail_streaming", {}), **cfg.get("xfail_nonstreaming", {})}
        for test, (field_name, expect) in COMMON_SUITE.items():
            if field_name not in cfg:
                out.skipped["config field not literal"] += 1
                continue
            notes = ["common suite (ToolParserTestConfig)"]
            if f"test_{test}" in xfails:
                notes.append(f"vLLM xfail: {xfails[f'test_{test}']}")
            out.cases.append(_new_case(family, name, f"common_{test}", cfg[field_name], expect(cfg), notes=notes))
        out.skipped["malformed input (vLLM asserts no crash only)"] += len(cfg.get("malformed_input_outputs", []))


def _row_values(names: list[str], row: Any) -> tuple[dict[str, Any], str, str | None]:
    """(bound arguments, marks, id) of one parametrize row."""
    marks, pid = "", None
    if isinstance(row, Param):
        marks, pid, row = row.marks, row.id, row.values
    values = list(row) if isinstance(row, tuple | list) and len(names) > 1 else [row]
    return dict(zip(names, values, strict=False)), marks, pid


def _expected_from_arguments(bound: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """The row's own expectation arguments override what the asserts say."""
    for argname, value in bound.items():
        role = role_of(argname)
        if role == "calls" and isinstance(value, list):
            expected["tool_calls"] = [normalized_call(c) for c in value]
            expected.pop("tool_calls_at_least", None)
        elif role == "content":
            expected["content"] = value
        elif role == "count" and isinstance(value, int):
            expected.setdefault("tool_calls", [{} for _ in range(value)])
        elif role == "name" and isinstance(value, str):
            first = (expected.get("tool_calls") or [{}])[0]
            expected["tool_calls"] = [{**{k: v for k, v in first.items() if k != "name"}, "name": value}]
        elif role == "names" and isinstance(value, list):
            expected["tool_calls"] = [{"name": x} for x in value]
        elif role == "args" and isinstance(value, dict):
            calls = expected.get("tool_calls") or [{}]
            calls[0] = dict(calls[0], arguments=value)
            expected["tool_calls"] = calls
    return expected


def parametrized_cases(module: Module, family: str, name: str, test: str, fn: ast.FunctionDef,
                       env: dict[str, Any], rowset: tuple[list[str], list[Any], list[str]], out: Extraction[Case]) -> None:
    names, rows, ids = rowset
    for k, row in enumerate(rows):
        bound, marks, pid = _row_values(names, row)
        pid = pid or (ids[k] if k < len(ids) else None)
        row_env = dict(env, **bound)
        bind_assignments(fn.body, row_env)
        chunks = next((v for a, v in bound.items() if role_of(a) == "chunks"), None)
        text = next((v for a, v in bound.items() if role_of(a) == "output" and isinstance(v, str)), None)
        if text is None and chunks:
            text = "".join(chunks)
        if text is None:
            out.skipped["parametrized: no literal output"] += 1
            continue
        try:
            expected = _expected_from_arguments(bound, expectation(asserted(fn, row_env)) or {})
        except Unresolvable as exc:
            out.skipped[f"parametrized: {exc}"] += 1
            continue
        if not expected:
            out.skipped["parametrized: no expectation read"] += 1
            continue
        notes = [f"parametrize id={pid}" if pid else f"parametrize row {k}"]
        if "xfail" in marks or "skip" in marks:
            notes.append(f"vLLM marks: {marks}")
        label = f"{test}[{pid if pid is not None else k}]"
        out.cases.append(_new_case(family, name, label, text, expected, chunks if isinstance(chunks, list) else None,
                                   module.tools_for(fn, row_env), notes))


def standalone_case(module: Module, family: str, name: str, test: str, fn: ast.FunctionDef,
                    env: dict[str, Any], rowsets: list[tuple[list[str], list[Any], list[str]]],
                    out: Extraction[Case]) -> None:
    env = dict(env)
    for names, rows, _ids in rowsets:  # other parametrizations (streaming or not): the first row
        if rows:
            env.update(_row_values(names, rows[0])[0])
    bind_assignments(fn.body, env)
    outputs = outputs_fed(fn, env)
    if len(outputs) != 1:
        out.skipped["standalone: " + ("no literal output fed to the parser" if not outputs
                                      else "several outputs in one test")] += 1
        return
    expected = expectation(asserted(fn, env))
    if not expected:
        out.skipped["standalone: no expectation read"] += 1
        return
    text, chunks = outputs[0]
    out.cases.append(_new_case(family, name, test, text, expected, chunks, module.tools_for(fn, env),
                               ["standalone test"]))


def module_cases(path: Path, family: str) -> Extraction[Case]:
    """The cases one vLLM test module states, and what it states that is not read (by reason)."""
    module, out = Module(path), Extraction[Case]()
    common_suite_cases(module, family, path.name, out)
    for cls, fn in test_functions(module.tree):
        test = f"{cls.name}::{fn.name}" if cls else fn.name
        env = dict(module.env)
        if cls is not None:
            bind_assignments(cls.body, env)
        rowsets = parametrize_sets(fn, env)
        main = next((s for s in rowsets if any(role_of(a) in ("output", "chunks") for a in s[0])), None)
        if main is not None:
            parametrized_cases(module, family, path.name, test, fn, env, main, out)
        else:
            standalone_case(module, family, path.name, test, fn, env, rowsets, out)
    return out


def template_of(family_template: str, case: Any, by_test: dict[str, str] = TEMPLATE_BY_TEST) -> str:
    """The family's template, or the one `by_test` names for a key in the case's id."""
    return next((t for key, t in by_test.items() if key in case.id), family_template)


def read_cases(directory: Path, templates: dict[str, tuple[str, str]] = TEMPLATES,
               extract: Callable[[Path, str], Extraction[Any]] = module_cases,
               by_test: dict[str, str] = TEMPLATE_BY_TEST) -> tuple[list[Any], dict[str, collections.Counter[str]]]:
    """Every case `extract` reads from the modules in `templates` (module -> (family, template)),
    ids made unique, and what was not extracted."""
    cases: list[Any] = []
    skipped: dict[str, collections.Counter[str]] = {}
    for module, (family, template) in templates.items():
        if not (directory / module).is_file():
            continue
        extraction = extract(directory / module, family)
        for case in extraction.cases:
            case.template = template_of(template, case, by_test)
        cases.extend(extraction.cases)
        skipped[family] = extraction.skipped
    seen: collections.Counter[str] = collections.Counter()
    for case in cases:
        seen[case.id] += 1
        if seen[case.id] > 1:
            case.id += f"#{seen[case.id]}"
    return cases, skipped


# -- running ----------------------------------------------------------------------------------------

@dataclass
class Outcome:
    case: Case
    status: str  # "pass", "fail", "no_template"
    cause: str = ""
    got: dict[str, Any] = field(default_factory=dict)

    @property
    def debatable(self) -> bool:
        return self.case.debatable or self.cause.startswith("debatable")


def _stringified(value: Any) -> Any:
    """Every scalar as the text it was written as (`7` and `"07"` both `"7"`)."""
    if isinstance(value, dict):
        return {k: _stringified(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stringified(v) for v in value]
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float) and value == int(value):
        return str(int(value))
    if isinstance(value, str) and value.isdigit():
        return value.lstrip("0") or "0"
    return str(value)


def _last_of_repeats(want: Any, got: Any) -> Any:
    """`want` with each list that `got` holds as one value (a key written twice, the last kept)
    replaced by its last item."""
    if isinstance(want, dict) and isinstance(got, dict):
        return {k: _last_of_repeats(v, got.get(k)) for k, v in want.items()}
    if isinstance(want, list) and want and not isinstance(got, list):
        return _last_of_repeats(want[-1], got)
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [_last_of_repeats(w, g) for w, g in zip(want, got, strict=True)]
    return want


def arguments_cause(got: Any, want: Any) -> str:
    if isinstance(got, dict) and isinstance(want, dict) and _stringified(got) == _stringified(want):
        return "debatable: values typed differently (schema-less inference or leading zeros)"
    if isinstance(got, dict) and _stringified(got) == _stringified(_last_of_repeats(want, got)):
        return "debatable: a key written twice keeps its last value (README; vLLM's parsers differ)"
    return "name/args differ"


def calls_cause(expected: dict[str, Any], message: dict[str, Any]) -> str:
    calls = [t for t in message.get("tool_calls") or [] if not t.get("incomplete")]
    want = expected["tool_calls"]
    enough = len(calls) >= len(want) if expected.get("tool_calls_at_least") else len(calls) == len(want)
    if not enough:
        if want and not calls:
            return "no calls read"
        return "calls read where none expected" if not want else "call count differs"
    for got, wanted in zip(calls, want, strict=False):
        try:
            arguments = json.loads(got["function"]["arguments"])
        except json.JSONDecodeError:
            return "name/args differ"
        if "name" in wanted and got["function"]["name"] != wanted["name"]:
            return "name/args differ"
        if "arguments" in wanted and arguments != wanted["arguments"]:
            return arguments_cause(arguments, wanted["arguments"])
        subset = wanted.get("arguments_subset", {})
        if any(arguments.get(k) != v for k, v in subset.items()):
            return arguments_cause({k: arguments.get(k) for k in subset}, subset)
    return ""


WRAPPER_MARKUP = r"```\w*|\[[A-Z_]+\]|</?[\w:|]+>"  # a fence, a `[TAG]` or a tag, as markup around text


def _spaced(text: str) -> str:
    return " ".join(text.split())


def content_cause(case: Case, message: dict[str, Any]) -> str:
    got, want = (message.get("content") or "").strip(), (case.expected["content"] or "").strip()
    if got == want:
        return ""
    residue = got.replace(want, "", 1) if want in got else None
    if residue is not None and re.fullmatch(rf"(\s|{WRAPPER_MARKUP})*", residue):
        return "debatable: vLLM drops wrapper markup the template never writes"
    if want and _spaced(re.sub(WRAPPER_MARKUP, "", got)) == _spaced(want):  # markup inside the text
        return "debatable: vLLM drops wrapper markup the template never writes"
    if message.get("tool_calls") and got and want in got and _is_subsequence(got, case.model_output):
        return "debatable: vLLM drops text around the calls (kept here: nothing is lost)"
    return "content differs"


def _is_subsequence(part: str, whole: str) -> bool:
    """Whether `part` is `whole` with spans left out (the calls between kept text)."""
    rest = iter(whole)
    return all(char in rest for char in part)


def compare(case: Case, message: dict[str, Any]) -> str:
    """"" when the message meets the case's expectation, else the cause of the difference."""
    cause = calls_cause(case.expected, message) if "tool_calls" in case.expected else ""
    if not cause and "content" in case.expected:
        cause = content_cause(case, message)
    return cause


def _without_ids(message: dict[str, Any]) -> dict[str, Any]:
    message = json.loads(json.dumps(message))
    for call in message.get("tool_calls") or []:
        call.pop("id", None)
    return message


def chunkings(case: Any) -> list[list[str]]:
    """How the output is streamed: a character at a time, vLLM's chunks, random cuts (seeded)."""
    text = case.model_output
    out = [list(text)] + ([case.chunks] if case.chunks else [])
    if len(text) > 2:
        rng = random.Random(case.id)
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, len(text) // 3)))
        out.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)])
    return out


def streamed(parser: Any, chunks: list[str]) -> dict[str, Any]:
    """The message the parser's stream gives for the output fed in these chunks."""
    stream = parser.stream()
    for chunk in chunks:
        stream.feed(chunk)
    stream.finish()
    return stream.message()


def streamed_cause(parser: Any, case: Case, whole: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    for chunks in chunkings(case):
        message = streamed(parser, chunks)
        if _without_ids(message) != _without_ids(whole):
            return "streamed differs from whole", message
    return "", whole


def _parser(case: Case, analysis: Any) -> Any:
    from autoparser.language.reading import Parser

    data = dict(analysis.to_dict(), reasoning={"mode": "none"})  # vLLM ran the tool parser alone
    tools = case.tools
    wanted = {w["name"] for w in case.expected.get("tool_calls") or [] if "name" in w}
    if tools and not wanted <= {t["function"]["name"] for t in tools}:
        tools = None  # vLLM's parser did not restrict names to the tools the test declared
    return Parser(data, **({"tools": tools} if tools else {}))


def _markers_absent(analysis: Any, text: str) -> bool:
    t = analysis.tools
    markers = [m.strip() for m in (t.section_start, t.call_start, t.name_start) if m.strip()]
    return bool(markers) and not any(m in text for m in markers)


TAG = re.compile(r"<[^<>\s]{1,40}>|\[[A-Z_]{2,40}\]")  # a marker-like token in an output
TEMPLATE_LACKS_IT = "template lacks it: vLLM's test writes markers the template never writes"


def respelled_tags(text: str, markers: Iterable[str]) -> list[tuple[str, str]]:
    """Each tag of `text` that one of `markers` (the template's) writes with more inside its
    brackets after a mark (`<tool_call>` where the template writes `<tool_call:opensource>`),
    with that marker: the spelling of another release of the template and its tokenizer."""
    spelled = [m.strip() for m in markers if m.strip().endswith(">")]
    pairs = []
    for tag in dict.fromkeys(TAG.findall(text)):
        longer = [m for m in spelled if m != tag and m.startswith(tag[:-1]) and not m[len(tag) - 1].isalnum()]
        if longer:
            pairs.append((tag, longer[0]))
    return pairs


def _unwritten_tags(analysis: Any, text: str) -> list[str]:
    """The marker-like tokens of `text` that appear nowhere in the template's source."""
    return [t for t in dict.fromkeys(TAG.findall(text)) if t not in analysis.source]


def call_markers(analysis: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The analysis's markers that open a call or its section, and those that close one."""
    tools = analysis.tools if analysis is not None else None
    if tools is None:
        return (), ()
    opens = tuple(m.strip() for m in (tools.section_start, tools.call_start) if m.strip())
    closes = tuple(m.strip() for m in (tools.call_end, tools.section_end) if m.strip())
    return opens, closes


def respelled_cause(markers: tuple[str, ...], text: str, peer: str = "vLLM") -> str:
    """The debatable cause of a case whose output writes the template's call markers spelled
    otherwise: the peer's parser takes their spelling from the tokenizer its test loads (another
    release's), so the test measures another template. "" where the case is none such."""
    pairs = respelled_tags(text, markers)
    if not pairs:
        return ""
    shown = ", ".join(f"`{tag}` for `{marker}`" for tag, marker in pairs[:2])
    return (f"debatable: {TEMPLATE_LACKS_IT.replace('vLLM', peer)} ({shown}: its parser spells them as the "
            "tokenizer it loads does)")


def run_case(case: Case, analysis: Any) -> Outcome:
    if analysis is None:
        return Outcome(case, "no_template", "no template in the corpus")
    if not analysis.tools.supported and case.expected.get("tool_calls"):
        if "tool_call" not in analysis.source:
            return Outcome(case, "fail", "template lacks it: the template writes no tool calls")
        return Outcome(case, "fail", "analysis finds no calls")
    parser = _parser(case, analysis)
    try:
        whole = parser.parse(case.model_output)
    except Exception as exc:  # noqa: BLE001  (a crash is a failure of this case, with its cause)
        return Outcome(case, "fail", f"parser raised {type(exc).__name__}: {exc}")
    cause = compare(case, whole)
    if (cause in ("no calls read", "content differs") and not whole.get("tool_calls")
            and _markers_absent(analysis, case.model_output)):
        unwritten = _unwritten_tags(analysis, case.model_output)
        cause = TEMPLATE_LACKS_IT if unwritten else "vLLM's markers differ from the template's"
        if unwritten:
            cause = respelled_cause(sum(call_markers(analysis), ()), case.model_output) or cause
    if cause:
        return Outcome(case, "fail", cause, whole)
    cause, got = streamed_cause(parser, case, whole)
    return Outcome(case, "fail" if cause else "pass", cause, got)


def shared_templates_dir() -> Path | None:
    """The shared corpus's templates (`$AUTOPARSER_SHARED`, or `shared/corpus` beside the checkout)."""
    configured = os.environ.get("AUTOPARSER_SHARED")
    candidates = [Path(configured), Path(configured) / "corpus"] if configured else []
    candidates.append(REPO.parent / "shared" / "corpus")
    return next((c / "templates" for c in candidates if (c / "templates").is_dir()), None)


@functools.cache
def llamacpp_templates_dir() -> Path:
    """llama.cpp's templates, fetched by `tools/fetch_corpus.py` where they are not yet cached."""
    try:
        return fetch_corpus.fetch()
    except fetch_corpus.FetchError as exc:
        raise FetchError(f"llama.cpp's templates: {exc}") from None


def template_path(spec: str) -> Path | None:
    corpus, name = spec.split(":", 1)
    directory = llamacpp_templates_dir() if corpus == "llamacpp" else shared_templates_dir()
    return directory / name if directory is not None else None


def analysis_of(spec: str, eos_tokens: dict[str, str] = EOS_TOKENS) -> Any:
    """The analysis of a template spec, or None where there is no template (or it is missing)."""
    import autoparser

    path = template_path(spec) if spec else None
    if path is None or not path.is_file():
        return None
    return autoparser.analyze(path.read_text(encoding="utf-8"), eos_token=eos_tokens.get(spec, ""))


def run_all(cases: list[Any], run: Callable[[Any, Any], Any] = run_case,
            eos_tokens: dict[str, str] = EOS_TOKENS) -> list[Any]:
    """Each case run by `run` against the analysis of its template (each template analysed once)."""
    analyses: dict[str, Any] = {}
    outcomes = []
    for case in cases:
        if case.template not in analyses:
            analyses[case.template] = analysis_of(case.template, eos_tokens)
        outcomes.append(run(case, analyses[case.template]))
    return outcomes


def totals(outcomes: list[Any]) -> tuple[int, int]:
    """(passed, comparable): comparable cases are those whose family has a template."""
    passed = sum(o.status == "pass" for o in outcomes)
    return passed, passed + sum(o.status == "fail" for o in outcomes)


def report(outcomes: list[Outcome], skipped: dict[str, collections.Counter[str]]) -> str:
    by_family: dict[str, list[Outcome]] = collections.defaultdict(list)
    for outcome in outcomes:
        by_family[outcome.case.family].append(outcome)
    width = max(len(f) for f in by_family)
    lines = [f"{'family':<{width}}  pass  fail  debatable  no-template  not-read  template"]
    for family, rows in by_family.items():
        count = collections.Counter(o.status for o in rows)
        debatable = sum(o.status == "fail" and o.debatable for o in rows)
        template = ", ".join(sorted({o.case.template for o in rows})) or "-"
        lines.append(f"{family:<{width}}  {count['pass']:>4}  {count['fail']:>4}  {debatable:>9}  "
                     f"{count['no_template']:>11}  {sum(skipped.get(family, {}).values()):>8}  {template}")
    passed, comparable = totals(outcomes)
    not_read = sum(sum(c.values()) for c in skipped.values())
    lines.append(f"total: {passed}/{comparable} cases with a template pass ({passed / max(comparable, 1):.1%}); "
                 f"{len(outcomes)} cases, {len(outcomes) - comparable} without a template, "
                 f"{not_read} test items not extracted")
    firm = [o for o in outcomes if o.status == "fail" and not o.debatable]
    lacking = sum(o.cause.startswith("template lacks it") for o in firm)
    lines.append(f"{passed}/{passed + len(firm)} of the non-debatable ones pass; {lacking} of the "
                 "non-debatable failures test what the template does not write")
    causes = collections.Counter(("debatable: " if o.case.debatable and not o.cause.startswith("debatable")
                                  else "") + o.cause for o in outcomes if o.status == "fail")
    lines += [f"  {count:>4}  {cause}" for cause, count in causes.most_common()]
    return "\n".join(lines)


def describe_failure(outcome: Outcome) -> str:
    case = outcome.case
    got = {k: outcome.got.get(k) for k in ("content", "tool_calls")}
    return (f"{case.id} [{'debatable ' if outcome.debatable else ''}{outcome.status}] {outcome.cause}"
            f"\n  test:     {case.test} ({'; '.join(case.notes)})"
            f"\n  template: {case.template or '-'}"
            f"\n  output:   {case.model_output!r}"
            f"\n  expect:   {json.dumps(case.expected, ensure_ascii=False)}"
            f"\n  got:      {json.dumps(got, ensure_ascii=False)}")


@dataclass(frozen=True)
class CaseTool:
    """One script over vLLM's tests: where its modules are and how it reads, runs and reports them."""
    name: str
    description: str
    subdir: PurePosixPath
    read_cases: Callable[[Path], tuple[list[Any], dict[str, collections.Counter[str]]]]
    run_all: Callable[[list[Any]], list[Any]]
    report: Callable[[list[Any], dict[str, collections.Counter[str]]], str]
    describe_failure: Callable[[Any], str]


def run_tool(tool: CaseTool, argv: list[str] | None = None) -> int:
    """The command line every such script shares: fetch, then --json, --failures and --report."""
    parser = argparse.ArgumentParser(description=tool.description)
    parser.add_argument("--sdist", type=Path, help=f"use this {SDIST_STEM}.tar.gz instead of downloading it")
    parser.add_argument("--force", action="store_true", help="extract again even if already present")
    parser.add_argument("--fetch-only", action="store_true", help="fetch the test modules, print where they are")
    parser.add_argument("--report", action="store_true", help="pass counts per family and in total, and the causes")
    parser.add_argument("--failures", metavar="FAMILY", help="print the failing cases of FAMILY ('all' for every one)")
    parser.add_argument("--json", action="store_true", help="print the extracted cases as JSON lines")
    args = parser.parse_args(argv)
    try:
        directory = fetch(args.sdist, force=args.force, subdir=tool.subdir)
    except FetchError as exc:
        print(f"{tool.name}: {exc}", file=sys.stderr)
        return 1
    if args.fetch_only:
        print(f"{len(list(directory.glob('*.py')))} test modules in {directory}")
        return 0
    cases, skipped = tool.read_cases(directory)
    if args.json:
        for case in cases:
            print(json.dumps(asdict(case), ensure_ascii=False))
        return 0
    try:
        outcomes = tool.run_all(cases)
    except FetchError as exc:
        print(f"{tool.name}: {exc}", file=sys.stderr)
        return 1
    if args.failures:
        for outcome in outcomes:
            if outcome.status != "pass" and args.failures in ("all", outcome.case.family):
                print(tool.describe_failure(outcome))
    if args.report or not args.failures:
        print(tool.report(outcomes, skipped))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_tool(CaseTool("vllm_parser_cases", __doc__.splitlines()[0], TESTS, read_cases, run_all, report,
                             describe_failure), argv)


if __name__ == "__main__":
    sys.exit(main())
