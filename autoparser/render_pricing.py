"""What a template may spend while it renders: the active render's budget and the checks that
price an operation before it runs.

A single C-level operation (`str * n`, `format` with a wide spec, comparing two lists built by
doubling) cannot be interrupted once started, so everything that multiplies size or walks a whole
container is priced here first, against the thread-local `render_budget` that `render.py` sets
for each render. Every refusal raises `LimitHit`, which `render.py` turns into a
`RenderLimitExceeded` with a one-line message.
"""

from __future__ import annotations

import codecs
import math
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import wraps
from typing import Any

from jinja2.sandbox import SandboxedFormatter
from markupsafe import EscapeFormatter


@dataclass(frozen=True)
class RenderLimits:
    """Bounds for one render: wall-clock seconds and characters of any produced string."""

    seconds: float = 2.0
    max_chars: int = 4_000_000


DEFAULT_LIMITS = RenderLimits()


class LimitHit(Exception):
    """Raised from inside template code; deliberately not a TypeError/LookupError so nothing in
    jinja's runtime mistakes it for a missing attribute and swallows it."""


class _Budget(threading.local):
    """The active render's limits. Thread-local because the server renders in worker threads."""

    deadline: float = math.inf
    seconds: float = DEFAULT_LIMITS.seconds
    max_chars: int = DEFAULT_LIMITS.max_chars
    allow_mutation: bool = False
    inputs: frozenset[int] = frozenset()
    clock_offset: float = 0.0
    used_randomness: bool = False


render_budget = _Budget()


def too_big(what: str) -> LimitHit:
    return LimitHit(f"template output would exceed {render_budget.max_chars:,} characters (in {what})")


def check_chars(n: int, what: str) -> None:
    if n > render_budget.max_chars:
        raise too_big(what)


def estimated_chars(value: Any, budget: int) -> int:
    """Roughly how many characters `str()` or JSON of `value` produces; stops early past `budget`.

    Containers built from shared references (`[s] * 1000`, `l = [l, l]` repeated) print far
    larger than they occupy in memory, so printing one must be priced before it is done. Each
    distinct container is measured once (its size remembered by identity), so pricing such a
    structure costs as little as the structure itself; a container that holds itself is endless.
    """
    known: dict[int, int] = {}
    open_ids: set[int] = set()
    frames: list[list[Any]] = []  # [container id, children, next child index, size so far]

    def enter(item: Any) -> int | None:
        """The size of `item` when known at once; otherwise opens a frame for it."""
        if isinstance(item, str | bytes | bytearray):
            return len(item) + 3
        is_mapping = isinstance(item, Mapping)
        if not is_mapping and not isinstance(item, list | tuple | set | frozenset):
            return 8
        key = id(item)
        if key in known:
            return known[key]
        if key in open_ids:
            return budget + 1
        if is_mapping:
            own, children = 2 + 4 * len(item), [*item.keys(), *item.values()]
        else:
            own, children = 2 + 2 * len(item), list(item)
        open_ids.add(key)
        frames.append([key, children, 0, own])
        return None

    total = enter(value)
    while frames:
        frame = frames[-1]
        if frame[3] > budget:
            return frame[3]
        if frame[2] < len(frame[1]):
            child = frame[1][frame[2]]
            frame[2] += 1
            size = enter(child)
            if size is not None:
                frame[3] += size
            continue
        frames.pop()
        known[frame[0]] = frame[3]
        open_ids.discard(frame[0])
        if frames:
            frames[-1][3] += frame[3]
        else:
            total = frame[3]
    return total if total is not None else 0


def check_estimate(value: Any, what: str) -> None:
    if type(value) is str:
        check_chars(len(value), what)
    else:
        check_chars(estimated_chars(value, render_budget.max_chars), what)



_WIDTH_NUMBER = re.compile(r"\d{4,}")
_NESTED_FIELD = re.compile(r"\{[^{}]*\{")
MAX_INT_BITS = 100_000
"""The largest integer (in bits) a template may compute: about 30,000 decimal digits."""


def as_width(digits: str) -> int:
    """A width written in a format, without converting an endless digit string."""
    return int(digits) if len(digits) <= 12 else 10 ** 12


def check_compared(value: Any) -> None:
    """Comparing or hashing a container walks all of it: `a == b` of two lists built by doubling
    (`a = [a, a]` sixty times) visits 2**60 items in one C call that no deadline can interrupt,
    so containers are priced by their printed size before they are compared or hashed."""
    if isinstance(value, list | tuple | Mapping | set | frozenset):
        if estimated_chars(value, render_budget.max_chars) > render_budget.max_chars:
            raise LimitHit(f"template compared or hashed a value too large to compare in time "
                            f"(over {render_budget.max_chars:,} characters printed)")


def check_int_arg(value: Any, what: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > render_budget.max_chars:
        raise LimitHit(f"template asked for a size of {value:,} in {what}, over the "
                        f"{render_budget.max_chars:,}-character limit")


def check_format_string(fmt: str, args: Any, what: str) -> None:
    """`'%999999999d' % 1`, `'{:>999999}' * 1000`, `'{0:{1}}'.format(x, 3999999)` and
    `'{0}{0}{0}…'.format(big)` allocate far more than their inputs; price them before running.

    Every field may be as wide as the widest value, the largest width written in the format, and
    (when widths can come from the arguments: nested `{}` or `*`) the largest integer argument.
    """
    widths = [as_width(number) for number in _WIDTH_NUMBER.findall(fmt)]
    for width in widths:
        check_int_arg(width, what)
    values = list(args.values()) if isinstance(args, Mapping) else list(args)
    for value in values:
        check_int_arg(value, what)
    fields = fmt.count("%") + fmt.count("{")
    if not fields:
        return
    widest = max((estimated_chars(v, render_budget.max_chars) for v in values), default=0)
    widest += max(widths, default=0)
    if _NESTED_FIELD.search(fmt) or "*" in fmt:
        widest += max((abs(v) for v in values if isinstance(v, int) and not isinstance(v, bool)), default=0)
    check_chars(len(fmt) + fields * widest, what)


def check_translate(text: str, table: Any) -> None:
    """`s.translate({ord('x'): long})` writes `long` for every `x`: price the longest mapping."""
    if isinstance(table, Mapping):
        targets = list(table.values())
    elif isinstance(table, list | tuple):
        targets = list(table)
    else:
        targets = []
    longest = max((len(t) for t in targets if isinstance(t, str)), default=1)
    check_chars(len(text) * max(longest, 1), "translate")


def check_int_product(left: Any, right: Any) -> None:
    """Integers multiply in quadratic time and their size adds up: 16 squarings of a big number
    take seconds and gigabytes, so the product is priced by its bit length first."""
    if (isinstance(left, int) and isinstance(right, int) and not isinstance(left, bool)
            and not isinstance(right, bool) and left.bit_length() + right.bit_length() > MAX_INT_BITS):
        raise LimitHit(f"template computed a number too large (over {MAX_INT_BITS:,} bits, in *)")


def collect_priced(value: Any, what: str) -> list[Any]:
    """A lazy sequence as a list, priced item by item so a generator of large strings
    (`map('center', 3999999)`) is refused before it fills memory."""
    if isinstance(value, list):
        return value
    items: list[Any] = []
    total = 0
    for item in value:
        total += estimated_chars(item, render_budget.max_chars)
        if total > render_budget.max_chars:
            raise too_big(what)
        items.append(item)
    return items


def is_lazy(value: Any) -> bool:
    return not isinstance(value, str | Mapping | list | tuple | set | frozenset | range)


def _check_wordwrap(text: str, width: Any, break_long_words: Any = True) -> None:
    """textwrap is linear in the line but quadratic in a word longer than the width (it slices
    the rest of the word once per piece): estimate the time and refuse what would pass the
    deadline."""
    check_int_arg(width, "wordwrap")
    if not isinstance(width, int) or width < 1:
        return  # textwrap refuses it with a clear error
    longest = max((len(word) for word in text.split()), default=0) if break_long_words else 0
    seconds = len(text) * _WRAP_SECONDS_PER_CHAR
    if longest > width:
        seconds += longest * longest / width * _WRAP_SECONDS_PER_SLICED_CHAR
    if time.monotonic() + seconds > render_budget.deadline:
        raise LimitHit(f"template rendering would take longer than {render_budget.seconds:g} s "
                        f"(wordwrap of {len(text):,} characters at width {width})")


# measured on CPython 3.11: about 1 us per character, 0.7 ns per character sliced off a long word
_WRAP_SECONDS_PER_CHAR = 1e-6
_WRAP_SECONDS_PER_SLICED_CHAR = 1e-9


def check_replace(text: Any, old: Any, new: Any, count: Any = -1) -> None:
    if len(new) > len(old):
        hits = text.count(old)
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        check_chars(len(text) + hits * (len(new) - len(old)), "replace")


def check_join(pieces: list[Any], separator: str) -> None:
    total = len(separator) * max(len(pieces) - 1, 0)
    for piece in pieces:
        total += estimated_chars(piece, render_budget.max_chars)
        check_chars(total, "join")


# Codecs whose running time grows with the square of the text (punycode's encoder rescans the
# whole text once per distinct character: 8,000 characters take 12 s on CPython 3.11), and the
# most bytes any codec writes per character (`\U0001f600` for the escape codecs, 4 otherwise).
_QUADRATIC_CODECS = frozenset({"punycode", "idna"})
_PUNYCODE_SECONDS_PER_CHAR_SQUARED = 2e-7
_ESCAPE_CODECS = frozenset({"unicode-escape", "raw-unicode-escape"})


def check_codec(text: str | bytes | bytearray, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """`str.encode` / `bytes.decode`: priced by the bytes written and, for the quadratic codecs,
    by the time they would take."""
    encoding = args[0] if args else kwargs.get("encoding", "utf-8")
    try:
        codec = codecs.lookup(str(encoding)).name
    except LookupError:
        return  # the call itself raises a clear error
    if codec in _QUADRATIC_CODECS:
        seconds = len(text) ** 2 * _PUNYCODE_SECONDS_PER_CHAR_SQUARED
        if time.monotonic() + seconds > render_budget.deadline:
            raise LimitHit(f"template rendering would take longer than {render_budget.seconds:g} s "
                            f"({name} of {len(text):,} characters with {codec})")
    if name == "encode":
        check_chars(len(text) * (10 if codec in _ESCAPE_CODECS else 4), f"{codec} encoding")


_ESCAPED = "<>&\"'"


def _escape_check(value: Any, *args: Any, **kwargs: Any) -> None:
    """HTML escaping writes up to five characters for one (`&#34;`)."""
    if isinstance(value, str):
        check_chars(len(value) + 4 * sum(map(value.count, _ESCAPED)), "escape")
    else:
        check_chars(5 * estimated_chars(value, render_budget.max_chars), "escape")


def _xmlattr_check(value: Any, *args: Any, **kwargs: Any) -> None:
    """Every attribute value is escaped (five characters for one) and quoted."""
    check_chars(5 * estimated_chars(value, render_budget.max_chars), "xmlattr")


def _urlencode_check(value: Any, *args: Any, **kwargs: Any) -> None:
    """Percent-encoding writes three characters per UTF-8 byte, up to four bytes a character."""
    size = len(value) if isinstance(value, str) else estimated_chars(value, render_budget.max_chars)
    check_chars(12 * size, "urlencode")


def _urlize_check(value: Any, trim_url_limit: Any = None, nofollow: Any = False, target: Any = None,
                  rel: Any = None, extra_schemes: Any = None) -> None:
    """Each link repeats `target` and `rel`; a text of short URLs with a long `target` multiplies."""
    text = str(value)
    words = len(text.split()) if len(text) <= render_budget.max_chars else len(text)
    per_link = 80 + len(str(target or "")) + len(str(rel or ""))
    check_chars(5 * len(text) + words * per_link, "urlize")


def guard_filter(filters: dict[str, Any], name: str, check: Any) -> None:
    """Wrap a built-in filter so `check(value, *args, **kwargs)` runs first; jinja's pass-arg
    markers (eval context, environment) are kept by `wraps` and skipped when checking."""
    original = filters[name]
    pass_arg = getattr(original, "jinja_pass_arg", None)

    @wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        check(*(args[1:] if pass_arg is not None else args), **kwargs)
        return original(*args, **kwargs)

    filters[name] = guarded


def _ints_only(value: Any, *args: Any, **kwargs: Any) -> None:
    for arg in (*args, *kwargs.values()):
        check_int_arg(arg, "a filter argument")


def _indent_check(value: Any, width: Any = 4, *args: Any, **kwargs: Any) -> None:
    width = kwargs.get("width", width)
    pad = width if isinstance(width, int) else len(str(width))
    check_int_arg(pad, "indent")
    text = str(value)
    check_chars(len(text) + pad * (text.count("\n") + 1), "indent")


def _replace_check(value: Any, old: Any = "", new: Any = "", count: Any = None, **kwargs: Any) -> None:
    check_replace(str(value), str(old), str(new), -1 if count is None else count)


def _format_check(value: Any, *args: Any, **kwargs: Any) -> None:
    check_format_string(str(value), kwargs or args, "format")


def _sum_check(iterable: Any, attribute: Any = None, start: Any = 0) -> None:
    if isinstance(iterable, list | tuple) and not isinstance(start, int | float):
        check_join(list(iterable), "")


def _print_check(value: Any, *args: Any, **kwargs: Any) -> None:
    check_estimate(value, "printing a value")


FILTER_GUARDS = {
    "center": _ints_only, "batch": _ints_only, "slice": _ints_only, "truncate": _ints_only,
    "indent": _indent_check, "replace": _replace_check,
    "format": _format_check, "sum": _sum_check, "string": _print_check, "pprint": _print_check,
    "escape": _escape_check, "e": _escape_check, "forceescape": _escape_check,
    "xmlattr": _xmlattr_check, "urlencode": _urlencode_check, "urlize": _urlize_check,
}

# Filters that consume their whole input: a lazy one is collected with pricing first. The ones
# marked True also compare items, which for nested lists built from shared references costs as
# much as printing them, so the collected input is priced as if printed.
CONSUMING_FILTERS = {
    "list": False, "reverse": False, "last": False, "random": False, "batch": False, "slice": False,
    "sum": False, "sort": True, "unique": True, "min": True, "max": True, "dictsort": True,
    "groupby": True,
}


def consuming_filter(original: Any, name: str, compares: bool) -> Any:
    """Wrap a filter whose first value argument is consumed whole (see `CONSUMING_FILTERS`)."""
    skip = 1 if getattr(original, "jinja_pass_arg", None) is not None else 0

    @wraps(original)
    def consuming(*args: Any, **kwargs: Any) -> Any:
        if len(args) > skip:
            value = args[skip]
            if is_lazy(value):
                value = collect_priced(value, name)
                args = (*args[:skip], value, *args[skip + 1:])
            if compares and isinstance(value, list | tuple | Mapping):
                check_estimate(value, name)
        return original(*args, **kwargs)

    return consuming


def bounded_join(original: Any) -> Any:
    """`join`, priced first. Lazy inputs (`map()` results) are collected with pricing, so the
    guard has to call the filter itself rather than only inspect its arguments."""

    @wraps(original)
    def join(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> Any:
        items = collect_priced(value, "join") if is_lazy(value) else list(value)
        check_join(items, str(d))
        return original(eval_ctx, items, d, attribute)

    return join


def bounded_wordwrap(original: Any) -> Any:
    """`wordwrap`, priced by the time textwrap would take and wrapped one line at a time with a
    clock check between lines (jinja wraps each line on its own too, so the result is the same)."""

    @wraps(original)
    def wordwrap(environment: Any, s: Any, width: int = 79, break_long_words: bool = True,
                 wrapstring: str | None = None, break_on_hyphens: bool = True) -> str:
        text = str(s)
        _check_wordwrap(text, width, break_long_words)
        separator = environment.newline_sequence if wrapstring is None else wrapstring
        pieces = []
        for line in text.splitlines():
            environment.autoparser_tick()
            pieces.append(original(environment, line, width, break_long_words, separator, break_on_hyphens))
        return separator.join(pieces)

    return wordwrap


def finalize_output(value: Any) -> Any:
    """Runs on every `{{ value }}`: containers are priced before jinja calls `str()` on them."""
    if type(value) is not str and isinstance(value, Mapping | list | tuple | set | frozenset):
        check_estimate(value, "printing a value")
    return value


_SPEC_NUMBER = re.compile(r"\d+")


class PricedFormatter(SandboxedFormatter):
    """The sandbox's `str.format`, pricing each field before it is formatted.

    A field's width and precision are read from its format spec as resolved, so widths given
    by nested fields (`{0:{1}}`), as text (`'{:{}}'.format(x, '999999999')`) or pieced together
    from several (`{0:{1}{2}}`) all count; the characters written so far are counted too.
    """

    def __init__(self, env: Any, **kwargs: Any) -> None:
        super().__init__(env, **kwargs)
        self._written = 0

    def vformat(self, format_string: str, args: Any, kwargs: Any) -> str:
        self._written = len(format_string)
        return super().vformat(format_string, args, kwargs)

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion is not None:
            check_estimate(value, "format")
        return super().convert_field(value, conversion)

    def format_field(self, value: Any, format_spec: str) -> Any:
        spec = sum(as_width(digits) for digits in _SPEC_NUMBER.findall(format_spec))
        check_int_arg(spec, "a format spec")
        self._written += spec + (len(value) if isinstance(value, str) else estimated_chars(value, render_budget.max_chars))
        check_chars(self._written, "format")
        return super().format_field(value, format_spec)


class PricedEscapeFormatter(PricedFormatter, EscapeFormatter):
    pass


class SizedBuffer(list):
    """A macro's or set-block's output buffer that refuses to grow past the size limit."""

    __slots__ = ("_chars",)

    def __init__(self) -> None:
        super().__init__()
        self._chars = 0

    def append(self, item: Any) -> None:
        self._chars += len(item)
        if self._chars > render_budget.max_chars:
            raise too_big("a macro or set block")
        super().append(item)

    def extend(self, items: Any) -> None:
        for item in items:
            self.append(item)
