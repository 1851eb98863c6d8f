"""A small GBNF reader for tests: random sentences from a grammar, and a recognizer.

`Gbnf(text)` parses llama.cpp's GBNF syntax (rules, literals, classes, ``.``, groups,
alternation, ``* + ? {m,n}``, token references ``<text>`` / ``<[id]>`` / ``!<...>``).

* `sample(rng)` expands the grammar at random. Past `max_depth` nested rule expansions it
  takes the cheapest alternative and the fewest repetitions, so every sample terminates.
  Token references produce their text, the way the parser sees detokenized output.
* `matches(text)` decides membership with the same pushdown-stack method llama.cpp uses
  (tail references do not grow the stack), over characters; a ``<text>`` token matches its
  text. It is the check "would this grammar let a model write exactly this".

Not a general GBNF implementation: ``!<token>`` is approximated by one arbitrary character.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

MAX_CP = 0x10FFFF
POOL = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n\t"
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~é中😀｜▁")
INF = float("inf")


@dataclass
class Node:
    kind: str  # alt seq lit cls ref tok rep
    items: list = field(default_factory=list)
    text: str = ""
    ranges: list = field(default_factory=list)
    lo: int = 0
    hi: int | None = None


class GbnfSyntaxError(ValueError):
    pass


def _is_word(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "-")


class _Reader:
    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def space(self, newline_ok: bool) -> None:
        s = self.s
        while self.i < len(s) and (s[self.i] in " \t#" or (newline_ok and s[self.i] in "\r\n")):
            if s[self.i] == "#":
                while self.i < len(s) and s[self.i] not in "\r\n":
                    self.i += 1
            else:
                self.i += 1

    def name(self) -> str:
        start = self.i
        while self.i < len(self.s) and _is_word(self.s[self.i]):
            self.i += 1
        if start == self.i:
            raise GbnfSyntaxError(f"expecting name at {self.s[start:start + 20]!r}")
        return self.s[start:self.i]

    def char(self) -> int:
        s = self.s
        if s[self.i] == "\\":
            e = s[self.i + 1]
            if e in "xuU":
                n = {"x": 2, "u": 4, "U": 8}[e]
                value = int(s[self.i + 2:self.i + 2 + n], 16)
                self.i += 2 + n
                return value
            self.i += 2
            simple = {"t": 9, "r": 13, "n": 10, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}
            if e not in simple:
                raise GbnfSyntaxError(f"unknown escape \\{e}")
            return simple[e]
        self.i += 1
        return ord(s[self.i - 1])

    def rules(self) -> dict[str, Node]:
        out: dict[str, Node] = {}
        self.space(True)
        while self.i < len(self.s):
            name = self.name()
            self.space(False)
            if not self.s.startswith("::=", self.i):
                raise GbnfSyntaxError(f"expecting ::= after {name}")
            self.i += 3
            self.space(True)
            out[name] = self.alternates(nested=False)
            if self.i < len(self.s) and self.s[self.i] not in "\r\n":
                raise GbnfSyntaxError(f"expecting end of rule at {self.s[self.i:self.i + 20]!r}")
            self.space(True)
        return out

    def alternates(self, nested: bool) -> Node:
        options = [self.sequence(nested)]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            self.space(True)
            options.append(self.sequence(nested))
        return Node("alt", options)

    def sequence(self, nested: bool) -> Node:
        items: list[Node] = []
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == '"':
                self.i += 1
                chars = []
                while s[self.i] != '"':
                    chars.append(chr(self.char()))
                self.i += 1
                items.append(Node("lit", text="".join(chars)))
            elif c == "[":
                self.i += 1
                negated = s[self.i] == "^"
                if negated:
                    self.i += 1
                ranges = []
                while s[self.i] != "]":
                    lo = self.char()
                    hi = lo
                    if s[self.i] == "-" and s[self.i + 1] != "]":
                        self.i += 1
                        hi = self.char()
                    ranges.append((lo, hi))
                self.i += 1
                items.append(Node("cls", ranges=_complement(ranges) if negated else _normalize(ranges)))
            elif c == "<" or (c == "!" and s[self.i + 1] == "<"):
                negated = c == "!"
                self.i += 1 if negated else 0
                end = s.index(">", self.i)
                body = s[self.i + 1:end]
                self.i = end + 1
                if negated:
                    items.append(Node("cls", ranges=[(0x20, 0x7E)]))
                else:
                    items.append(Node("tok", text=body if body.startswith("[") else f"<{body}>"))
            elif _is_word(c):
                items.append(Node("ref", text=self.name()))
            elif c == "(":
                self.i += 1
                self.space(True)
                inner = self.alternates(nested=True)
                if s[self.i] != ")":
                    raise GbnfSyntaxError("expecting )")
                self.i += 1
                items.append(inner)
            elif c == ".":
                self.i += 1
                items.append(Node("cls", ranges=[(0, MAX_CP)]))
            elif c in "*+?{":
                if not items:
                    raise GbnfSyntaxError("quantifier without item")
                if c == "{":
                    end = s.index("}", self.i)
                    body = s[self.i + 1:end].replace(" ", "")
                    self.i = end + 1
                    if "," in body:
                        a, b = body.split(",")
                        lo, hi = int(a), (int(b) if b else None)
                    else:
                        lo = hi = int(body)
                else:
                    self.i += 1
                    lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                items[-1] = Node("rep", [items[-1]], lo=lo, hi=hi)
            else:
                break
            self.space(nested)
        return Node("seq", items)


def _normalize(ranges: list) -> list:
    out: list = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _complement(ranges: list) -> list:
    out, nxt = [], 0
    for lo, hi in _normalize(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return out


def _in(ranges: list, cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


class Gbnf:
    def __init__(self, text: str, root: str = "root", max_depth: int = 60):
        self.rules = _Reader(text).rules()
        if root not in self.rules:
            raise GbnfSyntaxError(f"no rule {root}")
        for node in self._walk():
            if node.kind == "ref" and node.text not in self.rules:
                raise GbnfSyntaxError(f"undefined rule {node.text}")
        self.root = root
        self.max_depth = max_depth
        self._cost = self._min_costs()
        self._compiled: dict | None = None

    def _walk(self):
        todo = list(self.rules.values())
        while todo:
            node = todo.pop()
            yield node
            todo += node.items

    # -- sampling ---------------------------------------------------------------------------

    def _min_costs(self) -> dict[str, float]:
        cost = {name: INF for name in self.rules}
        changed = True
        while changed:
            changed = False
            for name, node in self.rules.items():
                c = self._node_cost(node, cost)
                if c < cost[name]:
                    cost[name], changed = c, True
        unreachable = [n for n, c in cost.items() if c == INF]
        if unreachable:
            raise GbnfSyntaxError(f"rules that derive no finite text: {unreachable}")
        return cost

    def _node_cost(self, node: Node, cost: dict) -> float:
        k = node.kind
        if k in ("lit", "tok"):
            return len(node.text)
        if k == "cls":
            return 1 if node.ranges else INF
        if k == "ref":
            return cost[node.text]
        if k == "seq":
            return sum(self._node_cost(n, cost) for n in node.items)
        if k == "alt":
            return min(self._node_cost(n, cost) for n in node.items)
        if k == "rep":
            inner = self._node_cost(node.items[0], cost)
            return 0 if node.lo == 0 else node.lo * inner
        raise AssertionError(k)

    def sample(self, rng: random.Random | None = None, continue_p: float = 0.5) -> str:
        rng = rng or random.Random()
        out: list[str] = []
        self._sample(self.rules[self.root], 0, rng, out, continue_p)
        return "".join(out)

    def _sample(self, node: Node, depth: int, rng: random.Random, out: list, p: float) -> None:
        k = node.kind
        deep = depth > self.max_depth
        if k in ("lit", "tok"):
            out.append(node.text)
        elif k == "cls":
            out.append(_random_char(node.ranges, rng))
        elif k == "ref":
            self._sample(self.rules[node.text], depth + 1, rng, out, p)
        elif k == "seq":
            for item in node.items:
                self._sample(item, depth, rng, out, p)
        elif k == "alt":
            if deep:
                choice = min(node.items, key=lambda n: self._node_cost(n, self._cost))
            else:
                choice = rng.choice(node.items)
            self._sample(choice, depth, rng, out, p)
        elif k == "rep":
            count = node.lo
            span = (node.hi - node.lo) if node.hi is not None else 8
            while not deep and count - node.lo < span and rng.random() < p:
                count += 1
            for _ in range(count):
                self._sample(node.items[0], depth + 1, rng, out, p)
        else:
            raise AssertionError(k)

    # -- recognition ------------------------------------------------------------------------

    def _compile(self) -> dict:
        """Rules as lists of alternatives of elements: ('c', ranges) or ('r', rule)."""
        compiled: dict[str, list[list[tuple]]] = {}
        counter = [0]

        def fresh(alts: list[list[tuple]]) -> str:
            counter[0] += 1
            name = f" anon{counter[0]}"
            compiled[name] = alts
            return name

        def elements(node: Node) -> list[tuple]:
            k = node.kind
            if k in ("lit", "tok"):
                return [("c", [(ord(c), ord(c))]) for c in node.text]
            if k == "cls":
                return [("c", node.ranges)]
            if k == "ref":
                return [("r", node.text)]
            if k == "seq":
                return [e for item in node.items for e in elements(item)]
            if k == "alt":
                return [("r", fresh([elements(o) for o in node.items]))]
            if k == "rep":
                inner = elements(node.items[0])
                out = inner * node.lo
                if node.hi is None:
                    name = fresh([])
                    compiled[name] = [inner + [("r", name)], []]
                    return out + [("r", name)]
                tail: list[tuple] = []
                for _ in range(node.hi - node.lo):
                    tail = [("r", fresh([inner + tail, []]))]
                return out + tail
            raise AssertionError(k)

        for name, node in self.rules.items():
            compiled[name] = [elements(o) for o in node.items]
        return compiled

    def _advance(self, stack: tuple, out: set) -> None:
        rules = self._compiled
        todo, seen = [stack], set()
        while todo:
            st = todo.pop()
            if st in seen:
                continue
            seen.add(st)
            if not st:
                out.add(st)
                continue
            rule, a, i = st[-1]
            elem = rules[rule][a][i]
            if elem[0] == "c":
                out.add(st)
                continue
            rest = st[:-1]
            if i + 1 < len(rules[rule][a]):
                rest = rest + ((rule, a, i + 1),)
            for j, option in enumerate(rules[elem[1]]):
                todo.append(rest + ((elem[1], j, 0),) if option else rest)

    def matches(self, text: str) -> bool:
        if self._compiled is None:
            self._compiled = self._compile()
        rules = self._compiled
        stacks: set = set()
        for j, option in enumerate(rules[self.root]):
            self._advance(((self.root, j, 0),) if option else (), stacks)
        for ch in text:
            cp = ord(ch)
            nxt: set = set()
            for st in stacks:
                if not st:
                    continue
                rule, a, i = st[-1]
                if _in(rules[rule][a][i][1], cp):
                    rest = st[:-1]
                    if i + 1 < len(rules[rule][a]):
                        rest = rest + ((rule, a, i + 1),)
                    self._advance(rest, nxt)
            stacks = nxt
            if not stacks:
                return False
        return () in stacks


def _random_char(ranges: list, rng: random.Random) -> str:
    candidates = [c for c in POOL if _in(ranges, ord(c))]
    if candidates and rng.random() < 0.9:
        return rng.choice(candidates)
    lo, hi = rng.choice(ranges)
    for _ in range(20):
        cp = rng.randint(lo, min(hi, lo + 5000))
        if not 0xD800 <= cp <= 0xDFFF and cp != 0:
            return chr(cp)
    return rng.choice(candidates) if candidates else chr(lo or 1)
