"""GBNF rules for object members: declared members in order, and keys outside a declared set.

Used for a schema's ``properties`` and for the member lists of the output language alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoparser.generators.gbnf_builder import (
    GrammarBuilder,
    alt,
    class_char,
    is_rule_name,
    literal,
    optional,
    rule_name,
    seq,
)

INLINE_LIMIT = 240


def ordered_members(b: GrammarBuilder, hint: str, members: list[tuple[str, bool]], sep: str,
                    extra: str | None) -> str:
    """Members in the given order, required ones present, optional ones skippable.

    `sep` goes between two present members; `extra` (one additional member, e.g. an undeclared
    key) may repeat after the declared ones. The construction keeps two suffix languages per
    position: "something was already written" (next member needs `sep`) and "nothing yet".
    """
    if extra is None and all(req for _, req in members):
        return seq(*[part for i, (m, _) in enumerate(members) for part in ((sep, m) if i else (m,))])
    n = len(members)
    after: list[str] = [""] * (n + 1)
    fresh: list[str] = [""] * (n + 1)
    if extra is not None:
        more = b.define(rule_name(f"{hint}-extra-next"), seq(sep, extra))
        after[n] = f"{more}*"
        fresh[n] = optional(seq(extra, f"{more}*"))
    for i in range(n - 1, -1, -1):
        member, req = members[i]
        nxt = after[i + 1]
        if not req and nxt and not is_rule_name(nxt):
            nxt = after[i + 1] = b.define(rule_name(f"{hint}-after{i + 1}"), nxt)
        rest = fresh[i + 1]
        if len(rest) > INLINE_LIMIT and not is_rule_name(rest):
            # named, not copied into every earlier alternative: inline, the text (and the time
            # to build it) would grow with the square of the number of optional members
            rest = fresh[i + 1] = b.define(rule_name(f"{hint}-from{i + 1}"), rest)
        if req:
            after[i] = seq(sep, member, nxt)
            fresh[i] = seq(member, nxt)
        else:
            after[i] = seq(optional(seq(sep, member)), nxt)
            fresh[i] = alt(seq(member, nxt), rest) if rest else optional(seq(member, nxt))
    return fresh[0]



def key_not_in(b: GrammarBuilder, hint: str, names: list[str]) -> str:
    """A JSON string rule for keys that are none of `names` (undeclared additional properties).

    A trie over the names: at each node the key may stop (unless a name ends there), continue
    along the trie, or leave it with any other character. Extra keys use no escape sequences,
    so a name that would need one can never be produced anyway.
    """
    plain_cls = '[^"\\\\\\x7F\\x00-\\x1F]'
    plain = b.fixed("key-char", plain_cls)
    if not names:
        return b.fixed("key-any", f'"\\"" {plain}* "\\""')
    trie: dict = {}
    for name in names:
        if any(c in '"\\' or ord(c) < 0x20 or ord(c) == 0x7F for c in name):
            continue
        node = trie
        for c in name:
            node = node.setdefault(c, {})
        node[""] = {}

    # One rule per trie node, named in pre-order and defined in post-order, walked without
    # recursion: a declared name thousands of characters long is a trie that deep.
    @dataclass
    class State:
        node: dict
        depth: int
        via: str  # the character leading here from the parent
        name: str = ""
        children: list[str] = field(default_factory=list)
        options: list[str] = field(default_factory=list)

    def enter(node: dict, depth: int, via: str) -> State | str:
        children = sorted(c for c in node if c)
        if not children:  # a declared name ends here and nothing extends it: one more char needed
            return b.fixed("key-more", f"{plain}+")
        return State(node, depth, via, b.reserve(f"{hint}-{depth}"), children)

    def finish(state: State) -> str:
        leave = "".join(class_char(c) for c in state.children)
        state.options.append(seq(f'[^"\\\\\\x7F\\x00-\\x1F{leave}]', f"{plain}*"))
        body = " | ".join(state.options)
        if "" not in state.node:  # no declared name ends here, so the key may stop
            body = f"( {body} )?"
        return b.set(state.name, body)

    first = enter(trie, 0, "")
    root = first if isinstance(first, str) else ""
    stack = [] if isinstance(first, str) else [first]
    while stack:
        state = stack[-1]
        if len(state.options) < len(state.children):
            c = state.children[len(state.options)]
            child = enter(state.node[c], state.depth + 1, c)
            if isinstance(child, str):
                state.options.append(seq(literal(c), child))
            else:
                stack.append(child)
            continue
        stack.pop()
        rule = finish(state)
        if stack:
            stack[-1].options.append(seq(literal(state.via), rule))
        else:
            root = rule
    return b.define(hint, f'"\\"" {root} "\\""')
