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


V31_OUTPUT = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Paris\"}"
              "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>")


def test_parse_prints_the_message() -> None:
    done = run("parse", str(FIXTURES / "deepseek_v31_style.jinja"), stdin=V31_OUTPUT)
    assert done.returncode == 0, done.stderr
    message = json.loads(done.stdout)
    assert message["tool_calls"][0]["function"]["name"] == "get_weather"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"location": "Paris"}


def test_parse_stream_prints_deltas_that_add_up(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}]))
    done = run("parse", str(FIXTURES / "deepseek_v31_style.jinja"), "--stream", "--tools", str(tools),
               stdin=V31_OUTPUT)
    assert done.returncode == 0, done.stderr
    deltas = [json.loads(line) for line in done.stdout.splitlines()]
    arguments = "".join(d["tool_calls"][0]["function"].get("arguments", "") for d in deltas if "tool_calls" in d)
    assert json.loads(arguments) == {"location": "Paris"}
    assert not any("content" in d for d in deltas)


def test_bad_tools_file_is_one_line_exit_2(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text("{not json")
    done = run("parse", str(FIXTURES / "deepseek_v31_style.jinja"), "--tools", str(tools), stdin="hi")
    assert done.returncode == 2 and done.stderr.count("\n") == 1


def test_generate_writes_a_standalone_module(tmp_path: Path) -> None:
    target = tmp_path / "my_parser.py"
    done = run("generate", str(FIXTURES / "deepseek_fenced.jinja"), "-o", str(target))
    assert done.returncode == 0, done.stderr
    output = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
              "{\"location\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
    script = f"import json, my_parser; print(json.dumps(my_parser.parse({output!r})))"
    ran = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); {script}"],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(json.loads(ran.stdout)["tool_calls"][0]["function"]["arguments"]) == {"location": "Paris"}


def test_gbnf_and_lark_print_grammars(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                                              "required": ["location"]}}}]))
    gbnf = run("analyze", str(FIXTURES / "deepseek_v31_style.jinja"), "--gbnf", "--tools", str(tools),
               "--tool-choice", "required")
    assert gbnf.returncode == 0, gbnf.stderr
    assert "root" in gbnf.stdout and "get_weather" in gbnf.stdout
    lark = run("analyze", str(FIXTURES / "deepseek_v31_style.jinja"), "--lark", "--tools", str(tools))
    assert lark.returncode == 0, lark.stderr
    assert "get_weather" in lark.stdout
    # the printed text is a grammar Lark parses with, as its header says
    from lark import Lark

    call = ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"location": "Paris"}'
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
    Lark(lark.stdout, parser="earley", lexer="dynamic").parse(call)
