"""`autoparser analyze` as a user runs it: a summary, JSON, and one clear line for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "templates"


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoparser.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=120)


def test_summary_names_the_markers() -> None:
    done = run("analyze", str(FIXTURES / "deepseek_v31_style.jinja"))
    assert done.returncode == 0, done.stderr
    assert "<｜tool▁calls▁begin｜>" in done.stdout and "thinking" in done.stdout


def test_json_is_the_analysis() -> None:
    done = run("analyze", str(FIXTURES / "deepseek_fenced.jinja"), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["tools"]["format"] == "tag_json" and data["tools"]["args_start"].startswith("```json")


BAD_TEMPLATES = {
    "does_not_compile": "{% if %}",
    "raises": "{{ raise_exception('no system role, please') }}",
    "sandbox": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
}


@pytest.mark.parametrize("kind", sorted(BAD_TEMPLATES))
def test_bad_template_is_one_line_exit_2(kind: str, tmp_path: Path) -> None:
    path = tmp_path / f"{kind}.jinja"
    path.write_text(BAD_TEMPLATES[kind], encoding="utf-8")
    done = run("analyze", str(path))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("autoparser: ")


def test_missing_file_is_one_line_exit_2(tmp_path: Path) -> None:
    done = run("analyze", str(tmp_path / "nope.jinja"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "nope.jinja" in done.stderr


def test_no_template_given_is_exit_2() -> None:
    done = run("analyze")
    assert done.returncode == 2 and "TEMPLATE" in done.stderr
