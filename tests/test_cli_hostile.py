"""Hostile input files on the command line: one line on stderr and exit 2, never a traceback."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")

GGUF_STRING, GGUF_ARRAY, GGUF_UINT8, GGUF_UINT32 = 8, 9, 0, 4


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoparser.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=120)


def assert_one_line_exit_2(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.startswith("autoparser: ")
    for word in words:
        assert word in done.stderr, done.stderr


# -- GGUF files written byte by byte, as the format describes them ------------------------------


def gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def gguf_file(path: Path, *fields: bytes) -> Path:
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, len(fields))
    path.write_bytes(header + b"".join(fields))
    return path


def template_field() -> bytes:
    return gguf_string("tokenizer.chat_template") + struct.pack("<I", GGUF_STRING) + gguf_string(TEMPLATE)


def nested_arrays_field(depth: int) -> bytes:
    body = gguf_string("general.nested") + struct.pack("<I", GGUF_ARRAY)
    body += struct.pack("<IQ", GGUF_ARRAY, 1) * (depth - 1)
    return body + struct.pack("<IQ", GGUF_UINT8, 0)


def huge_array_field(item_type: int) -> bytes:
    return gguf_string("tokenizer.ggml.tokens") + struct.pack("<I", GGUF_ARRAY) + struct.pack("<IQ", item_type, 1 << 40)


def test_a_well_formed_hand_written_gguf_loads(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "ok.gguf", template_field(), nested_arrays_field(3))
    done = run("analyze", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stop"] == ["<|end|>"]


def test_gguf_with_5000_nested_arrays(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "nested.gguf", template_field(), nested_arrays_field(5000))
    assert_one_line_exit_2(run("analyze", str(path)), "nested")


@pytest.mark.parametrize("item_type", [GGUF_STRING, GGUF_UINT32])
def test_gguf_with_a_2_to_the_40_item_array(tmp_path: Path, item_type: int) -> None:
    path = gguf_file(tmp_path / "huge.gguf", template_field(), huge_array_field(item_type))
    assert_one_line_exit_2(run("analyze", str(path)), "past the end")


# -- JSON and template files --------------------------------------------------------------------


def test_deeply_nested_tokenizer_config(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer_config.json"
    path.write_text('{"chat_template": "x", "deep": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert_one_line_exit_2(run("analyze", str(path)), "nested too deeply")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_template_symlinked_to_dev_zero(tmp_path: Path) -> None:
    path = tmp_path / "chat_template.jinja"
    os.symlink("/dev/zero", path)
    assert_one_line_exit_2(run("analyze", str(path)), "not a regular file")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_tools_file_symlinked_to_dev_zero(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text(TEMPLATE)
    tools = tmp_path / "tools.json"
    os.symlink("/dev/zero", tools)
    assert_one_line_exit_2(run("parse", str(template), "--tools", str(tools), stdin="hi"), "not a regular file")


def tool(name: str = "get_weather", parameters: object = None) -> dict:
    function: dict = {"name": name}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def nested_schema(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


BAD_TOOLS = {
    "nested": ("[" * 100_000 + "]" * 100_000, "nested"),
    "huge integer": ('[{"type": "function", "function": {"name": "f", "x": ' + "9" * 5000 + "}}]", "JSON"),
    "name with space": (json.dumps([tool("get weather")]), "not a valid function name"),
    "name with marker": (json.dumps([tool("f<|end|>")]), "not a valid function name"),
    "not a function": (json.dumps([{"type": "function", "function": 5}]), "'function' object"),
    "null property schema": (json.dumps([tool(parameters={"type": "object", "properties": {"x": None}})]),
                             "properties.x: a schema must be an object"),
    "huge bound": ('[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", '
                   '"properties": {"x": {"type": "integer", "minimum": -1e400}}}}}]', "out of range"),
    "150 levels": (json.dumps([tool(parameters=nested_schema(150))]), "nested"),
    "100k enum": (json.dumps([tool(parameters={"type": "object", "properties": {
        "x": {"enum": [f"v{i}" for i in range(100_000)]}}})]), "100,000 values"),
}


@pytest.mark.parametrize("kind", sorted(BAD_TOOLS))
def test_bad_tools_file(kind: str, tmp_path: Path) -> None:
    text, expected = BAD_TOOLS[kind]
    template = tmp_path / "t.jinja"
    template.write_text(TEMPLATE)
    tools = tmp_path / "tools.json"
    tools.write_text(text)
    assert_one_line_exit_2(run("analyze", str(template), "--gbnf", "--tools", str(tools)), expected)


def test_template_over_the_output_bound_fails_fast(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text(TEMPLATE + "{% for i in range(100000) %}{% for j in range(100) %}xxxxxxxxxx{% endfor %}{% endfor %}")
    assert_one_line_exit_2(run("analyze", str(template)), "4,000,000 characters")


@pytest.mark.parametrize(("args", "code"), [(("analyze", "--json"), 141), (("analyze", "--gbnf"), 141),
                                            (("parse", "--stream"), 141), (("analyze",), 1)])
def test_a_reader_that_goes_away_gets_no_traceback(tmp_path: Path, args: tuple[str, ...], code: int) -> None:
    """`autoparser analyze X --json | head -1`: the pipe closes before the output is written. The
    exit status is a shell's for SIGPIPE (141); the summary table's printer (rich) exits 1."""
    template = tmp_path / "t.jinja"
    template.write_text(TEMPLATE)
    command, *options = args
    process = subprocess.Popen([sys.executable, "-m", "autoparser.cli", command, str(template), *options],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stdin is not None
    process.stdout.close()  # before the child has written anything: its first write finds the pipe closed
    process.stdin.write(b'{"a": 1}' * 2000)
    process.stdin.close()
    stderr = process.stderr.read().decode() if process.stderr else ""
    assert process.wait(120) == code, stderr
    assert stderr == ""


def test_head_reads_the_first_line_quietly(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text(TEMPLATE)
    done = subprocess.run(f"{sys.executable} -m autoparser.cli analyze {template} --json | head -1", shell=True,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout == "{\n" and "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr


def test_a_template_over_the_size_limit_is_refused_before_compiling(tmp_path: Path) -> None:
    """2.7 MB of template took 89 s to compile; over the limit it is not compiled at all."""
    import time

    path = tmp_path / "huge.jinja"
    path.write_text(TEMPLATE + "{{ x }}" * 400_000, encoding="utf-8")
    started = time.monotonic()
    done = run("analyze", str(path))
    assert time.monotonic() - started < 10
    assert_one_line_exit_2(done, "over the 128,000-character limit")
