"""Hostile templates: each is refused with a clear error within 5 s, using under 1 GB.

The renders run in a child process whose address space is capped at 1 GB (`RLIMIT_AS`): a
template that slips past the sandbox's pricing would fail there with a MemoryError, which the
renderer reports as "ran out of memory", and the test rejects that message. Analysis of each
template must stop at the first bound that trips, not retry every probe shape.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from corpora import tool_module

from autoparser.isolation import HardLimits, analyze_isolated
from autoparser.render import RenderLimitExceeded, render_template

ROOT = Path(__file__).resolve().parent.parent


BENCH = tool_module("bench_hostile")
HOSTILE = BENCH.HOSTILE
CONVERSATION = BENCH.CONVERSATION


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, str], dict]:
    return {(row["name"], row["what"]): row for row in BENCH.run_all()}


@pytest.mark.parametrize("what", ["render", "analyze"])
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_template_is_refused_quickly_in_bounded_memory(outcomes: dict, name: str, what: str) -> None:
    row = outcomes[(name, what)]
    assert row["kind"] == "RenderLimitExceeded", row
    assert "out of memory" not in row["error"] and "\n" not in row["error"]
    assert row["seconds"] < 5, row
    assert row["peak"] < 1 << 30, row


@pytest.mark.parametrize("source, expected", [
    ("{{ 12345 * 67890 }}", "838102050"),
    ("{{ 'ab'.translate({97: 'xyz'}) }}", "xyzb"),
    ("{{ ('{0:{1}}|' * 2).format('a', 3) }}", "a  |a  |"),
    ("{{ '%*d' % (4, 7) }}", "   7"),
    ("{{ range(3) | map('string') | map('center', 3) | join('|') }}", " 0 | 1 | 2 "),
    ("{{ [3, 1, 2] | sort | list }}", "[1, 2, 3]"),
    ("{{ 'a b c d' | wordwrap(3) }}", "a b\nc d"),
    ("{{ 'one two\nthree four' | wordwrap(5, wrapstring='|') }}", "one|two|three|four"),
    ("{% set l = [1] %}{% set _ = l.extend(l) %}{{ l }}", "[1, 1]"),
    ("{{ ''.join(range(3) | map('string')) }}", "012"),
    ("{{ '{0:{1}}|'.format('a', '3') }}", "a  |"),
    ("{{ '{:>{}}'.format('x', 2) }}", " x"),
    ("{{ strftime_now('%Y') | length }}", "4"),
    ("{{ 'b\u00fccher'.encode('punycode') | length }}", "9"),
    ("{{ {'a': 1} | xmlattr }}", ' a="1"'),
    ("{{ 'a b' | urlencode }}", "a%20b"),
    ("{{ '<a>' | e }}", "&lt;a&gt;"),
    ("{{ [1, [2]] == [1, [2]] }}", "True"),
    ("{{ {(1, 2): 'x'}[(1, 2)] }}", "x"),
    ("{{ [1, 2, 1].count(1) }}", "2"),
    ("{{ (3).to_bytes(2, 'big') | length }}", "2"),
    ("{{ ('ab'.encode() * 2) | length }}", "4"),
    ("{{ [1, 2] is eq([1, 2]) }}|{{ [1, 2, 3] | select('gt', 1) | list }}", "True|[2, 3]"),
    ("{% for x in [1, 1, 2] %}{{ loop.changed(x) }}{% endfor %}", "TrueFalseTrue"),
    ("{{ messages is defined }}", "True"),
])
def test_ordinary_uses_of_priced_operations_still_work(source: str, expected: str) -> None:
    assert render_template(source, [{"role": "user", "content": "hi"}]) == expected


def test_a_render_the_sandbox_cannot_price_is_stopped_by_the_hard_limits() -> None:
    """Whatever the sandbox misses, the analysis child's CPU limit stops (here: a plain loop that
    passes the 1 s CPU limit before the 2 s render deadline, unless other processes slow it)."""
    source = CONVERSATION + "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    with pytest.raises(RenderLimitExceeded, match="CPU|took longer"):
        analyze_isolated(source, limits=HardLimits(cpu_seconds=1, wall_seconds=20))


def test_isolated_analysis_equals_the_in_process_one() -> None:
    from autoparser import analyze

    source = CONVERSATION + "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    assert analyze_isolated(source, eos_token="<|end|>").to_dict() == analyze(source, eos_token="<|end|>").to_dict()


def test_arguments_nested_too_deep_to_read_are_kept_as_text() -> None:
    """A client may send back arguments nested thousands deep as JSON text: the template gets the
    text as it came, rather than a RecursionError or a misleading "recursed too deeply"."""
    text = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    calls = [{"type": "function", "function": {"name": "f", "arguments": text}}]
    source = "{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.arguments }}{% endfor %}{% endfor %}"
    assert render_template(source, [{"role": "assistant", "content": "", "tool_calls": calls}]) == text
