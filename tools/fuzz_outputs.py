"""Fuzz the streaming parser with broken model outputs, and report what it does wrong.

For each target (a hand-built analysis of a well-known format, `tests/analyses.py`, or a template
of a corpus), outputs are written in its format (`analyses.render_output`, and for a template the
output of its own round trip), then mutated: cut anywhere or inside a marker, a marker dropped,
written twice, swapped with another or put inside a value, random code points, a long value, deep
nesting, a long run of digits. Each output is checked (CONTRACT sections 4 and 5):

* parsing it whole and streaming it raise nothing;
* the stream equals the whole parse, and its deltas join to it, fed 1 and 4 characters at a time,
  in random chunks, one marker a chunk, and (short outputs) split in two at every character;
* nothing is lost: every letter and digit is a marker or in the message (`tests/unplaced.py`);
* no end-of-turn marker is text: the reasoning and the content hold none that the output's own
  end-of-turn markers do not make up (`<|im_e<|im_end|>nd|>`);
* a per-output time limit, and each pass in time linear in the output's size;
* once per target, prose streamed among brackets and quotes is held back no more than the bound.

Findings are grouped by class, target and mutation, with the shortest output that showed each;
the exit status is 1 when there is any. A run with `--seed N --count K` checks the same outputs
(the summary prints their digest) and finds the same, whatever Python's hash seed; only the
`slow` and `timeout` classes depend on the machine. A run with `--seconds` stops where its time
runs out.

    python tools/fuzz_outputs.py --seed 1 --seconds 300 [--families hermes,glm45] \\
        [--corpus DIR_OR_TEMPLATE ...] [--out findings.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tools"))

import analyses  # noqa: E402
from analyses import joined_deltas, without_generated_ids, without_incomplete_flags  # noqa: E402
from holdback_report import BOUND, most_held, plain_cases  # noqa: E402
from unplaced import key_alone_pattern, lost_letters, marker_patterns, marker_texts  # noqa: E402

import autoparser  # noqa: E402
from autoparser.render import TemplateRenderError  # noqa: E402
from autoparser.roundtrip import probe_messages, run_case  # noqa: E402

TOOLS = [*analyses.WEATHER_TOOLS, {"type": "function", "function": {
    "name": "run_code", "parameters": {"type": "object", "properties": {
        "code": {"type": "string"}, "n": {"type": "number"}, "data": {"type": "object"},
        "items": {"type": "array"}}}}}]
NAMES = ["get_weather", "search", "run_code"]
ARGUMENTS: list[dict[str, Any]] = [
    {"city": "Paris"}, {"city": "Zürich ☃ 東京 😀", "days": 3},
    {"city": 'quote " back \\ slash \n newline \t tab', "options": {"a": [1, 2, {"b": None}], "c": True}},
    {"query": "x" * 300}, {"n": -12.5e3, "items": [1.0, "two", [3]]},
    {"code": "def f():\n    return {'a': [1]}\n"},
    {"data": {"nested": {"deeper": {"deepest": ["</tool_call>", "<|im_end|>"]}}}}, {},
    {"city": "a<b>c</d>"}, {"n": 12345678901234567890},
]
REASONING = ["Let me think about the weather. It's probably mild.", "Reasoning with ünïcödé and {braces} [x] <y>.", ""]
CONTENT = ["Sure, here you go.", "", 'Answer: 42 — done.\nSecond line {"k": 1}']
# where a mutation puts text inside a value, a long value or a run of digits
VALUE_ANCHORS = ("Paris", "mild", "Zürich", "xxxx", "quote", "return", "here you")
NUMBER_ANCHORS = ("12345678901234567890", "-12.5e3", "3")
PROSE = ('Words [a] then {b: 1} and "q" or \'r\' (c) <d> — ünï 東京 follow. ' * 40)[:1500]
ONE_CHAR_UP_TO = 4000  # longer outputs are not streamed a character at a time
EVERY_SPLIT_UP_TO = 250  # nor split in two at every character
LOST_UP_TO = 20_000


@dataclass
class Target:
    name: str
    analysis: Any
    round_trip: str | None = None  # a template's own output of a call, where one round-trips


@dataclass
class Finding:
    kind: str
    target: str
    mutation: str
    text: str
    detail: str
    count: int = 1


@dataclass
class Findings:
    seed: int
    found: dict[tuple[str, str, str], Finding] = field(default_factory=dict)
    # of every output checked, in order: two runs with one seed and count check the same outputs
    outputs: Any = field(default_factory=hashlib.sha256)

    def checked(self, text: str) -> None:
        self.outputs.update(text.encode("utf-8", "surrogatepass") + b"\0")

    def add(self, kind: str, target: str, mutation: str, text: str, detail: str) -> None:
        key = (kind, target, mutation)
        known = self.found.get(key)
        if known is None:
            self.found[key] = Finding(kind, target, mutation, text, detail)
            return
        known.count += 1
        if len(text) < len(known.text):  # the shortest output shows it best
            known.text, known.detail = text, detail

    def as_json(self) -> list[dict[str, Any]]:
        return [{"class": f.kind, "target": f.target, "mutation": f.mutation, "count": f.count, "seed": self.seed,
                 "length": len(f.text), "output": f.text[:4000], "detail": f.detail}
                for f in sorted(self.found.values(), key=lambda f: (f.kind, f.target, f.mutation))]


class OutOfTime(Exception):
    pass


# -- targets ----------------------------------------------------------------------------------------

def family_targets(names: list[str]) -> list[Target]:
    return [Target(name, analyses.FAMILIES[name]()) for name in names]


def corpus_targets(paths: list[Path]) -> list[Target]:
    templates = [p for path in paths for p in (sorted(path.glob("*.jinja")) if path.is_dir() else [path])]
    targets = []
    for path in templates:
        try:
            analysis = autoparser.load(str(path))
        except (TemplateRenderError, ValueError, OSError) as exc:
            print(f"skipped {path.name}: {exc}", file=sys.stderr)
            continue
        targets.append(Target(path.stem, analysis, _round_trip_output(analysis)))
    return targets


def _round_trip_output(analysis: Any) -> str | None:
    if not analysis.tools.supported:
        return None
    for case in ("two_calls", "one_call"):
        result = run_case(analysis, case, probe_messages()[case])
        if result.status == "pass":
            return result.output
    return None


# -- outputs ----------------------------------------------------------------------------------------

def valid_output(target: Target, rng: random.Random, thinking: bool) -> str:
    analysis = target.analysis
    if target.round_trip is not None and rng.random() < 0.3:
        return target.round_trip
    has_reasoning = analysis.reasoning.mode != "none" and analysis.reasoning.end.strip()
    reasoning = rng.choice(REASONING) if has_reasoning and rng.random() < 0.7 else None
    calls = []
    if analysis.tools.supported:
        count = rng.choice([0, 1, 1, 2, 3]) if analysis.tools.parallel else rng.choice([0, 1])
        calls = [(rng.choice(NAMES), rng.choice(ARGUMENTS)) for _ in range(count)]
    return analyses.render_output(analysis, reasoning=reasoning, content=rng.choice(CONTENT), calls=calls,
                                  thinking=thinking, stop=rng.random() < 0.7)


def _occurrences(text: str, markers: list[str]) -> list[tuple[int, str]]:
    return [(m.start(), marker) for marker in markers for m in re.finditer(re.escape(marker), text)]


def _at_anchor(text: str, anchors: tuple[str, ...]) -> tuple[int, str] | None:
    for anchor in anchors:
        if anchor in text:
            return text.index(anchor), anchor
    return None


def _random_code_points(rng: random.Random) -> str:
    ranges = [(0, 127), (128, 0x2FFF), (0xE000, 0x10FFFF)]
    chars = (chr(rng.randint(*rng.choice(ranges))) for _ in range(rng.randint(1, 8)))
    return "".join(chars).encode("utf-8", "replace").decode("utf-8")


def mutate(text: str, markers: list[str], rng: random.Random) -> tuple[str, str]:
    """(the mutation's name, the mutated output); a cut where the one drawn has nothing to work on."""
    kind = rng.choice(["cut", "cut", "cut_marker", "duplicate", "drop", "inside_value", "swap", "code_points",
                       "long_value", "deep", "digits"])
    found = _occurrences(text, markers)
    if kind == "cut_marker" and found:
        at, marker = rng.choice(found)
        return kind, text[:at + rng.randint(0, len(marker))]
    if kind == "duplicate" and found:
        at, marker = rng.choice(found)
        return kind, text[:at] + marker + text[at:]
    if kind == "drop" and found:
        at, marker = rng.choice(found)
        return kind, text[:at] + text[at + len(marker):]
    if kind == "swap" and len(found) >= 2:
        (i, a), (j, b) = sorted(rng.sample(found, 2))
        if i + len(a) <= j:
            return kind, text[:i] + b + text[i + len(a):j] + a + text[j + len(b):]
    if kind == "inside_value":
        anchor = _at_anchor(text, VALUE_ANCHORS)
        at = anchor[0] + rng.randint(0, len(anchor[1])) if anchor else rng.randint(0, len(text))
        return kind, text[:at] + rng.choice(markers or ["<x>"]) + text[at:]
    if kind == "code_points":
        at = rng.randint(0, len(text))
        return kind, text[:at] + _random_code_points(rng) + text[at:]
    if kind == "long_value":
        anchor = _at_anchor(text, VALUE_ANCHORS)
        big = rng.choice(["x" * 80_000, 'abc \\" ' * 10_000, "Ü" * 80_000])
        return kind, text[:anchor[0]] + big + text[anchor[0]:] if anchor else text + big
    if kind == "deep":
        anchor = _at_anchor(text, ('"Paris"', "'Paris'", "Paris"))
        if anchor is None:
            return kind, text + "[" * 2000
        depth = 2000
        nested = '{"a": ' * depth + "1" + "}" * rng.choice([depth, depth // 2, 0])
        return kind, text[:anchor[0]] + nested + text[anchor[0] + len(anchor[1]):]
    if kind == "digits":
        anchor = _at_anchor(text, NUMBER_ANCHORS)
        digits = "9" * rng.choice([400, 950, 2000])
        return kind, text[:anchor[0]] + digits + text[anchor[0] + len(anchor[1]):] if anchor else text + digits
    return "cut", text[:rng.randint(0, len(text))]


# -- checks -----------------------------------------------------------------------------------------

def chunkings(text: str, markers: list[str], rng: random.Random) -> Iterator[tuple[str, list[str]]]:
    yield "4-char", [text[i:i + 4] for i in range(0, len(text), 4)]
    if len(text) <= ONE_CHAR_UP_TO:
        yield "1-char", list(text)
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 12)))) if len(text) > 1 else []
    yield "random", [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    if markers:
        yield "marker-per-chunk", _marker_per_chunk(text, any_marker(markers))
    if len(text) <= EVERY_SPLIT_UP_TO:
        for cut in range(1, len(text)):
            yield f"split@{cut}", [text[:cut], text[cut:]]


def longest_first(texts: list[str]) -> list[str]:
    """Each text once, longest first, and alphabetically among those of one length: the order
    draws from the random generator pick by, the same in every run (a set's order is not)."""
    return sorted(set(texts), key=lambda text: (-len(text), text))


def any_marker(patterns: list[str]) -> re.Pattern[str]:
    """Any of the markers, the longest where several begin at one place (`patterns` are longest first)."""
    return re.compile("|".join(f"(?:{p})" for p in patterns))


def _marker_per_chunk(text: str, marker: re.Pattern[str]) -> list[str]:
    """The output in chunks that each hold one marker, or the text between two (as a model's
    special tokens arrive)."""
    pieces, at = [], 0
    for found in marker.finditer(text):
        pieces += [text[at:found.start()], found.group()]
        at = found.end()
    return [p for p in [*pieces, text[at:]] if p]


def streamed(parser: Any, pieces: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    stream = parser.stream()
    deltas = []
    for piece in pieces:
        deltas += stream.feed(piece)
    deltas += stream.finish()
    return stream.message(), deltas


def _short(message: dict[str, Any]) -> str:
    text = json.dumps(without_generated_ids(message), ensure_ascii=False)
    return text if len(text) < 600 else text[:300] + "…" + text[-300:]


@dataclass
class Check:
    target: Target
    parser: Any
    markers: list[str]  # the markers' regular expressions
    record: Callable[[str, str], None]  # (class, detail)
    slow_base: float
    slow_per_kb: float

    @property
    def marker(self) -> re.Pattern[str]:
        return any_marker(self.markers)

    def timed(self, label: str, size: int, run: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        result = run()
        spent = time.perf_counter() - started
        allowed = self.slow_base + self.slow_per_kb * size / 1000
        if spent > allowed:
            self.record("slow", f"{label}: {spent:.2f} s for {size} characters ({spent / size * 1e6:.0f} µs each)")
        return result

    def run(self, text: str, rng: random.Random) -> None:
        try:
            whole = self.timed("whole", len(text), lambda: self.parser.parse(text))
        except (OutOfTime, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - what the parser raises is the finding
            self.record("exception-whole", f"{type(exc).__name__}: {str(exc)[:200]}")
            return
        expected = without_generated_ids(whole)
        leaked = end_of_turn_in_text(self.target.analysis, text, whole)
        if leaked:
            self.record("end-of-turn-text", f"{leaked} in {_short(whole)}")
        for label, pieces in chunkings(text, self.markers, rng):
            if not self.stream_agrees(label, pieces, expected, whole, len(text)):
                return
        if len(text) <= LOST_UP_TO:
            # markers are markup, holes and all (`<|open|>argument key="{key}" type="{type}"`)
            unmarked = self.marker.sub(" ", text) if self.markers else text
            alone = key_alone_pattern(self.target.analysis)
            if alone:  # a key closed with no value after it adds nothing to the arguments
                unmarked = re.sub(alone, " ", text)
                unmarked = self.marker.sub(" ", unmarked) if self.markers else unmarked
            lost = lost_letters(self.target.analysis, unmarked, whole)
            if lost:
                self.record("lost", f"{''.join(sorted(lost.elements()))[:200]} from {_short(whole)}")

    def stream_agrees(self, label: str, pieces: list[str], expected: dict[str, Any], whole: dict[str, Any],
                      size: int) -> bool:
        try:
            message, deltas = self.timed(label, size, lambda: streamed(self.parser, pieces))
        except (OutOfTime, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001
            self.record("exception-stream", f"{label}: {type(exc).__name__}: {str(exc)[:200]}")
            return False
        if without_generated_ids(message) != expected:
            self.record("stream-differs", f"{label}: stream {_short(message)} whole {_short(whole)}")
            return False
        try:
            joined = joined_deltas(deltas)
        except (AssertionError, KeyError, TypeError) as exc:
            self.record("bad-deltas", f"{label}: {exc!r}")
            return False
        if without_generated_ids(joined) != without_generated_ids(without_incomplete_flags(message)):
            self.record("deltas-differ", f"{label}: deltas {_short(joined)} message {_short(message)}")
            return False
        return True


def end_of_turn_in_text(analysis: Any, text: str, message: dict[str, Any]) -> str | None:
    """The end-of-turn marker the message's reasoning or content holds as text, where the output
    holds one that its markers, left out, do not make up (None where none): the end-of-turn
    markers (`<|im_e<|im_end|>nd|>`, `<|eo<|eom_id|>t_id|>`), and those as well as the other
    markers, which may be markup (`<|im_e◁/think▷nd|>`). An end-of-turn marker the text holds
    only as the start of a longer marker held whole (a section's opener that begins with it,
    GigaChat3's `<|message_sep|>\n\nfunction call<|role_sep|>`) is that marker's: the reader
    reads the longer marker as one, and keeps the opener of a section that failed as text, as
    every format keeps a failed section's opener."""
    texts = (message.get("reasoning_content") or "") + "\0" + (message.get("content") or "")
    ends = sorted({stop.strip() for stop in analysis.stop if stop.strip()}, key=len, reverse=True)
    unmarked = _without(text, ends)
    unmarkup = _without(text, longest_first(marker_texts(analysis) + ends))
    for end in ends:
        openers = [m for m in marker_texts(analysis) if m.startswith(end) and m != end]
        if end in _without(texts, longest_first(openers)) and end not in unmarked and end not in unmarkup:
            return end
    return None


def _without(text: str, markers: list[str]) -> str:
    """`text` with the `markers` (longest first) left out in one pass: the text they leave, joined,
    is not searched again."""
    markers = [m for m in markers if m]
    return re.sub("|".join(map(re.escape, markers)), "", text) if markers else text


def holdback_excess(target: Target, parser: Any) -> list[str]:
    """Prose among brackets and quotes streamed as an answer and as reasoning: the cases that hold
    more than the bound beyond a pending marker prefix."""
    pending = max((len(m) for m in marker_texts(target.analysis)), default=0)
    excess = []
    for case in plain_cases(target.analysis, PROSE):
        held, _roles = most_held(parser, case)
        if held > BOUND + pending:
            excess.append(f"{case.name}: held {held} (bound {BOUND} + {pending} of a marker)")
    return excess


# -- the run ----------------------------------------------------------------------------------------

def _out_of_time(_signum: int, _frame: Any) -> None:
    raise OutOfTime


def fuzz(targets: list[Target], seed: int, count: int | None, seconds: float | None, limit: float,
         slow_base: float, slow_per_kb: float) -> tuple[Findings, int]:
    rng = random.Random(seed)
    findings = Findings(seed)
    end = time.monotonic() + seconds if seconds else None
    signal.signal(signal.SIGALRM, _out_of_time)
    parsers = {}
    for target in targets:
        parser = parsers[target.name] = target.analysis.parser(tools=TOOLS if target.analysis.tools.supported
                                                               else None, thinking=True)
        for detail in holdback_excess(target, parser):
            findings.add("holdback", target.name, "prose", PROSE, detail)
    done = 0
    while (count is None or done < count) and (end is None or time.monotonic() < end):
        target = targets[done % len(targets)]
        thinking = rng.random() < 0.8
        parser = parsers[target.name] if thinking else target.analysis.parser(
            tools=TOOLS if target.analysis.tools.supported else None, thinking=False)
        patterns = marker_patterns(target.analysis)
        literal = longest_first(marker_texts(target.analysis))
        base = valid_output(target, rng, thinking)
        mutation, text = ("valid", base) if rng.random() < 0.15 else mutate(base, literal, rng)

        def record(kind: str, detail: str, name: str = target.name, mutation: str = mutation,
                   text: str = text) -> None:
            findings.add(kind, name, mutation, text, detail)

        findings.checked(text)
        check = Check(target, parser, patterns, record, slow_base, slow_per_kb)
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            check.run(text, rng)
        except OutOfTime:
            record("timeout", f"over {limit:.0f} s for {len(text)} characters")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        done += 1
    return findings, done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--count", type=int, help="outputs to check (default: 200 unless --seconds)")
    budget.add_argument("--seconds", type=float, help="check outputs for this long")
    parser.add_argument("--families", default="all",
                        help="comma-separated names from tests/analyses.py FAMILIES, 'all' or 'none'")
    parser.add_argument("--corpus", type=Path, nargs="*", default=[],
                        help="templates, or folders of *.jinja templates, to fuzz too")
    parser.add_argument("--out", type=Path, help="write the findings here as JSON")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds for all the checks of one output")
    parser.add_argument("--slow-base", type=float, default=1.0,
                        help="seconds any one pass (a parse, a stream) may take before it is reported slow ...")
    parser.add_argument("--slow-per-kb", type=float, default=0.05, help="... plus this many per 1,000 characters")
    args = parser.parse_args(argv)
    names = {"all": list(analyses.FAMILIES), "none": []}.get(args.families)
    if names is None:
        names = [n.strip() for n in args.families.split(",") if n.strip()]
        unknown = sorted(set(names) - set(analyses.FAMILIES))
        if unknown:
            parser.error(f"unknown families {', '.join(unknown)}; known: {', '.join(analyses.FAMILIES)}")
    targets = family_targets(names) + corpus_targets(args.corpus)
    if not targets:
        parser.error("nothing to fuzz: name families or a corpus")
    count = args.count if args.count is not None or args.seconds else 200
    findings, done = fuzz(targets, args.seed, count, args.seconds, args.time_limit, args.slow_base,
                          args.slow_per_kb)
    found = findings.as_json()
    for item in found:
        print(f"{item['class']:16s} {item['target']:28s} {item['mutation']:12s} x{item['count']:<4d} "
              f"{item['length']:7d} chars  {item['detail'][:160]}")
    print(f"seed {args.seed}: {done} outputs of {len(targets)} targets (digest {findings.outputs.hexdigest()[:16]}), "
          f"{len(found)} findings ({sum(item['count'] for item in found)} outputs)")
    if args.out:
        args.out.write_text(json.dumps(found, ensure_ascii=False, indent=1), encoding="utf-8")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
