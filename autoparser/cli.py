"""`autoparser` command line: analyze, generate, parse, serve.

Bad input (a missing file, a template that does not compile or raises, a sandbox violation)
prints one line to stderr and exits with 2; no traceback reaches the user.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from autoparser.analysis import Analysis

EXIT_BAD_INPUT = 2
EXIT_BROKEN_PIPE = 141
"""What a shell reports for a command that SIGPIPE ended (128 + 13)."""


class CliError(Exception):
    """An error the user can fix; printed as one line."""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        code = int(args.handler(args) or 0)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return code
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as other tools do
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except CliError as exc:
        print(f"autoparser: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except (RecursionError, MemoryError) as exc:  # input shaped to exhaust the process
        print(f"autoparser: the input is too large or too deeply nested ({type(exc).__name__})", file=sys.stderr)
        return EXIT_BAD_INPUT


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file descriptor: nothing left to flush
        pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autoparser", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command")

    analyze = commands.add_parser("analyze", help="infer the output format of a chat template")
    _template_arguments(analyze)
    shown = analyze.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the analysis as JSON")
    shown.add_argument("--gbnf", action="store_true", help="print the GBNF grammar of the output")
    shown.add_argument("--lark", action="store_true", help="print the Lark grammar of the output")
    analyze.add_argument("--tools", help="a JSON file with OpenAI tool definitions")
    analyze.add_argument("--tool-choice", default="auto", help="auto, required, none or a tool name (--gbnf)")
    analyze.set_defaults(handler=run_analyze)

    generate = commands.add_parser("generate", help="write a standalone parser module")
    _template_arguments(generate)
    generate.add_argument("-o", "--output", required=True, help="where to write the module")
    generate.set_defaults(handler=run_generate)

    parse = commands.add_parser("parse", help="parse model output from stdin into an assistant message")
    _template_arguments(parse)
    parse.add_argument("--tools", help="a JSON file with OpenAI tool definitions")
    parse.add_argument("--stream", action="store_true", help="print the streaming deltas, one per line")
    parse.add_argument("--tool-call-policy", choices=("lenient", "strict"), default="lenient")
    parse.set_defaults(handler=run_parse)

    serve = commands.add_parser("serve", help="serve a GGUF model with an OpenAI-compatible API")
    try:
        from autoparser.server import add_serve_arguments
    except ImportError:
        serve.add_argument("rest", nargs=argparse.REMAINDER)
    else:
        add_serve_arguments(serve)
    serve.set_defaults(handler=run_serve)
    return parser


def _template_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("template", nargs="?", help=".jinja, tokenizer_config.json, model folder or .gguf")
    parser.add_argument("--hf", help="a Hugging Face model id resolved through the local cache")
    parser.add_argument("--bos-token", help="override the beginning-of-sequence token text")
    parser.add_argument("--eos-token", help="override the end-of-sequence token text")
    parser.add_argument("--thinking", choices=("on", "off"), help="force the thinking switch")


# -- loading ------------------------------------------------------------------------------------------

def load_analysis(args: argparse.Namespace, tools: bool = False) -> Analysis:
    from autoparser.isolation import analyze_isolated
    from autoparser.load import LoadError, load_template
    from autoparser.render import TemplateRenderError

    if not args.template and not args.hf:
        raise CliError("give a TEMPLATE (.jinja, tokenizer_config.json, model folder or .gguf) or --hf ORG/MODEL")
    try:
        source = load_template(args.template, hf=args.hf, tools=tools)
    except LoadError as exc:
        raise CliError(str(exc)) from None
    bos = args.bos_token if args.bos_token is not None else source.bos_token
    eos = args.eos_token if args.eos_token is not None else source.eos_token
    try:
        return analyze_isolated(source.source, bos_token=bos or "", eos_token=eos or "")
    except TemplateRenderError as exc:
        raise CliError(str(exc)) from None


def read_tools(path: str | None) -> list[dict[str, Any]] | None:
    """The tools file's OpenAI tool definitions, checked as the server checks a request's."""
    if not path:
        return None
    from autoparser.generators.schema_budget import SchemaError
    from autoparser.load import LoadError, parse_json_text, read_bounded_text
    from autoparser.server.validation import InvalidInput, check_json_value, check_tools

    try:
        data = parse_json_text(read_bounded_text(path, limit=MAX_TOOLS_FILE_BYTES), f"tools file {path}")
    except LoadError as exc:
        raise CliError(str(exc)) from None
    except ValueError as exc:  # integers beyond Python's digit limit
        raise CliError(f"tools file {path} is not usable JSON: {exc}") from None
    if isinstance(data, dict) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list) or not all(isinstance(t, dict) for t in data):
        raise CliError(f"tools file {path} must hold a JSON list of tool definitions")
    try:
        check_json_value(data, ("tools",))
        check_tools(data)
    except (InvalidInput, SchemaError) as exc:
        raise CliError(f"tools file {path}: {exc}") from None
    return data


MAX_TOOLS_FILE_BYTES = 16 << 20


def _thinking(args: argparse.Namespace) -> bool | None:
    return None if args.thinking is None else args.thinking == "on"


def _tool_choice(value: str) -> Any:
    if value in ("auto", "required", "none"):
        return value
    return {"type": "function", "function": {"name": value}}


# -- commands -----------------------------------------------------------------------------------------

def run_analyze(args: argparse.Namespace) -> int:
    tools = read_tools(args.tools)
    analysis = load_analysis(args, tools=bool(tools))
    if args.json:
        print(analysis.to_json(indent=2))
    elif args.gbnf:
        print(_grammar(lambda: analysis.gbnf(tools=tools, tool_choice=_tool_choice(args.tool_choice),
                                             thinking=_thinking(args))))
    elif args.lark:
        print(_grammar(lambda: analysis.lark(tools=tools, thinking=_thinking(args))))
    else:
        from autoparser.summary import print_summary

        print_summary(analysis, name=args.template or args.hf)
    return 0


def _grammar(build: Any) -> str:
    """A grammar's text; a tool choice or schema the grammar cannot serve is the user's error."""
    try:
        return build()
    except ValueError as exc:
        raise CliError(f"cannot build the grammar: {' '.join(str(exc).split())}") from None


def run_generate(args: argparse.Namespace) -> int:
    from autoparser.generators.module import generate_module

    analysis = load_analysis(args)
    text = generate_module(analysis)
    try:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise CliError(f"cannot write {args.output}: {exc.strerror}") from None
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def run_parse(args: argparse.Namespace) -> int:
    tools = read_tools(args.tools)
    analysis = load_analysis(args, tools=bool(tools))
    parser = analysis.parser(tools=tools, thinking=_thinking(args), tool_call_policy=args.tool_call_policy)
    text = sys.stdin.read()
    if not args.stream:
        print(json.dumps(parser.parse(text), ensure_ascii=False, indent=2))
        return 0
    stream = parser.stream()
    for chunk in _chunks(text):
        for delta in stream.feed(chunk):
            print(json.dumps(delta, ensure_ascii=False))
    for delta in stream.finish():
        print(json.dumps(delta, ensure_ascii=False))
    return 0


def _chunks(text: str, size: int = 8) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def run_serve(args: argparse.Namespace) -> int:
    try:
        from autoparser.server import run_server
    except ImportError as exc:
        raise CliError(f"the server needs the 'server' extra (pip install 'autoparser[server]'): {exc}") from None
    return run_server(args)


if __name__ == "__main__":
    sys.exit(main())
