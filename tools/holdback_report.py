"""How much plain text the streaming parser holds back, on every corpus and fixture template.

For each template that analyses (the corpora's and the fixtures'), three stretches of prose are
streamed in 4-character chunks (CONTRACT section 5): an answer; a reasoning block after its start
marker; reasoning whose start marker the model left out, ended by the end marker. Each is streamed
twice: as plain words, and as words among brackets, braces, parentheses, angle brackets and quotes,
where a bare call or a marker may begin but none does. While the prose streams, the text fed minus
the text emitted is what is held; the report gives the largest such figure per case and lists
every case over the bound (64 characters).

    python tools/holdback_report.py [--limit 64] [--verbose]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import autoparser  # noqa: E402
from autoparser.render import TemplateRenderError  # noqa: E402

BOUND = 64
PROSE = ("The weather in Paris is usually mild in spring, with showers now and then. " * 30)[:2000]
# prose where bare calls and markers may begin and none does: what a reading that fails there must not hold
MARKED_PROSE = ('I think [a] then {b: 1} and "q" or \'r\' more (c) words <d> follow here. ' * 30)[:2000]
FIXTURES = REPO / "fixtures" / "templates"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}]


@dataclass(frozen=True)
class Case:
    name: str
    before: str  # markup fed before the prose (not counted as held)
    after: str  # markup fed after it
    prose: str = PROSE


@dataclass
class Result:
    template: str
    case: str
    held: int
    roles: str


def cases(analysis: object) -> Iterator[Case]:
    for case in plain_cases(analysis):
        yield case
        yield Case(case.name + "-marked", case.before, case.after, MARKED_PROSE)


def plain_cases(analysis: object, prose: str = PROSE) -> Iterator[Case]:
    """Plain `prose` as an answer, as a reasoning block after its start marker, and as reasoning
    whose start marker was left out, where the analysis has such reasoning."""
    yield Case("answer", "", "", prose)
    reasoning = getattr(analysis, "reasoning", None)
    if reasoning is None or reasoning.mode == "none" or not reasoning.end.strip():
        return
    start, end = reasoning.start.strip(), reasoning.end.strip()
    if start:
        yield Case("reasoning", start, end, prose)
    yield Case("reasoning-unopened", "", end, prose)


def most_held(parser: object, case: Case, size: int = 4) -> tuple[int, str]:
    """The most prose held at once while it streamed, and the roles its deltas took."""
    stream = parser.stream()
    fed = emitted = most = 0
    roles: list[str] = []

    def take(deltas: list[dict]) -> None:
        nonlocal emitted
        for delta in deltas:
            for role in ("reasoning_content", "content"):
                if role in delta:
                    emitted += len(delta[role])
                    if not roles or roles[-1] != role:
                        roles.append(role)

    take(stream.feed(case.before) if case.before else [])
    base = emitted
    prose = case.prose
    for at in range(0, len(prose), size):
        take(stream.feed(prose[at:at + size]))
        fed += len(prose[at:at + size])
        most = max(most, fed - (emitted - base))
    if case.after:
        take(stream.feed(case.after))
    take(stream.finish())
    return most, "/".join(r.split("_")[0] for r in roles)


def templates() -> list[Path]:
    from corpora import all_templates
    return all_templates() + sorted(FIXTURES.glob("*.jinja"))


def report(limit: int, verbose: bool) -> list[Result]:
    results: list[Result] = []
    for path in templates():
        try:
            analysis = autoparser.load(str(path))
        except TemplateRenderError:  # tools/list_unrenderable.py reports these
            continue
        tools = TOOLS if analysis.tools.supported else None
        for case in cases(analysis):
            held, roles = most_held(analysis.parser(tools=tools), case)
            results.append(Result(path.stem, case.name, held, roles))
            if verbose or held > limit:
                print(f"{held:6d}  {case.name:20s} {roles:22s} {path.stem}")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=BOUND)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    results = report(args.limit, args.verbose)
    over = [r for r in results if r.held > args.limit]
    print(f"{len(results) - len(over)} of {len(results)} template x case combinations hold at most "
          f"{args.limit} characters; {len(over)} hold more")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
