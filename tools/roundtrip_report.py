"""Round-trip fidelity over both real corpora (CONTRACT section 6), with failures grouped by cause.

    python tools/roundtrip_report.py [--markdown] [--verbose]
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import autoparser  # noqa: E402
from autoparser.render import TemplateRenderError  # noqa: E402
from autoparser.roundtrip import CaseResult, run_template  # noqa: E402

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"


def corpus_results(paths: list[Path]) -> list[tuple[str, CaseResult]]:
    results = []
    for path in paths:
        try:
            analysis = autoparser.analyze(path.read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)
        except TemplateRenderError as exc:
            results.append((path.name, CaseResult("all", "skipped", f"template cannot be rendered: {exc}")))
            continue
        results += [(path.name, r) for r in run_template(analysis)]
    return results


def rate(results: list[tuple[str, CaseResult]]) -> tuple[int, int]:
    passed = sum(r.status == "pass" for _, r in results)
    failed = sum(r.status == "fail" for _, r in results)
    return passed, passed + failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="print every failing case")
    args = parser.parse_args()
    from corpora import _quietly, llamacpp_templates, shared_templates

    for label, paths in (("llama.cpp", _quietly(llamacpp_templates)), ("shared", _quietly(shared_templates))):
        results = corpus_results(paths)
        passed, applicable = rate(results)
        counts = collections.Counter(r.status for _, r in results)
        share = passed / applicable if applicable else 0.0
        print(f"{label}: {passed}/{applicable} applicable cases pass ({share:.1%}); "
              f"not applicable {counts['not_applicable']}, skipped {counts['skipped']}")
        by_cause: dict[str, list[str]] = collections.defaultdict(list)
        for name, result in results:
            if result.status == "fail":
                by_cause[result.cause].append(f"{name}:{result.case}")
        for cause, cases in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(sorted(cases)) if args.verbose else ", ".join(sorted({c.split(':')[0] for c in cases}))
            prefix = "- " if args.markdown else "    "
            print(f"{prefix}{cause} ({len(cases)}): {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
