"""After a broken call, are the valid calls after it still calls, in every format?

For each format (the hand-built analyses of `tests/analyses.py`, the fixture templates and the
corpora's templates that write parallel calls), three calls are written in the format
(`analyses.render_output`), then the first one is broken in one of a few ways:

* `no-value`: its string value left out (`city=)`, `"city": }`);
* `bad-value`: a stray bracket after its value (`city='Oslo'])`, `"city": "Oslo"]}`);
* `no-close`: its closing (the call's end marker, or the first closing bracket) left out;
* `junk-name`: a character no name holds in its name (`get_we@ther`);
* `open-quote`: its value's closing quote left out (where the value is quoted).

Each output is checked: the two later calls are the message's last calls, whole and not
incomplete; the output streamed one character at a time and in random chunks reads as its whole
parse; no letter or digit is lost (`tests/unplaced.py`). Counts are printed per format (corpus
templates grouped by how their calls are written), then each failure.

    python tools/broken_call_probe.py [--only NAME ...] [--verbose]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import analyses  # noqa: E402
import corpora  # noqa: E402
from analyses import WEATHER_TOOLS, streamed_in_random_chunks, without_generated_ids  # noqa: E402
from unplaced import lost_letters  # noqa: E402

import autoparser  # noqa: E402

FIXTURES = REPO / "fixtures" / "templates"
CALLS = [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Paris"}), ("search", {"query": "Rome"})]
QUOTES = "\"'"


def targets(only: set[str]) -> Iterator[tuple[str, str, Any]]:
    """(format, name, analysis) of every format with parallel calls."""
    found = [(name, "family", make) for name, make in analyses.FAMILIES.items()]
    found += [(path.stem, "fixture", path) for path in sorted(FIXTURES.glob("*.jinja"))]
    found += [(path.stem, "corpus", path) for path in corpora.all_templates()]
    for name, kind, source in found:
        if only and name not in only:
            continue
        try:
            analysis = source() if kind == "family" else autoparser.load(str(source))
        except Exception as exc:  # noqa: BLE001 (a template the analyzer cannot read is no target)
            print(f"skipped {name}: {exc}", file=sys.stderr)
            continue
        if analysis.tools.supported and analysis.tools.parallel:
            group = name if kind != "corpus" else "corpus " + signature(analysis)
            yield group, name, analysis


def signature(analysis: Any) -> str:
    """How a template writes its calls, in short: the format and its outer markers."""
    t = analysis.tools
    values = "python" if t.arg_python else "raw" if t.arg_string_raw else "json"
    return " ".join(repr(part) for part in (t.format, t.section_start, t.call_start or t.name_start, t.call_end,
                                             values if t.format == "tag_tagged" else "", t.array) if part)


def value_span(text: str, value: str) -> tuple[int, int]:
    """Where the first call's value is written, its quotes included."""
    at = text.index(value)
    start, end = at, at + len(value)
    if start and text[start - 1] in QUOTES and end < len(text) and text[end] == text[start - 1]:
        start, end = start - 1, end + 1
    return start, end


def breakings(analysis: Any, text: str) -> Iterator[tuple[str, str]]:
    """(how, output) for each way of breaking the first call of `text`."""
    start, end = value_span(text, "Oslo")
    quoted = text[start] in QUOTES
    yield "no-value", text[:start] + text[end:]
    yield "bad-value", text[:end] + "]" + text[end:]
    second = text.rindex("get_weather", 0, text.index("Paris"))
    between = text[end:second]
    close = analysis.tools.call_end.strip()
    if close and close in between:
        at = end + between.index(close)
        yield "no-close", text[:at] + text[at + len(close):]
    else:
        match = re.search(r"[)}\]]", between)
        if match:
            yield "no-close", text[:end + match.start()] + text[end + match.end():]
    name = text.index("get_weather")
    yield "junk-name", text[:name] + "get_we@ther" + text[name + len("get_weather"):]
    if quoted:
        yield "open-quote", text[:end - 1] + text[end:]


def one_character_at_a_time(parser: Any, text: str) -> dict[str, Any]:
    stream = parser.stream()
    for char in text:
        stream.feed(char)
    stream.finish()
    return stream.message()


def failures(analysis: Any, parser: Any, text: str) -> list[str]:
    """What is wrong with the message of `text`, a broken call then two valid ones."""
    wrong = []
    message = parser.parse(text)
    later = message["tool_calls"][-2:]
    if analyses.calls(dict(message, tool_calls=later)) != CALLS[1:] or any(c.get("incomplete") for c in later):
        wrong.append(f"later calls {analyses.calls(message)} content {message['content']!r}")
    whole = without_generated_ids(message)
    if without_generated_ids(one_character_at_a_time(parser, text)) != whole:
        wrong.append("streamed one character at a time differs")
    elif any(without_generated_ids(streamed_in_random_chunks(parser, text, seed)) != whole for seed in range(3)):
        wrong.append("streamed in random chunks differs")
    lost = lost_letters(analysis, text, message)
    if lost:
        wrong.append(f"lost {''.join(sorted(lost.elements()))!r}")
    return wrong


def probe(group: str, name: str, analysis: Any, record: Callable[..., None]) -> None:
    reasoning = [None] + (["Plan."] if analysis.reasoning.end else [])
    for thought in reasoning:
        text = analyses.render_output(analysis, thought, calls=CALLS)
        parser = analysis.parser(tools=WEATHER_TOOLS)
        try:
            whole = parser.parse(text)
            if analyses.calls(whole) != CALLS or (whole["content"] or "").strip() or any(
                    c.get("incomplete") for c in whole["tool_calls"]):
                # (the analysis's layout is not all of the template's: a quote or a hole unwritten)
                record(group, name, "unread", text, ["the output as written is not read as its calls alone"])
                continue
            for how, broken in breakings(analysis, text):
                record(group, name, how, broken, failures(analysis, parser, broken))
        except Exception as exc:  # noqa: BLE001 (a raise is a finding)
            record(group, name, "raised", text, [repr(exc)])


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--only", nargs="*", default=[], help="family, fixture or template names")
    cli.add_argument("--verbose", action="store_true", help="print every failing output")
    cli.add_argument("--json", type=Path, help="write the failures here")
    args = cli.parse_args(argv)
    random.seed(0)
    counts: dict[str, Counter] = defaultdict(Counter)
    members: dict[str, set[str]] = defaultdict(set)
    failed: list[dict[str, Any]] = []

    def record(group: str, name: str, how: str, text: str, wrong: list[str]) -> None:
        members[group].add(name)
        if how == "unread":
            counts[group]["unread"] += 1
            return
        counts[group]["checked"] += 1
        if wrong:
            counts[group]["failed"] += 1
            failed.append({"group": group, "template": name, "how": how, "output": text, "wrong": wrong})

    for group, name, analysis in targets(set(args.only)):
        probe(group, name, analysis, record)
    total = Counter()
    for group in sorted(counts):
        c = counts[group]
        total.update(c)
        print(f"{c['checked'] - c['failed']:3d}/{c['checked']:<3d} pass  {c['unread']:2d} unread  "
              f"{len(members[group]):3d} templates  {group}")
    print(f"total {total['checked'] - total['failed']}/{total['checked']} pass, {total['unread']} unread")
    by_kind = Counter((f["group"], f["how"]) for f in failed)
    for (group, how), n in sorted(by_kind.items()):
        example = next(f for f in failed if (f["group"], f["how"]) == (group, how))
        print(f"FAIL x{n} {group} {how}: {example['template']} {example['output']!r}\n      {example['wrong']}")
    if args.verbose:
        for f in failed:
            print(json.dumps(f, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(failed, ensure_ascii=False, indent=1), encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("AUTOPARSER_SHARED", str(REPO.parent / "shared"))
    sys.exit(main())
