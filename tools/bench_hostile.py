#!/usr/bin/env python3
"""Hostile chat templates: how fast, and in how much memory, each is refused.

Each template is rendered once and analyzed once in a child process whose address space is
capped at 1 GB (`RLIMIT_AS`); the child prints, per template, the error, the seconds it took and
the peak resident memory so far. `tests/test_render_hostile.py` asserts on the same list.

Usage::

    python tools/bench_hostile.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

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
    "bytes repetition": "{{ (('x'.encode() * 3000000) * 3000000) | length }}",
    "int to_bytes": "{{ (1).to_bytes(1500000000, 'big') | length }}",
    "xmlattr escapes": "{{ {'a': '<' * 3000000} | xmlattr | length }}",
    "urlencode": "{{ ('\u00ff' * 3000000) | urlencode | length }}",
    "escape": "{{ ('\"' * 3000000) | e | length }}",
    "format width as text": "{{ ('{:{}}' * 1000).format(*(['a', '3999999'] * 1000)) | length }}",
    "format spec pieces": "{{ ('{0:{1}{1}{1}}' * 1000).format('a', '999') | length }}",
    "strftime_now widths": "{{ strftime_now('%1000Y' * 600000) | length }}",
    "punycode": "{% set ns = namespace(s='') %}{% for i in range(256, 8256) %}{% set ns.s = ns.s ~ '%c' % i %}"
                "{% endfor %}{{ ns.s.encode('punycode') | length }}",
    "compare doubled lists": "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}"
                             "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}"
                             "{{ ns.a == ns.b }}",
    "hash doubled tuples": "{% set ns = namespace(a=(1,)) %}{% for i in range(60) %}"
                           "{% set ns.a = (ns.a, ns.a) %}{% endfor %}{{ {ns.a: 1} | length }}",
    "count doubled lists": "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}"
                           "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}"
                           "{{ [ns.a, ns.a].count(ns.b) }}",
    "is eq doubled lists": "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}"
                           "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}"
                           "{{ ns.a is eq(ns.b) }}",
    "loop.changed doubled lists": "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}"
                                  "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}"
                                  "{% for x in [ns.a, ns.b] %}{{ loop.changed(x) }}{% endfor %}",
    "template size": "{{ x }}" * 400_000,
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


def run_all() -> list[dict]:
    """One row per (template, render|analyze): name, what, error, kind, seconds, peak bytes."""
    sources = {name: CONVERSATION + source for name, source in HOSTILE.items()}
    done = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(sources), capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return [json.loads(line) for line in done.stdout.splitlines()]


def main() -> int:
    rows = run_all()
    for row in rows:
        print(f"{row['name']:28} {row['what']:8} {row['seconds']:6.2f} s  peak {row['peak'] >> 20:5} MB  "
              f"{row['kind'] or 'ACCEPTED'}: {row['error'][:70]}")
    print(f"slowest {max(r['seconds'] for r in rows):.2f} s, peak {max(r['peak'] for r in rows) >> 20} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
