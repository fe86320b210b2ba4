#!/usr/bin/env bash
# Installs the tessera-shards wheel into the project's virtual environment and
# runs the Python tests (python/tests), among them the install of the same
# wheel into a fresh virtual environment with no Rust on PATH.
#   scripts/test-python.sh            # builds the wheel (scripts/build-wheel.sh) first
#   TESSERA_WHEEL=dist/x.whl scripts/test-python.sh   # tests a wheel already built
#   scripts/test-python.sh -k loader  # extra arguments go to pytest
# Expects scripts/setup.sh --test to have run (./test.sh does both).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
py="$TESSERA_VENV/bin/python"
if [[ ! -x "$py" ]]; then
  echo "test-python: no virtual environment at $TESSERA_VENV; run scripts/setup.sh --test first" >&2
  exit 1
fi

wheel="${TESSERA_WHEEL:-}"
if [[ -z "$wheel" ]]; then
  wheel="$(PYTHON="$py" scripts/build-wheel.sh | tail -1)"
fi
wheel="$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")"
# Always reinstall: the version number does not change with the sources.
"$py" -m pip install -q --force-reinstall --no-deps "$wheel"
export TESSERA_WHEEL="$wheel"
# Run from outside the source tree so `import tessera` finds the installed
# package (with its native module), not python/tessera.
cd python/tests
exec "$py" -m pytest -q -rs "$@"
