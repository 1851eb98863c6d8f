"""GBNF alternatives for the JSON numbers between two bounds.

Integer bounds become exact digit-range rules (``[0-9]``, ``"1" [0-3]``...); decimals between
integer ends add bounded fractions. Unbounded sides stop at `INT_DIGITS` digits.
"""

from __future__ import annotations

import re

from autoparser.generators.gbnf_builder import INT_DIGITS, alt, literal, seq


def _join_digits(expr: str) -> str:
    """``"1" "2" [0-3]`` → ``"12" [0-3]``: adjacent digit literals read better merged."""
    while True:
        merged = re.sub(r'"(\d+)" "(\d+)"', r'"\1\2"', expr)
        if merged == expr:
            return expr
        expr = merged


def _digits_class(lo: str, hi: str) -> str:
    return literal(lo) if lo == hi else f"[{lo}-{hi}]"


def _any_digits(n: int) -> str:
    return "" if n == 0 else ("[0-9]" if n == 1 else f"[0-9]{{{n}}}")


def _same_length(lo: str, hi: str) -> list[str]:
    """Sequences matching the decimal strings between `lo` and `hi` (same length)."""
    if lo == hi:
        return [literal(lo)]
    k = len(lo) - 1
    if k == 0:
        return [_digits_class(lo, hi)]
    if lo[0] == hi[0]:
        return [seq(literal(lo[0]), s) for s in _same_length(lo[1:], hi[1:])]
    out: list[str] = []
    first, last = int(lo[0]), int(hi[0])
    if lo[1:] != "0" * k:
        out += [seq(literal(lo[0]), s) for s in _same_length(lo[1:], "9" * k)]
        first += 1
    tail: list[str] = []
    if hi[1:] != "9" * k:
        tail = [seq(literal(hi[0]), s) for s in _same_length("0" * k, hi[1:])]
        last -= 1
    if first <= last:
        out.append(seq(_digits_class(str(first), str(last)), _any_digits(k)))
    return out + tail


def uint_range(lo: int, hi: int | None) -> list[str]:
    """Alternatives for the non-negative integers in [lo, hi] (hi None: no upper bound)."""
    out: list[str] = []
    n_lo = len(str(lo))
    top = hi if hi is not None else 10 ** max(n_lo, INT_DIGITS) - 1
    for d in range(n_lo, len(str(top)) + 1):
        a = max(lo, 10 ** (d - 1) if d > 1 else 0)
        z = min(top, 10 ** d - 1)
        if a > z:
            continue
        if hi is None and d > n_lo and a == 10 ** (d - 1) and z == 10 ** d - 1:
            out.append(seq("[1-9]", f"[0-9]{{{d - 1},{len(str(top)) - 1}}}"))
            break
        out += [_join_digits(x) for x in _same_length(str(a), str(z))]
    return out


def integer_range(lo: int | None, hi: int | None) -> list[str]:
    """Alternatives for the JSON integers in [lo, hi] (None: unbounded on that side)."""
    out: list[str] = []
    if hi is None or hi >= 0:
        out += uint_range(max(lo, 0) if lo is not None else 0, hi)
    if lo is None or lo < 0:
        mag_lo = max(1, -hi) if hi is not None else 1
        mag_hi = -lo if lo is not None else None
        neg = uint_range(mag_lo, mag_hi)
        if neg:
            out.append(seq('"-"', alt(*neg)))
    return out


FRAC_ANY = f'( "." [0-9]{{1,{INT_DIGITS - 1}}} )?'
FRAC_NONZERO = f'"." "0"{{0,{INT_DIGITS - 2}}} [1-9] [0-9]{{0,{INT_DIGITS - 2}}}'
FRAC_ZERO = f'( "." "0"{{1,{INT_DIGITS - 1}}} )?'


def magnitude_range(lo: int, lo_x: bool, hi: int | None, hi_x: bool) -> list[str]:
    """Alternatives for decimals (no sign, no exponent) with value in the interval lo..hi."""
    out: list[str] = []
    if hi is None:
        if lo_x:
            out.append(seq(alt(*uint_range(lo, lo)), FRAC_NONZERO))
            out.append(seq(alt(*uint_range(lo + 1, None)), FRAC_ANY))
        else:
            out.append(seq(alt(*uint_range(lo, None)), FRAC_ANY))
        return out
    if lo == hi:
        return [] if lo_x or hi_x else [seq(literal(str(lo)), FRAC_ZERO)]
    out.append(seq(literal(str(lo)), FRAC_NONZERO if lo_x else FRAC_ANY))
    if lo + 1 <= hi - 1:
        out.append(seq(alt(*uint_range(lo + 1, hi - 1)), FRAC_ANY))
    if not hi_x:
        out.append(seq(literal(str(hi)), FRAC_ZERO))
    return out


def decimal_range(lo: int | None, lo_x: bool, hi: int | None, hi_x: bool) -> list[str]:
    """Alternatives for JSON numbers in the interval with integer ends (None: unbounded)."""
    out: list[str] = []
    if hi is None or hi > 0 or (hi == 0 and not hi_x):
        if lo is not None and lo >= 0:
            out += magnitude_range(lo, lo_x, hi, hi_x)
        else:
            out += magnitude_range(0, False, hi, hi_x)
    if lo is None or lo < 0:
        if hi is not None and hi < 0:
            m_lo, m_lo_x = -hi, hi_x
        else:
            m_lo, m_lo_x = 0, True
        m_hi, m_hi_x = (None, False) if lo is None else (-lo, lo_x)
        neg = magnitude_range(m_lo, m_lo_x, m_hi, m_hi_x)
        if neg:
            out.append(seq('"-"', alt(*neg)))
    return out
