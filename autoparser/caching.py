"""A least-recently-used cache bounded in entries and in (estimated) bytes.

Grammars and parsers are cached by the tools that shaped them, and a client chooses the tools:
a cache bounded only in entries would let 64 requests with megabytes of tools each pin a
gigabyte. Each entry is weighed when it is stored (by a function of its key and value, an
estimate of the memory it holds), the oldest entries go first when the total passes the bound,
and an entry heavier than the whole bound is built and returned but never stored.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["BoundedCache"]


def _key_length(key: Hashable, value: Any) -> int:
    return len(key) if isinstance(key, str) else 64


class BoundedCache:
    """`get(key, make)`: the cached value for `key`, made (and stored when it fits) if absent."""

    def __init__(self, max_items: int = 64, max_bytes: int = 64 << 20,
                 weigh: Callable[[Hashable, Any], int] = _key_length) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._weigh = weigh
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # requests are prepared on a thread pool

    def __len__(self) -> int:
        return len(self._items)

    @property
    def weight(self) -> int:
        """The estimated bytes the stored entries hold."""
        return self._bytes

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
            value = make()
            weight = max(int(self._weigh(key, value)), 1)
            if weight <= self.max_bytes:
                self._items[key] = (value, weight)
                self._bytes += weight
                while len(self._items) > self.max_items or self._bytes > self.max_bytes:
                    self._bytes -= self._items.popitem(last=False)[1][1]
            return value

    def lookup(self, key: Hashable) -> Any:
        """The cached value for `key` (marked recently used), or None; with `store`, for callers
        that build the value outside the cache's lock."""
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key][0]

    def store(self, key: Hashable, value: Any) -> None:
        """Keep `value` under `key` when it fits, evicting the least recently used."""
        weight = max(int(self._weigh(key, value)), 1)
        if weight > self.max_bytes:
            return
        with self._lock:
            if key in self._items:
                self._bytes -= self._items.pop(key)[1]
            self._items[key] = (value, weight)
            self._bytes += weight
            while len(self._items) > self.max_items or self._bytes > self.max_bytes:
                self._bytes -= self._items.popitem(last=False)[1][1]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
