"""`python -m autoparser.server --model M.gguf ...`: the same as `autoparser serve`."""

import argparse
import sys

from autoparser.server import add_serve_arguments, run_server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autoparser serve",
                                     description="Serve a GGUF model with an OpenAI-compatible API.")
    add_serve_arguments(parser)
    return run_server(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
