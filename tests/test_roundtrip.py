"""Round-trip fidelity over the real corpora (CONTRACT section 6).

Goals from the project's issues: at least 95 % of applicable cases on llama.cpp's templates and
at least 90 % on the shared corpus. Failures by cause: `python tools/roundtrip_report.py`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from analyses import without_generated_ids
from corpora import llamacpp_templates, shared_templates

import autoparser
from autoparser.roundtrip import TOOLS, probe_messages, run_case, template_results

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "templates"


def _rate(paths: list[Path]) -> tuple[float, list[str]]:
    passed = applicable = 0
    failures = []
    for path, analysis, result in template_results(paths, BOS, EOS):
        if result.status in ("pass", "fail"):
            applicable += 1
            passed += result.status == "pass"
            failures += [f"{path.name}:{result.case}: {d}" for d in _stream_differences(analysis, result)]
        if result.status == "fail":
            failures.append(f"{path.name}:{result.case}: {result.cause}")
    return (passed / applicable if applicable else 0.0), failures


def _assert_streams_agree(failures: list[str]) -> None:
    """Stream equals whole for 1-, 2-, 3- and 7-character chunks and special tokens one per chunk."""
    differences = [f for f in failures if "stream (" in f]
    assert not differences, "\n".join(differences)


def _chunkings(analysis: autoparser.Analysis, text: str) -> dict[str, list[str]]:
    """Ways a server may deliver the output: fixed sizes, and special tokens one per chunk."""
    ways = {f"{n}-char": [text[i:i + n] for i in range(0, len(text), n)] for n in (1, 2, 3, 7)}
    tokens = sorted({t.strip() for t in [*analysis.preserved_tokens, *analysis.stop] if t.strip()},
                    key=len, reverse=True)
    if tokens:
        pieces = [p for p in re.split("(" + "|".join(map(re.escape, tokens)) + ")", text) if p]
        ways["tokens"] = pieces
        ways["tokens+chars"] = [c for p in pieces for c in ([p] if p in tokens else list(p))]
    return ways


def _stream_differences(analysis: autoparser.Analysis, result) -> list[str]:  # type: ignore[no-untyped-def]
    """Stream equals whole for every chunking of the case's output (ids drawn afresh aside)."""
    parser = analysis.parser(tools=TOOLS, thinking=result.thinking)
    whole = without_generated_ids(parser.parse(result.output))
    differences = []
    for name, chunks in _chunkings(analysis, result.output).items():
        stream = parser.stream()
        for chunk in chunks:
            stream.feed(chunk)
        stream.finish()
        streamed = without_generated_ids(stream.message())
        if streamed != whole:
            differences.append(f"stream ({name}) {streamed} != whole {whole}")
    return differences


def test_llamacpp_corpus_round_trips() -> None:
    share, failures = _rate(llamacpp_templates())
    assert share >= 0.95, f"{share:.1%} < 95 %:\n" + "\n".join(f for f in failures if "stream (" not in f)
    _assert_streams_agree(failures)


def test_shared_corpus_round_trips() -> None:
    share, failures = _rate(shared_templates())
    assert share >= 0.90, f"{share:.1%} < 90 %:\n" + "\n".join(f for f in failures if "stream (" not in f)
    _assert_streams_agree(failures)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.jinja")), ids=lambda p: p.stem)
@pytest.mark.parametrize("case", sorted(probe_messages()))
def test_fixture_round_trips(path: Path, case: str) -> None:
    analysis = autoparser.analyze(path.read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)
    result = run_case(analysis, case, probe_messages()[case])
    assert result.status != "fail", f"{result.cause}\noutput: {result.output!r}\ngot: {result.got}"
    if result.status == "pass":
        _assert_streams_agree(_stream_differences(analysis, result))
