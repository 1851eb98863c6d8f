"""Benchmark the streaming parser on one large DeepSeek V3.1 tool call.

The call writes a file whose content is brace-heavy code (the worst case for parsers that
re-scan a growing JSON buffer on every chunk). The output is fed in 4-character chunks, as a
server would feed tokens, and also parsed whole. Printed:

* the streaming time at 10 KB and at 100 KB of code, and their ratio (linear time gives ~10;
  the goal is at most 15);
* streaming time divided by whole-text parse time (goal: at most 10, a stream costing at most ten
  whole parses);
* microseconds per chunk, and whether 100 KB streams in under 100 ms;
* for scale, the same loop with a do-nothing consumer that only returns one delta dict per chunk:
  the floor any Python streaming parser pays on this machine. The whole-text parse scans the
  JSON string with one regular expression, so "stream / whole" is dominated by that per-chunk
  floor, not by re-scanning (which the 10 KB / 100 KB ratio would expose).

Times are CPU time of this process (`time.process_time`), best of several runs, so that other
work on a shared machine disturbs them less.

With --prose it also streams 100 KB of prose in 4-character chunks as the answer and as
reasoning (the V3.1 format with thinking on: three readings of the text until `</think>`), where
every chunk goes through the reader rather than the in-string hot path, and prints each stream's
time beside its whole parse.

With --html it also streams a call whose 45 KB of arguments are markup (`<b>word</b> ` repeated)
in 4-character chunks: many chunks end with `<`, which may begin a marker where a call begins
again, and are held at that character on the in-string hot path rather than read by the reader.

Usage: python tools/bench_stream.py [--template PATH] [--repeat N] [--prose] [--html]
With --template the analysis is inferred from that chat template; by default the DeepSeek V3.1
format is spelled out here, so the benchmark measures the parser alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoparser.analysis import Analysis, ReasoningAnalysis, ToolsAnalysis  # noqa: E402
from autoparser.language.reading import Parser  # noqa: E402

CHUNK = 4
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"


def deepseek_v31() -> Analysis:
    return Analysis(
        reasoning=ReasoningAnalysis(mode="tagged", start="<think>", end="</think>", forced_open=True,
                                    toggle="thinking", default_on=False, closed_when_off=True),
        tools=ToolsAnalysis.from_dict(dict(supported=True, format="tag_json", section_start="<｜tool▁calls▁begin｜>",
                            section_end="<｜tool▁calls▁end｜>", call_start="<｜tool▁call▁begin｜>",
                            call_end="<｜tool▁call▁end｜>", name_end="<｜tool▁sep｜>", parallel=True)),
        stop=[EOS])


def brace_heavy_code(size: int) -> str:
    """JavaScript-like code full of braces, brackets, quotes and newlines, `size` characters long."""
    lines = []
    total = 0
    index = 0
    while total < size:
        line = (f'function f{index}(a, b) {{ if (a["k{index}"] > b) {{ return {{x: a, y: [b, {{z: "q\\\\n"}}], '
                f"w: {{}}}}; }} else {{ while (true) {{ b = {{...b, n: {index}}}; }} }} }}\n")
        lines.append(line)
        total += len(line)
        index += 1
    return "".join(lines)[:size]


def model_output(code: str) -> tuple[str, str]:
    arguments = json.dumps({"path": "src/app.js", "content": code}, ensure_ascii=False)
    text = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>" + arguments
            + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>" + EOS)
    return text, arguments


def prose(size: int) -> str:
    line = "the quick brown fox jumps over a lazy dog while {braces}, <angles> and [brackets] pass by,\n"
    return (line * (size // len(line) + 1))[:size]


def prose_times(analysis: Analysis, repeat: int) -> None:
    """Prose streamed as the answer and as reasoning: every chunk is read by the reader."""
    text = prose(100_000)
    for label, parser, output in (("answer", Parser(analysis), text + EOS),
                                  ("reasoning", Parser(analysis, thinking=True), text + "</think>ok" + EOS)):
        streamed, message, _ = best(lambda p=parser, o=output: stream_time(p, o), repeat)
        whole, whole_message = best(lambda p=parser, o=output: whole_time(p, o), repeat)
        if message != whole_message:
            print(f"WRONG RESULT: the streamed {label} differs from the whole parse", file=sys.stderr)
        print(f"prose {label:9s}  {streamed * 1000:8.2f} ms streamed, {whole * 1000:6.2f} ms whole "
              f"(stream / whole = {streamed / whole:.1f})")


def html_times(parser: Parser, repeat: int) -> None:
    """A call whose arguments are markup, streamed and parsed whole."""
    text, arguments = model_output("<b>word</b> " * 3750)
    streamed, message, _ = best(lambda: stream_time(parser, text), repeat)
    whole, _ = best(lambda: whole_time(parser, text), repeat)
    if message["tool_calls"][0]["function"]["arguments"] != arguments:
        print("WRONG RESULT: the streamed markup arguments differ", file=sys.stderr)
    print(f"html {len(arguments) // 1000} KB     {streamed * 1000:8.2f} ms streamed, {whole * 1000:6.2f} ms whole "
          f"(stream / whole = {streamed / whole:.1f})")


def stream_time(parser: Parser, text: str) -> tuple[float, dict, int]:
    start = time.process_time()
    stream = parser.stream()
    chunks = 0
    for offset in range(0, len(text), CHUNK):
        stream.feed(text[offset : offset + CHUNK])
        chunks += 1
    stream.finish()
    return time.process_time() - start, stream.message(), chunks


def floor_time(text: str) -> tuple[float]:
    """The same chunk loop with a consumer that does nothing but build one delta per chunk."""

    def consume(chunk: str) -> list[dict]:
        return [{"tool_calls": [{"index": 0, "function": {"arguments": chunk}}]}]

    start = time.process_time()
    for offset in range(0, len(text), CHUNK):
        consume(text[offset : offset + CHUNK])
    return (time.process_time() - start,)


def whole_time(parser: Parser, text: str) -> tuple[float, dict]:
    start = time.process_time()
    message = parser.parse(text)
    return time.process_time() - start, message


def best(measure, repeat: int):
    results = [measure() for _ in range(repeat)]
    return min(results, key=lambda r: r[0])


def main() -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--template", type=Path, help="analyze this chat template instead")
    options.add_argument("--repeat", type=int, default=9, help="take the best of N runs")
    options.add_argument("--prose", action="store_true", help="also stream 100 KB of prose as answer and reasoning")
    options.add_argument("--html", action="store_true", help="also stream 45 KB of markup as a call's arguments")
    args = options.parse_args()
    if args.template:
        import autoparser

        analysis = autoparser.analyze(args.template.read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)
    else:
        analysis = deepseek_v31()
    parser = Parser(analysis)

    timings = {}
    for size in (10_000, 100_000):
        text, arguments = model_output(brace_heavy_code(size))
        elapsed, message, chunks = best(lambda text=text: stream_time(parser, text), args.repeat)
        call = message["tool_calls"][0]["function"]
        if call["name"] != "write_file" or call["arguments"] != arguments:
            print(f"WRONG RESULT at {size} bytes", file=sys.stderr)
            return 1
        timings[size] = (elapsed, chunks, text)

    small, large = timings[10_000][0], timings[100_000][0]
    chunks = timings[100_000][1]
    whole, whole_message = best(lambda: whole_time(parser, timings[100_000][2]), args.repeat)
    if whole_message["tool_calls"][0]["function"]["name"] != "write_file":
        print("WRONG RESULT in the whole-text parse", file=sys.stderr)
        return 1
    floor = best(lambda: floor_time(timings[100_000][2]), args.repeat)[0]
    ratio = large / small
    per_chunk = large / chunks * 1e6
    print(f"stream 10 KB:   {small * 1000:8.2f} ms")
    print(f"stream 100 KB:  {large * 1000:8.2f} ms  ({chunks} chunks of {CHUNK} chars)")
    print(f"100 KB / 10 KB: {ratio:8.2f}     (goal <= 15: {'ok' if ratio <= 15 else 'MISSED'})")
    print(f"whole 100 KB:   {whole * 1000:8.2f} ms")
    print(f"stream / whole: {large / whole:8.2f}     (goal <= 10: {'ok' if large / whole <= 10 else 'MISSED'})")
    print(f"per chunk:      {per_chunk:8.2f} us   (100 KB in < 100 ms: {'ok' if large < 0.1 else 'MISSED'})")
    print(f"floor 100 KB:   {floor * 1000:8.2f} ms  (do-nothing consumer; stream / floor = {large / floor:.2f})")
    if args.prose:
        prose_times(analysis, args.repeat)
    if args.html:
        html_times(parser, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
