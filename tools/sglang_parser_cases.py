"""SGLang's function-call parser expectations, read from its test modules, run against autoparser.

SGLang tests each hand-written detector (`test/srt/function_call/`, later
`test/registered/function_call/` and `test/registered/unit/function_call/`) with model outputs and
the calls and normal text it must return, mostly as `unittest` methods: a `setUp` that declares the
tools and the detector, then `detect_and_parse(text, tools)` and `self.assertEqual(...)`. SGLang
publishes wheels only, so its tests are read from a checkout or a bare git directory; this script
reads them as data, by Python's `ast` and literals only (nothing of SGLang is imported or run), and
writes what it reads to `fixtures/sglang_parser_cases.jsonl`, each case with the SGLang commit and
file it comes from. Its reasoning-parser tests (`test_reasoning_parser.py`: `detect_and_parse(text)`
and `ReasoningParser(model).parse_non_stream(text)` against `reasoning_text` and `normal_text`) go to
`fixtures/sglang_reasoning_cases.jsonl` and are scored as `vllm_reasoning_cases.py` scores vLLM's, in
the prompt state each expectation assumes. An expression that is no literal, a loop over outputs, or a detector fed several
increments in one test is counted as not extracted, never guessed.

Scoring reuses `vllm_parser_cases.py`: each case is parsed whole against the analysis of the
template its detector's family maps to (`FAMILIES` below), then streamed (a character at a time and
in random cuts); streamed must equal whole. Comparison: call count, names exact, arguments equal as
JSON, normal text stripped of surrounding whitespace. A failure is marked debatable where the test's
name says it probes malformed or unusual output, and where the difference is one the project
chooses (text around calls kept, values typed without a schema).

    python tools/sglang_parser_cases.py --extract SGLANG_CHECKOUT_OR_GIT_DIR   # write the fixture
    python tools/sglang_parser_cases.py --report               # pass counts per family and in total
    python tools/sglang_parser_cases.py --failures FAMILY      # failing cases with what was parsed
"""

from __future__ import annotations

import argparse
import ast
import collections
import copy
import functools
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/ is scripts, not a package
import vllm_reasoning_cases as reasoning_tool  # noqa: E402
from vllm_parser_cases import (  # noqa: E402
    DEBATABLE_NAME,
    TAG,
    TEMPLATE_LACKS_IT,
    Asserted,
    Case,
    Unresolvable,
    _bind,
    _callee,
    _index_of,
    analysis_of,
    bind_assignments,
    call_markers,
    describe_failure,
    evaluate,
    expectation,
    normalized_tools,
    report,
    respelled_cause,
    run_all,
    template_of,
    template_path,  # noqa: F401  (re-exported for the tests)
    totals,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "sglang_parser_cases.jsonl"
TEST_FILE = re.compile(r"^test/(.+/)?(function_call/test_[\w]+|test_function_call_parser)\.py$")
REASONING_FIXTURE = REPO / "fixtures" / "sglang_reasoning_cases.jsonl"
REASONING_TEST_FILE = re.compile(r"^test/(.+/)?test_reasoning_parser\.py$")

# detector class -> (family, template). The template is the one SGLang (or the model) serves the
# family with where a corpus holds it, as `tests/language/test_peer_cases.py` chooses; "" where no
# published template writes the format. "shared:" is the shared corpus, "llamacpp:" llama.cpp's.
FAMILIES: dict[str, tuple[str, str]] = {
    "PythonicDetector": ("pythonic", "shared:vllm__tool_chat_template_llama3.2_pythonic.jinja"),
    "MistralDetector": ("mistral", "llamacpp:mistralai-Mistral-Nemo-Instruct-2407.jinja"),
    "Llama32Detector": ("llama32", "llamacpp:meta-llama-Llama-3.2-3B-Instruct.jinja"),
    "Qwen25Detector": ("qwen25", "llamacpp:Qwen-Qwen2.5-7B-Instruct.jinja"),
    "KimiK2Detector": ("kimik2", "llamacpp:Kimi-K2-Instruct.jinja"),
    "DeepSeekV3Detector": ("deepseekv3", "shared:sglang__tool_chat_template_deepseekv3.jinja"),
    "DeepSeekV31Detector": ("deepseekv31", "llamacpp:deepseek-ai-DeepSeek-V3.1.jinja"),
    "DeepSeekV32Detector": ("deepseekv32", "llamacpp:deepseek-ai-DeepSeek-V3.2.jinja"),
    "Qwen3CoderDetector": ("qwen3_coder", "llamacpp:Qwen3-Coder.jinja"),
    "Glm4MoeDetector": ("glm4_moe", "shared:sglang__tool_and_thinking_chat_template_glm4.5.jinja"),
    "Glm47MoeDetector": ("glm47_moe", "llamacpp:GLM-4.7-Flash.jinja"),
    "Lfm2Detector": ("lfm2", "llamacpp:LFM2.5-8B-A1B.jinja"),
    "GigaChat3Detector": ("gigachat3", "llamacpp:GigaChat3-10B-A1.8B.jinja"),
    "HermesDetector": ("hermes", "llamacpp:Qwen-Qwen2.5-7B-Instruct.jinja"),
    "DeepSeekV4Detector": ("deepseekv4", "llamacpp:deepseek-ai-DeepSeek-V4.jinja"),
    "GptOssDetector": ("gpt_oss", "llamacpp:openai-gpt-oss-120b.jinja"),
    "Gemma4Detector": ("gemma4", "llamacpp:google-gemma-4-31B-it.jinja"),
    "HunyuanDetector": ("hunyuan", "llamacpp:tencent-Hy3.jinja"),  # Hy3's `<tool_sep>` calls
    "MiniCPM5Detector": ("minicpm5", "llamacpp:openbmb-MiniCPM5-1B.jinja"),
    "MinimaxM3Detector": ("minimax_m3", "llamacpp:MiniMax-M3.jinja"),
    "PoolsideV1Detector": ("poolside_v1", "llamacpp:poolside-Laguna-XS.2.jinja"),
    "InklingDetector": ("inkling", ""),
    "JsonArrayParser": ("json_array", ""),  # SGLang's generic parser for constrained output
    "BaseFormatDetector": ("base_format", ""),  # the abstract base, driven by a test double
}
# Cases whose test name holds the key use another template: GigaChat 3.1 writes `<|function_call|>`,
# Devstral Mistral's compact `[TOOL_CALLS]name[ARGS]{...}`.
TEMPLATE_BY_TEST = {"function_call_marker": "llamacpp:GigaChat3.1-10B-A1.8B.jinja",
                    "compact": "llamacpp:unsloth-mistral-Devstral-Small-2507.jinja"}
# The end-of-sequence token a template needs to render, where it uses one.
EOS_TOKENS = {"llamacpp:GigaChat3-10B-A1.8B.jinja": "</s>", "llamacpp:GigaChat3.1-10B-A1.8B.jinja": "</s>",
              "llamacpp:mistralai-Mistral-Nemo-Instruct-2407.jinja": "</s>",
              "llamacpp:unsloth-mistral-Devstral-Small-2507.jinja": "</s>"}

# reasoning detector class -> (family, template), as for FAMILIES; and the model names SGLang's
# `ReasoningParser(name)` builds them by.
REASONING_FAMILIES: dict[str, tuple[str, str]] = {
    "DeepSeekR1Detector": ("deepseek_r1", "llamacpp:deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"),
    "Qwen3Detector": ("qwen3", "llamacpp:Qwen-Qwen3-0.6B.jinja"),
    "KimiDetector": ("kimi", ""),  # its ◁think▷ markers appear in no published template
    "KimiK2Detector": ("kimi_k2", "llamacpp:Kimi-K2-Thinking.jinja"),
    "Glm45Detector": ("glm45", "shared:xinference__glm-4.5.jinja"),
    "HunyuanDetector": ("hunyuan", "shared:vllm__tool_chat_template_hunyuan_a13b.jinja"),
    "Nemotron3Detector": ("nemotron3", "llamacpp:NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"),
    "Apertus2509Detector": ("apertus", "llamacpp:Apertus-8B-Instruct.jinja"),
    "Gemma4Detector": ("gemma4", "llamacpp:google-gemma-4-31B-it.jinja"),
    "GptOssDetector": ("gpt_oss", "llamacpp:openai-gpt-oss-120b.jinja"),
    "MiniMaxAppendThinkDetector": ("minimax_append_think", "llamacpp:MiniMax-M2.jinja"),
    "MiniMaxM3Detector": ("minimax_m3", "llamacpp:MiniMax-M3.jinja"),
    "InklingDetector": ("inkling", ""),
    "BaseReasoningFormatDetector": ("base_reasoning", ""),  # markers the test chooses, no model
}
REASONING_MODELS = {"deepseek-r1": "DeepSeekR1Detector", "qwen3": "Qwen3Detector", "qwen3-thinking": "Qwen3Detector",
                    "kimi": "KimiDetector", "kimi_k2": "KimiK2Detector", "glm45": "Glm45Detector",
                    "hunyuan": "HunyuanDetector", "nemotron_3": "Nemotron3Detector", "gemma4": "Gemma4Detector",
                    "gpt-oss": "GptOssDetector", "minimax-append-think": "MiniMaxAppendThinkDetector",
                    "minimax-m3": "MiniMaxM3Detector"}

PARSE_CALLS = {"detect_and_parse": False, "parse_streaming_increment": True,  # -> streamed
               "parse_non_stream": False, "parse_stream_chunk": True}


@dataclass
class SglangCase(Case):
    commit: str = ""  # the SGLang commit the test module was read at
    file: str = ""  # the test module's path in that commit


@dataclass
class SglangReasoningCase(reasoning_tool.Case):
    commit: str = ""
    file: str = ""


# -- reading the source ----------------------------------------------------------------------------

def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True,
                          text=True).stdout


def _is_git_dir(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def test_modules(source: Path, pattern: re.Pattern[str] = TEST_FILE) -> tuple[str, dict[str, str]]:
    """(commit, {path: text}) of SGLang's test modules whose path matches `pattern` (its function-call
    tests by default) in a checkout or git dir."""
    if _is_git_dir(source):
        commit = _git(source, "rev-parse", "HEAD").strip()
        names = _git(source, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
        return commit, {n: _git(source, "show", f"HEAD:{n}") for n in names if pattern.match(n)}
    try:
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
    except (subprocess.CalledProcessError, OSError):
        commit = ""
    texts = {}
    for path in sorted(source.rglob("test_*.py")):
        name = path.relative_to(source).as_posix()
        if pattern.match(name):
            texts[name] = path.read_text(encoding="utf-8")
    return commit, texts


class _SelfAsName(ast.NodeTransformer):
    """`self.tools` becomes the name `self.tools`, so the literal reader binds and reads it."""

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            return ast.copy_location(ast.Name(id=f"self.{node.attr}", ctx=node.ctx), node)
        return self.generic_visit(node)


class _Substitute(ast.NodeTransformer):
    """Names bound to an expression of a parse result (`call = result.calls[0]`) replaced by it."""

    def __init__(self, aliases: dict[str, ast.expr]) -> None:
        self.aliases = aliases

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return copy.deepcopy(self.aliases[node.id]) if node.id in self.aliases else node


# -- expectations read from asserts ----------------------------------------------------------------

def _comparisons(statement: ast.stmt) -> list[tuple[ast.expr, str, ast.expr | None]]:
    """(left, operator, right) of an `assert` or a `self.assertX(...)` statement."""
    if isinstance(statement, ast.Assert):
        test = statement.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            return [(test.left, type(test.ops[0]).__name__, test.comparators[0])]
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return [(test.operand, "Not", None)]
        return []
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return []
    call, name = statement.value, _callee(statement.value).removeprefix("self.")
    args = call.args
    if name in ("assertEqual", "assertEquals") and len(args) >= 2:
        return [(args[0], "Eq", args[1])]
    if name in ("assertGreater", "assertGreaterEqual") and len(args) >= 2:
        return [(args[0], "Gt" if name == "assertGreater" else "GtE", args[1])]
    if name == "assertFalse" and args:
        return [(args[0], "Not", None)]
    if name == "assertIn" and len(args) >= 2:
        return [(args[1], "Contains", args[0])]
    if name == "assertIsNone" and args:
        return [(args[0], "Eq", ast.Constant(None))]
    return []


@dataclass
class Fed:
    """One output fed to a detector, and what the asserts that follow state of its result."""
    text: str
    streamed: bool
    chunks: list[str] | None = None
    found: Asserted = field(default_factory=Asserted)
    reasoning: Any = ...  # Ellipsis: not asserted
    reasoning_contains: bool = False  # the reasoning asserted only to contain some text
    tools: Any = ...  # the tools passed with the output, where a literal; Ellipsis: the test's `tools`


@dataclass(frozen=True)
class Shape:
    """How a test reaches the calls and text of a result: `result.calls[0].name` of one parse, or
    `tool_calls[0]["name"]` of calls a chunk loop merges by `tool_index`."""
    calls: str
    name: str
    parameters: str
    text: str | None
    reasoning: str | None = None

    @staticmethod
    def of_result(var: str) -> Shape:
        return Shape(f"{var}.calls", r"\[\d+\]\.name", r"\[\d+\]\.parameters", f"{var}.normal_text",
                     f"{var}.reasoning_text")

    @staticmethod
    def of_text(var: str, reasoning: bool = False) -> Shape:
        """A name bound to the normal (or the reasoning) text alone."""
        return Shape("", "", "", None, var) if reasoning else Shape("", "", "", var)

    @staticmethod
    def of_merged(var: str) -> Shape:
        return Shape(var, r"\[\d+\]\[['\"]name['\"]\]", r"\[\d+\]\[['\"]parameters['\"]\]", None)


def _read(left: ast.expr, op: str, right: Any, shape: Shape, fed: Fed) -> None:
    """One comparison about a result, in the shapes SGLang's tests use."""
    text, found = ast.unparse(left), fed.found
    calls = re.escape(shape.calls)
    parameters = rf"{calls}{shape.parameters}"
    index = _index_of(text) or 0
    if text == f"len({shape.calls})" and isinstance(right, int):
        if op == "Eq":
            found.count = right
        elif op in ("Gt", "GtE"):
            found.min_count = right + (op == "Gt")
    elif text == shape.calls and op in ("Eq", "Not") and not right:
        found.count = 0
    elif re.fullmatch(rf"{calls}{shape.name}", text) and isinstance(right, str):
        found.names[index] = right
    elif re.fullmatch(parameters, text) and isinstance(right, str):
        try:
            found.args[index] = json.loads(right)
        except json.JSONDecodeError:
            pass
    elif re.fullmatch(rf"json\.loads\({parameters}\)", text) and isinstance(right, dict):
        found.args[index] = right
    elif (isinstance(left, ast.Subscript) and re.fullmatch(rf"json\.loads\({parameters}\)", ast.unparse(left.value))
          and isinstance(left.slice, ast.Constant) and op == "Eq"):
        found.subset[index][left.slice.value] = right
    elif text == shape.text and op == "Eq" and (isinstance(right, str) or right is None):
        found.content = right
    elif text == shape.reasoning and op == "Eq" and (isinstance(right, str) or right is None):
        fed.reasoning = right
    elif text == shape.reasoning and op == "Contains":
        fed.reasoning_contains = True


def _chunk_loop(loop: ast.For, env: dict[str, Any]) -> tuple[list[str], dict[str, Shape], set[str]] | None:
    """(chunks, merged-call names, accumulated-text names) of a loop that feeds literal chunks to one
    detector and merges the calls by `tool_index`, or None for any other loop."""
    feeds = [n for n in ast.walk(loop) if isinstance(n, ast.Call) and _callee(n) in PARSE_CALLS]
    if not (isinstance(loop.target, ast.Name) and len(feeds) == 1 and _callee(feeds[0]) == "parse_streaming_increment"
            and feeds[0].args and ast.unparse(feeds[0].args[0]) == loop.target.id):
        return None
    try:
        chunks = evaluate(loop.iter, env)
    except Exception:  # noqa: BLE001
        return None
    if not (isinstance(chunks, list) and chunks and all(isinstance(c, str) for c in chunks)):
        return None
    merged: dict[str, Shape] = {}
    texts: set[str] = set()
    merges = "tool_index" in ast.unparse(loop)
    for node in ast.walk(loop):
        if (merges and isinstance(node, ast.Call) and _callee(node) == "append"
                and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)):
            merged[node.func.value.id] = Shape.of_merged(node.func.value.id)
        elif (merges and isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)
              and isinstance(node.targets[0].value, ast.Name) and "tool_index" in ast.unparse(node.targets[0].slice)):
            merged[node.targets[0].value.id] = Shape.of_merged(node.targets[0].value.id)
        elif (isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name)
              and ast.unparse(node.value).endswith(".normal_text")):
            texts.add(node.target.id)
    return chunks, merged, texts


def _helper_loop(value: ast.expr, targets: list[ast.Name], env: dict[str, Any]) -> tuple[Fed, dict[str, Shape]] | str | None:
    """A call to a module helper that streams chunks through a detector in a loop and returns what it
    merged (`tool_calls, text = _collect(detector, chunks, tools)`): the output fed, and the test's
    names for the merged calls and text. None for any other statement; "unread" for such a helper
    this reader cannot follow."""
    helper = env.get("__helpers__", {}).get(_callee(value)) if isinstance(value, ast.Call) else None
    if helper is None or not _contains_parse_call(helper):
        return None
    local = dict(env)
    try:
        local.update(zip([a.arg for a in helper.args.args], [evaluate(a, env) for a in value.args], strict=False))
    except Exception:  # noqa: BLE001  (the detector argument is no literal: it is not needed)
        for param, arg in zip([a.arg for a in helper.args.args], value.args, strict=False):
            _bind(local, param, lambda a=arg: evaluate(a, env))
    loops = [n for n in ast.walk(helper) if isinstance(n, ast.For) and _contains_parse_call(n)]
    returned = next((n.value for n in ast.walk(helper) if isinstance(n, ast.Return) and n.value is not None), None)
    loop = _chunk_loop(loops[0], local) if len(loops) == 1 else None
    if loop is None or returned is None:
        return "unread"
    chunks, merged, texts = loop
    names = returned.elts if isinstance(returned, ast.Tuple) else [returned]
    if len(names) != len(targets) or not all(isinstance(n, ast.Name) for n in names):
        return "unread"
    shapes = {}
    for mine, theirs in zip(targets, names, strict=True):
        if theirs.id in merged:  # type: ignore[attr-defined]
            shapes[mine.id] = Shape.of_merged(mine.id)
        elif theirs.id in texts:  # type: ignore[attr-defined]
            shapes[mine.id] = Shape.of_text(mine.id)
    return Fed("".join(chunks), True, chunks), shapes


def _result_var(node: ast.expr, fed: dict[str, Fed]) -> str | None:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & set(fed)
    return names.pop() if len(names) == 1 else None


def _parse_call(value: ast.expr) -> tuple[ast.Call, bool] | None:
    """The detector call in `value`, and whether it streams; None when there is none."""
    if isinstance(value, ast.Call) and _callee(value) in PARSE_CALLS and isinstance(value.func, ast.Attribute):
        return value, PARSE_CALLS[_callee(value)]
    return None


def _contains_parse_call(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and _callee(n) in PARSE_CALLS for n in ast.walk(node))


@dataclass
class Reading:
    """What one test method feeds its detectors, in order, and why it is not read when it is not."""
    fed: list[Fed] = field(default_factory=list)
    skipped: str = ""


def read_method(fn: ast.FunctionDef, env: dict[str, Any]) -> Reading:
    """Walk the method's statements in order: bind literals, follow the results, read the asserts."""
    out, results, aliases = Reading(), {}, {}
    shapes: dict[str, Shape] = {}
    streamed_to: collections.Counter[str] = collections.Counter()
    for statement in _flattened(fn.body):
        if isinstance(statement, ast.For | ast.While | ast.AsyncFor) and _contains_parse_call(statement):
            loop = _chunk_loop(statement, env) if isinstance(statement, ast.For) and not out.fed else None
            if loop is None:
                return Reading(skipped="outputs fed in a loop")
            chunks, merged, texts = loop
            fed = Fed("".join(chunks), True, chunks)
            out.fed.append(fed)
            for name, shape in merged.items():
                results[name], shapes[name] = fed, shape
            for name in texts:
                results[name], shapes[name] = fed, Shape.of_text(name)
            streamed_to["loop"] += 2  # any later increment continues this stream
            continue
        statement = _Substitute(aliases).visit(copy.deepcopy(statement))
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
            parse = _parse_call(value)
            targets = [e for e in (target.elts if isinstance(target, ast.Tuple) else [target])
                       if isinstance(e, ast.Name)]
            if parse is not None and targets and len(targets) <= 2:
                call, streams = parse
                detector = ast.unparse(call.func.value)  # type: ignore[attr-defined]
                streamed_to[detector] += streams
                if streamed_to[detector] > 1 or streamed_to["loop"]:
                    return Reading(skipped="several increments fed to one detector")
                try:
                    text = evaluate(call.args[0], env)
                except (Unresolvable, IndexError, KeyError, TypeError):
                    return Reading(skipped="no literal output fed to the detector")
                if not isinstance(text, str):
                    return Reading(skipped="no literal output fed to the detector")
                rebound = {t.id for t in targets}
                aliases = {a: e for a, e in aliases.items()
                           if not rebound & {n.id for n in ast.walk(e) if isinstance(n, ast.Name)}}
                fed = Fed(text, streams, tools=_tools_passed(call, env))
                out.fed.append(fed)
                if len(targets) == 1:
                    results[targets[0].id], shapes[targets[0].id] = fed, Shape.of_result(targets[0].id)
                else:  # `reasoning, normal = parser.parse_non_stream(text)`
                    results[targets[0].id], shapes[targets[0].id] = fed, Shape.of_text(targets[0].id, True)
                    results[targets[1].id], shapes[targets[1].id] = fed, Shape.of_text(targets[1].id)
                continue
            collected = _helper_loop(value, targets, env)
            if collected is not None:
                if collected == "unread" or out.fed or streamed_to:
                    return Reading(skipped="outputs fed in a loop")
                fed, named = collected
                out.fed.append(fed)
                for name, shape in named.items():
                    results[name], shapes[name] = fed, shape
                streamed_to["loop"] += 2
                continue
            if isinstance(target, ast.Name) and _result_var(value, results) is not None:
                aliases[target.id] = value  # `call = result.calls[0]`, `params = json.loads(...)`
                continue
            bind_assignments([statement], env)
            continue
        if _contains_parse_call(statement):
            for call in (n for n in ast.walk(statement) if isinstance(n, ast.Call) and _parse_call(n)):
                streamed_to[ast.unparse(call.func.value)] += PARSE_CALLS[_callee(call)]  # type: ignore[attr-defined]
            if max(streamed_to.values(), default=0) > 1 or (streamed_to["loop"] and streamed_to.total() > 2):
                return Reading(skipped="several increments fed to one detector")
            bind_assignments([statement], env)
            continue
        for left, op, right_node in _comparisons(statement):
            var = _result_var(left, results)
            if var is None:
                continue
            try:
                right = evaluate(right_node, env) if right_node is not None else None
            except Exception:  # noqa: BLE001  (an expectation that is no literal is not read)
                continue
            _read(left, op, right, shapes[var], results[var])
        if not isinstance(statement, ast.Expr | ast.Assert):
            bind_assignments([statement], env)
    return out


def _flattened(statements: list[ast.stmt]) -> list[ast.stmt]:
    """The statements, with the bodies of `with` blocks in their place."""
    out: list[ast.stmt] = []
    for statement in statements:
        if isinstance(statement, ast.With):
            out.extend(_flattened(statement.body))
        else:
            out.append(statement)
    return out


# -- extraction -------------------------------------------------------------------------------------

def imported_names(tree: ast.Module, reasoning: bool) -> dict[str, str]:
    """Local name -> class name of what the module imports from SGLang's function-call modules (or
    with `reasoning` its reasoning-parser module): both define classes named alike (`KimiK2Detector`)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and ("reasoning" in node.module) == reasoning:
            out.update({a.asname or a.name: a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.update({a.asname or a.name: "" for a in node.names})  # the other kind's class
    return out


def _built(node: ast.AST, families: dict[str, tuple[str, str]], names: dict[str, str] | None = None) -> str | None:
    """The detector class `node` builds: `Qwen3Detector()`, or `ReasoningParser("qwen3")`, its local
    name resolved through the module's imports (`names`) where it is imported."""
    if not isinstance(node, ast.Call):
        return None
    name = _callee(node)
    name = (names or {}).get(name, name)
    if name == "ReasoningParser" and node.args and isinstance(node.args[0], ast.Constant):
        name = REASONING_MODELS.get(str(node.args[0].value).lower(), "")
    return name if name in families else None


def _detector_of(nodes: list[ast.AST], families: dict[str, tuple[str, str]] = FAMILIES,
                 names: dict[str, str] | None = None) -> str | None:
    """The detector class a test feeds: the one bound to the name its first parse call is made on,
    else the first one it builds (in its own body first, then in `setUp`)."""
    feeds = [n for n in ast.walk(nodes[0]) if isinstance(n, ast.Call) and _parse_call(n)]
    receiver = ast.unparse(feeds[0].func.value) if feeds else None  # type: ignore[attr-defined]
    for node in nodes:
        for sub in ast.walk(node):
            if (isinstance(sub, ast.Assign) and ast.unparse(sub.targets[0]) == receiver
                    and _built(sub.value, families, names)):
                return _built(sub.value, families, names)
    for node in nodes:
        for sub in ast.walk(node):
            if _built(sub, families, names):
                return _built(sub, families, names)
    return None


def _class_env(cls: ast.ClassDef, module_env: dict[str, Any]) -> tuple[dict[str, Any], ast.FunctionDef | None]:
    env = dict(module_env)
    bind_assignments([s for s in cls.body if isinstance(s, ast.Assign | ast.AnnAssign)], env)
    setup = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "setUp"), None)
    if setup is not None:
        bind_assignments(_flattened(setup.body), env)
    return env, setup


def _tests(tree: ast.Module) -> list[tuple[ast.ClassDef | None, ast.FunctionDef]]:
    out: list[tuple[ast.ClassDef | None, ast.FunctionDef]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            out.append((None, node))
        elif isinstance(node, ast.ClassDef):
            out.extend((node, s) for s in node.body if isinstance(s, ast.FunctionDef) and s.name.startswith("test"))
    return out


def _tools_passed(call: ast.Call, env: dict[str, Any]) -> Any:
    """The tools a detector call passes (`detect_and_parse(text, tools_with_string)`), normalized;
    Ellipsis where it passes none or no literal, so the test's own `tools` stand."""
    passed = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "tools"), None)
    if passed is None:
        return ...
    try:
        return normalized_tools(evaluate(passed, env))
    except Exception:  # noqa: BLE001  (tools that are no literal: the test's own stand)
        return ...


def _tools(env: dict[str, Any]) -> list[dict[str, Any]] | None:
    for name in ("tools", "self.tools"):
        if name in env:
            try:
                return normalized_tools(env[name])
            except Exception:  # noqa: BLE001
                return None
    return None


@dataclass
class ModuleExtraction:
    """The cases read from one test module, and why the rest of its items were not, by (family, reason)."""
    cases: list[Any] = field(default_factory=list)
    skipped: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)


def _reasoning_expectation(fed: Fed) -> dict[str, Any]:
    out = {} if fed.reasoning is ... else {"reasoning": fed.reasoning}
    return out if fed.found.content is ... else dict(out, content=fed.found.content)


def module_cases(path: str, source: str, commit: str = "", reasoning: bool = False) -> ModuleExtraction:
    """The cases one SGLang test module states (function calls, or with `reasoning` its reasoning
    detectors'), and what it states that is not read (by family and reason)."""
    families = REASONING_FAMILIES if reasoning else FAMILIES
    tree = _SelfAsName().visit(ast.parse(source))
    names = imported_names(tree, reasoning)
    module_env: dict[str, Any] = {"__helpers__": {
        n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("test")}}
    bind_assignments(tree.body, module_env)
    out = ModuleExtraction()
    for cls, fn in _tests(tree):
        env, setup = _class_env(cls, module_env) if cls is not None else (dict(module_env), None)
        detector = _detector_of([fn, *([setup] if setup else [])], families, names)
        test = f"{cls.name}::{fn.name}" if cls else fn.name
        if detector is None:
            out.skipped[("-", "no detector FAMILIES maps")] += 1  # a test double, internals, the other kind
            continue
        family = families[detector][0]
        reading = read_method(fn, env)
        if reading.skipped or not reading.fed:
            out.skipped[(family, reading.skipped or "no output fed to a detector")] += 1
            continue
        for k, fed in enumerate(reading.fed):
            expected = _reasoning_expectation(fed) if reasoning else expectation(fed.found)
            if reasoning and fed.reasoning is ... and fed.reasoning_contains:
                out.skipped[(family, "reasoning asserted only to contain some text")] += 1
                continue
            if not expected:
                out.skipped[(family, "no expectation read")] += 1
                continue
            label = test if len(reading.fed) == 1 else f"{test}#{k + 1}"
            notes = [f"detector {detector}", ("streamed in SGLang's chunks" if fed.chunks else
                                                 "one streamed increment" if fed.streamed else "detect_and_parse")]
            common = {"id": f"sglang-{family}-{label}", "family": family, "test": f"{Path(path).name}::{label}",
                      "template": "", "model_output": fed.text, "expected": expected, "chunks": fed.chunks,
                      "notes": notes, "debatable": bool(DEBATABLE_NAME.search(fn.name)), "commit": commit,
                      "file": path}
            out.cases.append(SglangReasoningCase(**common, streaming=fed.streamed) if reasoning
                             else SglangCase(**common, tools=_tools(env) if fed.tools is ... else fed.tools))
    return out


def extract(source: Path, reasoning: bool = False) -> tuple[list[Any], dict[str, collections.Counter[str]]]:
    """Every case of SGLang's function-call (or with `reasoning` reasoning-parser) tests in `source`
    (a checkout or a git dir), and the test items not extracted, by family and reason ("-" where the
    test builds no known detector)."""
    commit, texts = test_modules(source, REASONING_TEST_FILE if reasoning else TEST_FILE)
    cases: list[Any] = []
    skipped: dict[str, collections.Counter[str]] = {}
    for path, text in texts.items():
        if not any(f"{name}(" in text for name in PARSE_CALLS):
            continue  # a module of server, schema or template tests: no output is fed to a detector
        extraction = module_cases(path, text, commit, reasoning)
        cases.extend(extraction.cases)
        for (family, reason), count in extraction.skipped.items():
            skipped.setdefault(family, collections.Counter())[reason] += count
    seen: collections.Counter[str] = collections.Counter()
    for case in cases:
        seen[case.id] += 1
        if seen[case.id] > 1:
            case.id += f"@{seen[case.id]}"
    return cases, skipped


def write_fixture(cases: list[Any], skipped: dict[str, collections.Counter[str]], target: Path) -> None:
    """The cases as JSON lines, after one line that says what was not extracted, per family."""
    lines = [json.dumps({"not_extracted": {p: dict(c) for p, c in skipped.items() if c}}, sort_keys=True)]
    for case in cases:
        record = asdict(case)
        record.pop("template")  # chosen when scoring, from FAMILIES or REASONING_FAMILIES
        lines.append(json.dumps(record, ensure_ascii=False, sort_keys=True))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")


def load_fixture(path: Path = FIXTURE, reasoning: bool = False) -> tuple[list[Any], dict[str, collections.Counter[str]]]:
    """The cases of a fixture (of reasoning cases with `reasoning`), each given its family's template,
    and the not-extracted counts by family."""
    kind = SglangReasoningCase if reasoning else SglangCase
    names = {f.name for f in fields(kind)}
    templates = dict((REASONING_FAMILIES if reasoning else FAMILIES).values())
    cases: list[Any] = []
    skipped: dict[str, collections.Counter[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "not_extracted" in record:
            skipped = {p: collections.Counter(c) for p, c in record["not_extracted"].items()}
            continue
        record["template"] = templates.get(record["family"], "")
        case = kind(**{k: v for k, v in record.items() if k in names})
        case.template = template_of(case.template, case, TEMPLATE_BY_TEST)
        cases.append(case)
    return cases, skipped


def _held_back_midstream(outcome: Any) -> bool:
    """A case read from one streamed increment that expects the text SGLang still holds back:
    its output never ends, so the finished message keeps what may have begun a call."""
    want = (outcome.case.expected.get("content") or "").strip()
    got = (outcome.got.get("content") or "").strip()
    return ("one streamed increment" in outcome.case.notes and outcome.cause == "content differs"
            and got.startswith(want) and got != want and not outcome.got.get("tool_calls"))


def _cut_off_midstream(outcome: Any) -> bool:
    """A streamed case whose output stops inside a call (it ends with none of the template's closing
    markers): SGLang states what it streamed so far, the finished message reads an unfinished call."""
    case = outcome.case
    markers = _call_markers(case.template)[1]
    return ("one streamed increment" in case.notes or "streamed in SGLang's chunks" in case.notes) and bool(
        markers) and bool(case.expected.get("tool_calls")) and outcome.cause in CALL_CAUSES and not any(
        case.model_output.rstrip().endswith(m) for m in markers)


CALL_CAUSES = ("no calls read", "call count differs", "name/args differ")


def _name_never_written(outcome: Any) -> bool:
    """A case that expects calls by names its output never writes (`<|tool_call_begin|>0`, a call
    id with no name in it): SGLang picks the tool its test declares by the argument keys; here a
    call's name is read from the output, and an id with no name in it is no call."""
    names = [c["name"] for c in outcome.case.expected.get("tool_calls") or [] if c.get("name")]
    return outcome.cause == "no calls read" and bool(names) and not any(n in outcome.case.model_output for n in names)


def _set_literal(text: Any) -> list[Any] | None:
    """The items of a Python set literal (`{1, 2, 3}`) as written, or None."""
    try:
        node = ast.parse(text.strip(), mode="eval").body if isinstance(text, str) else None
        return [ast.literal_eval(e) for e in node.elts] if isinstance(node, ast.Set) else None
    except (SyntaxError, ValueError):
        return None


def _set_read_as_list(outcome: Any) -> bool:
    """A case that expects a Python set literal kept as its text where it is read here as the
    list of its items, as vLLM's parsers read it (its LFM2 test `set_arg`): the peers disagree."""
    if outcome.cause != "name/args differ":
        return False
    for want, got in zip(outcome.case.expected.get("tool_calls") or [], outcome.got.get("tool_calls") or [],
                         strict=False):
        arguments = json.loads(got["function"]["arguments"])
        for key, value in (want.get("arguments") or want.get("arguments_subset") or {}).items():
            if _set_literal(value) is not None and arguments.get(key) == _set_literal(value):
                return True
    return False


def _unwritten_markers(outcome: Any) -> str:
    """The debatable cause of a case whose output writes the template's call markers spelled
    otherwise (`respelled_cause`); "" where the case is none such."""
    if outcome.cause != TEMPLATE_LACKS_IT:
        return ""
    return respelled_cause(sum(_call_markers(outcome.case.template), ()), outcome.case.model_output)


@functools.cache
def _source(spec: str) -> str:
    path = template_path(spec) if spec else None
    return path.read_text(encoding="utf-8") if path is not None and path.is_file() else ""


def writing_template(case: Any, family_templates: set[str]) -> str:
    """The case's template; or, where its output writes a marker that template's source never
    writes and another template of its family writes every marker of the output, that one (the
    detector serves both layouts: Mistral's compact `[TOOL_CALLS]name[ARGS]{…}`, which Devstral's
    template writes, beside Nemo's JSON array)."""
    tags = set(TAG.findall(case.model_output))
    if all(tag in _source(case.template) for tag in tags):
        return case.template
    others = sorted(family_templates - {case.template})
    return next((o for o in others if all(tag in _source(o) for tag in tags)), case.template)


def score(cases: list[SglangCase]) -> list[Any]:
    """Each case run against its template's analysis (the one of its family that writes its
    markers); the shared causes name the peer these come from."""
    by_family: dict[str, set[str]] = collections.defaultdict(set)
    for case in cases:
        if case.template:
            by_family[case.family].add(case.template)
    for case in cases:
        case.template = writing_template(case, by_family[case.family])
    outcomes = run_all(cases, eos_tokens=EOS_TOKENS)
    for outcome in outcomes:
        if _held_back_midstream(outcome):
            outcome.cause = "debatable: SGLang states the stream before it ends (what it holds back)"
        elif _cut_off_midstream(outcome):
            outcome.cause = "debatable: SGLang states a stream cut off inside a call (the finished message differs)"
        elif unwritten := _unwritten_markers(outcome):
            outcome.cause = unwritten
        elif _name_never_written(outcome):
            outcome.cause = ("debatable: SGLang names a call whose output writes no name (by the argument keys, "
                             "from the tools its test declares); here it is no call")
        elif _set_read_as_list(outcome):
            outcome.cause = ("debatable: a Python set literal: SGLang keeps its text; read here as the list of its "
                             "items, as the other peer's LFM2 test (`set_arg`) expects")
        outcome.cause = outcome.cause.replace("vLLM", "SGLang")
    return outcomes


@functools.cache
def _call_markers(template: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The template's markers that open a call or its section, and those that close one."""
    return call_markers(analysis_of(template, EOS_TOKENS) if template else None)


def score_reasoning(cases: list[SglangReasoningCase]) -> list[Any]:
    """Each reasoning case run as `vllm_reasoning_cases.py` runs vLLM's, in the prompt state its
    expectation assumes."""
    outcomes = run_all(cases, reasoning_tool.run_case, eos_tokens=EOS_TOKENS)
    for outcome in outcomes:
        outcome.cause = outcome.cause.replace("vLLM", "SGLang")
    return outcomes


def not_extracted(skipped: dict[str, collections.Counter[str]]) -> str:
    lines = ["not extracted, by family:"]
    for family, counts in sorted(skipped.items()):
        lines.append(f"  {family}: " + ", ".join(f"{reason} {n}" for reason, n in counts.most_common()))
    return "\n".join(lines)


@dataclass(frozen=True)
class Kind:
    """Function-call or reasoning cases: where they are kept and how they are scored and shown."""
    name: str
    reasoning: bool
    score: Any
    report: Any
    describe: Any


KINDS = (Kind("function-call", False, score, report, describe_failure),
         Kind("reasoning", True, score_reasoning, reasoning_tool.report, reasoning_tool.describe_failure))


def _extract_into(source: Path, kind: Kind, target: Path) -> None:
    cases, skipped = extract(source, kind.reasoning)
    write_fixture(cases, skipped, target)
    by_family = collections.Counter(c.family for c in cases)
    print(f"{len(cases)} {kind.name} cases written to {target}: "
          + ", ".join(f"{f} {n}" for f, n in sorted(by_family.items())))
    print(f"not extracted: {sum(sum(c.values()) for c in skipped.values())} test items")


def _show(kind: Kind, target: Path, failures: str | None, summary: bool) -> None:
    cases, skipped = load_fixture(target, kind.reasoning)
    outcomes = kind.score(cases)
    if failures:
        for outcome in outcomes:
            if outcome.status != "pass" and failures in ("all", outcome.case.family):
                print(kind.describe(outcome).replace("vLLM", "SGLang"))
    if summary:
        passed, comparable = totals(outcomes)
        debatable = sum(o.status == "fail" and o.debatable for o in outcomes)
        print(f"== SGLang's {kind.name} parser tests")
        print(kind.report(outcomes, skipped).replace("vLLM", "SGLang"))
        print(f"non-debatable: {passed}/{comparable - debatable} pass; {debatable} debatable failures")
        print(not_extracted(skipped))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extract", type=Path, metavar="SGLANG", help="read a checkout or git dir, write the fixtures")
    parser.add_argument("--fixture", type=Path, default=FIXTURE, help="the function-call cases (%(default)s)")
    parser.add_argument("--reasoning-fixture", type=Path, default=REASONING_FIXTURE,
                        help="the reasoning cases (%(default)s)")
    parser.add_argument("--report", action="store_true", help="pass counts per family and in total, and the causes")
    parser.add_argument("--failures", metavar="FAMILY", help="print the failing cases of FAMILY ('all' for every one)")
    args = parser.parse_args(argv)
    targets = {False: args.fixture, True: args.reasoning_fixture}
    if args.extract:
        for kind in KINDS:
            _extract_into(args.extract, kind, targets[kind.reasoning])
        if not (args.report or args.failures):
            return 0
    for kind in KINDS:
        _show(kind, targets[kind.reasoning], args.failures, args.report or not args.failures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
