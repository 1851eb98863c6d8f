"""`serve` start-up failures: one clear line on stderr, a non-zero exit, never a traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from server_harness import find_template, run_serve, tiny_model


@pytest.fixture(scope="module")
def model() -> Path:
    return tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))


def assert_one_clear_line(result, fragment: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, result.stderr
    assert fragment in errors[0]


def test_missing_model(tmp_path: Path) -> None:
    result = run_serve("--model", str(tmp_path / "nope.gguf"), "--port", "0")
    assert_one_clear_line(result, "model file not found")
    assert result.returncode == 2


def test_public_address_needs_an_api_key(model: Path) -> None:
    result = run_serve("--model", str(model), "--host", "0.0.0.0", "--port", "0")
    assert_one_clear_line(result, "without --api-key")
    assert result.returncode == 2


def test_port_in_use(model: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run_serve("--model", str(model), "--port", str(port))
    assert_one_clear_line(result, "already in use")
    assert result.returncode == 1


def test_template_that_does_not_compile(model: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for message in messages %}{{ message.content }", encoding="utf-8")
    result = run_serve("--model", str(model), "--port", "0", "--chat-template-file", str(bad))
    assert_one_clear_line(result, "bad.jinja")
    assert result.returncode == 2


def test_file_that_is_not_a_model(tmp_path: Path) -> None:
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"not a gguf at all")
    result = run_serve("--model", str(fake), "--port", "0")
    assert_one_clear_line(result, "cannot load the model")
    assert result.returncode == 2


@pytest.mark.parametrize(("flags", "fragment"), [
    (["--parallel", "0"], "--parallel must be at least 1"),
    (["--parallel", "65"], "--parallel must be at most 64"),
    (["--parallel", "8", "--n-ctx", "64"], "fewer than 16 tokens"),
])
def test_bad_parallel_settings(model: Path, flags: list[str], fragment: str) -> None:
    result = run_serve("--model", str(model), "--port", "0", *flags)
    assert_one_clear_line(result, fragment)
    assert result.returncode == 2


def test_default_parallel_follows_the_context() -> None:
    from autoparser.server.startup import default_parallel

    assert [default_parallel(n) for n in (2048, 4096, 8192, 16384, 131072)] == [1, 1, 2, 4, 4]


def test_template_over_the_size_limit(model: Path, tmp_path: Path) -> None:
    """A 2.8 MB template is refused before compiling (it compiled for minutes): one line, quickly."""
    import time

    huge = tmp_path / "huge.jinja"
    huge.write_text("{% for m in messages %}{{ m.content }}{% endfor %}" + "{{ x }}" * 400_000, encoding="utf-8")
    started = time.monotonic()
    result = run_serve("--model", str(model), "--port", "0", "--chat-template-file", str(huge))
    assert time.monotonic() - started < 30
    assert_one_clear_line(result, "over the 128,000-character limit")
    assert result.returncode == 2
