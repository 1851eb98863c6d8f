"""Render chat templates the way Hugging Face transformers does, inside a bounded sandbox.

What transformers' `apply_chat_template(..., tokenize=False)` does, and so what this does:

* an `ImmutableSandboxedEnvironment` with `trim_blocks` and `lstrip_blocks`, the `loopcontrols`
  extension and a `{% generation %}` tag that renders its body;
* a `tojson` filter with `ensure_ascii=False` that also takes `indent`, `separators`, `sort_keys`;
* the globals `raise_exception`, `strftime_now`, a `dict` that only builds dicts, and a
  `namespace` that refuses underscore-prefixed attribute names;
* the template sees `messages`, `tools` (None when not given), `documents` (None unless passed),
  `add_generation_prompt`, `bos_token`, `eos_token` and every extra keyword argument;
* message keys whose value is None are dropped, and a message's reasoning is visible under both
  `reasoning_content` and `thinking` (`render_messages.py` prepares the messages).

Where real templates need more than transformers gives, this renderer is deliberately kinder:

* Tool-call `arguments` may be a dict or a JSON string; either way the template gets a
  `JsonArguments`, a mapping whose text form is JSON (`render_messages.py` says more).
* `tojson` accepts generators (`map()` results), dict views and ranges, serializing them as lists.

A template is untrusted input, so rendering is fenced in:

* touching an unsafe attribute (`''.__class__`, `cycler.__init__.__globals__`, `list.append`)
  raises at once instead of quietly yielding an undefined value;
* a compiled-in check runs at the top of every loop iteration and macro call, so runaway loops
  and recursion stop at a wall-clock deadline (no signals: it works in any thread);
* a template over `MAX_TEMPLATE_CHARS` is refused before it is parsed;
* output and intermediate strings are capped in size, and the operations that multiply size
  (`*` and `**` on integers, strings, bytes and sequences, `%` and `format` with their widths as
  each field's spec resolves, padding and every integer size argument such as `int.to_bytes`,
  `replace`, `translate`, `join`, `tojson`, `escape`, `xmlattr`, `urlencode`, `urlize`,
  `strftime_now` widths, `encode`, printing containers, growing a list) are checked before they
  run. A single C-level operation cannot be interrupted once started, which is why the
  multiplying ones are checked beforehand rather than afterwards;
* for the same reason, the operations that walk a whole container in one call are priced by
  its printed size first: every comparison operand, dict-literal key, lookup key and test
  argument, and `count`/`index`/`remove` (two lists doubled sixty times compare for ever), as
  are the quadratic codecs (punycode, idna) by the time they would take;
* the filters that consume a lazy sequence (`map()` results into `join`, `list`, `sort`...)
  collect it item by item, pricing as they go, so a generator of large strings is refused before
  it fills memory; every filter call (including the ones `map` and `select` make per item)
  checks the clock, and `wordwrap` and the comparison filters (`sort`, `unique`, `min`, `max`,
  `dictsort`, `groupby`) are priced by the work they would do.

Every failure surfaces as a `TemplateRenderError` subclass with a one-line message. The prices
and the render's budget live in `render_pricing.py`; this module wires them into jinja.
"""

from __future__ import annotations

import json
import re
import threading
import time
import types
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import update_wrapper, wraps
from types import TracebackType
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame, operators
from jinja2.exceptions import SecurityError, TemplateError, TemplateSyntaxError
from jinja2.ext import Extension
from jinja2.runtime import Context, LoopContext
from jinja2.sandbox import (
    ImmutableSandboxedEnvironment,
    SandboxedEnvironment,
    modifies_known_mutable,
)
from jinja2.utils import Namespace, pass_eval_context
from markupsafe import Markup

from autoparser.render_messages import prepare_messages
from autoparser.render_pricing import (
    CONSUMING_FILTERS,
    DEFAULT_LIMITS,
    FILTER_GUARDS,
    MAX_INT_BITS,
    LimitHit,
    PricedEscapeFormatter,
    PricedFormatter,
    RenderLimits,
    SizedBuffer,
    as_width,
    bounded_join,
    bounded_wordwrap,
    check_chars,
    check_codec,
    check_compared,
    check_estimate,
    check_format_string,
    check_int_arg,
    check_int_product,
    check_join,
    check_replace,
    check_translate,
    collect_priced,
    consuming_filter,
    estimated_chars,
    finalize_output,
    guard_filter,
    is_lazy,
    render_budget,
    too_big,
)

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_TEMPLATE_CHARS",
    "RenderLimitExceeded",
    "RenderLimits",
    "SandboxViolation",
    "TemplateCompileError",
    "TemplateRaisedError",
    "TemplateRenderError",
    "check_template_size",
    "compile_template",
    "get_environment",
    "make_environment",
    "render_template",
    "shifted_clock",
    "used_randomness",
]


# -- errors ------------------------------------------------------------------------------------


class TemplateRenderError(Exception):
    """A template failed to compile, raised, escaped the sandbox, or exceeded its bounds."""


class TemplateCompileError(TemplateRenderError):
    """The template text is not valid Jinja."""


class TemplateRaisedError(TemplateRenderError):
    """The template refused its input, through `raise_exception` or a runtime error."""


class SandboxViolation(TemplateRenderError):
    """The template reached for something the sandbox forbids."""


class RenderLimitExceeded(TemplateRenderError):
    """The template ran too long, recursed too deeply, or produced too much text."""


class _ExplicitRaise(TemplateError):
    """What `raise_exception` throws, told apart from jinja's own runtime errors."""


# -- template globals and filters -------------------------------------------------------------


def _json_default(value: Any) -> Any:
    """Serialize the lazy sequences templates produce (`map()`, `dict.items()`, `range`) as lists."""
    if isinstance(value, Iterator | KeysView | ValuesView | ItemsView | range):
        items = collect_priced(value, "tojson")
        check_estimate(items, "tojson")
        return items
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def tojson(value: Any, ensure_ascii: bool = False, indent: int | str | None = None,
           separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """transformers' `tojson`: no HTML escaping, non-ASCII kept, json.dumps options exposed."""
    width = indent if isinstance(indent, int) else len(indent or "")
    check_int_arg(width, "tojson indent")
    if type(value) is not str:
        # every line of indented JSON repeats the indent; price that too
        check_chars(estimated_chars(value, render_budget.max_chars) * (1 + max(width, 0)), "tojson")
    text = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys, default=_json_default)
    check_chars(len(text), "tojson")
    return text


def raise_exception(message: Any) -> None:
    """Lets a template refuse its input with a message of its own."""
    raise _ExplicitRaise(str(message))


_STRFTIME_WIDTH = re.compile(r"%[-_0^#]*(\d+)")


def strftime_now(format: str) -> str:  # the name templates call it with
    """The current time, formatted; each directive may be padded to a width of its own
    (`%999999Y`), so the output is priced by the widest before formatting."""
    text = str(format)
    widest = max((as_width(digits) for digits in _STRFTIME_WIDTH.findall(text)), default=0)
    check_int_arg(widest, "strftime_now")
    check_chars(len(text) + text.count("%") * (widest + 64), "strftime_now")
    return (datetime.now() + timedelta(seconds=render_budget.clock_offset)).strftime(text)


@contextmanager
def shifted_clock(seconds: float) -> Iterator[None]:
    """Renders in this block see `strftime_now` `seconds` later (how time-dependent templates
    are told apart from deterministic ones)."""
    previous = render_budget.clock_offset
    render_budget.clock_offset = seconds
    try:
        yield
    finally:
        render_budget.clock_offset = previous


class _DictBuilder:
    """The template's `dict`: builds dicts, but is not the `dict` type itself, so a template can
    reach no class machinery through it."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        for arg in args:
            check_compared(arg)
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        for arg in args:
            check_compared(arg)
        return dict.fromkeys(*args, **kwargs)


class _SafeNamespace(Namespace):
    """jinja's `namespace`, refusing underscore-prefixed names as transformers does, so a
    template cannot plant names that shadow the object's internals."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # mirrors jinja's signature
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _SafeNamespace._refuse_private(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _SafeNamespace._refuse_private(name)
        Namespace.__setitem__(self, name, value)

    @staticmethod
    def _refuse_private(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"a namespace cannot hold underscore-prefixed names, got {name!r}")


class GenerationTag(Extension):
    """`{% generation %}...{% endgeneration %}` marks the trainable part; rendering keeps its body.

    Compiled as a call block, as transformers does, so scoping rules are identical.
    """

    tags = {"generation"}

    def parse(self, parser):  # type: ignore[no-untyped-def]
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    @pass_eval_context
    def _render_body(self, eval_context: Any, caller: Any) -> str:
        return caller()


# -- the code generator and environment -------------------------------------------------------


class _BoundedCodeGenerator(CodeGenerator):
    """jinja's code generator plus three hooks into the compiled Python:

    * a call to `environment.autoparser_tick()` at the top of every loop body and macro body, the
      only places where a template can spend unbounded time;
    * output buffers (macros, call blocks, `{% set %}` blocks) that count what is appended;
    * a size check on the result of every `~` concatenation;
    * a price check on every operand of a comparison and every dict-literal key.
    """

    _tick_next_block = False

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        if node.test is not None and not getattr(node, "autoparser_ticks", False):
            # `for x in xs if TEST` filters in a generator of its own, outside the loop body; the
            # test can itself be costly, so it checks the clock too (the tick returns True).
            tick = nodes.Call(nodes.EnvironmentAttribute("autoparser_tick"), [], [], None, None)
            node.test = nodes.And(tick, node.test, lineno=node.test.lineno)
            node.autoparser_ticks = True  # type: ignore[attr-defined]
        self._tick_next_block = True
        super().visit_For(node, frame)

    def macro_body(self, node: nodes.Macro | nodes.CallBlock, frame: Frame):  # type: ignore[no-untyped-def]
        self._tick_next_block = True
        return super().macro_body(node, frame)

    def blockvisit(self, nodes: Any, frame: Frame) -> None:
        if self._tick_next_block:
            self._tick_next_block = False
            self.writeline("environment.autoparser_tick()")
        super().blockvisit(nodes, frame)

    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.autoparser_buffer()")

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.autoparser_sized(")
        super().visit_Concat(node, frame)
        self.write(")")

    def visit_Compare(self, node: nodes.Compare, frame: Frame) -> None:
        self.write("(")
        self._compared(node.expr, frame)
        for operand in node.ops:
            self.write(f" {operators[operand.op]} ")
            self._compared(operand.expr, frame)
        self.write(")")

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        self.write("{")
        for index, item in enumerate(node.items):
            if index:
                self.write(", ")
            self._compared(item.key, frame)
            self.write(": ")
            self.visit(item.value, frame)
        self.write("}")

    def _compared(self, node: nodes.Expr, frame: Frame) -> None:
        """An operand that is compared or hashed, priced first (`autoparser_compared`)."""
        self.write("environment.autoparser_compared(")
        self.visit(node, frame)
        self.write(")")


_SEQUENCES = (str, bytes, bytearray, list, tuple)
# tests that compare their operands (the others, `defined`, `mapping`..., only look at the type)
_COMPARING_TESTS = frozenset({
    "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in",
})
_COMPARING_METHODS = frozenset({
    "count", "index", "remove", "get", "pop", "setdefault", "update", "fromkeys", "add", "discard",
    "union", "intersection", "difference", "symmetric_difference", "issubset", "issuperset", "isdisjoint",
})
_TEXTS = (str, bytes, bytearray)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """transformers' chat-template sandbox with fail-fast unsafe access, time and size bounds."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"+", "*", "**", "%"})

    # hooks called from compiled template code

    def autoparser_tick(self) -> bool:
        if time.monotonic() > render_budget.deadline:
            raise LimitHit(f"template rendering took longer than {render_budget.seconds:g} s "
                            "(a runaway loop or recursion?)")
        return True

    def autoparser_buffer(self) -> SizedBuffer:
        return SizedBuffer()

    def autoparser_sized(self, value: Any) -> Any:
        if len(value) > render_budget.max_chars:
            raise too_big("a concatenation")
        return value

    def autoparser_compared(self, value: Any) -> Any:
        check_compared(value)
        return value

    def getitem(self, obj: Any, argument: Any) -> Any:
        check_compared(argument)  # a tuple key is hashed
        return super().getitem(obj, argument)

    def wrap_str_format(self, value: Any) -> Any:
        """`str.format` and `format_map` run through `PricedFormatter`, which prices each field
        as the format resolves it."""
        if (not isinstance(value, types.BuiltinMethodType) or value.__name__ not in ("format", "format_map")
                or not isinstance(value.__self__, str)):
            return None
        text: str = value.__self__
        formatter = (PricedEscapeFormatter(self, escape=text.escape) if isinstance(text, Markup)
                     else PricedFormatter(self))
        is_map = value.__name__ == "format_map"

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one mapping argument")
                args, kwargs = (), args[0]
            return type(text)(formatter.vformat(text, args, kwargs))

        return update_wrapper(wrapper, value)

    # sandbox policy

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if render_budget.allow_mutation and id(obj) not in render_budget.inputs and modifies_known_mutable(obj, attr):
            return SandboxedEnvironment.is_safe_attribute(self, obj, attr, value)
        return super().is_safe_attribute(obj, attr, value)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        """Fail at the access, not later: an escape attempt is an error, never a silent blank."""
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} "
                            "object is unsafe")

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            self._check_repeat(left, right)
            check_int_product(left, right)
        elif operator == "**":
            self._check_power(left, right)
        elif operator == "%" and isinstance(left, _TEXTS):
            fmt = left if isinstance(left, str) else left.decode("latin-1")
            check_format_string(fmt, right if isinstance(right, tuple | Mapping) else (right,), "%")
        elif operator == "+":
            self._check_sum(left, right)
        return self.binop_table[operator](left, right)

    @staticmethod
    def _check_sum(left: Any, right: Any) -> None:
        if isinstance(left, _TEXTS) and isinstance(right, _TEXTS):
            check_chars(len(left) + len(right), "+")
        elif isinstance(left, list | tuple) and isinstance(right, list | tuple):
            # shared references make lists print far larger than they occupy
            size = estimated_chars(left, render_budget.max_chars)
            check_chars(size + estimated_chars(right, render_budget.max_chars - size), "+")
        elif isinstance(left, str) or isinstance(right, str):  # JsonArguments + str
            check_chars(estimated_chars(left, render_budget.max_chars) + estimated_chars(right, render_budget.max_chars), "+")

    @staticmethod
    def _check_repeat(left: Any, right: Any) -> None:
        sequence, count = (left, right) if isinstance(right, int) else (right, left)
        if isinstance(sequence, _SEQUENCES) and isinstance(count, int) and count > 1:
            size = len(sequence) if isinstance(sequence, _TEXTS) else estimated_chars(sequence, render_budget.max_chars)
            check_chars(size * count, "*")

    @staticmethod
    def _check_power(base: Any, exponent: Any) -> None:
        if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
            if abs(base).bit_length() * exponent > MAX_INT_BITS:
                raise LimitHit(f"template computed a number too large ({base} ** {exponent})")

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        method = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format
        owner = getattr(method, "__self__", None)
        name = getattr(method, "__name__", "")
        if isinstance(owner, str | bytes | bytearray):
            if name == "join" and args and is_lazy(args[0]):
                args = (collect_priced(args[0], "str.join"), *args[1:])
            __self._check_text_method(owner, name, args, kwargs)
        elif isinstance(owner, LoopContext) and name == "changed":  # compares with the last value
            for arg in args:
                check_compared(arg)
        elif isinstance(owner, int | float):  # `(1).to_bytes(10 ** 9, 'big')`
            for arg in (*args, *kwargs.values()):
                check_int_arg(arg, f"{type(owner).__name__}.{name}")
        elif isinstance(owner, list | tuple | Mapping | set | frozenset):
            if name in _COMPARING_METHODS:  # they hash their argument or compare it with every item
                for arg in (*args, *kwargs.values()):
                    check_compared(arg)
            if name in ("count", "index", "remove"):
                check_compared(owner)
            if isinstance(owner, list):
                if name == "extend" and args and is_lazy(args[0]):
                    args = (collect_priced(args[0], "list.extend"), *args[1:])
                __self._check_list_growth(owner, name, args)
        return super().call(__context, __obj, *args, **kwargs)

    def call_filter(self, name: str, value: Any, args: Any = None, kwargs: Any = None,
                    context: Any = None, eval_ctx: Any = None) -> Any:
        # `map` and `select` call filters and tests once per item, outside any loop body
        self.autoparser_tick()
        return super().call_filter(name, value, args, kwargs, context, eval_ctx)

    def call_test(self, name: str, value: Any, args: Any = None, kwargs: Any = None,
                  context: Any = None, eval_ctx: Any = None) -> Any:
        self.autoparser_tick()
        return super().call_test(name, value, args, kwargs, context, eval_ctx)

    @staticmethod
    def _check_list_growth(items: list[Any], name: str, args: tuple[Any, ...]) -> None:
        """A template's own list (mutable on the lenient retry) doubles with `l.extend(l)`:
        its length is priced like printing it, two characters an item at least."""
        if name == "extend" and args and isinstance(args[0], list | tuple | str | Mapping | set | frozenset):
            check_chars(2 * (len(items) + len(args[0])), "list.extend")
        elif name in ("append", "insert"):
            check_chars(2 * (len(items) + 1), f"list.{name}")

    @staticmethod
    def _check_text_method(text: str | bytes | bytearray, name: str, args: tuple[Any, ...],
                           kwargs: dict[str, Any]) -> None:
        """String and bytes methods whose result can dwarf their inputs or run long: padding,
        tabs, replace, join, format, hex, encode and decode."""
        kind = type(text).__name__
        for arg in (*args, *kwargs.values()):
            check_int_arg(arg, f"{kind}.{name}")
        if name == "expandtabs":
            size = args[0] if args else kwargs.get("tabsize", 8)
            check_chars(len(text) * max(size if isinstance(size, int) else 8, 1), "expandtabs")
        elif name == "replace" and len(args) >= 2 and all(hasattr(a, "__len__") for a in args[:2]):
            check_replace(text, args[0], args[1], args[2] if len(args) > 2 else -1)
        elif name == "join" and args and isinstance(args[0], list | tuple):
            check_join(list(args[0]), text)
        elif name == "translate" and args:
            check_translate(text, args[0])
        elif name in ("format", "format_map") and isinstance(text, str):
            check_format_string(text, kwargs or (args[0] if name == "format_map" and args else args), name)
        elif name in ("encode", "decode"):
            check_codec(text, name, args, kwargs)
        elif name == "hex":
            check_chars(3 * len(text), f"{kind}.hex")


def make_environment() -> BoundedSandbox:
    """A fresh environment configured like transformers' chat-template environment."""
    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True, finalize=finalize_output,
                         extensions=["jinja2.ext.loopcontrols", GenerationTag])
    for name, check in FILTER_GUARDS.items():
        guard_filter(env.filters, name, check)
    for name, compares in CONSUMING_FILTERS.items():
        env.filters[name] = consuming_filter(env.filters[name], name, compares)
    env.filters["join"] = bounded_join(env.filters["join"])
    env.filters["wordwrap"] = bounded_wordwrap(env.filters["wordwrap"])
    env.filters["tojson"] = tojson
    for name in _COMPARING_TESTS & set(env.tests):
        env.tests[name] = _compared_operands(env.tests[name])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = _DictBuilder()
    env.globals["namespace"] = _SafeNamespace
    env.globals["lipsum"] = _bounded_lipsum(env.globals["lipsum"])
    env.filters["random"] = _noted_random(env.filters["random"])
    return env


def _compared_operands(test: Any) -> Any:
    """A comparing test (`is eq(x)`, `select('in', xs)`), its operands priced first; compiled
    templates call tests directly, not through `call_test`."""

    @wraps(test)
    def priced(*args: Any, **kwargs: Any) -> Any:
        for operand in (*args, *kwargs.values()):
            check_compared(operand)
        return test(*args, **kwargs)

    return priced


def _noted_random(original: Any) -> Any:
    """The `random` filter, noting that the render drew a random value (`used_randomness`)."""

    @wraps(original)
    def noted(*args: Any, **kwargs: Any) -> Any:
        render_budget.used_randomness = True
        return original(*args, **kwargs)

    return noted


def used_randomness() -> bool:
    """Whether the last render on this thread drew a random value (`lipsum()`, `| random`): its
    output may differ from one render to the next even where two renders happened to agree."""
    return render_budget.used_randomness


def _bounded_lipsum(lipsum: Any) -> Any:
    """`lipsum(n, html, min, max)` writes n paragraphs of up to max words; price it first."""

    @wraps(lipsum)
    def bounded(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> Any:
        check_chars(abs(n) * abs(max) * 12, "lipsum")
        render_budget.used_randomness = True
        return lipsum(n, html, min, max)

    return bounded


_ENV = make_environment()
_COMPILED: dict[str, Any] = {}
_COMPILE_CACHE_SIZE = 512
_COMPILE_CACHE_CHARS = 4_000_000
_compiled_chars = 0
_COMPILE_LOCK = threading.Lock()

MAX_TEMPLATE_CHARS = 128_000
"""The longest template accepted, checked before parsing: compiling takes about 5 us a
character and more for some shapes (2.7 MB took 89 s); real chat templates stay under 20 KB."""


def check_template_size(source: str) -> None:
    """Refuse a template over `MAX_TEMPLATE_CHARS` before any work is spent on it."""
    if len(source) > MAX_TEMPLATE_CHARS:
        raise RenderLimitExceeded(f"the template is {len(source):,} characters long, over the "
                                  f"{MAX_TEMPLATE_CHARS:,}-character limit; it was not compiled")


def get_environment() -> BoundedSandbox:
    """The shared environment every render uses (parse ASTs with it rather than building one)."""
    return _ENV


def compile_template(source: str, ast: Any = None):  # type: ignore[no-untyped-def]
    """The compiled template for `source`, cached; failures are cached too, as the analyzer
    renders the same template dozens of times. `ast`: the source already parsed, to compile.
    The cache holds at most `_COMPILE_CACHE_SIZE` templates and `_COMPILE_CACHE_CHARS` of text."""
    global _compiled_chars
    check_template_size(source)
    entry = _COMPILED.get(source)
    if entry is None:
        try:
            entry = _ENV.from_string(ast if ast is not None else source)
        except TemplateSyntaxError as exc:
            message = f"template does not compile: line {exc.lineno}: {exc.message}"
            entry = TemplateCompileError(" ".join(message.split()))
        except Exception as exc:  # any compiler failure is the template's fault
            message = f"template does not compile: {type(exc).__name__}: {exc}"
            entry = TemplateCompileError(" ".join(message.split()))
        with _COMPILE_LOCK:
            while _COMPILED and (len(_COMPILED) >= _COMPILE_CACHE_SIZE
                                 or _compiled_chars + len(source) > _COMPILE_CACHE_CHARS):
                oldest = next(iter(_COMPILED))
                del _COMPILED[oldest]
                _compiled_chars -= len(oldest)
            if source not in _COMPILED:
                _compiled_chars += len(source)
            _COMPILED[source] = entry
    if isinstance(entry, TemplateCompileError):
        raise TemplateCompileError(str(entry))
    return entry


# -- rendering --------------------------------------------------------------------------------


def render_template(source: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                    add_generation_prompt: bool = False, bos_token: str = "", eos_token: str = "",
                    *, render_limits: RenderLimits | None = None, **kwargs: Any) -> str:
    """Render `source` like `tokenizer.apply_chat_template(messages, tokenize=False, ...)`.

    Extra keyword arguments become template variables (`enable_thinking=False`, `documents=...`).
    `render_limits` bounds time and size (default `DEFAULT_LIMITS`).
    Raises a `TemplateRenderError` subclass with a one-line message on any failure.
    """
    template = compile_template(source)
    variables: dict[str, Any] = {"documents": None}
    variables.update(kwargs)
    variables.update(messages=prepare_messages(messages), tools=tools,
                     add_generation_prompt=add_generation_prompt, bos_token=bos_token, eos_token=eos_token)
    limits = render_limits or DEFAULT_LIMITS
    render_budget.used_randomness = False
    previous = (render_budget.deadline, render_budget.seconds, render_budget.max_chars)
    render_budget.deadline = time.monotonic() + limits.seconds
    render_budget.seconds, render_budget.max_chars = limits.seconds, limits.max_chars
    try:
        try:
            return _stream(template, variables, limits.max_chars)
        except SecurityError as exc:
            if not _is_mutation(exc):
                raise
        # Templates that append to their own lists (Kimi's tool-call bookkeeping) fail in
        # transformers' immutable sandbox; llama.cpp renders them. Retry allowing list and dict
        # mutation only: every other sandbox rule still holds.
        render_budget.allow_mutation, render_budget.inputs = True, frozenset(_container_ids(variables))
        return _stream(template, variables, limits.max_chars)
    except BaseException as exc:  # translated, or re-raised below when not ours
        raise _translate(exc, template) from None
    finally:
        render_budget.deadline, render_budget.seconds, render_budget.max_chars = previous
        render_budget.allow_mutation, render_budget.inputs = False, frozenset()


def _container_ids(value: Any) -> set[int]:
    """Ids of every list, dict and set reachable from the inputs: those stay immutable.
    Walked without recursion: inputs may nest thousands deep."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list | dict | set) and id(node) not in seen:
            seen.add(id(node))
            stack.extend(node.values() if isinstance(node, dict) else node)
    return seen


_MUTATORS = ("append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem",
             "add", "discard", "sort", "reverse")


def _is_mutation(exc: SecurityError) -> bool:
    text = str(exc)
    return any(f"attribute {name!r} of " in text for name in _MUTATORS) and (
        "'list' object" in text or "'dict' object" in text or "'set' object" in text)


def _stream(template: Any, variables: dict[str, Any], max_chars: int) -> str:
    """Collect the output chunk by chunk, stopping as soon as it passes the size limit."""
    chunks = []
    size = 0
    for chunk in template.root_render_func(template.new_context(variables)):
        size += len(chunk)
        if size > max_chars:
            raise too_big("the rendered prompt")
        chunks.append(chunk)
    return "".join(chunks)


def _translate(exc: BaseException, template: Any) -> BaseException:
    """One clear, one-line error per failure kind, with the template line where it happened."""
    if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
        return exc
    where = _template_line(exc, template)
    kind: type[TemplateRenderError] = TemplateRaisedError
    if isinstance(exc, _ExplicitRaise):
        message = f"template raised an error{where}: {exc}"
    elif isinstance(exc, SecurityError):
        kind, message = SandboxViolation, f"template tried to escape the sandbox{where}: {exc}"
    elif isinstance(exc, LimitHit):
        kind, message = RenderLimitExceeded, f"{exc}{where}"
    elif isinstance(exc, RecursionError):
        kind, message = RenderLimitExceeded, f"template recursed too deeply{where}"
    elif isinstance(exc, MemoryError):
        kind, message = RenderLimitExceeded, f"template ran out of memory{where}"
    elif isinstance(exc, TemplateError):
        message = f"template failed{where}: {exc}"
    else:
        message = f"template failed{where}: {type(exc).__name__}: {exc}"
    return kind(" ".join(message.split()))


def _template_line(exc: BaseException, template: Any) -> str:
    """' at line N' for the innermost template frame in the traceback, or ''."""
    line = None
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = template.get_corresponding_lineno(tb.tb_lineno)
        tb = tb.tb_next
    return f" at line {line}" if line else ""
