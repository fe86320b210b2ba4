#!/usr/bin/env bash
# Builds and installs the Python package, installs the test dependencies
# (pytest, mypy, and torch unless TESSERA_TEST_TORCH=0), and runs its tests.
#   scripts/test-python.sh            # everything
#   TESSERA_TEST_TORCH=0 scripts/test-python.sh
#   scripts/test-python.sh -k loader  # extra arguments go to pytest
# torch from PyPI is the CUDA build (about 6 GB, a few minutes the first time);
# it runs on CPU, which is all the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
PY=${PYTHON:-python3}

deps=(numpy pytest mypy)
if [[ "${TESSERA_TEST_TORCH:-1}" != 0 ]] && ! "$PY" -c "import torch" 2>/dev/null; then
  deps+=(torch)
fi
"$PY" -m pip install -q "${deps[@]}"
# Always rebuild: the version number does not change with the sources.
"$PY" -m pip install -q --force-reinstall --no-deps ./python
# Run from outside the source tree so `import tessera` finds the installed
# package (with its native module), not python/tessera.
cd python/tests
exec "$PY" -m pytest -q "$@"
