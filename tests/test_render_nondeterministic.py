"""A template that renders differently each time (random, or printing the seconds) is analyzed
with a warning; a template printing the date, like most, is not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autoparser import analyze
from autoparser.analyzers import NOT_DETERMINISTIC

TURNS = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
         "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.mark.parametrize("prefix", [
    "{{ lipsum(1) }}",
    "{{ range(100000) | random }}",
    "Now: {{ strftime_now('%H:%M:%S') }}",
    "{{ strftime_now('%f') }}",
    "{% if range(100000) | random > 50000 %}<think>{% endif %}",
], ids=["lipsum", "random", "seconds", "microseconds", "random-marker"])
def test_a_template_that_renders_differently_each_time_is_flagged(prefix: str) -> None:
    assert NOT_DETERMINISTIC in analyze(prefix + TURNS, eos_token="<|end|>").warnings


@pytest.mark.parametrize("prefix", ["", "Today is {{ strftime_now('%d %b %Y') }}.\n"], ids=["plain", "date"])
def test_a_deterministic_template_is_not_flagged(prefix: str) -> None:
    assert NOT_DETERMINISTIC not in analyze(prefix + TURNS, eos_token="<|end|>").warnings


def test_autoparser_analyze_shows_the_warning(tmp_path: Path) -> None:
    path = tmp_path / "random.jinja"
    path.write_text("{{ lipsum(1) }}" + TURNS, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "autoparser.cli", "analyze", str(path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert NOT_DETERMINISTIC in json.loads(done.stdout)["warnings"]
    summary = subprocess.run([sys.executable, "-m", "autoparser.cli", "analyze", str(path)],
                             capture_output=True, text=True, timeout=120)
    assert "renders differently each time" in " ".join(summary.stdout.split())
