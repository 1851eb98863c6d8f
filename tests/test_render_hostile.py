"""Hostile templates: each is refused with a clear error within 5 s, using under 1 GB.

The renders run in a child process whose address space is capped at 1 GB (`RLIMIT_AS`): a
template that slips past the sandbox's pricing would fail there with a MemoryError, which the
renderer reports as "ran out of memory", and the test rejects that message. Analysis of each
template must stop at the first bound that trips, not retry every probe shape.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autoparser.isolation import HardLimits, analyze_isolated
from autoparser.render import RenderLimitExceeded, render_template

ROOT = Path(__file__).resolve().parent.parent
CONVERSATION = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"

HOSTILE = {
    "integer squarings": "{% set ns = namespace(n=2 ** 50000) %}{% for i in range(16) %}"
                         "{% set ns.n = ns.n * ns.n %}{% endfor %}{{ ns.n > 0 }}",
    "translate": "{{ ('x' * 4000000).translate({120: 'y' * 4000}) | length }}",
    "map center into join": "{{ range(100000) | map('string') | map('center', 3999999) | join | length }}",
    "map center into list": "{{ range(100000) | map('string') | map('center', 3999999) | list | length }}",
    "map center into sort": "{{ range(100000) | map('string') | map('center', 3999999) | sort | length }}",
    "map center into str.join": "{{ ''.join(range(100000) | map('string') | map('center', 3999999)) | length }}",
    "map center into tojson": "{{ range(100000) | map('string') | map('center', 3999999) | tojson | length }}",
    "nested format width": "{{ ('{0:{1}}' * 1000).format(1, 3999999) | length }}",
    "format widths": "{{ ('{:999999}' * 1000).format(*range(1000)) | length }}",
    "percent star width": "{{ ('%*d' * 1000) % ((3999999, 1) * 1000) }}",
    "list extend self": "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}"
                        "{% set _ = ns.l.extend(ns.l) %}{% endfor %}{{ ns.l | length }}",
    "list plus self": "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}"
                      "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}",
    "string repetition": "{{ ('x' * 3000000) * 3000000 }}",
    "wordwrap long word": "{{ ('x' * 3000000) | wordwrap(2) | length }}",
    "wordwrap long text": "{{ ('abc ' * 999999) | wordwrap(79) | length }}",
    "sort shared references": "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}"
                              "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}"
                              "{{ [ns.a, ns.b] | sort | length }}",
    "unique shared references": "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}"
                                "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}"
                                "{{ [ns.a, ns.b] | unique | list | length }}",
    "output bound": "{% for i in range(100000) %}{% for j in range(100) %}xxxxxxxxxx{% endfor %}{% endfor %}",
}

CHILD = textwrap.dedent("""
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    from autoparser.analyzers import analyze
    from autoparser.render import TemplateRenderError, render_template
    for name, source in json.loads(sys.stdin.read()).items():
        for what, run in (("render", lambda: render_template(source, [{"role": "user", "content": "hi"}])),
                          ("analyze", lambda: analyze(source))):
            started = time.perf_counter()
            try:
                run()
                error, kind = "", ""
            except TemplateRenderError as exc:
                error, kind = str(exc), type(exc).__name__
            seconds = time.perf_counter() - started
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            print(json.dumps({"name": name, "what": what, "error": error, "kind": kind,
                              "seconds": seconds, "peak": peak}), flush=True)
""")


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, str], dict]:
    sources = {name: CONVERSATION + source for name, source in HOSTILE.items()}
    done = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(sources), capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    return {(row["name"], row["what"]): row for row in rows}


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
])
def test_ordinary_uses_of_priced_operations_still_work(source: str, expected: str) -> None:
    assert render_template(source, [{"role": "user", "content": "hi"}]) == expected


def test_comparing_shared_references_is_stopped_by_the_hard_limits() -> None:
    """`==` cannot be priced from inside the sandbox; the child process's CPU limit stops it."""
    source = CONVERSATION + HOSTILE["sort shared references"].replace("[ns.a, ns.b] | sort | length", "ns.a == ns.b")
    with pytest.raises(RenderLimitExceeded, match="CPU|took longer"):
        analyze_isolated(source, limits=HardLimits(cpu_seconds=2, wall_seconds=20))


def test_isolated_analysis_equals_the_in_process_one() -> None:
    from autoparser import analyze

    source = CONVERSATION + "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    assert analyze_isolated(source, eos_token="<|end|>").to_dict() == analyze(source, eos_token="<|end|>").to_dict()
