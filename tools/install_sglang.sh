#!/usr/bin/env bash
# Install SGLang and this project into a separate virtual environment (default .venv-sglang) for
# the SGLang plugin tests. About 10 GB; its detectors run on CPU, no GPU and no weights needed.
# SGLang and vLLM pin different torch and transformers versions, so each has its own environment.
#
#     bash tools/install_sglang.sh [VENV] [SGLANG_VERSION]
set -euo pipefail
venv="${1:-.venv-sglang}"
version="${2:-0.5.23}"
python3 -m venv "$venv"
"$venv/bin/pip" install -q "sglang==$version"
"$venv/bin/pip" install -q -e '.[dev]'
"$venv/bin/python" -c "import sglang; print('sglang', sglang.__version__)"
