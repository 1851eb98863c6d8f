"""The standalone module from `generate_module` behaves exactly like `Parser`.

Each generated file runs in a separate interpreter started with `-I -S`: no site-packages and no
environment, so only the standard library is importable (the driver checks that `autoparser`
is not). Many outputs are parsed whole and streamed there and here; the messages and deltas must
match, call ids aside (they are random per parser).
"""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import analyses
import corpora
import pytest

from autoparser.generators.module import embedded_modules, generate_module, package_imports
from autoparser.language.reading import Parser

FAMILIES = ["deepseek_v31", "deepseek_v3_0324", "deepseek_r1", "hermes", "qwen3", "qwen3_coder", "glm45",
            "mistral_array", "mistral_compact", "llama31", "bare_json_array", "kimi_k2", "deepseek_v32",
            "lfm2_python", "llama32_pythonic", "minicpm3_kwargs", "functionary_v32", "glm4_tool_only",
            "keyed_tags", "gpt_oss"]

DRIVER = r"""
import importlib.util, json, sys
try:
    import autoparser  # noqa: F401
except ImportError:
    pass
else:
    sys.exit("autoparser is importable: the test would prove nothing")
spec = importlib.util.spec_from_file_location("generated_parser", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
results = []
for case in json.load(sys.stdin):
    whole = module.parse(case["text"], case["tools"])
    stream = module.stream(case["tools"])
    deltas = []
    for chunk in case["chunks"]:
        deltas += stream.feed(chunk)
    deltas += stream.finish()
    results.append({"whole": whole, "stream": stream.message(), "deltas": deltas})
json.dump(results, sys.stdout)
"""


def _outputs(family: str) -> list[str]:
    analysis = getattr(analyses, family)()
    texts = [
        analyses.render_output(analysis, None, "Plain answer with {braces} and <angles>.", []),
        analyses.render_output(analysis, "Some thought.", "Text.", [("get_weather", {"city": "Paris"})],
                               thinking=True),
        # non-string values (Python literals where the format writes them: True, None, {'a': 1})
        analyses.render_output(analysis, None, "", [("get_weather", {"city": "Oslo", "days": 2,
                                                                     "options": {"a": [1, None, True]}})]),
        analyses.render_output(analysis, None, "", [("get_weather", {"city": 'Quote " brace } </tool_call>',
                                                                     "days": 3}),
                                                    ("search_web", {"query": "naïve ☃\nline"})]),
    ]
    full = texts[-1]
    texts += [full[:cut] for cut in range(0, len(full), max(1, len(full) // 12))]
    try:
        texts += [case["model_output"] for case in corpora.peer_cases()]
    except pytest.skip.Exception:
        pass
    return texts


def _cases(family: str) -> list[dict[str, Any]]:
    rng = random.Random(family)
    cases = []
    for index, text in enumerate(_outputs(family)):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, 8))) if len(text) > 1 else []
        chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        tools = analyses.WEATHER_TOOLS if index % 2 else None
        cases.append({"text": text, "tools": tools, "chunks": chunks})
    return cases


def _normalize_ids(value: Any) -> Any:
    """Generated call ids are random per parser: compare them by shape only."""
    if isinstance(value, dict):
        return {k: ("call_*" if k == "id" and isinstance(v, str) and v.startswith("call_") else _normalize_ids(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize_ids(v) for v in value]
    return value


def _parser_results(family: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    analysis = getattr(analyses, family)()
    results = []
    for case in cases:
        whole = Parser(analysis, tools=case["tools"]).parse(case["text"])
        stream = Parser(analysis, tools=case["tools"]).stream()
        deltas = []
        for chunk in case["chunks"]:
            deltas += stream.feed(chunk)
        deltas += stream.finish()
        results.append({"whole": whole, "stream": stream.message(), "deltas": deltas})
    return results


@pytest.mark.parametrize("family", FAMILIES)
def test_generated_module_matches_the_parser(family: str, tmp_path: Path) -> None:
    module_path = tmp_path / f"{family}_parser.py"
    module_path.write_text(generate_module(getattr(analyses, family)()), encoding="utf-8")
    cases = _cases(family)
    completed = subprocess.run([sys.executable, "-I", "-S", "-c", DRIVER, str(module_path)],
                               input=json.dumps(cases), capture_output=True, text=True, encoding="utf-8",
                               timeout=300, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    generated = json.loads(completed.stdout)
    expected = _parser_results(family, cases)
    assert len(generated) == len(expected)
    for case, got, want in zip(cases, generated, expected, strict=True):
        assert _normalize_ids(got) == _normalize_ids(want), case["text"]


def test_generated_module_runs_as_a_script(tmp_path: Path) -> None:
    module_path = tmp_path / "v31_parser.py"
    module_path.write_text(generate_module(analyses.deepseek_v31()), encoding="utf-8")
    text = analyses.render_output(analyses.deepseek_v31(), None, "Hi.", [("get_weather", {"city": "Rome"})])
    completed = subprocess.run([sys.executable, "-I", "-S", str(module_path)], input=text, capture_output=True,
                               text=True, encoding="utf-8", timeout=60, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    message = json.loads(completed.stdout)
    assert message["content"] == "Hi."
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"city": "Rome"}


def test_generated_module_accepts_a_plain_dict_analysis(tmp_path: Path) -> None:
    source = generate_module(analyses.hermes().to_dict())
    assert "ANALYSIS = {" in source
    compile(source, "generated.py", "exec")


def test_generated_module_embeds_the_language_and_its_reader() -> None:
    """The module is the builder, the IR and the reader (and what they import), not a second parser."""
    embedded = set(embedded_modules())
    assert {"autoparser.language.build", "autoparser.language.ir", "autoparser.language.interpret",
            "autoparser.language.reading"} <= embedded
    assert not any(name.startswith(("autoparser.runtime", "autoparser.generators")) for name in embedded)
    # the analysis is read back as its dataclasses, without what `Analysis` adds (rendering, grammars)
    assert {"autoparser.analysis_data", "autoparser.tool_calls"} <= embedded and "autoparser.analysis" not in embedded


def test_generating_refuses_a_module_outside_the_standard_library() -> None:
    with pytest.raises(RuntimeError, match="not in the standard library"):
        package_imports("autoparser.example", ast.parse("def f():\n    import numpy\n"))
