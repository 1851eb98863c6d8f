"""The analyzer on every real template: never a crash, always an analysis or a clear refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corpora import llamacpp_template_params, llamacpp_templates, shared_corpus_dir, shared_template_params

import autoparser
from autoparser.render import TemplateRenderError

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"


def analyze_path(path: Path) -> autoparser.Analysis:
    return autoparser.analyze(path.read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)


def _check(path: Path | None) -> None:
    try:
        analysis = analyze_path(path)
    except TemplateRenderError as exc:
        assert str(exc), "a refusal must say why"
        return
    data = analysis.to_dict()
    assert set(data) >= {"generation_prompt", "reasoning", "content", "tools", "stop", "preserved_tokens",
                         "triggers", "warnings"}
    assert analysis.tools.supported or analysis.warnings, "unsupported tools must be explained"
    again = autoparser.Analysis.from_dict(json.loads(analysis.to_json()))
    assert again == analysis and again.to_dict() == data, "the analysis must read back from its JSON"
    if analysis.tools.supported:
        assert analysis.tools.format in ("json", "tag_json", "tag_tagged")


@pytest.mark.parametrize("path", llamacpp_template_params())
def test_llamacpp_template_analyzes(path: Path) -> None:
    _check(path)


@pytest.mark.parametrize("path", shared_template_params())
def test_shared_template_analyzes(path: Path) -> None:
    _check(path)


def _deepseek(paths: list[Path]) -> list[Path]:
    return [p for p in paths if "deepseek" in p.name.lower()]


def _deepseek_params() -> list:
    paths: list[Path] = []
    try:
        paths += _deepseek(llamacpp_templates())
    except pytest.skip.Exception:
        pass
    shared = shared_corpus_dir()
    if shared:
        paths += _deepseek(sorted((shared / "templates").glob("*.jinja")))
    return [pytest.param(p, id=p.stem) for p in paths] or [pytest.param(None, marks=pytest.mark.skip("no corpus"))]


@pytest.mark.parametrize("path", _deepseek_params())
def test_deepseek_analysis_snapshot(path: Path, snapshot) -> None:
    try:
        result = analyze_path(path).to_dict()
    except TemplateRenderError as exc:
        result = {"refused": str(exc)}
    assert result == snapshot


def _llamacpp(name: str) -> Path:
    for path in llamacpp_templates():
        if path.name == name:
            return path
    pytest.skip(f"{name} not in the llama.cpp corpus")


def _shared(name: str) -> Path:
    shared = shared_corpus_dir()
    if shared is None or not (shared / "templates" / name).is_file():
        pytest.skip(f"{name} not available")
    return shared / "templates" / name


def test_deepseek_v31_acceptance() -> None:
    a = analyze_path(_llamacpp("deepseek-ai-DeepSeek-V3.1.jinja"))
    assert (a.reasoning.start, a.reasoning.end, a.reasoning.toggle) == ("<think>", "</think>", "thinking")
    assert a.tools.supported
    assert "<｜tool▁calls▁begin｜>" in a.triggers
    assert "<｜end▁of▁sentence｜>" in a.stop


@pytest.mark.parametrize("name", ["hfjs-e2e__deepseek-ai-DeepSeek-R1.jinja", "xinference__deepseek-v3-0324-92ebdf26.jinja"])
def test_fenced_json_call_format(name: str) -> None:
    t = analyze_path(_shared(name)).tools
    assert t.supported and t.format == "tag_json"
    assert t.args_start.startswith("```json") and t.args_end.strip() == "```"
    assert t.name_start == "function<｜tool▁sep｜>" and t.call_start == "<｜tool▁call▁begin｜>"


def _distill() -> list:
    params = []
    try:
        params += [pytest.param(p, id=p.stem) for p in llamacpp_templates() if "Distill" in p.name]
    except pytest.skip.Exception:
        pass
    shared = shared_corpus_dir()
    if shared:
        params += [pytest.param(p, id=p.stem) for p in sorted((shared / "templates").glob("*distill*.jinja"))]
    return params or [pytest.param(None, marks=pytest.mark.skip("no corpus"))]


@pytest.mark.parametrize("path", _distill())
def test_r1_distill_is_forced_open(path: Path) -> None:
    r = analyze_path(path).reasoning
    assert r.forced_open and r.end == "</think>"
