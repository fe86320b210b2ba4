#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine (Rust + Python + pip present):
# installs what is missing, then the Rust tests (unit, integration, doc),
# the Python package's tests, and a short fuzz run of the format parsers.
#   ./test.sh                   everything
#   FUZZ_SECONDS=0 ./test.sh    skip the fuzz run
#   TESSERA_LINT=1 ./test.sh    also rustfmt --check and clippy -D warnings
set -euo pipefail
cd "$(dirname "$0")"
source scripts/env.sh
PY=${PYTHON:-python3}

echo "== setup"
scripts/setup.sh --test

if [[ "${TESSERA_LINT:-0}" == "1" ]]; then
  echo "== lint"
  cargo fmt --all -- --check
  cargo clippy --release --workspace --all-targets -- -D warnings
fi

echo "== rust tests"
cargo test --release --workspace 2>&1 | tee "${TMPDIR:-/tmp}/tessera-cargo-test.log"

echo "== python package"
cargo build --release -p tessera
export TESSERA_BIN="$CARGO_TARGET_DIR/release/tessera"
"$PY" -m pip install -q ./python

echo "== python tests"
"$PY" -m pytest -q python/tests

if [[ "${FUZZ_SECONDS:-20}" != "0" ]]; then
  echo "== fuzz (${FUZZ_SECONDS:-20}s per target)"
  FUZZ_SECONDS="${FUZZ_SECONDS:-20}" scripts/fuzz.sh
fi

# Summarize the cargo test results (pytest printed its own line above).
passed=$(grep -Eo '[0-9]+ passed' "${TMPDIR:-/tmp}/tessera-cargo-test.log" | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "${TMPDIR:-/tmp}/tessera-cargo-test.log" | awk '{s+=$1} END {print s+0}')
echo "rust: $passed passed, $failed failed"
