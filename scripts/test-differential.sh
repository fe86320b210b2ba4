#!/usr/bin/env bash
# Runs the differential suite (tests/differential): tessera's stored records
# against DuckDB's answer to the same SQL over the same generated files, byte
# identity across thread counts, and identical records however the input is cut.
#   TESSERA_BIN=path/to/tessera scripts/test-differential.sh
#   scripts/test-differential.sh -k group_by      # extra arguments go to pytest
# The interpreter is $PYTHON (default python3); without TESSERA_BIN the
# release binary is built into the shared target directory and used.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if ! "$PY" -c "import duckdb, pyarrow, numpy, pytest" 2>/dev/null; then
  "$PY" -m pip install -q duckdb pyarrow numpy pytest
fi
# The TPC-H generator (a binary installed beside the interpreter).
if ! "$PY" -m pip show -q tpchgen-cli >/dev/null 2>&1; then
  "$PY" -m pip install -q tpchgen-cli
fi
if [[ -z "${TESSERA_BIN:-}" ]]; then
  source scripts/env.sh
  cargo build --release -p tessera
  export TESSERA_BIN="$CARGO_TARGET_DIR/release/tessera"
fi
exec "$PY" -m pytest -q -p no:cacheprovider tests/differential "$@"
