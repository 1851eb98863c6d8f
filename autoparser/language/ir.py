"""The output language as data: small frozen nodes that every backend reads the same way.

A `Language` is what one request lets the model write after its prompt. `build.build_language`
makes it from an analysis and a request; the GBNF backend writes it as a grammar. The nodes:

* `Lit`: literal text; `special` when it is one special token of the vocabulary (a backend
  references the token, not its spelling), `spelled` when that token is also accepted written
  out as text (where generation resumes from text a trigger matched); `bounded` when text that
  ends in a word character is not this marker where a word character follows it (the word
  `thought` is not read in `thoughtful`); `not_before`: not this marker where that one follows;
* `Chars`: a run of characters from a class (`a-zA-Z0-9_`), `min` to `max` long, none of the
  runs in `excluded` (the keys a schema names, where a member reads any other key);
* `Text`: free text up to a set of markers (`stops`); it may end only where the marker that
  follows (`end`) would be found exactly there, so splitting at the first marker gives it back;
  `limit` bounds its length; `weak` makes one stop count only before the right thing;
  `not_first`: markers it does not begin with (the parser reads the marker there), `bounded` as
  a `Lit`'s (a marker word there only where no word character follows it);
* `Seq`, `Choice`, `Repeat`: sequence, alternatives, repetition (`max` None: unbounded);
* `Gap`: optional whitespace between structural parts, at most `max` characters; `not_line`: not
  before a line indented that many spaces or more (`Gap(0, n)` reads nothing: where a call whose
  arguments are lines at that indentation ends, such a line is the call's, not what follows it);
* `Json`: a JSON value typed by a schema (`kind` "schema"), or any value / string / object;
* `PyValue`: a tagged value written as a JSON or Python literal (`'text'`, `True`, `None`),
  spelled as its `Spelling` says;
* `RawString`: a string value written as raw text up to `end`, typed by its schema;
* `Bracketed`: an object or array in the template's own syntax, up to its closing bracket;
* `Members`: an object's members in order, required ones present, optional ones skippable
  (`any_order`: in any order, each optional); a member that holds a key and no value node (a key
  the model closed with no value after it) adds nothing to the object;
* `Capture`: the text its body matches is a part of the message (`ROLES`);
* `Rule`: a named part, for reading and for sharing (a backend may name a rule after it);
* `Lazy`: free output until a trigger; from the trigger on, the body applies. Triggers count
  only outside reasoning (`Guard`), except a trigger that is one special token (`anywhere`).

One rule about reasoning is the parser's and therefore the full language's: reasoning that has
no end marker after it ends where the tool calls begin (`build_generation._Builder.reasoning_then`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

REASONING, CONTENT, TOOL_NAME, ARGUMENTS, CALL_ID = "reasoning", "content", "tool_name", "arguments", "id"
ROLES = (REASONING, CONTENT, TOOL_NAME, ARGUMENTS, CALL_ID)
# what a `Rule` is: the call section (what it reads is held until a call in it begins), one call's
# own structure, a later call with the separator before it, one argument of a call
SECTION, CALL, NEXT_CALL, MEMBER = "section", "call", "next-call", "member"
# a marker read as markup where a text beside it could also hold it (the reading prefers it)
MARKUP = "markup"
# markers read as the text of the role around them, a reading kept where the one that reads them
# as structure breaks (it ranks below any other)
AS_TEXT = "as-text"


@dataclass(frozen=True)
class Lit:
    """A marker. `exact`: one that is whitespace alone (a line break and an argument's
    indentation) is read whole, as written: a line indented less is no such marker; `bounded`: one
    that ends in a word character is not there where a word character follows it; `not_before`: it
    is not there where that marker follows it, whitespace aside, nor at the end of the output
    before whitespace or a part of that marker, which may still come (a key's closing tag that
    ends a key with no value: not before the value's opening tag)."""

    text: str
    special: bool = False
    spelled: bool = False
    exact: bool = False
    bounded: bool = False
    not_before: str = ""


@dataclass(frozen=True)
class Chars:
    allowed: str  # a character class body, as written between brackets in a regex
    min: int = 1
    max: int | None = None
    excluded: tuple[str, ...] = ()


@dataclass(frozen=True)
class Weak:
    """`marker` ends the text only where `before` follows it, after whitespace and (`word`) a
    word: `, days=`; a bracket that opens a bare JSON call only before a key's quote (`{"`); a
    call's opener that ends a raw value only where a call goes on after it
    (`<tool_call>get_weather\n<arg_key>`: the model began the next call; the opener alone is text).
    `leads`: the text may begin with the marker (where it opened nothing, it is text).
    `indent`: the marker is a line break. It counts before a line indented exactly this many
    spaces that begins as a word does, whatever follows (as in YAML, a line at the keys'
    indentation never goes on with the value: it is the next key, or text that breaks the call),
    and before a line indented less that begins with a word and `before` (the next call's
    header); a line indented deeper (a nested block), less without that (a string's next line)
    or at the keys' with no word (`}` of a JSON value) is the value's. At the end of the output,
    a line no deeper than the keys' that may still become one that counts (`call` of `call:`)
    counts too: a marker cut off, as a cut marker ends a value (`cut_follows`).
    None: the marker counts after any whitespace, then (`word`) a word, then `before`; with `cut`,
    at the end of the output, also before whitespace and what may still become the word
    (`Paris, da` of `Paris, days=`: the value is `Paris`, as a JSON value whose call was cut in the
    next key).
    `header`: with `indent`, a line indented less that begins with it counts too: the next call's
    opener where it does not begin as a word does (`- name:` of a YAML-like list of calls)."""

    marker: str
    before: str
    word: bool = True
    leads: bool = False
    indent: int | None = None
    cut: bool = False
    header: str = ""

    def follows(self, escape: Callable[[str], str]) -> str:
        """The regex of what must follow the marker for it to count, `before` escaped by `escape`."""
        word = WORD if self.word else ""
        if self.indent is None:
            return r"\s*" + word + escape(self.before)
        keys = rf"[ \t]{{{self.indent}}}[^\W\d]"
        less = word + escape(self.before) + (f"|{escape(self.header)}" if self.header else "")
        return rf"(?:{keys}|[ \t]{{0,{self.indent - 1}}}(?:{less}))" if self.indent else keys

    def cut_follows(self) -> str | None:
        """The regex of what may follow the marker at the end of the output for it to count (a
        line that may still become one it counts before); None: nothing more than `follows`."""
        if self.indent is None:
            return rf"\s*(?:{WORD})?\Z" if self.cut and self.word else None
        header = "".join(f"|{re.escape(self.header[:n])}" for n in range(1, len(self.header)))
        begun = rf"|[ \t]{{0,{self.indent - 1}}}(?:{header[1:]})" if header and self.indent else ""
        return rf"(?:[ \t]{{0,{self.indent}}}(?:{WORD if self.word else ''})?{begun})\Z"


WORD = r"[^\W\d][\w.\-]*\s*"  # a key or a name as the parser reads one, and the spaces after it


def indented_line(indent: int) -> str:
    """The regex of a line break then a line indented `indent` spaces or more (`Gap.not_line`)."""
    return rf"\n[ \t]{{{indent},}}\S"


@dataclass(frozen=True)
class Text:
    stops: tuple[str, ...]
    end: str | None = None
    limit: int | None = None
    weak: Weak | None = None
    hint: str = "text"
    nonempty: bool = False
    not_first: tuple[str, ...] = ()  # markers the text does not begin with (after whitespace)
    bounded: bool = False  # a `not_first` marker ending in a word character: not before another


@dataclass(frozen=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Choice:
    options: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat:
    item: Node
    min: int = 0
    max: int | None = None


@dataclass(frozen=True)
class Gap:
    max: int
    not_line: int | None = None


@dataclass(frozen=True)
class Json:
    """A JSON value. `kind`: "schema" (typed by `schema`, a part of `owner`'s `root` schema at
    `path`), "any", "string" or "object". `note` is a warning to report with the value."""

    kind: str = "any"
    owner: str = ""
    root: Any = None
    schema: Any = None
    path: str = "$"
    hint: str = ""
    note: str = ""

    def __hash__(self) -> int:  # the schemas are dicts: equal nodes hash alike by their names
        return hash((self.__class__, self.kind, self.owner, self.path, self.hint))


@dataclass(frozen=True)
class Spelling:
    """How the template's literal values are written, as the builder states it for the readers: a
    string between two of the same `quotes`, where `escape` makes the character after it part of
    the text; a nested value from one of `opens` to its match in `closes`; else a bare word, which
    ends at whitespace, a quote, a closing bracket or one of `separators`. `null`, `true`, `false`:
    the words for no value (a nullable string's) and the two booleans. JSON's own spelling of
    strings and constants is read beside it, as JSON is read wherever a literal is."""

    quotes: str
    opens: str
    closes: str
    escape: str
    separators: str
    null: str
    true: str = "true"
    false: str = "false"


@dataclass(frozen=True)
class PyValue:
    """A value written as a literal, JSON or Python spelling; `schema` None: any value."""

    owner: str
    root: Any
    schema: Any
    path: str
    hint: str
    spelling: Spelling
    nested: tuple[str, ...] = ()  # the template's own syntax for objects and arrays (`values.nested_to_json`)

    def __hash__(self) -> int:  # the schemas are dicts: equal nodes hash alike by their names
        return hash((self.__class__, self.owner, self.path, self.hint))


@dataclass(frozen=True)
class RawString:
    """A string of `schema` written as raw text before `end`; `text` where the schema sets no
    pattern, format or value; `bounded`: the schema's length bounds apply to that text."""

    owner: str
    root: Any
    schema: Any
    path: str
    hint: str
    end: str
    text: Node
    bounded: bool = True
    as_json: bool = False  # the text is a JSON value whatever the schema (the marker before it says so)
    nested: tuple[str, ...] = ()  # the template's own syntax for objects and arrays (`values.nested_to_json`)
    # a value written as a literal of this spelling (quoted, `None`, `True`, a number, a list or a
    # dict) is that literal's value; other text is the raw string (`name(key=value)` calls)
    literals: Spelling | None = None
    # the word that is null where the schema allows null (raw text has no other way to write it)
    null: str = ""
    # the JSON text of a value written as no text (`[]`, `{}`, `""`), None where no text is no
    # value: where the template writes an object or array as its members' or elements' markup
    # alone, an empty one is written as nothing (the builder's `empty_collection`)
    empty: str | None = None

    def __hash__(self) -> int:  # the schemas are dicts: equal nodes hash alike by their names
        return hash((self.__class__, self.owner, self.path, self.hint, self.end))


@dataclass(frozen=True)
class Bracketed:
    """An object or array written with the template's own string quote and bare keys
    (`{theme:<|"|>dark<|"|>,count:3}`), up to its closing bracket; quoted text is skipped."""

    quote: str


@dataclass(frozen=True)
class Members:
    """`owner`'s arguments as members (`root`: the tool's schema, which the values are part of)."""

    items: tuple[tuple[Node, bool], ...]  # (member, required)
    separator: Node
    extra: Node | None
    hint: str
    owner: str = ""
    root: Any = None
    any_order: bool = False  # members in any order, none required (as the parser reads them)

    def __hash__(self) -> int:  # the schemas are dicts: equal nodes hash alike by their names
        return hash((self.__class__, self.hint, self.owner, self.any_order))


@dataclass(frozen=True)
class Capture:
    role: str
    body: Node


@dataclass(frozen=True)
class Rule:
    """A named part. `kind` says what it is to every backend (`SECTION`, `CALL`, `MEMBER`, `MARKUP`,
    `AS_TEXT`, or "" for a name only); a member's `key` is the argument it holds (None: any key)."""

    name: str
    body: Node
    kind: str = ""
    key: str | None = None


@dataclass(frozen=True)
class Guard:
    """Where triggers do not count: inside reasoning between `start` and `end`. `inside`: the
    output starts in reasoning; `start` empty: reasoning can only be that first block; `alone`:
    the start marker's tag, which opens reasoning by itself too ("": none)."""

    start: str
    end: str
    inside: bool
    alone: str = ""


@dataclass(frozen=True)
class Lazy:
    """`anywhere`: the triggers that count inside reasoning too (one special token each, which
    a model does not write by mentioning it): there the calls end the reasoning."""

    triggers: tuple[str, ...]
    guard: Guard | None
    body: Node
    anywhere: tuple[str, ...] = ()


Node = Lit | Chars | Text | Seq | Choice | Repeat | Gap | Json | PyValue | RawString | Bracketed | Members | Capture \
    | Rule | Lazy
EMPTY = Seq(())


@dataclass(frozen=True)
class Language:
    """`continues`: the role whose text the output goes on with, where the prompt ended inside the
    assistant's own reasoning or answer (prefill); its leading whitespace is kept.
    `reasoning_end`: the marker that ends reasoning (a reader that resumes after reasoning is
    over reads it as text).
    `bare_calls`: calls open with a bracket and no marker (bare JSON), and a bracket that opens no
    call is content; after such calls, content may follow as freely as before them.
    `value_section`: the section (opening, closing) a raw argument value may be wrapped in (XML
    CDATA), read whole: the markers inside it are the value's text, the section's are not.
    `resync`: where a call may begin again after one that broke, for calls that end only in
    punctuation (a later call's separator and its first markers up to a word, `, { "name"`, or a
    later section's opener up to a word, the section the broken call was in left unended):
    the broken call's text is content up to one of them, and the calls go on from there."""

    root: Node
    warnings: tuple[str, ...] = field(default=())
    continues: str = ""
    reasoning_end: str = ""
    bare_calls: bool = False
    value_section: tuple[str, ...] = ()
    resync: tuple[str, ...] = ()

    def __str__(self) -> str:
        return describe(self.root)

    def markers(self) -> frozenset[str]:
        """Every marker the language reads or stops at (structure, reasoning, calls, end of turn),
        stripped: what the server must keep as special tokens and never show as text."""
        found: set[str] = set()
        for node in walk(self.root):
            if isinstance(node, Lit):
                found.add(node.text.strip())
            elif isinstance(node, Text):
                found.update(s.strip() for s in (*node.stops, *node.not_first))
            elif isinstance(node, Lazy):
                found.update(t.strip() for t in node.triggers)
            elif isinstance(node, Guard):
                found.update((node.start.strip(), node.end.strip(), node.alone.strip()))
        found.update(self.value_section)
        found.discard("")
        return frozenset(found)

    def reasoning_markers(self) -> frozenset[str]:
        """The markers that open and close reasoning: those next to a reasoning capture."""
        found: set[str] = set()
        for node in walk(self.root):
            if isinstance(node, Seq):
                for before, after in zip(node.items, node.items[1:], strict=False):
                    if isinstance(before, Lit) and any(_is_reasoning(n) for n in _leading(after)):
                        found.add(before.text.strip())
                    elif isinstance(after, Lit) and _is_reasoning(before):
                        found.add(after.text.strip())
            elif isinstance(node, Guard):
                found.update((node.start.strip(), node.end.strip(), node.alone.strip()))
        found.discard("")
        return frozenset(found)

    def call_openers(self) -> frozenset[str]:
        """The markers a call section or a call begins with."""
        found: set[str] = set()
        for node in walk(self.root):
            if isinstance(node, Rule) and node.kind in (SECTION, CALL):
                found.update(n.text.strip() for n in _leading(node.body) if isinstance(n, Lit))
            elif isinstance(node, Lazy):
                found.update(t.strip() for t in node.triggers)
        found.discard("")
        return frozenset(found)


def to_json(value: Any) -> Any:
    """A language or node as JSON data (`{"$node": "Seq", "items": {"$tuple": [...]}}`); the
    schemas it holds stay as they are. `from_json` reads it back."""
    if isinstance(value, tuple):
        return {"$tuple": [to_json(item) for item in value]}
    if is_dataclass(value) and not isinstance(value, type):
        return {"$node": type(value).__name__, **{f.name: to_json(getattr(value, f.name)) for f in fields(value)}}
    return value


def from_json(data: Any) -> Any:
    """What `to_json` wrote, as nodes again."""
    if isinstance(data, dict) and "$tuple" in data:
        return tuple(from_json(item) for item in data["$tuple"])
    if isinstance(data, dict) and "$node" in data:
        cls = _NODE_TYPES[data["$node"]]
        return cls(**{key: from_json(value) for key, value in data.items() if key != "$node"})
    return data


def children(node: Any) -> tuple[Any, ...]:
    """The nodes a node holds, in order (a choice's options, a member's body, a guard...)."""
    out: list[Any] = []
    for f in fields(node):
        value = getattr(node, f.name)
        if isinstance(value, tuple):
            for item in value:
                if isinstance(item, tuple):  # Members.items: (member, required)
                    out.extend(i for i in item if _is_node(i))
                elif _is_node(item):
                    out.append(item)
        elif _is_node(value):
            out.append(value)
    return tuple(out)


def walk(node: Any) -> Iterator[Any]:
    """Every node under `node` once (shared parts are visited once), without recursion."""
    seen: set[int] = set()
    todo = [node]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo.extend(reversed(children(current)))


def _is_node(value: Any) -> bool:
    return is_dataclass(value) and not isinstance(value, type) and not isinstance(value, Language)


def _is_reasoning(node: Any) -> bool:
    return isinstance(node, Capture) and node.role == REASONING


def _leading(node: Any) -> list[Any]:
    """The markers and captures `node` may begin with, looking through sequences (past gaps),
    choices and named parts."""
    found: list[Any] = []
    todo = [node]
    seen: set[int] = set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, Lit | Capture):
            found.append(current)
        if isinstance(current, Seq) and current.items:
            lead = next((i for i in current.items if not isinstance(i, Gap)), None)
            todo.extend([lead] if lead is not None else [])
        elif isinstance(current, Choice):
            todo.extend(current.options)
        elif isinstance(current, Rule):
            todo.append(current.body)
    return found


def seq(*items: Node | None) -> Node:
    """A sequence without empty parts (one part stands alone)."""
    parts = tuple(i for i in items if i is not None and i != EMPTY)
    return parts[0] if len(parts) == 1 else Seq(parts)


def choice(*options: Node) -> Node:
    unique = tuple(dict.fromkeys(options)) if all(_hashable(o) for o in options) else tuple(options)
    return unique[0] if len(unique) == 1 else Choice(unique)


def optional(item: Node) -> Node:
    return EMPTY if item == EMPTY else Repeat(item, 0, 1)


def _hashable(node: Node) -> bool:
    try:
        hash(node)
    except TypeError:
        return False
    return True


# -- printing ----------------------------------------------------------------------------------


def describe(node: Node) -> str:
    """The language as readable text: named parts first-seen order, one per line."""
    rules: dict[str, str] = {}
    if isinstance(node, Choice):  # one option a line
        top = "\n    | ".join(_show(option, rules) for option in node.options)
    else:
        top = _show(node, rules)
    lines = [f"language ::= {top}"] + [f"{name} ::= {body}" for name, body in rules.items()]
    return "\n".join(lines) + "\n"


def _show(node: Node, rules: dict[str, str]) -> str:  # noqa: C901 - one case per node kind
    if isinstance(node, Lit):
        flag = " special" if node.special else ""
        flag += f" not before {node.not_before!r}" if node.not_before else ""
        return f"{node.text!r}{flag}{' or spelled' if node.spelled else ''}"
    if isinstance(node, Chars):
        but = f" but {' '.join(repr(k) for k in node.excluded)}" if node.excluded else ""
        return f"[{node.allowed}]{_bounds(node.min, node.max)}{but}"
    if isinstance(node, Text):
        stops = " ".join(repr(s) for s in dict.fromkeys(node.stops) if s.strip())
        extra = f" then {node.end!r}" if node.end else ""
        extra += f" at most {node.limit}" if node.limit is not None else ""
        if node.weak:
            extra += f" ({node.weak.marker!r} only before {'a word and ' if node.weak.word else ''}{node.weak.before!r})"
        extra += " not empty" if node.nonempty else ""
        extra += f" not starting with {' '.join(repr(m) for m in node.not_first)}" if node.not_first else ""
        return _named(node.hint, f"text-without({stops}){extra}", rules)
    if isinstance(node, Seq):
        return " ".join(_show(i, rules) if isinstance(i, Seq) else _group(i, rules) for i in node.items) \
            if node.items else "''"
    if isinstance(node, Choice):
        return " | ".join(_show(o, rules) for o in node.options)
    if isinstance(node, Repeat):
        return f"{_group(node.item, rules)}{_bounds(node.min, node.max)}"
    if isinstance(node, Gap):
        barred = f" not before a line indented {node.not_line}+" if node.not_line is not None else ""
        return f"gap{{0,{node.max}}}{barred}"
    if isinstance(node, Json):
        typed = f" {node.owner}{node.path[1:]}" if node.kind == "schema" else ""
        return f"json-{node.kind}{typed}"
    if isinstance(node, PyValue):
        return f"literal {node.owner}{node.path[1:]}" if node.schema is not None else "literal"
    if isinstance(node, RawString):
        kind = "json-text" if node.as_json else "raw-string"
        empty = f" (nothing: {node.empty})" if node.empty is not None else ""
        return f"{kind} {node.owner}{node.path[1:]}{empty} else {_show(node.text, rules)}"
    if isinstance(node, Bracketed):
        return f"bracketed quoted by {node.quote!r}"
    if isinstance(node, Members):
        items = " ".join(_group(m, rules) + ("" if req else "?") for m, req in node.items)
        extra = f" {_group(node.extra, rules)}*" if node.extra is not None else ""
        return f"members({items}{extra} by {_show(node.separator, rules)})"
    if isinstance(node, Capture):
        return f"<{node.role}: {_show(node.body, rules)}>"
    if isinstance(node, Rule):
        if node.name not in rules:
            rules[node.name] = ""
            rules[node.name] = _show(node.body, rules)
        return node.name
    if isinstance(node, Lazy):
        guard = ""
        if node.guard is not None:
            where = "starting inside" if node.guard.inside else "outside"
            guard = f", not inside {node.guard.start!r}..{node.guard.end!r} ({where})"
            guard += f" except {' '.join(repr(t) for t in node.anywhere)}" if node.anywhere else ""
        return f"lazy on {' '.join(repr(t) for t in node.triggers)}{guard}: {_show(node.body, rules)}"
    raise TypeError(f"not a language node: {node!r}")


def _named(hint: str, body: str, rules: dict[str, str]) -> str:
    """A text printed once as a rule of its own, named by what it holds (`content`, `reasoning`,
    `content-2` for a second kind), so that the lines that use it stay short."""
    for number in range(1, len(rules) + 2):
        name = hint if number == 1 else f"{hint}-{number}"
        if rules.get(name) == body:
            return name
        if name not in rules:
            rules[name] = body
            return name
    raise AssertionError("unreachable")


def _group(node: Node, rules: dict[str, str]) -> str:
    text = _show(node, rules)
    return f"( {text} )" if isinstance(node, Choice | Seq) and len(_parts(node)) > 1 else text


def _parts(node: Seq | Choice) -> tuple[Node, ...]:
    return node.items if isinstance(node, Seq) else node.options


def _bounds(lo: int, hi: int | None) -> str:
    if (lo, hi) == (0, 1):
        return "?"
    if (lo, hi) == (0, None):
        return "*"
    if (lo, hi) == (1, None):
        return "+"
    if (lo, hi) == (1, 1):
        return ""
    return f"{{{lo},{'' if hi is None else hi}}}"


_NODE_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    Lit, Chars, Weak, Text, Seq, Choice, Repeat, Gap, Json, Spelling, PyValue, RawString, Bracketed, Members, Capture,
    Rule, Guard, Lazy, Language)}
