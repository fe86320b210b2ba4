#!/usr/bin/env bash
# Fuzzes the parsers of untrusted input, each for a bounded time: the reader
# crate's manifest parser and shard-header decoder (reader/fuzz/), and the
# compiler's spec parser (fuzz/).
#
#   scripts/fuzz.sh                  # every target, 30 s each
#   FUZZ_SECONDS=300 scripts/fuzz.sh header spec
#
# Environment:
#   FUZZ_SECONDS     seconds per target (default 30)
#   FUZZ_SANITIZER   cargo-fuzz sanitizer (default none; address etc. need a
#                    nightly toolchain, see FUZZ_TOOLCHAIN)
#   FUZZ_TOOLCHAIN   rustup toolchain for the fuzz build, e.g. nightly
#                    (default: the active one)
#
# Runs on stable Rust: `cargo fuzz run -s none` needs no unstable flag. The
# reader's corpus is seeded from a real shard set written by ShardSetWriter
# (reader/fuzz/examples/write_seeds.rs), the spec parser's from specs/ and
# tests/bad_specs/; corpora are kept in <crate>/corpus/, so later runs start
# where earlier ones stopped. A crash leaves its input in
# <crate>/artifacts/<target>/ and makes the script exit 1.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=env.sh
source "$repo/scripts/env.sh"

seconds="${FUZZ_SECONDS:-30}"
sanitizer="${FUZZ_SANITIZER:-none}"
toolchain=()
if [[ -n "${FUZZ_TOOLCHAIN:-}" ]]; then
  toolchain=("+$FUZZ_TOOLCHAIN")
fi
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(manifest header spec)
fi

# The crate directory of a target.
crate_of() {
  case "$1" in
    spec) echo "$repo/fuzz" ;;
    *) echo "$repo/reader/fuzz" ;;
  esac
}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# Its own target directory: the instrumented build uses different flags from
# the workspace build and would otherwise invalidate it.
target_dir="$CARGO_TARGET_DIR/fuzz"

built=()
for t in "${targets[@]}"; do
  dir="$(crate_of "$t")"
  [[ " ${built[*]} " == *" $dir "* ]] && continue
  built+=("$dir")
  cd "$dir"
  if [[ "$dir" == "$repo/reader/fuzz" ]]; then
    echo "== seeding $dir/corpus from a shard set written by ShardSetWriter"
    cargo "${toolchain[@]}" run --quiet --release --example write_seeds \
      --target-dir "$target_dir" -- "$dir/corpus"
  else
    echo "== seeding $dir/corpus/spec from specs/ and tests/bad_specs/"
    mkdir -p "$dir/corpus/spec"
    cp "$repo"/specs/*.yaml "$repo"/tests/bad_specs/*.yaml "$dir/corpus/spec/"
  fi
  echo "== building the fuzz targets of ${dir#"$repo"/} (sanitizer: $sanitizer)"
  cargo "${toolchain[@]}" fuzz build -s "$sanitizer" --target-dir "$target_dir" 2>&1 |
    grep -vE '^\s+(Compiling|Downloaded|Downloading)' || true
done

failed=()
summary=()
for t in "${targets[@]}"; do
  dir="$(crate_of "$t")"
  corpus="$dir/corpus"
  cd "$dir"
  echo "== fuzzing $t for ${seconds}s"
  log="$(mktemp)"
  if cargo "${toolchain[@]}" fuzz run -s "$sanitizer" --target-dir "$target_dir" "$t" "$corpus/$t" -- \
      -max_total_time="$seconds" -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
    tail -40 "$log"
  fi
  runs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')"
  files="$(find "$corpus/$t" -type f | wc -l)"
  summary+=("$(printf '%-10s %-7s %12s runs  %6s corpus files  %4ss' "$t" "$status" "$runs" "$files" "$seconds")")
  rm -f "$log"
done

echo
echo "== fuzz summary (cargo-fuzz $(cargo fuzz --version | awk '{print $2}'), $(rustc "${toolchain[@]}" --version))"
printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "crashes in: ${failed[*]} (inputs under reader/fuzz/artifacts/ or fuzz/artifacts/)"
  exit 1
fi
