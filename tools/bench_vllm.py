"""Benchmark the `autoparser` vLLM plugin against vLLM's own DeepSeek-V3.1 parsers, in one process.

Both run through vLLM's per-request streaming path (`ChatStreamProcessor.step`, which calls the
parser vLLM composes from `--tool-call-parser` and `--reasoning-parser`), fed token ids and their
text in chunks of about 4 characters, as the engine hands them over:

* the 100 KB brace-heavy `write_file` call of `tools/bench_stream.py` (and its 10 KB version, to
  show whether time grows linearly: the 100 KB / 10 KB ratio is ~10 when it does);
* a typical agent turn: 2 KB of reasoning, a short answer, two tool calls.

vLLM's parsers: `deepseek_v31` tools, `deepseek_v3` reasoning. Printed: CPU time of the stepping
loop for each parser (best of --repeat runs; vLLM's own parser once on the 100 KB call), the
ratio, and whether the plugin streams 100 KB in under 1 s. Each parser's result is checked
against the call that was written.

The tokenizer is built offline from the DeepSeek-V3.1 chat template in the template corpus
(byte-level vocabulary, DeepSeek's markers as special tokens); no weights are needed.

Usage (in the environment `tools/install_vllm.sh` makes):
    .venv-vllm/bin/python tools/bench_vllm.py [--repeat N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

CHUNK = 4
TEMPLATE = "deepseek-ai-DeepSeek-V3.1.jinja"
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
MARKERS = ["<think>", "</think>", CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP,
           "<｜User｜>", "<｜Assistant｜>"]
TOOLS = [
    {"type": "function", "function": {"name": "write_file", "description": "Write a file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"]}}},
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a place.",
     "parameters": {"type": "object", "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["location"]}}},
]


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def served_tokenizer(folder: Path) -> Any:
    from engine_tokenizer import write_tokenizer
    from vllm.tokenizers import get_tokenizer

    fetcher = _load(ROOT / "tools" / "fetch_corpus.py", "_fetch_corpus")
    fetcher.fetch()
    template = (fetcher.templates_dir() / TEMPLATE).read_text(encoding="utf-8")
    write_tokenizer(folder, template, BOS, EOS, specials=MARKERS)
    return get_tokenizer(str(folder))


def agent_turn() -> tuple[str, list[tuple[str, str]]]:
    reasoning = ("The user wants the forecast and a saved note. I check the city first, then the days, "
                 "and write the file once the weather is known. ") * 16
    calls = [("get_weather", json.dumps({"location": "Paris, France", "days": 3})),
             ("write_file", json.dumps({"path": "notes/paris.md", "content": "# Paris\n{\"sunny\": true}\n"}))]
    text = (reasoning[:2048] + "</think>" + "I will look up the weather and save a note." + CALLS_BEGIN
            + "".join(f"{CALL_BEGIN}{name}{SEP}{args}{CALL_END}" for name, args in calls) + CALLS_END)
    return text, calls


def chunks_of(tokenizer: Any, text: str) -> list[tuple[str, list[int]]]:
    """Token ids in groups of about CHUNK characters, each with its text (decoded on its own)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    out: list[tuple[str, list[int]]] = []
    start = 0
    while start < len(ids):
        end = min(len(ids), start + CHUNK)
        piece = tokenizer.decode(ids[start:end], skip_special_tokens=False)
        while piece.endswith("\ufffd") and end < len(ids):
            end += 1
            piece = tokenizer.decode(ids[start:end], skip_special_tokens=False)
        out.append((piece, ids[start:end]))
        start = end
    return out


def floor_parser_cls(ParserManager: Any) -> Any:
    """vLLM's path with a tool parser that only wraps each chunk in a delta: the cost of the
    path itself, which no parser can go below."""
    from vllm.entrypoints.generate.base.protocol import DeltaMessage
    from vllm.tool_parsers import ToolParser, ToolParserManager

    class WrapEachChunk(ToolParser):
        engine_based_streaming = True
        supports_required_and_named = False

        def extract_tool_calls_streaming(self, previous_text, current_text, delta_text, *rest):  # type: ignore[no-untyped-def]
            return DeltaMessage(tool_calls=[{"index": 0, "function": {"arguments": delta_text}}])

    ToolParserManager.register_module("bench_floor", module=WrapEachChunk)
    return ParserManager.get_parser(tool_parser_name="bench_floor", enable_auto_tools=True)


def run_stream(parser_cls: Any, tokenizer: Any, request: Any, kwargs: dict, prompt_ids: list[int],
               chunks: list[tuple[str, list[int]]]) -> tuple[float, list[tuple[str, str]], str]:
    """CPU seconds of vLLM's per-chunk step over `chunks`, the calls and the reasoning it gave."""
    from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor

    parser = parser_cls(tokenizer, request.tools, chat_template_kwargs=kwargs, model_config=None)
    processor = ChatStreamProcessor(request, parser, enable_auto_tools=True, parser_cls=parser_cls)
    names: dict[int, str] = {}
    arguments: dict[int, list[str]] = {}
    reasoning: list[str] = []
    last = len(chunks) - 1
    # each delta is read and dropped at once, as a server serializes and drops it: keeping tens of
    # thousands of delta objects alive would make Python's garbage collector cost grow with them
    start = time.process_time()
    for number, (text, ids) in enumerate(chunks):
        delta = processor.step(text, ids, "stop" if number == last else None, prompt_ids).delta
        if delta is None:
            continue
        if delta.reasoning:
            reasoning.append(delta.reasoning)
        for call in delta.tool_calls or []:
            parts = arguments.setdefault(call.index, [])
            if call.function and call.function.name:
                names[call.index] = call.function.name
            if call.function and call.function.arguments:
                parts.append(call.function.arguments)
    elapsed = time.process_time() - start
    calls = [(names.get(i, ""), "".join(arguments[i])) for i in sorted(arguments)]
    return elapsed, calls, "".join(reasoning)


def same_calls(got: list[tuple[str, str]], expected: list[tuple[str, str]]) -> bool:
    try:
        return [(n, json.loads(a)) for n, a in got] == [(n, json.loads(a)) for n, a in expected]
    except ValueError:
        return False


def main() -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--repeat", type=int, default=3, help="best of N runs (vLLM's parser on 100 KB: once)")
    options.add_argument("--verbose", action="store_true", help="show what a wrong result was")
    options.add_argument("--quick", action="store_true", help="skip vLLM's own parser on the 100 KB call")
    args = options.parse_args()

    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser import ParserManager

    import autoparser.plugins.vllm as plugin

    bench_stream = _load(ROOT / "tools" / "bench_stream.py", "_bench_stream")
    plugin.register()
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = served_tokenizer(Path(folder))
        parsers = {
            "vllm deepseek_v31": ParserManager.get_parser(tool_parser_name="deepseek_v31",
                                                          reasoning_parser_name="deepseek_v3",
                                                          enable_auto_tools=True, tokenizer=tokenizer),
            "autoparser": ParserManager.get_parser(tool_parser_name="autoparser", reasoning_parser_name="autoparser",
                                                   enable_auto_tools=True, tokenizer=tokenizer),
        }
        floor = floor_parser_cls(ParserManager)
        workloads = []
        for size in (10_000, 100_000):
            text, arguments = bench_stream.model_output(bench_stream.brace_heavy_code(size))
            workloads.append((f"call {size // 1000} KB", text.removesuffix(EOS), {"thinking": False},
                              [("write_file", arguments)]))
        turn, turn_calls = agent_turn()
        workloads.append(("agent turn", turn, {"thinking": True}, turn_calls))

        times: dict[tuple[str, str], float] = {}
        failures = 0
        for label, text, kwargs, expected in workloads:
            messages = [{"role": "user", "content": "Save the weather in Paris to a note."}]
            prompt_ids = tokenizer.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True,
                                                       tokenize=True, **kwargs)
            if not isinstance(prompt_ids, list):
                prompt_ids = list(prompt_ids["input_ids"])
            chunks = chunks_of(tokenizer, text)
            for name, parser_cls in parsers.items():
                request = ChatCompletionRequest(model="m", messages=messages, tools=TOOLS, stream=True,
                                                chat_template_kwargs=kwargs)
                adjust = parser_cls(tokenizer, request.tools, model_config=None, chat_template_kwargs=kwargs)
                adjust.set_prompt_token_ids(prompt_ids)
                request = adjust.adjust_request(request=request)
                if args.quick and name != "autoparser" and label == "call 100 KB":
                    times[(label, name)] = float("nan")
                    continue
                runs = 1 if (name != "autoparser" and label == "call 100 KB") else args.repeat
                results = [run_stream(parser_cls, tokenizer, request, kwargs, prompt_ids, chunks) for _ in range(runs)]
                elapsed, calls, reasoning = min(results, key=lambda r: r[0])
                times[(label, name)] = elapsed
                if name == "autoparser" and label.startswith("call"):
                    times[(label, "floor")] = min(
                        run_stream(floor, tokenizer, request, kwargs, prompt_ids, chunks)[0] for _ in range(runs))
                ok = same_calls(calls, expected) and (label != "agent turn" or reasoning.strip() == text[:2048].strip())
                failures += name == "autoparser" and not ok
                print(f"{label:12} {name:18} {elapsed * 1000:10.1f} ms  {len(chunks)} chunks  "
                      f"{'ok' if ok else 'WRONG RESULT'}")
                if not ok and args.verbose:
                    print(f"  calls: {[(n, a[:80]) for n, a in calls]}\n  reasoning: {reasoning[:80]!r}")
        print()
        for label in ("call 100 KB", "agent turn"):
            own, ours = times[(label, "vllm deepseek_v31")], times[(label, "autoparser")]
            if own == own:  # not skipped by --quick
                print(f"{label}: vLLM's parser / autoparser = {own / ours:.1f}x")
        ours_small, ours_large = times[("call 10 KB", "autoparser")], times[("call 100 KB", "autoparser")]
        ratio = ours_large / ours_small
        print(f"autoparser 100 KB / 10 KB: {ratio:.1f} (linear ~10; goal <= 15: {'ok' if ratio <= 15 else 'MISSED'})")
        floor_small, floor_large = times[("call 10 KB", "floor")], times[("call 100 KB", "floor")]
        print(f"vLLM's path alone (a parser that only wraps each chunk): 10 KB {floor_small * 1000:.1f} ms, "
              f"100 KB {floor_large * 1000:.1f} ms; autoparser adds {(ours_large - floor_large) * 1000:.1f} ms "
              f"on 100 KB")
        print(f"autoparser 100 KB under 1 s: {'ok' if ours_large < 1 else 'MISSED'} ({ours_large:.3f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
