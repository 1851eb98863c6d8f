#!/usr/bin/env python3
"""What a decode step costs for 1, 2, 4 and 8 sequences, without the server.

1. ``llama_decode`` alone: each sequence gets a ``--prompt``-token prompt, then ``--steps``
   steps of one new token per sequence (logits for each), repeated ``--reps`` times; printed is
   the CPU time per step and per token. ``--flash-attn``, ``--type-k``/``--type-v`` (ggml type
   numbers: 1 = F16, 0 = F32, 30 = BF16) and ``--idle-tokens`` (tokens cached in 8 sequences
   outside the batch) set up the context. ``--chains`` times it a second time with the engine's
   device chain for the server's default sampling attached to each sequence of the batch, as the engine
   attaches them: that row less the first is what sampling inside ``llama_decode`` costs (on a
   GPU, the part of a server step that neither the engine's host work nor the model makes).
2. ``Engine.step`` with the server's default sampling (whole vocabulary, temperature 1): the CPU
   per token of the whole step, of ``llama_decode`` inside it, and of the rest (sampling,
   bookkeeping), for 1 generation and for 4. ``--device-sampling on`` samples inside
   ``llama_decode`` on a CPU too (the default does so only with ``--n-gpu-layers``): "the rest"
   is then the host's work on a GPU, while ``llama_decode`` grows by the CPU's sampling passes.
   ``--decode-stand-in noop|sweep`` tells the step's own work from the cache misses a real
   decode leaves behind.

Without ``--model`` the tiny random-weight model is built (``--shape``, as in bench_load.py).
Everything runs on one thread, as ``bench_load.py --threads 1`` serves. CPU time is steadier
than wall time on a shared machine; compare variants back to back.

Usage::

    python tools/bench_decode.py [--model M.gguf | --shape tiny|aligned|medium [--vocab-size N]] [--sizes 1,2,4,8]
                                 [--flash-attn -1|0|1] [--n-gpu-layers N] [--device-sampling auto|on|off]
                                 [--generations 1,4] [--chains]
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import tiny_model  # noqa: E402
from make_tiny_model import SHAPES  # noqa: E402

IDLE_SEQUENCES = 8
DEVICE_SAMPLING = {"auto": None, "on": True, "off": False}
SWEPT_BYTES = 30_000_000  # more than the last-level cache, as a 100,000-token model's output layer
# the server's default sampling: the whole vocabulary at temperature 1 (the random pick only)
SERVER_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}


class Decoder:
    """One llama.cpp context driven through the low-level API, for timing ``llama_decode``."""

    def __init__(self, model_path: Path, args: argparse.Namespace, n_seq: int):
        import llama_cpp

        from autoparser.llama import _native

        _native.ensure_backend(False)
        self.llama = llama_cpp
        self.model = _native.load_model(str(model_path), n_gpu_layers=args.n_gpu_layers)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = args.n_ctx, 512, 512
        params.n_seq_max = n_seq + IDLE_SEQUENCES
        params.kv_unified = True
        params.n_threads = params.n_threads_batch = 1
        params.flash_attn_type = args.flash_attn
        params.type_k, params.type_v = args.type_k, args.type_v
        params.no_perf = True
        params.n_outputs_max_per_seq = 1  # as the engine's context
        self.ctx = llama_cpp.llama_init_from_model(self.model, params)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(512, 0, 1)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
        self.chains: list[object] = [None] * params.n_seq_max

    def decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        """Decode (token, position, sequence, wants logits) entries as one batch."""
        batch = self.batch
        for i, (token, pos, seq, logits) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, int(logits)
        batch.n_tokens = len(entries)
        if self.llama.llama_decode(self.ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def fill(self, seq: int, tokens: np.ndarray) -> None:
        for start in range(0, len(tokens), 256):
            chunk = tokens[start:start + 256]
            self.decode([(int(t), start + i, seq, start + i == len(tokens) - 1) for i, t in enumerate(chunk)])

    def attach_chains(self, n_seq: int) -> None:
        """Attach to each of the first ``n_seq`` sequences the chain the engine gives a request with
        the server's default sampling (the whole vocabulary at temperature 1: the random pick only),
        and none to the others (llama.cpp runs an attached chain at every step, row or no row)."""
        from autoparser.llama.device_sampling import build_chain, chain_key
        from autoparser.llama.sampling import SamplingParams

        key = chain_key(SamplingParams(**SERVER_SAMPLING), ())
        for seq, old in enumerate(self.chains):
            chain = build_chain(key, self.n_vocab, seq) if seq < n_seq else None
            if not self.llama.llama_set_sampler(self.ctx, seq, chain) and chain is not None:
                raise RuntimeError("this backend cannot run sampler chains inside llama_decode")
            self.chains[seq] = chain
            if old is not None:
                self.llama.llama_sampler_free(old)

    def close(self) -> None:
        self.attach_chains(0)
        self.llama.llama_batch_free(self.batch)
        self.llama.llama_free(self.ctx)
        self.llama.llama_model_free(self.model)


def decode_alone(model: Path, args: argparse.Namespace, chains: bool = False) -> None:
    rng = np.random.default_rng(0)
    decoder = Decoder(model, args, max(args.sizes))
    what = "llama_decode with chains" if chains else "llama_decode"
    try:
        for size in args.sizes:
            if chains:
                decoder.attach_chains(size)
            cpu = wall = 0.0
            for _ in range(args.reps):
                decoder.llama.llama_memory_clear(decoder.memory, True)
                for idle in range(args.idle_tokens and IDLE_SEQUENCES):
                    decoder.fill(max(args.sizes) + idle, rng.integers(0, decoder.n_vocab, args.idle_tokens))
                for seq in range(size):
                    decoder.fill(seq, rng.integers(0, decoder.n_vocab, args.prompt))
                steps = rng.integers(0, decoder.n_vocab, (args.steps, size))
                cpu0, wall0 = time.process_time(), time.perf_counter()
                for k in range(args.steps):
                    decoder.decode([(int(steps[k, s]), args.prompt + k, s, True) for s in range(size)])
                cpu += time.process_time() - cpu0
                wall += time.perf_counter() - wall0
            n = args.reps * args.steps
            print(f"{what}, {size} sequence(s): {1e6 * cpu / n:7.1f} us CPU a step "
                  f"({1e6 * cpu / n / size:6.1f} a token), wall {1e6 * wall / n:7.1f} us a step", flush=True)
    finally:
        decoder.close()


def engine_steps(model: Path, args: argparse.Namespace) -> None:
    import llama_cpp

    from autoparser.llama.engine import Engine, SamplingParams

    spent = [0.0]
    decode = llama_cpp.llama_decode
    last_size = [0]
    swept = np.zeros(SWEPT_BYTES // 8) if args.decode_stand_in == "sweep" else None

    def timed_decode(ctx: ctypes.c_void_p, batch: object) -> int:
        start = time.thread_time()
        try:
            # a stand-in only where the last real decode left outputs in the same rows
            if args.decode_stand_in != "none" and batch.n_tokens == last_size[0]:  # type: ignore[attr-defined]
                if swept is not None:
                    np.add(swept, 1.0, out=swept)
                return 0
            last_size[0] = batch.n_tokens  # type: ignore[attr-defined]
            return decode(ctx, batch)
        finally:
            spent[0] += time.thread_time() - start

    llama_cpp.llama_decode = timed_decode
    try:
        with Engine(str(model), n_ctx=args.n_ctx, n_threads=1, n_parallel=max(4, *args.generations),
                    n_gpu_layers=args.n_gpu_layers,
                    device_sampling=DEVICE_SAMPLING[args.device_sampling]) as engine:
            print(f"Engine: sampling {'inside llama_decode' if engine.device_sampling else 'on the host'}", flush=True)
            # the engine's one-time tables (tokens that would break UTF-8 after each kind of
            # unfinished character) are built on first use: not part of a token's cost. As many
            # generations as the first measurement steps: a free slot's device chain samples a
            # dummy row for a few steps more (engine.IDLE_CHAIN_STEPS)
            warm_up = [engine.new_generation(engine.tokenize(f"<｜User｜>Warm up {i}.<｜Assistant｜>"), 200,
                                             SamplingParams(seed=99 + i, **SERVER_SAMPLING), ignore_eos=True)
                       for i in range(args.generations[0])]
            while not all(g.finished for g in warm_up):
                engine.step(warm_up)
            for generation in warm_up:
                generation.close()
            engine.prepare_utf8_tables()
            for size in args.generations:
                total = in_decode = wall = 0.0
                tokens = steps = 0
                for rep in range(args.reps):
                    generations = [engine.new_generation(
                        engine.tokenize(f"<｜User｜>Request {rep * 10 + i}: say something about rain.<｜Assistant｜>"),
                        args.steps, SamplingParams(seed=rep * 10 + i, **SERVER_SAMPLING), ignore_eos=True)
                        for i in range(size)]
                    engine.step(generations)  # the prompts
                    spent[0] = 0.0
                    start, wall_start = time.thread_time(), time.perf_counter()
                    while not all(g.finished for g in generations):
                        tokens += sum(token is not None for token in engine.step(generations))
                        steps += 1
                    total += time.thread_time() - start
                    wall += time.perf_counter() - wall_start
                    in_decode += spent[0]
                    for generation in generations:
                        generation.close()
                print(f"Engine.step, {size} generation(s): {1e6 * total / tokens:6.1f} us CPU a token "
                      f"(llama_decode {1e6 * in_decode / tokens:6.1f}, the rest {1e6 * (total - in_decode) / tokens:6.1f}), "
                      f"wall {1e6 * wall / steps:7.1f} us a step",
                      flush=True)
    finally:
        llama_cpp.llama_decode = decode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="GGUF model (default: the tiny deepseek2 model)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny", help="shape of the tiny model")
    parser.add_argument("--vocab-size", type=int, help="regular tokens of the tiny model (default: the shape's)")
    parser.add_argument("--n-gpu-layers", type=int, default=0, help="layers offloaded to a GPU (-1: all; default 0)")
    parser.add_argument("--sizes", default="1,2,4,8", help="sequences per step for llama_decode alone")
    parser.add_argument("--prompt", type=int, default=30, help="prompt tokens per sequence (default 30)")
    parser.add_argument("--steps", type=int, default=96, help="steps after the prompt (default 96)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--n-ctx", type=int, default=8192, help="context (default 8192, as bench_load.py)")
    parser.add_argument("--flash-attn", type=int, default=-1, help="-1 auto (default), 0 off, 1 on")
    parser.add_argument("--type-k", type=int, default=1, help="ggml type of cached keys (default 1: F16)")
    parser.add_argument("--type-v", type=int, default=1, help="ggml type of cached values (default 1: F16)")
    parser.add_argument("--idle-tokens", type=int, default=0,
                        help=f"tokens cached in each of {IDLE_SEQUENCES} sequences outside the batch")
    parser.add_argument("--skip-engine", action="store_true", help="only llama_decode alone")
    parser.add_argument("--chains", action="store_true",
                        help="llama_decode alone again with a device sampler chain on every sequence")
    parser.add_argument("--generations", default="1,4",
                        help="generations stepped together by the engine (default 1,4; on a GPU compare each "
                             "step's wall time with llama_decode alone at as many sequences)")
    parser.add_argument("--device-sampling", choices=sorted(DEVICE_SAMPLING), default="auto",
                        help="the engine's sampling inside llama_decode (default auto: with a GPU)")
    parser.add_argument("--decode-stand-in", choices=("none", "noop", "sweep"), default="none",
                        help="in the engine's generation steps, replace llama_decode (after one real step) by "
                             "nothing or by a sweep over 30 MB of memory: the rest with warm or with "
                             "swept caches (the tokens then repeat the last real ones)")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.generations = [int(s) for s in args.generations.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(args.model) if args.model else tiny_model(Path(tmp), args.shape, args.vocab_size)
        print(f"model: {model.name}, prompt {args.prompt} tokens, {args.steps} steps, {args.reps} repetitions, "
              f"flash attention {args.flash_attn}, cache types {args.type_k}/{args.type_v}")
        decode_alone(model, args)
        if args.chains:
            decode_alone(model, args, chains=True)
        if not args.skip_engine:
            engine_steps(model, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
