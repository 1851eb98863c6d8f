"""JSON Schema → GBNF, written for tool arguments.

llama.cpp ships a converter, but it drops keywords it cannot express without saying so; this one
reports every such keyword as a warning naming the tool, the JSON path and the keyword, so the
server can surface it with the request. Choices, all of which keep every generated value valid:

* Properties are emitted in the schema's ``properties`` order; required ones must appear,
  optional ones may be skipped. Any order is *not* allowed (a grammar for all orders of n
  optional keys is exponential, and models follow the schema order anyway).
* ``additionalProperties`` absent on an object that declares ``properties`` (even ``{}``, the
  usual spelling of "no arguments") means "no extra keys" (stricter than JSON Schema, still
  valid); a bare ``{"type": "object"}`` is any object. ``true`` or a schema allows extra keys after the
  declared ones; their names can never repeat a declared name.
* Whitespace between JSON tokens is optional and bounded (`WS_MAX` characters), integers without
  a bound have at most 16 digits, and fractions at most 16: unbounded repetition lets small
  models loop forever.
* ``oneOf`` is written as ``anyOf``; when its branches can overlap a warning says exclusivity is
  not enforced.
* Integer bounds become exact digit-range rules; number bounds are exact when they are
  integers, otherwise a warning. String ``pattern`` goes through `regex_gbnf`; ``format`` knows
  date, time, date-time, uuid, email (loosely), ipv4, hostname and uri (loosely).

This module walks the schema (`SchemaConverter`); beside it, `schema_budget` refuses a schema too
costly before the walk, `schema_keywords` knows the keywords and merges ``allOf`` parts,
`schema_formats` and `number_ranges` write the rules of string formats and number bounds, and
`gbnf_members` those of an object's members.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from autoparser.generators.gbnf_builder import (
    MAX_REPETITION,
    GrammarBuilder,
    alt,
    is_rule_name,
    json_bool,
    json_char,
    json_int,
    json_null,
    json_number,
    json_string,
    json_value,
    optional,
    repeat,
    rule_name,
    seq,
    ws,
)
from autoparser.generators.gbnf_members import key_not_in, ordered_members
from autoparser.generators.number_ranges import decimal_range, integer_range
from autoparser.generators.regex_gbnf import RegexUnsupported, regex_to_gbnf
from autoparser.generators.schema_budget import DEFAULT_BUDGET, GrammarBudget, SchemaError, check_schema
from autoparser.generators.schema_formats import FORMATS, format_rule
from autoparser.generators.schema_keywords import (
    ANNOTATIONS,
    BY_TYPE,
    JSON_TYPES,
    KNOWN,
    UNSUPPORTED,
    branches_disjoint,
    json_literal,
    matches_type,
    merge_schemas,
    single_ref,
)
from autoparser.language.build import resolve_ref

__all__ = [  # the converter, and the budget and number ranges it was once written beside
    "DEFAULT_BUDGET",
    "GrammarBudget",
    "SchemaConverter",
    "SchemaError",
    "SchemaGrammar",
    "SchemaWarnings",
    "check_schema",
    "decimal_range",
    "integer_range",
    "schema_to_gbnf",
]


@dataclass
class SchemaWarnings:
    """Collects "cannot express" messages, each naming the tool, the path and the keyword."""

    owner: str
    messages: list[str] = field(default_factory=list)

    def add(self, path: str, keyword: str, why: str) -> None:
        msg = f"{self.owner}: {path}: '{keyword}' {why}"
        if msg not in self.messages:
            self.messages.append(msg)


_ROOT: Any = object()


class SchemaConverter:
    """Converts one schema (a tool's ``parameters``) into rules of a shared `GrammarBuilder`.

    `prefix` starts every rule name this converter creates, so several tools coexist in one
    grammar; JSON primitives (``ws``, ``json-string``...) are shared. `string_limit` caps the
    length of strings the schema leaves unbounded (see `gbnf.build_grammar`'s `free_text_limit`).
    """

    def __init__(self, builder: GrammarBuilder, prefix: str, root_schema: Any,
                 warnings: SchemaWarnings, string_limit: int | None = None):
        check_schema(root_schema, owner=warnings.owner, strict=False, budget=DEFAULT_BUDGET)
        self.b = builder
        self.string_limit = string_limit  # cap for strings the schema leaves unbounded
        self.prefix = rule_name(prefix)
        self.root = root_schema
        self.w = warnings
        self._visits = 0  # subschemas visited, `$ref`/`allOf` expansions included
        self._depth = 0  # subschemas being visited inside each other, expansions included
        self._ref_rules: dict[str, str] = {}
        self._unguarded: list[str] = []  # refs being expanded with no "{" or "[" consumed yet
        self._inlining: list[str] = []  # refs whose target is being merged into a parent schema

    # -- entry points ------------------------------------------------------------------------

    def convert(self, schema: Any = _ROOT, path: str = "$", hint: str = "") -> str:
        """The rule name of the JSON text of a value of `schema` (default: the root schema).

        A sentinel marks "the root": a subschema that is `null` is read as "any value", not as
        the root again (which recursed without end)."""
        expr = self.visit(self.root if schema is _ROOT else schema, path, hint or self.prefix)
        return self._named(hint or self.prefix, expr)

    def _named(self, hint: str, expr: str) -> str:
        if is_rule_name(expr):
            return expr
        return self.b.define(hint, expr)

    def _hint(self, hint: str, part: str) -> str:
        return rule_name(f"{hint}-{part}")

    # -- dispatch --------------------------------------------------------------------------

    @contextmanager
    def _deeper(self, path: str) -> Iterator[None]:
        """One level down; a chain of references (each a few Python frames) stops at the
        budget's expanded depth with a `SchemaError` rather than a `RecursionError`."""
        self._depth += 1
        try:
            if self._depth > DEFAULT_BUDGET.max_expanded_depth:
                raise SchemaError(f"{self.w.owner}: {path}: subschemas nest more than "
                                  f"{DEFAULT_BUDGET.max_expanded_depth} deep once $ref and allOf are followed")
            yield
        finally:
            self._depth -= 1

    def visit(self, schema: Any, path: str, hint: str) -> str:
        self._visits += 1
        if self._visits > DEFAULT_BUDGET.max_subschemas:  # references that expand exponentially
            raise SchemaError(f"{self.w.owner}: {path}: expands to more than "
                              f"{DEFAULT_BUDGET.max_subschemas:,} subschemas, over the grammar budget")
        with self._deeper(path):
            return self._visit(schema, path, hint)

    def _visit(self, schema: Any, path: str, hint: str) -> str:
        if schema is True or schema == {} or schema is None:
            return json_value(self.b)
        if schema is False:
            self.w.add(path, "false", "schema allows no value; the grammar allows none either")
            return self._never()
        if not isinstance(schema, dict):
            self.w.add(path, "schema", f"is not an object ({type(schema).__name__}); any value allowed")
            return json_value(self.b)
        if "$ref" in schema:
            return self.visit_ref(schema, path, hint)
        single = single_ref(schema)
        if single is not None:  # {"allOf": [{"$ref": ...}]}: a plain reference, recursion-safe
            return self.visit_ref(single, path, hint)
        inlined: list[str] = []
        schema = self.merge_all_of(schema, path, inlined)
        self._inlining += inlined
        try:
            return self.visit_merged(schema, path, hint)
        finally:
            del self._inlining[len(self._inlining) - len(inlined):]

    def visit_merged(self, schema: dict, path: str, hint: str) -> str:
        """`visit` for a schema whose ``$ref`` and ``allOf`` are resolved."""
        self.warn_unknown(schema, path)
        if "const" in schema:
            return json_literal(schema["const"])
        if "enum" in schema:
            return self.visit_enum(schema, path)
        if "anyOf" in schema or "oneOf" in schema:
            return self.visit_any_of(schema, path, hint)
        types = self.types_of(schema, path)
        if types is None:
            return json_value(self.b)
        exprs = [self.visit_type(t, schema, path, hint if len(types) == 1 else self._hint(hint, t))
                 for t in types]
        return alt(*exprs)

    def types_of(self, schema: dict, path: str) -> list[str] | None:
        """The JSON types the value may take (None: any value)."""
        declared = schema.get("type")
        if isinstance(declared, str):
            types = [declared]
        elif isinstance(declared, list) and declared:
            types = [t for t in declared if isinstance(t, str)]
        else:
            # no type: infer from the keywords present (a subset of the valid values)
            types = [t for t in ("object", "array", "string", "number")
                     if any(k in schema for k in BY_TYPE[t])]
            if not types:
                return None
        unknown = [t for t in types if t not in JSON_TYPES]
        for t in unknown:
            self.w.add(path, "type", f"has unknown type {t!r}; ignored")
        types = [t for t in types if t in JSON_TYPES]
        if "integer" in types and "number" in types:
            types.remove("integer")
        if schema.get("nullable") is True and "null" not in types:
            types.append("null")
        if not types:
            return None
        return types

    def visit_type(self, t: str, schema: dict, path: str, hint: str) -> str:
        if t == "string":
            return self.visit_string(schema, path, hint)
        if t == "integer":
            return self.visit_integer(schema, path, hint)
        if t == "number":
            return self.visit_number(schema, path, hint)
        if t == "boolean":
            return json_bool(self.b)
        if t == "null":
            return json_null(self.b)
        if t == "object":
            return self.visit_object(schema, path, hint)
        return self.visit_array(schema, path, hint)

    def warn_unknown(self, schema: dict, path: str) -> None:
        for key in schema:
            if key in UNSUPPORTED:
                self.w.add(f"{path}", key, "is not expressible in the grammar; not enforced")
            elif key not in KNOWN and not key.startswith("x-"):
                self.w.add(path, key, "is an unknown keyword; not enforced")

    def _never(self) -> str:
        return self.b.fixed("never", "[^\\x00-\\U0010FFFF]")

    # -- combinators -------------------------------------------------------------------------

    def visit_ref(self, schema: dict, path: str, hint: str) -> str:
        ref = schema["$ref"]
        target = self.resolve(ref, path)
        if target is None:
            return json_value(self.b)
        rest = {k: v for k, v in schema.items() if k != "$ref" and k not in ANNOTATIONS}
        if rest and ref in self._inlining:
            self.w.add(path, "$ref", f"{ref} is recursive; keywords beside it are not enforced")
        elif rest:
            self._inlining.append(ref)
            try:
                return self.visit({"allOf": [target, rest]}, path, hint)
            finally:
                self._inlining.pop()
        if ref in self._ref_rules:
            if ref in self._unguarded:
                self.w.add(path, "$ref", f"{ref} refers to itself before any value starts; any value allowed")
                return json_value(self.b)
            return self._ref_rules[ref]
        name = self.b.reserve(self._hint(self.prefix, ref.rsplit("/", 1)[-1] or "root"))
        self._ref_rules[ref] = name
        self._unguarded.append(ref)
        try:
            expr = self.visit(target, ref, name)
        finally:
            self._unguarded.remove(ref)
        self.b.set(name, expr)
        return name

    def resolve(self, ref: Any, path: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            self.w.add(path, "$ref", f"{ref!r} is not a local reference; any value allowed")
            return None
        node = resolve_ref(self.root, ref)
        if node is None:
            self.w.add(path, "$ref", f"{ref!r} does not resolve; any value allowed")
        return node

    def visit_enum(self, schema: dict, path: str) -> str:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            self.w.add(path, "enum", "is empty or not a list; no value allowed")
            return self._never()
        declared = schema.get("type")
        if declared:
            types = [declared] if isinstance(declared, str) else list(declared)
            values = [v for v in values if matches_type(v, types)] or values
        return alt(*[json_literal(v) for v in values])

    def visit_any_of(self, schema: dict, path: str, hint: str) -> str:
        key = "anyOf" if "anyOf" in schema else "oneOf"
        branches = schema[key]
        if not isinstance(branches, list) or not branches:
            self.w.add(path, key, "is empty; any value allowed")
            return json_value(self.b)
        if "anyOf" in schema and "oneOf" in schema:
            self.w.add(path, "oneOf", "next to anyOf is not enforced")
        base = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf") and k not in ANNOTATIONS}
        exprs = []
        for i, branch in enumerate(branches):
            merged = {"allOf": [base, branch]} if base else branch
            exprs.append(self.visit(merged, f"{path}/{key}/{i}", self._hint(hint, str(i))))
        if key == "oneOf" and not branches_disjoint(branches):
            self.w.add(path, "oneOf", "branches may overlap; exclusivity is not enforced")
        return alt(*exprs)

    def merge_all_of(self, schema: dict, path: str, inlined: list[str] | None = None) -> dict:
        """Fold ``allOf`` into its parent when the parts combine keyword by keyword.

        The targets of ``$ref`` parts are merged in too, and their pointers appended to
        `inlined`; a reference already being inlined higher up (a recursive schema) is left out
        with a warning instead of being expanded forever.
        """
        if "allOf" not in schema:
            return schema
        inlined = inlined if inlined is not None else []
        parts = schema["allOf"]
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        if not isinstance(parts, list):
            self.w.add(path, "allOf", "is not a list; ignored")
            return merged
        for i, part in enumerate(parts):
            here = f"{path}/allOf/{i}"
            if isinstance(part, dict) and "$ref" in part:
                ref = part["$ref"]
                if ref in self._inlining or ref in inlined:
                    self.w.add(here, "$ref", f"{ref} is recursive inside allOf; that part is not enforced")
                    continue
                inlined.append(ref)
                target = self.resolve(ref, here)
                rest = {k: v for k, v in part.items() if k != "$ref"}
                part = merge_schemas(copy.deepcopy(target) if isinstance(target, dict) else {}, rest, [])
            if part is True or part is None:
                continue
            if not isinstance(part, dict):
                self.w.add(here, "allOf", "part is not an object; ignored")
                continue
            with self._deeper(here):
                part = self.merge_all_of(part, here, inlined)
            conflicts: list[str] = []
            merged = merge_schemas(merged, part, conflicts)
            for key in conflicts:
                self.w.add(here, key, "conflicts with another allOf part; the first one is used")
        return merged

    # -- scalars -------------------------------------------------------------------------

    def visit_string(self, schema: dict, path: str, hint: str) -> str:
        min_len = schema.get("minLength", 0)
        max_len = schema.get("maxLength")
        pattern = schema.get("pattern")
        fmt = schema.get("format")
        quote = '"\\""'
        content = None
        if isinstance(pattern, str):
            try:
                content = regex_to_gbnf(self.b, pattern, self._hint(hint, "pattern"))
            except RegexUnsupported as exc:
                self.w.add(path, "pattern", f"{pattern!r} cannot be translated ({exc}); not enforced")
            if fmt is not None:
                self.w.add(path, "format", "together with pattern is not enforced")
        elif isinstance(fmt, str) and fmt in FORMATS:
            content = format_rule(self.b, fmt)
        elif fmt is not None:
            self.w.add(path, "format", f"{fmt!r} is not supported; not enforced")
        if content is not None:
            if min_len or max_len is not None:
                self.w.add(path, "minLength/maxLength", "together with pattern/format is not enforced")
            return seq(quote, content, quote)
        if max_len is None and self.string_limit is not None:
            max_len = max(self.string_limit, min_len or 0)
        if not min_len and max_len is None:
            return json_string(self.b)
        lo, hi = self._length_bounds(min_len, max_len, path, "minLength", "maxLength")
        return seq(quote, repeat(json_char(self.b), lo, hi), quote)

    def _length_bounds(self, lo: Any, hi: Any, path: str, lo_key: str, hi_key: str) -> tuple[int, int | None]:
        lo = int(lo) if isinstance(lo, int | float) and lo > 0 else 0
        hi = int(hi) if isinstance(hi, int | float) and hi >= 0 else None
        if lo > MAX_REPETITION:
            self.w.add(path, lo_key, f"above {MAX_REPETITION} is not enforced")
            lo = 0
        if hi is not None and hi > MAX_REPETITION:
            self.w.add(path, hi_key, f"above {MAX_REPETITION} is not enforced")
            hi = None
        if hi is not None and hi < lo:
            self.w.add(path, hi_key, f"is below {lo_key}; no value allowed")
            hi = lo
        return lo, hi

    def _bounds(self, schema: dict, path: str) -> tuple[Any, bool, Any, bool]:
        """(low, low_exclusive, high, high_exclusive) from draft-4 and draft-6+ spellings."""
        lo, lo_x, hi, hi_x = schema.get("minimum"), False, schema.get("maximum"), False
        emin, emax = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if emin is True:
            lo_x = True
        elif isinstance(emin, int | float) and not isinstance(emin, bool):
            if lo is None or emin >= lo:
                lo, lo_x = emin, True
        if emax is True:
            hi_x = True
        elif isinstance(emax, int | float) and not isinstance(emax, bool):
            if hi is None or emax <= hi:
                hi, hi_x = emax, True
        for key, value in (("minimum", lo), ("maximum", hi)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or math.isnan(value) or math.isinf(value)):
                self.w.add(path, key, f"{value!r} is not a number; ignored")
                if key == "minimum":
                    lo = None
                else:
                    hi = None
        return lo, lo_x, hi, hi_x

    def visit_integer(self, schema: dict, path: str, hint: str) -> str:
        self._check_multiple_of(schema, path, integer=True)
        self._check_number_format(schema, path)
        lo, lo_x, hi, hi_x = self._bounds(schema, path)
        if schema.get("format") == "int32":
            lo = max(lo, -(2 ** 31)) if lo is not None else -(2 ** 31)
            hi = min(hi, 2 ** 31 - 1) if hi is not None else 2 ** 31 - 1
        if lo is None and hi is None:
            return json_int(self.b)
        ilo = None if lo is None else (math.floor(lo) + 1 if lo_x or lo != math.floor(lo) else int(lo))
        ihi = None if hi is None else (math.ceil(hi) - 1 if hi_x or hi != math.ceil(hi) else int(hi))
        if ilo is not None and ihi is not None and ilo > ihi:
            self.w.add(path, "minimum/maximum", "leave no integer; no value allowed")
            return self._never()
        return alt(*integer_range(ilo, ihi))

    def visit_number(self, schema: dict, path: str, hint: str) -> str:
        self._check_multiple_of(schema, path, integer=False)
        self._check_number_format(schema, path)
        lo, lo_x, hi, hi_x = self._bounds(schema, path)
        if lo is not None and lo != math.floor(lo):
            self.w.add(path, "exclusiveMinimum" if lo_x else "minimum", f"{lo} is not an integer; not enforced")
            lo, lo_x = None, False
        if hi is not None and hi != math.floor(hi):
            self.w.add(path, "exclusiveMaximum" if hi_x else "maximum", f"{hi} is not an integer; not enforced")
            hi, hi_x = None, False
        if lo is None and hi is None:
            return json_number(self.b)
        lo = None if lo is None else int(lo)
        hi = None if hi is None else int(hi)
        if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_x or hi_x))):
            self.w.add(path, "minimum/maximum", "leave no number; no value allowed")
            return self._never()
        return alt(*decimal_range(lo, lo_x, hi, hi_x))

    def _check_multiple_of(self, schema: dict, path: str, integer: bool) -> None:
        m = schema.get("multipleOf")
        if m is None or (integer and isinstance(m, int | float) and m == 1):
            return
        self.w.add(path, "multipleOf", f"{m} is not enforced")

    def _check_number_format(self, schema: dict, path: str) -> None:
        fmt = schema.get("format")
        if fmt is not None and fmt not in ("int32", "int64", "float", "double"):
            self.w.add(path, "format", f"{fmt!r} is not supported for numbers; not enforced")

    # -- containers ------------------------------------------------------------------------

    @contextmanager
    def _guarded(self) -> Iterator[None]:
        """Inside an object or array a "{" or "[" is consumed: no reference being expanded
        recurses unguarded any more, until the container is left."""
        saved, self._unguarded = self._unguarded, []
        try:
            yield
        finally:
            self._unguarded = saved

    def visit_object(self, schema: dict, path: str, hint: str) -> str:
        with self._guarded():
            return self._visit_object(schema, path, hint)

    def _visit_object(self, schema: dict, path: str, hint: str) -> str:
        b, w = self.b, ws(self.b)
        props = schema.get("properties") or {}
        if not isinstance(props, dict):
            self.w.add(path, "properties", "is not an object; ignored")
            props = {}
        required = [r for r in schema.get("required") or [] if isinstance(r, str)]
        addl = schema.get("additionalProperties", None)
        if "properties" not in schema and addl is None:
            addl = True  # a bare {"type": "object"} is any object ("properties": {} means none)
        names = list(props) + [r for r in required if r not in props]
        members: list[tuple[str, bool]] = []
        for name in names:
            sub = props.get(name, True)
            if sub is False:
                if name in required:
                    self.w.add(f"{path}/properties/{name}", "false", "is required but allows no value")
                continue
            value = self.convert(sub, f"{path}/properties/{name}", self._hint(hint, name))
            member = b.define(self._hint(hint, f"{name}-kv"), seq(json_literal(name), w, '":"', w, value, w))
            members.append((member, name in required))
        extra = None
        if addl is not None and addl is not False:
            value = self.convert(addl, f"{path}/additionalProperties", self._hint(hint, "extra"))
            key = key_not_in(b, self._hint(hint, "extra-key"), names)
            extra = b.define(self._hint(hint, "extra-kv"), seq(key, w, '":"', w, value, w))
        self._check_property_counts(schema, path, members, extra)
        body = ordered_members(b, hint, members, f'"," {w}', extra)
        return seq('"{"', w, body, '"}"')

    def _check_property_counts(self, schema: dict, path: str, members: list[tuple[str, bool]],
                               extra: str | None) -> None:
        n_required = sum(1 for _, req in members if req)
        lo, hi = schema.get("minProperties"), schema.get("maxProperties")
        if isinstance(lo, int) and lo > n_required:
            self.w.add(path, "minProperties", f"{lo} is not enforced beyond the required properties")
        if isinstance(hi, int) and (extra is not None or hi < len(members)):
            self.w.add(path, "maxProperties", f"{hi} is not enforced")

    def visit_array(self, schema: dict, path: str, hint: str) -> str:
        with self._guarded():
            return self._visit_array(schema, path, hint)

    def _visit_array(self, schema: dict, path: str, hint: str) -> str:
        b, w = self.b, ws(self.b)
        prefix = schema.get("prefixItems")
        rest = schema.get("items", True)
        if isinstance(rest, list):  # draft-4 tuple form
            prefix, rest = rest, schema.get("additionalItems", True)
        elif prefix is not None and "additionalItems" in schema and "items" not in schema:
            rest = schema["additionalItems"]
        lo, hi = self._length_bounds(schema.get("minItems", 0), schema.get("maxItems"), path,
                                     "minItems", "maxItems")
        if schema.get("uniqueItems") is True and (hi is None or hi > 1):
            self.w.add(path, "uniqueItems", "is not enforced")
        open_, close = '"["', '"]"'
        if prefix:
            return seq(open_, w, self._tuple_items(prefix, rest, lo, hi, path, hint), close)
        if hi == 0 or rest is False:
            if lo > 0:
                self.w.add(path, "minItems", "cannot be met; no value allowed")
                return self._never()
            return seq(open_, w, close)
        value = self.convert(rest, f"{path}/items", self._hint(hint, "item"))
        element = b.define(self._hint(hint, "element"), seq(value, w))
        nxt = b.define(self._hint(hint, "element-next"), seq('","', w, element))
        more = repeat(nxt, max(lo - 1, 0), None if hi is None else hi - 1)
        if lo >= 1:
            return seq(open_, w, element, more, close)
        return seq(open_, w, optional(seq(element, more)), close)

    def _tuple_items(self, prefix: list, rest: Any, lo: int, hi: int | None, path: str, hint: str) -> str:
        b, w = self.b, ws(self.b)
        n_prefix = len(prefix) if hi is None else min(len(prefix), hi)
        elements = []
        for i in range(n_prefix):
            value = self.convert(prefix[i], f"{path}/prefixItems/{i}", self._hint(hint, f"item{i}"))
            elements.append(b.define(self._hint(hint, f"element{i}"), seq(value, w)))
        tail = ""
        if rest is not False and (hi is None or hi > len(prefix)):
            value = self.convert(rest, f"{path}/items", self._hint(hint, "item"))
            element = b.define(self._hint(hint, "element"), seq(value, w))
            nxt = b.define(self._hint(hint, "element-next"), seq('","', w, element))
            extra_min = max(lo - len(prefix), 0)
            tail = repeat(nxt, extra_min, None if hi is None else hi - len(prefix))
        elif lo > len(prefix):
            self.w.add(path, "minItems", "cannot be met; no value allowed")
            return self._never()
        # elements[0] (',' elements[1] (... tail)?)? with the first `lo` ones mandatory
        expr = tail
        for i in range(n_prefix - 1, -1, -1):
            part = seq('","', w, elements[i], expr) if i > 0 else seq(elements[0], expr)
            expr = part if i < lo else optional(part)
        return expr


# -- standalone use ------------------------------------------------------------------------


@dataclass
class SchemaGrammar:
    gbnf: str
    warnings: list[str]


def schema_to_gbnf(schema: Any, root: str = "root", owner: str = "schema", ws_around: bool = False) -> SchemaGrammar:
    """A complete grammar whose `root` is one JSON value of `schema`.

    `ws_around` allows bounded whitespace before and after the value (for response formats).
    """
    b = GrammarBuilder()
    warnings = SchemaWarnings(owner)
    value = SchemaConverter(b, "schema" if root != "schema" else "value", schema, warnings).convert()
    body = seq(ws(b), value, ws(b)) if ws_around else value
    b.set(root, body)
    return SchemaGrammar(b.text(root), warnings.messages)
