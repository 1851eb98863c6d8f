"""Cutting very long runs of characters before llama.cpp tokenizes them.

For some vocabularies llama.cpp's pre-tokenizer falls back to ``std::regex``, which recurses
once per character of a match. A single word of tens of thousands of letters (``"x" * 27000``)
then overflows the stack and kills the whole process, whatever thread runs it.

:func:`tokenizer_pieces` cuts every run of non-space characters, and every run of spaces,
longer than :data:`MAX_RUN` characters into pieces of at most that length; the engine tokenizes
the pieces one by one. A pre-tokenizer match never spans a space/non-space boundary in a way
that makes it longer than the run it sits in (plus one leading space), so this bounds the depth
of every match. Text without such runs is one piece: its tokens are exactly llama.cpp's. A
long run gets the tokens of its pieces, which can differ from one-piece tokens at the cuts.
Cuts never fall inside the text of a special token, so ``parse_special`` still finds them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: The longest run of spaces or of non-spaces given to llama.cpp in one piece. The crash needs
#: runs about ten times longer; an ordinary word, URL or base64 line is far shorter.
MAX_RUN = 2048


def long_run_pattern(max_run: int = MAX_RUN) -> re.Pattern[str]:
    """Runs longer than ``max_run``; matching starts only where a run starts, so it is linear."""
    return re.compile(rf"(?<!\S)\S{{{max_run + 1},}}|(?<!\s)\s{{{max_run + 1},}}")


_LONG_RUN = long_run_pattern()


def tokenizer_pieces(text: str, specials: Iterable[str] = (), max_run: int = MAX_RUN) -> list[str]:
    """``text`` as consecutive pieces, none holding a run longer than ``max_run`` characters."""
    if len(text) <= max_run:
        return [text]
    pattern = _LONG_RUN if max_run == MAX_RUN else long_run_pattern(max_run)
    cuts: list[int] = []
    special_list = sorted({s for s in specials if s}, key=len, reverse=True)
    for run in pattern.finditer(text):
        cuts.extend(_cuts_in_run(text, run.start(), run.end(), max_run, special_list))
    if not cuts:
        return [text]
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def _cuts_in_run(text: str, start: int, end: int, max_run: int, specials: list[str]) -> list[int]:
    cuts: list[int] = []
    last = start
    while end - last > max_run:
        cut = _outside_specials(text, last + max_run, last, specials)
        cuts.append(cut)
        last = cut
    return cuts


def _outside_specials(text: str, cut: int, floor: int, specials: list[str]) -> int:
    """``cut``, moved back to the start of any special-token text it would split (never to ``floor``)."""
    for special in specials:
        width = len(special)
        window_start = max(floor, cut - width + 1)
        found = text.find(special, window_start, cut + width - 1)
        while found != -1 and found < cut:
            if found + width > cut:
                return found if found > floor else found + width
            found = text.find(special, found + 1, cut + width - 1)
    return cut
