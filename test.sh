#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine (Rust + Python 3.9+ present):
# installs what is missing (mold, and a virtual environment in .venv with the
# Python packages), then the Rust tests (unit, integration, doc), the wheel
# (binding + CLI) and the Python tests against it, including its install into
# a fresh virtual environment with no Rust and docs/GUIDE.md run as written,
# the differential suite (every query of a corpus against DuckDB, across
# thread counts and input cuts), and a short fuzz run of the format and spec parsers.
#   ./test.sh                   everything
#   FUZZ_SECONDS=0 ./test.sh    skip the fuzz run
#   TESSERA_LINT=0 ./test.sh    skip rustfmt --check and clippy -D warnings (run by default)
#   SPEED_GUARD=0 ./test.sh     skip the speed guard (scripts/speed_guard.py)
set -euo pipefail
cd "$(dirname "$0")"
# Each step is announced with the seconds elapsed so far.
step() { echo "== $* [${SECONDS}s]"; }

step "setup"
scripts/setup.sh --test
# After setup: the linker flags depend on what setup installed.
source scripts/env.sh

if [[ "${TESSERA_LINT:-1}" == "1" ]]; then
  step "lint (rustfmt --check, clippy -D warnings)"
  cargo fmt --all -- --check
  # One package at a time, like the tests below (the same features, so the
  # dependencies are checked once).
  for pkg in tessera-shards-reader tessera-shards-transform tessera-shards tessera-shards-python; do
    cargo clippy --release -p "$pkg" --all-targets -- -D warnings
  done
  # The reader also builds without its default zstd feature (a small reader
  # for uncompressed sets); nothing else builds it that way.
  cargo clippy --release -p tessera-shards-reader --no-default-features -- -D warnings
fi

step "rust tests"
# One package at a time: building the workspace in one invocation unifies
# dependency features differently and would recompile DataFusion a second time.
log="${TMPDIR:-/tmp}/tessera-cargo-test.log"
: > "$log"
for pkg in tessera-shards-reader tessera-shards-transform tessera-shards tessera-shards-python; do
  cargo test --release -p "$pkg" 2>&1 | tee -a "$log"
done

if [[ $(id -u) -ne 0 ]]; then
  # tests/faults mounts a small tmpfs to fill the disk, which needs root.
  echo "NOTE: not running as root: the full-disk fault tests were SKIPPED and"
  echo "      docs/RELIABILITY.md was not compared (run ./test.sh as root, as CI does)"
fi

step "cargo install (the CLI alone, from the clone; reuses the build above)"
inst="$(mktemp -d)"
cargo install --locked --quiet --path . --root "$inst"
"$inst/bin/tessera" --help >/dev/null
rm -rf "$inst"

step "wheel"
# The CLI in it is the binary the Rust tests just built (no rebuild).
TESSERA_WHEEL="$(PYTHON="$TESSERA_VENV/bin/python" scripts/build-wheel.sh | tail -1)"
ls -l "$TESSERA_WHEEL"

step "python package and tests"
TESSERA_WHEEL="$TESSERA_WHEEL" scripts/test-python.sh

# --- speed guard (issue 21) -------------------------------------------------
# A few seconds: the loaders (Rust, Python, `tessera bench`) and a small build
# as ratios against baselines measured in the same run; prints the figures
# every time, fails only below half of a goal. SPEED_GUARD=0 skips it.
if [[ "${SPEED_GUARD:-1}" != "0" ]]; then
  step "speed guard (scripts/speed_guard.py)"
  TESSERA_BIN="$CARGO_TARGET_DIR/release/tessera" "$TESSERA_VENV/bin/python" scripts/speed_guard.py
fi
# -----------------------------------------------------------------------------

step "differential suite (tessera against DuckDB on the same files)"
TESSERA_BIN="$CARGO_TARGET_DIR/release/tessera" PYTHON="$TESSERA_VENV/bin/python" \
  scripts/test-differential.sh

if [[ "${FUZZ_SECONDS:-20}" != "0" ]]; then
  step "fuzz (${FUZZ_SECONDS:-20}s per target)"
  FUZZ_SECONDS="${FUZZ_SECONDS:-20}" scripts/fuzz.sh
fi

# Summarize the cargo test results (pytest printed its own line above).
passed=$(grep -Eo '[0-9]+ passed' "$log" | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s+=$1} END {print s+0}')
echo "rust: $passed passed, $failed failed"
