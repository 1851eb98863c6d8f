"""Adversarial parse benchmark: whole and streamed parsing must stay linear in the output.

For each output format family of the corpora, hostile outputs are built from the format's own
markers and from a real rendered tool call (the round-trip "one_call" output): repeated section
and call openers, every marker cut one character short and repeated, the call cut at each of its
parts and repeated, `{` runs, long unclosed keys, names and strings, an unfinished call header
again and again (also with a name that breaks, and an opener followed by the end of turn), `[`
again and again after a whole call, `[`, `{"a": ` and `[{"a": ` nesting in a value (cut off, and
complete). Each is parsed whole and streamed in 16-character chunks at 100 KB and at 1 MB.
Linear time gives a 1 MB / 100 KB ratio near 10; the benchmark fails (exit 1) when any ratio
exceeds 12, or when a stream's message differs from the whole parse of the same text.

Times are CPU time of this process (`time.process_time`), the small size best of three runs,
so that other work on a shared machine disturbs them less, and either size best of as many runs
as take 0.1 s in all (at most 25) where its runs are short (`--small 5000 --large 50000`); the two
sizes are timed back to back, and a ratio over the limit is measured again (the best of five
rounds counts). A 100 KB case
slower than `--give-up` seconds is reported as failing without the 1 MB run.

Usage: python tools/bench_adversarial.py [--family TEXT] [--case TEXT] [--small 100000]
       [--large 1000000] [--chunk 16] [--limit 12] [--markdown]
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import autoparser  # noqa: E402
from autoparser.roundtrip import TOOLS, probe_messages, run_case  # noqa: E402

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"

# one template per output format family, from llama.cpp's corpus or the shared one (or an analysis
# of the tests', `analyses:NAME`, where no corpus template has the format)
FAMILIES = {
    "DeepSeek-V3.1": "deepseek-ai-DeepSeek-V3.1.jinja",
    "DeepSeek-V3-0324": "xinference__deepseek-v3-0324-92ebdf26.jinja",
    "DeepSeek-R1": "llama-cpp-deepseek-r1.jinja",
    "Qwen/Hermes <tool_call>": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "Qwen3-Coder XML": "Qwen3-Coder.jinja",
    "GLM-4.6": "GLM-4.6.jinja",
    "GLM-4.7": "GLM-4.7-Flash.jinja",
    "Mistral [TOOL_CALLS] array": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "Mistral [TOOL_CALLS] name[ARGS]": "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "gpt-oss channels": "openai-gpt-oss-120b.jinja",
    "Kimi-K2": "moonshotai-Kimi-K2.jinja",
    "Kimi-K3": "Kimi-K3.jinja",
    "MiniMax-M2 XML": "MiniMax-M2.jinja",
    "GigaChat3": "GigaChat3-10B-A1.8B.jinja",
    "Python calls": "vllm__tool_chat_template_llama3.2_pythonic.jinja",
    "plain JSON (Llama 3.x)": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "bare JSON array (Cogito)": "hfjs-ollama-automap__cogito-3b.jinja",
    # no corpus template's calls are a bare array whose bracket is the call opener, the answer's
    # text ending early at each `[`: the tests' analysis of that format (xLAM / Cogito style)
    "bare JSON array, [ opens calls": "analyses:bare_json_array",
}

# runs of a size are repeated until they took this many seconds in all (`timed`), at most this many
SHORT, MOST_RUNS = 0.1, 25

MARKER_FIELDS = ("section_start", "call_start", "name_start", "name_end", "id_start", "id_end", "args_start",
                 "args_end", "arg_start", "arg_key_end", "arg_end", "call_end", "call_separator", "section_end")


@dataclass
class Case:
    name: str
    prefix: str
    unit: str
    closer: str = ""  # with a closer: `unit` n times, `middle`, `closer` n times, `suffix` (complete nesting)
    middle: str = ""
    suffix: str = ""

    def text(self, size: int) -> str:
        body = size - len(self.prefix)
        if self.closer:
            count = max(body - len(self.middle) - len(self.suffix), 0) // (len(self.unit) + len(self.closer))
            return self.prefix + self.unit * count + self.middle + self.closer * count + self.suffix
        return self.prefix + (self.unit * (body // len(self.unit) + 1))[:max(body, 0)]


def find_template(name: str) -> Path | None:
    from corpora import _quietly, llamacpp_templates, shared_templates

    for path in _quietly(llamacpp_templates) + _quietly(shared_templates):
        if path.name == name:
            return path
    return None


def family_analysis(source: str) -> autoparser.Analysis | None:
    """A family's analysis: its template's, found in the corpora, or (`analyses:NAME`) the one
    `tests/analyses.py` writes for a format no corpus template has."""
    if source.startswith("analyses:"):
        import analyses

        return getattr(analyses, source.split(":", 1)[1])()
    path = find_template(source)
    return None if path is None else autoparser.analyze(path.read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)


def sample_output(analysis: autoparser.Analysis) -> tuple[str, bool | None]:
    """A model output holding one tool call (after reasoning where the template has it): the
    template's own rendering where the round trip applies, else written from the analysis."""
    messages = probe_messages()
    for case in ("reasoning_call", "one_call"):
        result = run_case(analysis, case, messages[case])
        if result.status in ("pass", "fail") and result.output:
            return result.output, result.thinking
    from analyses import render_output

    reasoning = "I should call a tool." if analysis.reasoning.mode != "none" else None
    call = ("get_weather", {"location": "Paris, France", "days": 3})
    return render_output(analysis, reasoning, "", [call], stop=False), None


def markers_of(data: dict) -> dict[str, str]:
    tools = data.get("tools") or {}
    reasoning = data.get("reasoning") or {}
    found = {field: (tools.get(field) or "").strip() for field in MARKER_FIELDS}
    found["reasoning_start"] = (reasoning.get("start") or "").strip()
    found["reasoning_end"] = (reasoning.get("end") or "").strip()
    for index, stop in enumerate(data.get("stop") or []):
        found[f"stop{index}"] = stop.strip()
    return {field: marker for field, marker in found.items() if marker}


def adversarial_cases(data: dict, output: str) -> list[Case]:
    """Hostile outputs built from the format's markers and one real call."""
    markers = markers_of(data)
    tools = data.get("tools") or {}
    cases = [Case("prose", "", "The weather is fine; see [1] and {2}. ")]
    opener = "".join(tools.get(f) or "" for f in ("section_start", "call_start", "name_start"))
    if opener.strip():
        cases.append(Case("repeated openers", "", opener))
    for field in ("section_start", "call_start", "reasoning_start"):
        if field in markers:
            cases.append(Case(f"repeated {field}", "", markers[field]))
    if "stop0" in markers and opener.strip():
        # reasoning opened, a call opened, the turn ended, again and again (readings failing at one place)
        cases.append(Case("opener then end of turn", "", markers.get("reasoning_start", "") + opener + markers["stop0"]))
    for field, marker in markers.items():
        if len(marker) > 1:
            cases.append(Case(f"partial {field}", "", marker[:-1]))
            cases.append(Case(f"partial {field} spaced", "", marker[:-1] + " "))
    for field, marker in markers.items():
        parts = [part for part in re.split(r"\s+|(?<=>)(?=<)", marker) if part]
        if len(parts) > 1:  # a marker that admits whitespace inside: a long run where it may go
            cases.append(Case(f"whitespace inside {field}", parts[0], " \n"))
    cases.append(Case("whitespace run", "x", " \n"))
    for char in "{[<\"":
        cases.append(Case(f"{char} run", "", char))
    if output:
        name_at = output.find("get_weather")
        key_at = output.find("location")
        value_at = output.find("Paris")
        cases.append(Case("repeated calls", "", output + "\n"))
        # after a whole call, `[` again and again: each may open a bare array of calls again
        cases.append(Case("[ run after a call", output, "["))
        if name_at >= 0:
            cases.append(Case("long name", output[:name_at], "get_weather"))
            cases.append(Case("repeated header to name", "", output[:name_at]))
            cases.append(Case("repeated header with name", "", output[:name_at + len("get_weather")]))
            # a call that fails on its name right after the section's opener (recovery each time)
            cases.append(Case("repeated header, broken name", "", output[:name_at] + 'get"_weather\n'))
        if key_at >= 0:
            brace = output.rfind("{", 0, key_at)
            cases.append(Case("long key", output[:key_at], "location_"))
            cases.append(Case("repeated call to key", "", output[:key_at]))
            if brace >= 0:
                cases.append(Case("{ run in arguments", output[:brace + 1], "{"))
                cases.append(Case('{" run in arguments', output[:brace + 1], '{"'))
                # an unfinished call header, again and again (`{"name": "f", "parameters": ` ...)
                cases.append(Case("repeated header to arguments", "", output[:brace]))
                comma = output.rfind(",", 0, brace)
                if name_at >= 0 and comma > name_at:
                    cases.append(Case("repeated header to its comma", "", output[:comma + 1] + " "))
        if value_at >= 0:
            cases.append(Case("unclosed value", output[:value_at], "Paris, France \\ "))
            # nesting in an argument value, cut off inside the deepest level and complete
            start = value_at - 1 if output[value_at - 1:value_at] in "\"'" else value_at
            end = output.find("France", value_at) + len("France") + (start < value_at)
            for unit, closer in (("[", "]"), ('{"a": ', "}"), ('[{"a": ', "}]")):
                cases.append(Case(f"{unit!r} nesting in a value, cut", output[:start], unit))
                cases.append(Case(f"{unit!r} nesting in a value, complete", output[:start], unit, closer,
                                  "1", output[end:]))
            cases.append(Case("{ run in a value", output[:value_at], "{"))
            cases.append(Case("repeated call to value", "", output[:value_at]))
            for field, marker in markers.items():
                if len(marker) > 1:
                    cases.append(Case(f"partial {field} in a value", output[:value_at], marker[:-1] + "x"))
    for cut in cut_points(output, markers.values()):
        cases.append(Case(f"whitespace after {output[max(cut - 12, 0):cut]!r}", output[:cut], " \n"))
    seen: set[tuple[str, str, str]] = set()
    unique = []
    for case in cases:
        if (case.prefix, case.unit, case.closer) not in seen:
            seen.add((case.prefix, case.unit, case.closer))
            unique.append(case)
    return unique


def cut_points(output: str, markers) -> list[int]:
    """Where a state may wait for what follows: after each marker and each piece of punctuation."""
    cuts = {i + 1 for i, char in enumerate(output) if char in "{[(,:;=\"'"}
    for marker in markers:
        start = output.find(marker)
        while start >= 0:
            cuts.add(start + len(marker))
            start = output.find(marker, start + 1)
    return sorted(cuts)


def whole(parser, text: str, chunk: int) -> dict:  # noqa: ARG001
    return parser.parse(text)


def streamed(parser, text: str, chunk: int) -> dict:
    stream = parser.stream()
    feed = stream.feed
    for offset in range(0, len(text), chunk):
        feed(text[offset:offset + chunk])
    stream.finish()
    return stream.message()


def timed(run: Callable, parser, text: str, chunk: int, repeat: int) -> tuple[float, dict]:
    """The best of `repeat` runs, and of more where they took less than `SHORT` in all (up to
    `MOST_RUNS`): a run of a few milliseconds is within the process clock's tick and a shared
    machine's hiccups, which a single slow run of the pair would turn into a ratio over the limit."""
    best, message, spent, runs = float("inf"), {}, 0.0, 0
    while runs < repeat or (spent < SHORT and runs < MOST_RUNS):
        gc.collect()
        start = time.process_time()
        message = run(parser, text, chunk)
        elapsed = time.process_time() - start
        best, spent, runs = min(best, elapsed), spent + elapsed, runs + 1
    return best, message


def without_ids(message: dict) -> dict:
    return dict(message, tool_calls=[dict(c, id="") for c in message.get("tool_calls") or []])


@dataclass
class Row:
    family: str
    case: str
    mode: str
    small: float
    large: float | None

    @property
    def ratio(self) -> float:
        return float("inf") if self.large is None else self.large / max(self.small, 1e-6)


def measure(parser, case: Case, mode: str, args) -> Row:
    """Both sizes timed back to back, so that both see the same load on a shared machine; a ratio
    over the limit is measured again, and the best of five rounds counts."""
    run = whole if mode == "whole" else streamed
    small_text, large_text = case.text(args.small), case.text(args.large)
    best: Row | None = None
    for _ in range(5):
        small = timed(run, parser, small_text, args.chunk, 3)[0]
        if small > args.give_up:
            return Row("", case.name, mode, small, None)
        row = Row("", case.name, mode, small, timed(run, parser, large_text, args.chunk, 1)[0])
        if best is None or row.ratio < best.ratio:
            best = row
        if best.ratio <= args.limit:
            break
    return best


def main() -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--family", default="", help="only families whose label contains this")
    options.add_argument("--case", default="", help="only cases whose name contains this")
    options.add_argument("--small", type=int, default=100_000)
    options.add_argument("--large", type=int, default=1_000_000)
    options.add_argument("--chunk", type=int, default=16, help="characters per streamed chunk")
    options.add_argument("--limit", type=float, default=12.0, help="largest allowed large/small time ratio")
    options.add_argument("--give-up", type=float, default=3.0, help="seconds at the small size that fail at once")
    options.add_argument("--markdown", action="store_true", help="print the per-family summary as a table")
    args = options.parse_args()

    failures: list[str] = []
    summary: list[tuple[str, int, list[Row], list[Row]]] = []
    small_kb, large_kb = args.small // 1000, args.large // 1000
    print(f"{'family':32} {'case':40} {'mode':6} {small_kb:>6} KB {large_kb:>6} KB  ratio")
    for family, template in FAMILIES.items():
        if args.family.lower() not in family.lower():
            continue
        analysis = family_analysis(template)
        if analysis is None:
            print(f"{family:32} template {template} not found in the corpora: skipped")
            continue
        output, thinking = sample_output(analysis)
        parser = analysis.parser(tools=TOOLS, thinking=thinking)
        cases = [c for c in adversarial_cases(analysis.to_dict(), output) if args.case.lower() in c.name.lower()]
        rows: dict[str, list[Row]] = {"whole": [], "stream": []}
        for case in cases:
            for mode in ("whole", "stream"):
                row = measure(parser, case, mode, args)
                row.family = family
                rows[mode].append(row)
                large = "   n/a  " if row.large is None else f"{row.large * 1000:8.1f}"
                flag = "  SLOW" if row.ratio > args.limit else ""
                print(f"{family[:32]:32} {case.name[:40]:40} {mode:6} {row.small * 1000:6.1f} ms {large} ms"
                      f" {row.ratio:6.2f}{flag}", flush=True)
                if row.ratio > args.limit:
                    failures.append(f"{family}: {case.name} ({mode}) ratio {row.ratio:.2f}")
            text = case.text(args.small)
            if without_ids(whole(parser, text, 0)) != without_ids(streamed(parser, text, args.chunk)):
                failures.append(f"{family}: {case.name}: the stream differs from the whole parse")
        if cases:
            summary.append((family, len(cases), rows["whole"], rows["stream"]))

    print()
    header = ("Format", "Cases", "Whole: median / worst ratio", f"Whole: slowest {large_kb} KB",
              "Stream: median / worst ratio", f"Stream: slowest {large_kb} KB")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|---|---:|---:|---:|---:|---:|")
    for family, count, whole_rows, stream_rows in summary:
        cells = [family, str(count)]
        for mode_rows in (whole_rows, stream_rows):
            ratios = sorted(r.ratio for r in mode_rows)
            slowest = max((r.large or float("inf")) for r in mode_rows)
            cells += [f"{ratios[len(ratios) // 2]:.1f} / {ratios[-1]:.1f}", f"{slowest * 1000:.0f} ms"]
        print(("| " + " | ".join(cells) + " |") if args.markdown else
              f"{cells[0]:32} {cells[1]:>3} cases  whole {cells[2]:>12} {cells[3]:>9}  stream {cells[4]:>12} {cells[5]:>9}")
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    print(f"\nall ratios <= {args.limit:g}: linear")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
