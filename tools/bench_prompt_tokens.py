#!/usr/bin/env python3
"""A 40-turn conversation's prompt tokenize time per turn, whole and from the longest beginning
tokenized before (`PrefixTokenizer`), on the tiny model (``--vocab-size`` regular tokens).

Each turn's prompt is rendered by `ChatService.prepare` first; then the 40 prompts are tokenized
in turn by `tokenize_prompt`, once whole and once with a fresh `PrefixTokenizer`, and the ids
are checked to be the same. Usage::

    python tools/bench_prompt_tokens.py [--turns 40] [--vocab-size 100000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import tiny_model  # noqa: E402

N_CTX = 65536


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--vocab-size", type=int, default=100000)
    args = parser.parse_args(argv)

    import autoparser
    from autoparser.llama.engine import Engine
    from autoparser.server.prefix_tokens import PrefixTokenizer
    from autoparser.server.protocol import parse_request
    from autoparser.server.service import ChatService, ServerSettings
    from autoparser.server.validation import tokenize_prompt

    engine = Engine(str(tiny_model(Path(tempfile.gettempdir()), vocab_size=args.vocab_size)), n_ctx=N_CTX, n_threads=1)
    analysis = autoparser.analyze(engine.chat_template or "", bos_token=engine.bos_token, eos_token=engine.eos_token)
    service = ChatService(analysis, engine, ServerSettings(model_name="bench"))
    messages = [{"role": "system", "content": "You are a helpful assistant. " * 20}]
    prompts = []
    for turn in range(args.turns):
        messages.append({"role": "user", "content": f"Question {turn}: the weather in city number {turn}? " * 3})
        prompts.append(service.prepare(parse_request({"messages": messages, "max_tokens": 4})).prompt)
        messages.append({"role": "assistant", "content": f"In city {turn} it is sunny, {turn} degrees. " * 25})

    def per_turn(whole: PrefixTokenizer | None) -> tuple[list[float], list[list[int]]]:
        times, ids = [], []
        for prompt in prompts:
            start = time.perf_counter()
            ids.append(tokenize_prompt(engine, prompt, set(), service.special_tokens, limit=N_CTX, whole=whole))
            times.append((time.perf_counter() - start) * 1000)
        return times, ids

    whole_ms, whole_ids = per_turn(None)
    tokenizer = PrefixTokenizer(lambda text: engine.tokenize(text, parse_special=True), service.special_token_ids)
    prefix_ms, prefix_ids = per_turn(tokenizer)
    assert prefix_ids == whole_ids, "the ids differ"
    print(f"{args.turns} turns, the last {len(whole_ids[-1])} tokens ({len(prompts[-1])} characters)")
    print(f" whole:  {statistics.mean(whole_ms):6.2f} ms a turn, the last {whole_ms[-1]:6.2f} ms")
    print(f" prefix: {statistics.mean(prefix_ms):6.2f} ms a turn, the last {prefix_ms[-1]:6.2f} ms "
          f"(kept: {tokenizer.prefixes.bytes / 1e6:.1f} MB)")
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
