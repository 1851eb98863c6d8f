"""What the reader needs to know of a language's shape: the characters each node can begin with
(computed once per node, to prune the options of a fork), the markers that lead a part, and
where a reading stands in its stack (inside reasoning, below a part, inside a call's arguments).

Standard library only: the standalone module embeds it with the reader.
"""

from __future__ import annotations

from typing import Any

from autoparser.language import ir
from autoparser.language.readings import (
    _FRAMES,
    _MADE_WHILE_READING,
    _WHITESPACE,
    _Again,
    _EndCapture,
)

# -- first characters, per node ------------------------------------------------------------------


class _Firsts:
    """For each node: the characters its text can start with (None: any) and whether it can be
    empty. Computed once per node and kept, so a choice costs a set lookup per option."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[frozenset[str] | None, bool]] = {}
        self._keep: list[Any] = []

    def of(self, node: Any) -> tuple[frozenset[str] | None, bool]:
        key = id(node)
        found = self._cache.get(key)
        if found is None:
            if _of_reading(node):
                return None, True  # decided by reading; not kept, or a long output would pile them up
            self._cache[key] = (None, True)  # a recursive reference reads as "anything"
            found = self._cache[key] = self._compute(node)
            self._keep.append(node)
        return found

    def _compute(self, node: Any) -> tuple[frozenset[str] | None, bool]:  # noqa: C901 - one case per kind
        if isinstance(node, ir.Lit):
            core = node.text.strip()
            if not core:
                return frozenset(node.text[:1]), True  # whitespace: as much of it as there is
            return frozenset(core[0] + _WHITESPACE), False  # whitespace before a marker is skipped
        if isinstance(node, ir.Gap):
            return frozenset(_WHITESPACE), True
        if isinstance(node, ir.Chars):
            return None, node.min == 0
        if isinstance(node, ir.Text):
            return None, not node.nonempty
        if isinstance(node, ir.Json):
            # an object, or a string that holds one (arguments written as a JSON string)
            return (frozenset('{"' + _WHITESPACE), False) if node.kind == "object" else (None, False)
        if isinstance(node, ir.Bracketed):
            return frozenset("{[" + _WHITESPACE), False
        if isinstance(node, ir.Capture | ir.Rule):
            return self.of(node.body)
        if isinstance(node, ir.Repeat):
            chars, empty = self.of(node.item)
            return chars, empty or node.min == 0
        if isinstance(node, ir.Seq):
            return self._sequence(node.items)
        if isinstance(node, ir.Choice):
            return self._union([self.of(o) for o in node.options])
        return None, True  # PyValue, RawString, Members, Lazy, frames: decided by reading

    def _sequence(self, items: tuple[Any, ...]) -> tuple[frozenset[str] | None, bool]:
        chars: set[str] = set()
        for item in items:
            first, empty = self.of(item)
            if first is None:
                return None, empty and all(self.of(i)[1] for i in items)
            chars |= first
            if not empty:
                return frozenset(chars), False
        return frozenset(chars), True

    @staticmethod
    def _union(found: list[tuple[frozenset[str] | None, bool]]) -> tuple[frozenset[str] | None, bool]:
        empty = any(e for _, e in found)
        if any(f is None for f, _ in found):
            return None, empty
        return frozenset().union(*(f for f, _ in found)), empty


def _of_reading(node: Any) -> bool:
    """Whether `node` was made while reading (a frame, the rest of a repetition, the members left)
    or is an optional part around one (what follows a failed call, `interpret.LanguageReader.resync_rest`):
    the reader's caches keep none of them, or a long output would pile them up."""
    cls = node.__class__
    if cls is ir.Repeat:
        cls = node.item.__class__
    return cls in _MADE_WHILE_READING or cls in _FRAMES


def _lead_markers(node: Any, depth: int) -> set[str]:
    """The marker cores a node may begin with (as far as `depth` levels of nodes show)."""
    if depth == 0:
        return set()
    if isinstance(node, ir.Lit):
        return {node.text.strip()} if node.text.strip() else set()
    if isinstance(node, ir.Choice):
        return set().union(*(_lead_markers(o, depth - 1) for o in node.options))
    if isinstance(node, ir.Repeat | ir.Capture | ir.Rule):
        return _lead_markers(node.item if isinstance(node, ir.Repeat) else node.body, depth - 1)
    if isinstance(node, ir.Seq):
        found: set[str] = set()
        for item in node.items:
            if isinstance(item, ir.Gap):
                continue
            found |= _lead_markers(item, depth - 1)
            if not (isinstance(item, ir.Repeat) and item.min == 0):
                break
        return found
    return set()


def _first_marker(node: Any) -> str:
    """The core of the marker a node begins with, whitespace aside ("" where it begins otherwise)."""
    while True:
        if isinstance(node, ir.Lit):
            return node.text.strip()
        if isinstance(node, ir.Repeat) and node.max == 1:
            node = node.item  # a marker that may be left out
        elif isinstance(node, ir.Seq):
            items = [i for i in node.items if not isinstance(i, ir.Gap)]
            if not items:
                return ""
            node = items[0]
        else:
            return ""


def _inside_reasoning(stack: Any) -> bool:
    """Whether what is left of a reading closes a reasoning capture (it is inside one)."""
    while stack is not None:
        node, stack = stack
        if node.__class__ is _EndCapture and node.role == ir.REASONING:
            return True
    return False


def _parts(node: Any) -> tuple[Any, ...]:
    """A node's direct parts (the members of tagged arguments are values: no call id there)."""
    if isinstance(node, ir.Seq):
        return node.items
    if isinstance(node, ir.Choice):
        return node.options
    if isinstance(node, ir.Repeat):
        return (node.item,)
    if isinstance(node, ir.Capture | ir.Rule):
        return (node.body,)
    if isinstance(node, ir.Lazy):
        return (node.body,)
    return ()


def _holds_arguments(node: Any) -> bool:
    """Whether `node` captures a call's arguments itself, not inside a rule of its own."""
    if isinstance(node, ir.Capture) and node.role == ir.ARGUMENTS:
        return True
    if isinstance(node, ir.Rule | ir.Lazy):
        return False
    return any(_holds_arguments(part) for part in _parts(node))


def _below(stack: Any, part: Any) -> bool:
    """Whether `part` is what is left of `stack` at some depth (the reading has not passed it)."""
    while stack is not None:
        if stack is part:
            return True
        stack = stack[1]
    return part is None


def _without_spent_repeats(stack: Any, here: int) -> Any:
    """`stack` less the rests of repetitions that may read no more items and whose last item began
    before `here` (absolute): from here they read nothing. A reading that resumes inside the part
    a failed one was reading keeps what follows it, and a failure repeated again and again would
    otherwise pile up one such rest each time (`recovery._Recovery._rest_of_section`)."""
    def spent(frame: Any) -> bool:
        return frame.__class__ is _Again and frame.left_max == 0 and frame.start < here

    entries, last, node = [], -1, stack
    while node is not None:
        if spent(node[0]):
            last = len(entries)
        entries.append(node)
        node = node[1]
    if last < 0:
        return stack
    tail = entries[last][1]
    for frame, _ in reversed(entries[:last]):
        if not spent(frame):
            tail = (frame, tail)
    return tail
