"""Round-trip fidelity over the real corpora (CONTRACT section 6).

Goals from the project's issues: at least 95 % of applicable cases on llama.cpp's templates and
at least 90 % on the shared corpus. Failures by cause: `python tools/roundtrip_report.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from corpora import llamacpp_templates, shared_templates

import autoparser
from autoparser.render import TemplateRenderError
from autoparser.roundtrip import probe_messages, run_case, run_template

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "templates"


def _rate(paths: list[Path]) -> tuple[float, list[str]]:
    passed = applicable = 0
    failures = []
    for path in paths:
        try:
            analysis = autoparser.analyze(path.read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)
        except TemplateRenderError:
            continue
        for result in run_template(analysis):
            if result.status in ("pass", "fail"):
                applicable += 1
                passed += result.status == "pass"
            if result.status == "fail":
                failures.append(f"{path.name}:{result.case}: {result.cause}")
    return (passed / applicable if applicable else 0.0), failures


def test_llamacpp_corpus_round_trips() -> None:
    share, failures = _rate(llamacpp_templates())
    assert share >= 0.95, f"{share:.1%} < 95 %:\n" + "\n".join(failures)


def test_shared_corpus_round_trips() -> None:
    share, failures = _rate(shared_templates())
    assert share >= 0.90, f"{share:.1%} < 90 %:\n" + "\n".join(failures)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.jinja")), ids=lambda p: p.stem)
@pytest.mark.parametrize("case", sorted(probe_messages()))
def test_fixture_round_trips(path: Path, case: str) -> None:
    analysis = autoparser.analyze(path.read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)
    result = run_case(analysis, case, probe_messages()[case])
    assert result.status != "fail", f"{result.cause}\noutput: {result.output!r}\ngot: {result.got}"
