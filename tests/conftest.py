"""Shared test set-up: make `import corpora` work whichever way pytest imports the test files."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parent
# the tests mirror the package (`tests/language/`, `tests/server/`, ...) and share helpers that
# live here, and a few test modules take cases from another: every folder is importable
for _folder in [_TESTS, *sorted(p for p in _TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))]:
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

# CI runs are reproducible: the same examples every time (set CI=true); local runs explore.
try:
    import os

    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, print_blob=True)
    if os.environ.get("CI"):
        settings.load_profile("ci")
except ImportError:  # hypothesis is a dev extra
    pass


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    """Without the shared corpus its tests skip, so its snapshots go unused: syrupy warns about
    them instead of failing the run (with the corpus present, unused snapshots still fail)."""
    import corpora

    if corpora.shared_corpus_dir() is None and hasattr(config.option, "warn_unused_snapshots"):
        config.option.warn_unused_snapshots = True
