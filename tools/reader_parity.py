"""Parity of the streaming reader of the output language with the runtime, over the round-trip
cases of both corpora (CONTRACT section 6): how many applicable cases each reads back, how many
messages are the same, and where they differ, grouped by how.

    python tools/reader_parity.py [--verbose] [--lenient] [--generation]

The reader reads the request's full language as the parser reads it (`Request(reading=True)`, not
lazy; `--generation`: the language generation writes). With `--lenient` each
output with tool calls is also changed the ways a model strays from the language (text after
the calls, a call to a tool that was not offered, the output cut off at half and at 80%), and
the reader is compared with the runtime on those, whole and streamed one character at a time.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import autoparser  # noqa: E402
from autoparser.language.build import Request, build_language  # noqa: E402
from autoparser.language.interpret import LanguageReader  # noqa: E402
from autoparser.roundtrip import TOOLS, compare, template_results  # noqa: E402

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"


def exact(message: dict) -> dict:
    """The message as a client sees it: texts as they are, argument text, and ids where the
    format writes them (a drawn `call_` id differs on every parse)."""
    calls = [(c["function"]["name"], c["function"]["arguments"],
              None if c.get("id", "").startswith("call_") else c.get("id"), bool(c.get("incomplete")))
             for c in message.get("tool_calls") or []]
    return {"reasoning_content": message.get("reasoning_content"), "content": message.get("content"),
            "tool_calls": calls}


def comparable(message: dict) -> dict:
    calls = []
    for call in message.get("tool_calls") or []:
        try:
            arguments = json.loads(call["function"]["arguments"])
        except ValueError:
            arguments = call["function"]["arguments"]
        calls.append((call["function"]["name"], arguments))
    return {"reasoning_content": (message.get("reasoning_content") or "").strip() or None,
            "content": (message.get("content") or "").strip() or None, "tool_calls": calls}


READING = True  # read by the language the parser reads (`Request(reading=True)`); off: the generation one


def reader_for(analysis: autoparser.Analysis, thinking: bool | None) -> LanguageReader:
    request = Request(tools=tuple(TOOLS), thinking=thinking, lazy=False, reading=READING,
                      end_tokens=(analysis.eos_token,) if analysis.eos_token else ())
    return LanguageReader(build_language(analysis.to_dict(), request), end_of_turn=tuple(analysis.stop))


def read(analysis: autoparser.Analysis, output: str, thinking: bool | None) -> dict:
    return reader_for(analysis, thinking).parse(output)


def strays(output: str, names: list[str]) -> dict[str, str]:
    """The output changed the ways a model strays from its language."""
    found = {"text after the calls": output + "\nThat is all.", "cut at 1/2": output[:len(output) // 2],
             "cut at 4/5": output[:len(output) * 4 // 5]}
    if names and names[0] in output:
        found["unknown tool"] = output.replace(names[0], "unknown_tool", 1)
    return found


def streamed(analysis: autoparser.Analysis, output: str, thinking: bool | None) -> dict:
    stream = reader_for(analysis, thinking).stream()
    for char in output:
        stream.feed(char)
    stream.finish()
    return stream.message()


def lenient(paths: list[Path], verbose: bool) -> None:
    """Reader and runtime on outputs that stray from the language."""
    total = same = stream_same = 0
    differences: dict[str, list[str]] = collections.defaultdict(list)
    for path, analysis, result in template_results(paths, BOS, EOS):
        if result.status not in ("pass", "fail") or not (result.expected or {}).get("tool_calls"):
            continue
        names = [c["name"] for c in result.expected["tool_calls"]]
        for kind, output in strays(result.output, names).items():
            total += 1
            runtime = comparable(analysis.parser(tools=TOOLS, thinking=result.thinking).parse(output))
            try:
                got = comparable(read(analysis, output, result.thinking))
                stream_same += comparable(streamed(analysis, output, result.thinking)) == got
            except Exception as exc:  # noqa: BLE001 - a crash is a difference to report
                differences[f"{kind}: reader raised {type(exc).__name__}"].append(path.name)
                continue
            if got == runtime:
                same += 1
                continue
            differences[f"{kind}: {how(runtime, got)}"].append(path.name)
            if verbose:
                print(f"  {path.name}:{result.case} {kind}\n    output  {output!r}\n    runtime {runtime}\n"
                      f"    reader  {got}")
    print(f"  strayed outputs: {total}; same message as the runtime {same}; reader streamed == whole {stream_same}")
    for cause, cases in sorted(differences.items(), key=lambda kv: -len(kv[1])):
        print(f"    {cause} ({len(cases)}): {', '.join(sorted(set(cases))[:8])}")


def how(runtime: dict, reader: dict) -> str:
    """A short name for how two messages differ."""
    parts = [key for key in ("reasoning_content", "content", "tool_calls") if runtime[key] != reader[key]]
    return " and ".join(parts) + " differ"


def main() -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--verbose", action="store_true", help="print every differing case")
    options.add_argument("--lenient", action="store_true", help="also outputs that stray from the language")
    options.add_argument("--generation", action="store_true",
                         help="read by the language generation writes, not the one the parser reads")
    args = options.parse_args()
    global READING
    READING = not args.generation
    from corpora import _quietly, llamacpp_templates, shared_templates

    for label, paths in (("llama.cpp", _quietly(llamacpp_templates)), ("shared", _quietly(shared_templates))):
        applicable = runtime_pass = reader_pass = same = same_exactly = 0
        inexact: dict[str, list[str]] = collections.defaultdict(list)
        differences: dict[str, list[str]] = collections.defaultdict(list)
        for path, analysis, result in template_results(paths, BOS, EOS):
            if result.status not in ("pass", "fail"):
                continue
            applicable += 1
            runtime_pass += result.status == "pass"
            try:
                got = read(analysis, result.output, result.thinking)
            except Exception as exc:  # noqa: BLE001 - a crash is a difference to report
                differences[f"reader raised {type(exc).__name__}"].append(f"{path.name}:{result.case}")
                continue
            reader_pass += not compare(result.expected, got)
            runtime_exact, reader_exact = exact(result.got or {}), exact(got)
            if runtime_exact == reader_exact:
                same_exactly += 1
            else:
                cause = " and ".join(k for k in runtime_exact if runtime_exact[k] != reader_exact[k])
                inexact[f"{cause} differ"].append(f"{path.name}:{result.case}")
                if args.verbose:
                    print(f"  exactly {path.name}:{result.case}\n    runtime {runtime_exact}\n"
                          f"    reader  {reader_exact}")
            if comparable(got) == comparable(result.got or {}):
                same += 1
                continue
            cause = how(comparable(result.got or {}), comparable(got))
            differences[cause].append(f"{path.name}:{result.case}")
            if args.verbose:
                print(f"  {path.name}:{result.case}: {cause}\n    output  {result.output!r}\n"
                      f"    runtime {comparable(result.got or {})}\n    reader  {comparable(got)}")
        print(f"{label}: {applicable} applicable cases; runtime reads back {runtime_pass}, reader {reader_pass}; "
              f"same message {same}/{applicable}, exactly (texts untrimmed, format ids) {same_exactly}/{applicable}")
        for cause, cases in sorted(differences.items(), key=lambda kv: -len(kv[1])):
            print(f"    {cause} ({len(cases)}): {', '.join(sorted({c.split(':')[0] for c in cases}))}")
        for cause, cases in sorted(inexact.items(), key=lambda kv: -len(kv[1])):
            print(f"    exactly: {cause} ({len(cases)}): {', '.join(sorted({c.split(':')[0] for c in cases}))}")
        if args.lenient:
            lenient(paths, args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
