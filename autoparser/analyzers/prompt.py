"""The generation prompt and the end-of-turn marker."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from autoparser.analyzers.diff import (
    char_common_prefix,
    common_suffix,
    is_marker,
    is_unit_marker,
    markers_in,
    segments,
    units,
)
from autoparser.analyzers.probes import CONTENT_TEXT, USER_TEXT, Prober


def generation_prompt(prober: Prober, **kwargs: Any) -> str | None:
    """What `add_generation_prompt=True` appends to the history."""
    with_prompt = prober.prompt(**kwargs)
    without = prober.render(prober.history(), add_generation_prompt=False, **kwargs)
    if with_prompt is None or without is None:
        return None
    return with_prompt[len(char_common_prefix(with_prompt, without)):]


@dataclass
class TurnEnd:
    before_content: str = ""  # what the output carries before the content (after the prompt)
    stop: list[str] = field(default_factory=list)
    closing: list[str] = field(default_factory=list)  # the markers that close a reply, in order


def turn_end(prober: Prober, eos_token: str, **kwargs: Any) -> TurnEnd | None:
    output = prober.output(prober.assistant(CONTENT_TEXT), **kwargs)
    if output is None or CONTENT_TEXT not in output:
        return None
    at = output.index(CONTENT_TEXT)
    after = output[at + len(CONTENT_TEXT):]
    between = _next_turn_opening(prober, **kwargs)
    if between:
        # between a reply and the next user text: the end of the turn, then the user turn's opening
        closing, opening = _split_turns(prober, between, **kwargs)
        # a closing of no marker shape may be cut where the opening's marker recurs (`#<end>`):
        # the text right after the content names it whole
        stop = stop_markers(closing) or shapeless_stop(after) or markers_in(opening)[:1]
    else:
        closing = after
        stop = stop_markers(after)
    if eos_token and eos_token not in stop:
        stop.append(eos_token)
    return TurnEnd(before_content=output[:at], stop=stop, closing=closing_markup(closing))


def _split_turns(prober: Prober, between: str, **kwargs: Any) -> tuple[str, str]:
    """Split the text between two turns into the first one's closing and the next one's opening.

    A turn opens with the marker the generation prompt starts with (`<|im_start|>`); templates
    whose prompt is always appended show it after the user text instead.
    """
    prompt = prober.prompt(**kwargs) or ""
    gp = generation_prompt(prober, **kwargs) or ""
    openers = [m for m in markers_in(gp)[:1] if m in between]
    if not openers:
        openers = _marker_before_role(between)
    if not openers and USER_TEXT in prompt:
        openers = [m for m in reversed(markers_in(prompt[prompt.rindex(USER_TEXT):])) if m in between][:1]
    if openers and openers[0] in between:
        at = between.rindex(openers[0])
        return between[:at], between[at:]
    opening = common_suffix(between, _user_turn_opening(prober, **kwargs))
    return between[: len(between) - len(opening)], opening


def _marker_before_role(between: str) -> list[str]:
    """The marker that opens a `<|im_user|>user<|im_middle|>`-style header: the one before the role."""
    segs = segments(between)
    for at in range(len(segs) - 1, 0, -1):
        if segs[at].lower() == "user":
            before = [s for s in segs[:at] if not s.isspace()]
            return before[-1:] if before and is_marker(before[-1]) else []
    return []


def _user_turn_opening(prober: Prober, **kwargs: Any) -> str:
    prompt = prober.render(prober.history(), add_generation_prompt=False, **kwargs) or ""
    return prompt[: prompt.rfind(USER_TEXT)] if USER_TEXT in prompt else ""


def _next_turn_opening(prober: Prober, **kwargs: Any) -> str:
    """What a template writes between a reply and the next user message's text."""
    follow_up = "Probe follow-up from the user."
    messages = prober.history() + [prober.assistant(CONTENT_TEXT),
                                   {"role": "user", "content": prober.text(follow_up)}]
    full = prober.render(messages, add_generation_prompt=False, **kwargs)
    if not full or CONTENT_TEXT not in full or follow_up not in full:
        return ""
    at = full.rindex(CONTENT_TEXT) + len(CONTENT_TEXT)
    return full[at: full.index(follow_up, at)]


def closing_markup(after_content: str) -> list[str]:
    """The markers (compound ones joined) that directly follow a reply's content, up to the first text."""
    markup = []
    for unit in units(after_content):
        if unit.isspace():
            continue
        if not is_unit_marker(unit):
            break
        markup.append(unit)
    return markup


def stop_markers(after_content: str) -> list[str]:
    """The marker that ends the turn: the last marker of the markup that directly follows the content.

    `<|END_RESPONSE|><|END_OF_TURN_TOKEN|>` ends the turn with its last marker; the first one closes
    the content. Markup stops at the first text that is not a marker (the next turn's words).
    """
    stops: list[str] = []
    markup = closing_markup(after_content)
    if markup:
        stops.append(markup[-1])
    else:
        stops += shapeless_stop(after_content)
    return stops


def shapeless_stop(after_content: str) -> list[str]:
    """Markup of no known shape that ends a turn: a short run of non-space text holding punctuation
    (`[e~[`, `[/]`), or a short line of symbols and a word (`+++ end`, `=== end ===`)."""
    if closing_markup(after_content):
        return []
    lines = after_content.strip().splitlines()
    line = lines[0].strip() if lines else ""
    word = line.split()[0] if line else ""
    if 2 <= len(word) <= 16 and not word.isalnum() and (any(c.isalpha() for c in word) or _bracketed(word)):
        return [word]
    if len(line) <= 24 and _SYMBOLS_AND_WORD.fullmatch(line):
        return [line]
    return []


# symbols, a word, and maybe the same symbols again: a line that only markup would write
_SYMBOLS_AND_WORD = re.compile(r"(?P<run>[^\w\s]{2,4}) [^\W\d_]\w{0,15}(?: (?P=run))?")


def _bracketed(word: str) -> bool:
    return word[0] in "[(<{" and word[-1] in "])>}"
