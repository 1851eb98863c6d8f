#!/usr/bin/env bash
# Install vLLM and this project into a separate virtual environment (default .venv-vllm) for the
# plugin tests and tools/bench_vllm.py. About 9 GB; CPU is enough, no GPU and no weights needed.
#
# vLLM 0.33.0 asks for certifi>=2026.10.19, newer than any certifi release the registry holds, so
# vLLM is installed without dependencies and its own requirement list (read from the installed
# metadata) is installed with that one pin relaxed to "certifi". Nothing else is changed.
#
#     bash tools/install_vllm.sh [VENV] [VLLM_VERSION]
set -euo pipefail
venv="${1:-.venv-vllm}"
version="${2:-0.33.0}"
python3 -m venv "$venv"
"$venv/bin/pip" install -q packaging
"$venv/bin/pip" install -q --no-deps "vllm==$version"
"$venv/bin/python" - "$venv/vllm-requirements.txt" <<'PY'
import re
import sys
from importlib.metadata import requires

from packaging.requirements import Requirement

lines = []
for text in requires("vllm") or []:
    requirement = Requirement(text)
    if requirement.marker and "extra" in str(requirement.marker):
        continue
    if requirement.marker and not requirement.marker.evaluate():
        continue
    if requirement.name.lower() == "certifi":
        requirement.specifier = type(requirement.specifier)("")
        requirement.marker = None
    lines.append(str(requirement))
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
"$venv/bin/pip" install -q -r "$venv/vllm-requirements.txt"
# the project itself; its `vllm` extra only names vLLM, which is already there
"$venv/bin/pip" install -q -e '.[dev]'
"$venv/bin/python" -c "import vllm; print('vllm', vllm.__version__)"
