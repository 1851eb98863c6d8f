"""The streaming policy: when the reader lets text go, and which reading it keeps, in one place.

Rule 1: everything that decides what a stream emits, and when, is stated here. The builder makes
the language say it (`build.py`) and the reader carries it out (`interpret.py`); a rule that is
not in this list is a bug in one of them. `describe()` prints the rules in order, as the README
quotes them and a test prints them.

Standard library only: the standalone module embeds this file with the reader.
"""

from __future__ import annotations

from dataclasses import dataclass

HOLD_BOUND = 64  # characters of plain text held at most, beyond a pending marker prefix
UNDECIDED_LIMIT = 1 << 16  # characters held while readings disagree, before one of them wins
WHOLE_PIECE = 512  # a whole output is read in pieces this long (readings merge where one ends)
# where calls are bare JSON, in pieces this long (ending at every multiple of `WHOLE_PIECE` too):
# where a piece ends, a call read whole drops the readings of it as text (`_calls_over_text`),
# which inside one piece fork again at each later call, and the readings from each meet the
# ones that read more calls only after reading on themselves
BARE_CALLS_PIECE = 128


@dataclass(frozen=True)
class Rule:
    name: str
    text: str


RULES: tuple[Rule, ...] = (
    Rule("role-from-prompt",
         "The role of the text an output starts with is decided from the prompt's state and the text "
         "read so far, never by waiting for the end: where the prompt opened reasoning, or the "
         "template never writes the reasoning's start marker (it only strips reasoning up to the end "
         "marker), the output starts inside reasoning, and text before the first end marker is "
         "reasoning, written with its start marker or without; where the model writes the start "
         "marker itself, an output that does not begin with it is the answer, and an end marker in "
         "that answer is markup."),
    Rule("markers-never-emitted",
         "A marker is never emitted as text, not even a prefix of one: text that could still become "
         "a marker is held only until it cannot."),
    Rule("bounded-hold-back",
         f"While plain text streams, at most {HOLD_BOUND} characters are held beyond a pending marker "
         "prefix."),
    Rule("emit-what-all-readings-read",
         "Every reading of the text is followed at once; an event goes out once every living reading "
         "has read it, and text of one role that readings share goes out however they cut it."),
    Rule("calls-wait-for-arguments",
         "A call's start is held until its arguments start well (a first key, a first tagged value, a "
         "bare value with the first marker after it that is not punctuation), so a call that fails "
         "before is text; a section's opener is held until a call in it begins."),
    Rule("calls-not-inside-arguments",
         "A call does not begin inside text another reading reads as a call's arguments written as "
         "one JSON value (up to where the value ends, or where that reading failed): the reading that "
         "begins it is dropped, unless none would be left, so a call written inside another call's "
         "JSON arguments is part of them."),
    Rule("more-calls-win",
         "At the end of the output, of the complete readings the one with the most calls wins (a text "
         "that reads as content or as a call is a call), then the one that read more markers as markup "
         "where a text could hold them (a marker the language states as markup), then the first in the "
         "language's order."),
    Rule("nothing-lost",
         "Where no reading continues, the one that got furthest keeps what it read (of those that got "
         "as far, the first in the language's order, however the chunks came; a call whose "
         "arguments had started is closed and marked incomplete), the text from there to where it "
         "failed is content, and the language is read again from there with reasoning over (after a "
         "call that broke in a section, from its end marker, or where only punctuation ends a call, "
         "from where a later call or a later section begins; where a call's JSON string ran on "
         "past a marker that opens a later call or section, from that marker, the call's "
         "arguments ending before it). In reasoning no end marker has closed, "
         "a call that breaks is text of that reasoning (it never left it), and the reasoning goes on "
         "after it at once, a later call able to end it; a call section that breaks there is the "
         "reasoning's text too. A call read whole ends such reasoning where "
         f"it began, decided once the text after it has gone on for {HOLD_BOUND} characters without "
         "the end marker (an end marker sooner makes the call the reasoning's text; one later is the "
         "answer's text); one cut off by the end of the output, once its arguments started well "
         "(`cut-off-calls`)."),
    Rule("cut-off-calls",
         "At the end of the output, a call cut off keeps its complete values and is marked "
         "incomplete; the member or marker it stopped inside is content (an id member written after the "
         "arguments included, until the id's first character); a call cut off in reasoning no end "
         "marker has closed ends that reasoning where it began once its arguments started well "
         "(before, its text is the reasoning's)."),
    Rule("undecided-too-long",
         f"Readings that still disagree once {UNDECIDED_LIMIT} characters are held (counted once, "
         "however many readings hold them and however the chunks came) give way there to the one that "
         "began the most calls, then read the most markup, then to the first in the language's order "
         f"(where the held text was already past it, one reading having held it alone: where the text "
         f"read ends at a multiple of {WHOLE_PIECE} characters, as a whole output's pieces do); "
         "a failed reading that would be kept were the others to fail where they stand (one that read "
         "more calls whole than every reading still going on) is kept, as at the end of the output."),
)


def describe() -> str:
    """The rules as numbered lines, in the order they apply."""
    return "\n".join(f"{number}. `{rule.name}`: {rule.text}" for number, rule in enumerate(RULES, 1))
