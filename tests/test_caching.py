"""The grammar and parser caches are bounded in estimated bytes as well as in entries."""

from __future__ import annotations

from autoparser.caching import BoundedCache


def test_oldest_entries_go_when_the_weight_passes_the_bound() -> None:
    cache = BoundedCache(max_items=100, max_bytes=1000, weigh=lambda key, value: len(value))
    for n in range(10):
        cache.get(f"k{n}", lambda: "x" * 300)
    assert cache.weight <= 1000 and len(cache) == 3
    made = []
    cache.get("k9", lambda: made.append(1))  # the newest is still there
    assert not made


def test_an_entry_heavier_than_the_bound_is_returned_but_never_stored() -> None:
    cache = BoundedCache(max_bytes=100, weigh=lambda key, value: len(value))
    cache.get("small", lambda: "s")
    assert cache.get("huge", lambda: "h" * 101) == "h" * 101
    assert len(cache) == 1 and cache.weight == 1


def test_entry_count_still_bounds_light_entries() -> None:
    cache = BoundedCache(max_items=4)
    for n in range(10):
        cache.get(str(n), object)
    assert len(cache) == 4


def test_recently_used_entries_are_kept() -> None:
    cache = BoundedCache(max_items=2)
    cache.get("a", lambda: 1)
    cache.get("b", lambda: 2)
    cache.get("a", lambda: 0)
    cache.get("c", lambda: 3)
    assert cache.get("a", lambda: 0) == 1 and cache.get("b", lambda: 0) == 0


def test_many_large_tool_sets_pin_a_bounded_amount_of_parsers() -> None:
    """Clients choose the tools; 40 requests with 100 KB of tools each stay under the bound."""
    from autoparser.server.service import PARSER_BYTES_PER_KEY_BYTE, _parser_weight

    cache = BoundedCache(max_bytes=32 << 20, weigh=_parser_weight)
    for n in range(40):
        cache.get(f"{n}" + "t" * 100_000, object)
    assert cache.weight <= 32 << 20
    assert len(cache) == (32 << 20) // (PARSER_BYTES_PER_KEY_BYTE * 100_002)


def test_lookup_and_store_for_values_built_outside_the_lock() -> None:
    cache = BoundedCache(max_bytes=1000, weigh=lambda key, value: len(value))
    assert cache.lookup("a") is None
    cache.store("a", "x" * 600)
    cache.store("b", "y" * 600)  # evicts "a"
    cache.store("huge", "z" * 2000)  # never stored
    assert cache.lookup("a") is None and cache.lookup("b") == "y" * 600 and cache.lookup("huge") is None
    assert cache.weight == 600


def test_the_plugins_parser_cache_is_bounded_in_bytes() -> None:
    from autoparser.plugins.common import ServedModel

    model = ServedModel("k", analysis=None)
    for n in range(100):
        model._parsers.store(f"{n}" + "t" * 100_000, object())
    assert model._parsers.weight <= model._parsers.max_bytes < 1 << 30
