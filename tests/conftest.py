"""Shared test set-up: make `import corpora` work whichever way pytest imports the test files."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parent
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

# CI runs are reproducible: the same examples every time (set CI=true); local runs explore.
try:
    import os

    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, print_blob=True)
    if os.environ.get("CI"):
        settings.load_profile("ci")
except ImportError:  # hypothesis is a dev extra
    pass
