"""Benchmark `parse_with_lark` on the output `tools/bench_stream.py` builds.

The output is one DeepSeek V3.1 tool call whose arguments hold brace-heavy code, at 10 KB and
100 KB of code; it is parsed with the tool given and with no tools (any tool name). Also timed:
the same code as plain content before the calls (Hermes format), where free text is the
longest part of the output. Times are CPU time (`time.process_time`), best of several runs.

Usage: python tools/bench_lark.py [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import brace_heavy_code, deepseek_v31, model_output  # noqa: E402

from autoparser.analysis import Analysis, ToolsAnalysis  # noqa: E402
from autoparser.generators.lark import parse_with_lark  # noqa: E402

WRITE_FILE = {"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}


def hermes() -> Analysis:
    return Analysis(tools=ToolsAnalysis(supported=True, format="json", call_start="<tool_call>\n",
                                        call_end="\n</tool_call>", call_separator="\n", parallel=True),
                    stop=["<|im_end|>"])


def best(analysis: Analysis, text: str, repeat: int, **kwargs: Any) -> float:
    parse_with_lark(analysis, text[:10], **kwargs)  # builds and caches the parser
    times = []
    for _ in range(repeat):
        start = time.process_time()
        parse_with_lark(analysis, text, **kwargs)
        times.append(time.process_time() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for size in (10_000, 100_000):
        code = brace_heavy_code(size)
        call, _arguments = model_output(code)
        kb = size // 1000
        print(f"{kb} KB call, tool given: {best(deepseek_v31(), call, args.repeat, tools=[WRITE_FILE]) * 1000:.0f} ms")
        print(f"{kb} KB call, no tools:   {best(deepseek_v31(), call, args.repeat) * 1000:.0f} ms")
        content = "Here is the file:\n" + code
        print(f"{kb} KB content:          {best(hermes(), content, args.repeat, tools=[WRITE_FILE]) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
