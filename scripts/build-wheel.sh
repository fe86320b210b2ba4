#!/usr/bin/env bash
# Builds the tessera-shards wheel: the `tessera` Python package (the reader
# binding, abi3, Python >= 3.9) and the compiler, which pip installs as the
# `tessera` command beside the interpreter. Installing it needs no Rust.
#   scripts/build-wheel.sh [--out DIR]     (default DIR: dist/)
# Progress goes to stderr; the wheel's path is the last line on stdout.
#
# The CLI in the wheel is the `cargo build --release -p tessera-shards`
# artifact that the demo and the tests use (same flags, features and target
# directory; the release profile already leaves out symbols and debug info):
# DataFusion is never compiled a second way for the wheel.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
out="$repo/dist"
if [[ "${1:-}" == "--out" && -n "${2:-}" ]]; then
  out="$(mkdir -p "$2" && cd "$2" && pwd)"
fi
# shellcheck source=env.sh
source scripts/env.sh
# maturin: $MATURIN (the PEP 517 backend passes the build environment's), else
# the one installed for $PYTHON (the project's .venv in the demo and tests).
if [[ -n "${MATURIN:-}" ]]; then
  maturin=("$MATURIN")
else
  maturin=("${PYTHON:-python3}" -m maturin)
fi

{
  echo "== wheel: the compiler (cargo build --release -p tessera-shards)"
  cargo build --release -p tessera-shards
  staging="$repo/build/wheel-data/scripts"
  rm -rf "$repo/build/wheel-data"
  mkdir -p "$staging"
  cp "$CARGO_TARGET_DIR/release/tessera" "$staging/tessera"

  # The platform tag must cover the CLI too (maturin audits only the
  # extension): the oldest manylinux whose glibc has every symbol version the
  # CLI asks for, and no shared library outside the manylinux set.
  compat=(--compatibility linux)   # without objdump: the plain (local) linux tag
  if command -v objdump >/dev/null 2>&1; then
    glibc="$(objdump -T "$staging/tessera" | grep -oE 'GLIBC_2\.[0-9]+' | sort -t. -k2 -n | tail -1)"
    minor="${glibc#GLIBC_2.}"
    (( minor < 17 )) && minor=17
    compat=(--compatibility "manylinux_2_$minor")
    extra="$(objdump -p "$staging/tessera" | awk '$1 == "NEEDED" {print $2}' |
      grep -vxE 'libc\.so\.6|libm\.so\.6|libgcc_s\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux-x86-64\.so\.2' || true)"
    if [[ -n "$extra" ]]; then
      echo "build-wheel: the CLI links libraries outside manylinux: $extra" >&2
      exit 1
    fi
  fi

  echo "== wheel: maturin (the binding, plus the CLI as data/scripts/tessera)"
  rm -f "$out"/tessera_shards-*.whl
  # Its own target directory for the binding: maturin builds pyo3 with other
  # settings than `cargo test` does, and sharing one directory would rebuild
  # pyo3, numpy and the binding on every switch between the two.
  "${maturin[@]}" build --release --strip --out "$out" --target-dir "$CARGO_TARGET_DIR/wheel" "${compat[@]}"
} >&2

ls -t "$out"/tessera_shards-*.whl | head -1
