"""Very long runs of one kind of character must not crash llama.cpp's tokenizer.

With the DeepSeek vocabulary llama.cpp's pre-tokenizer matches words with ``std::regex``, which
recurses once per character: ``"x" * 27000`` overflows the stack and kills the process. The
engine tokenizes such runs in pieces (``autoparser.llama.long_runs``). Checked here: ordinary
text gets exactly llama.cpp's tokens, and long runs of every kind tokenize (in a child process,
so that a regression is a failed test rather than a dead test run) and decode back to the text.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from autoparser.llama.long_runs import MAX_RUN, tokenizer_pieces

pytest_plugins = ["tiny_model"]

REPO = Path(__file__).resolve().parents[2]
SPECIAL = "<｜tool▁calls▁begin｜>"


def longest_run(text: str) -> int:
    return max((len(m.group()) for m in re.finditer(r"\S+|\s+", text)), default=0)


# -- the cutting, without llama.cpp ----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.tuples(st.sampled_from(["x", " ", "7", "語", "!", SPECIAL, "\n"]),
                                st.integers(min_value=1, max_value=40)), max_size=12),
       max_run=st.integers(min_value=25, max_value=60))
def test_pieces_rebuild_the_text_and_bound_every_run(parts: list[tuple[str, int]], max_run: int) -> None:
    text = "".join(unit * count for unit, count in parts)
    pieces = tokenizer_pieces(text, [SPECIAL], max_run=max_run)
    assert "".join(pieces) == text
    for piece in pieces:
        assert longest_run(piece) <= max_run + len(SPECIAL)
    # a special token is never split: each occurrence lies inside one piece
    offsets, position = [], 0
    for piece in pieces:
        offsets.append((position, position + len(piece)))
        position += len(piece)
    for found in re.finditer(re.escape(SPECIAL), text):
        assert any(a <= found.start() and found.end() <= b for a, b in offsets)


def test_text_without_long_runs_is_one_piece() -> None:
    text = ("word " * 2000) + "y" * MAX_RUN
    assert tokenizer_pieces(text) == [text]


def test_a_long_run_is_cut_at_the_limit() -> None:
    pieces = tokenizer_pieces("a " + "x" * 27000 + " b")
    assert "".join(pieces) == "a " + "x" * 27000 + " b"
    assert max(len(p) for p in pieces) <= MAX_RUN + 2


# -- with llama.cpp and the DeepSeek vocabulary ----------------------------------------------------


ORDINARY = [
    "Hello, world! How are you today?",
    "<｜User｜>What is the weather in Paris?<｜Assistant｜></think>",
    "def f(x):\n    return x ** 2  # square\n\n\n",
    "數學 and 中文 text, 12345 numbers, emoji 🙂🙂 and tabs\t\tend",
    "https://example.com/" + "a1b2c3" * 300,  # a long URL, still under the limit
    " " * 500 + "indented" + "\n" * 300,
]


def test_ordinary_text_gets_llama_cpps_own_tokens(tiny_engine) -> None:  # type: ignore[no-untyped-def]
    from tiny_model import v31_template

    texts = [*ORDINARY, v31_template() or ""]
    for text in texts:
        for special in (True, False):
            assert tiny_engine.tokenize(text, parse_special=special) == \
                tiny_engine._tokenize_piece(text, special, False)


def test_long_run_tokens_are_the_pieces_tokens(tiny_engine) -> None:  # type: ignore[no-untyped-def]
    text = "start " + "ab" * 3000 + SPECIAL + "cd" * 2000 + " end"
    tokens = tiny_engine.tokenize(text, parse_special=True)
    expected = [t for piece in tokenizer_pieces(text, tiny_engine.special_tokens)
                for t in tiny_engine._tokenize_piece(piece, True, False)]
    assert tokens == expected
    assert tiny_engine.token_id(SPECIAL) in tokens
    assert tiny_engine.detokenize(tokens) == text


CHILD = textwrap.dedent("""
    import json, sys
    from autoparser.llama.engine import Engine
    engine = Engine(sys.argv[1], n_ctx=64)
    out = {}
    for name, text in json.loads(sys.stdin.read()).items():
        tokens = engine.tokenize(text, parse_special=True)
        out[name] = [len(tokens), engine.detokenize(tokens) == text]
    print(json.dumps(out))
""")

LONG = {
    "letters": "x" * 27000,
    "letters in a message": "<｜User｜>" + "x" * 27000 + "<｜Assistant｜>",
    "mixed letters": "abcdefghij" * 6000,
    "digits": "7" * 40000,
    "punctuation": "!" * 40000,
    "spaces": " " * 40000,
    "newlines": "\n" * 40000,
    "cjk": "語" * 30000,
}


def test_long_runs_tokenize_without_crashing(tiny_model_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", CHILD, str(tiny_model_path)], input=json.dumps(LONG),
                            capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, f"the tokenizer died ({result.returncode}): {result.stderr[-2000:]}"
    out = json.loads(result.stdout.splitlines()[-1])
    assert set(out) == set(LONG)
    for name, (count, round_trip) in out.items():
        assert count > 0 and round_trip, name
