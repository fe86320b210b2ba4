#!/usr/bin/env bash
# Runs the reader throughput benchmark (reader/benches/throughput.rs) and
# prints tessera's throughput next to the plain baselines measured in the same
# run: sequential batches vs a memcpy of contiguous batches, shuffled batches
# vs a plain loop gathering records at random indices.
#
#   scripts/bench-reader.sh                       # 2 GiB per record size
#   TESSERA_BENCH_GIB=0.25 scripts/bench-reader.sh --measurement-time 2
#
# Arguments are passed to criterion (a name filter, --measurement-time S,
# --sample-size N, ...). The shard sets are written once and cached under
# $CARGO_TARGET_DIR/tmp/tessera-bench (TESSERA_BENCH_DIR overrides).
# The loader's consumer reads every byte of each batch (a batch borrowed from
# the memory map costs nothing until read); the baselines write every byte.
# Figures are criterion's median time per batch; the bars are those of the
# reader issue: sequential >= 0.85 x memcpy, shuffled >= 0.70 x gather loop,
# for the loader's 1 and 2 prefetch threads against the 1- and 2-thread
# baselines. Row "thr 0" is the loader building batches on the consuming
# thread (no hand-off), set against the 1-thread baseline for information.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=env.sh
source "$repo/scripts/env.sh"
cd "$repo"

stamp="$(mktemp)"
trap 'rm -f "$stamp"' EXIT
echo "== cargo bench -p tessera-shards-reader --bench throughput (TESSERA_BENCH_GIB=${TESSERA_BENCH_GIB:-2})"
cargo bench -p tessera-shards-reader --bench throughput -- "$@"

echo
echo "== $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) (noisy if other work was running)"
python3 - "$CARGO_TARGET_DIR/criterion" "$stamp" <<'PY'
import json, os, sys

root, stamp = sys.argv[1], sys.argv[2]
since = os.path.getmtime(stamp)

def result(group, bench):
    """(seconds per batch, bytes per batch, fresh) or None."""
    d = os.path.join(root, group, bench, "new")
    try:
        est = json.load(open(os.path.join(d, "estimates.json")))
        meta = json.load(open(os.path.join(d, "benchmark.json")))
    except OSError:
        return None
    fresh = os.path.getmtime(os.path.join(d, "estimates.json")) >= since
    nbytes = next(iter(meta["throughput"].values()))
    return est["median"]["point_estimate"] * 1e-9, nbytes, fresh

def fmt(r, stride):
    if r is None:
        return "       -        -"
    secs, nbytes, fresh = r
    gbs = nbytes / secs / 1e9
    msps = nbytes / stride / secs / 1e6
    return f"{gbs:8.2f} {msps:8.2f}" + ("" if fresh else " (old)")

rows = []
print(f"{'record':>7} {'mode':<11} {'thr':>3}  {'baseline':<7} {'GB/s':>8} {'Msmp/s':>8}  "
      f"{'tessera GB/s':>12} {'Msmp/s':>8}  {'ratio':>6}  bar")
for stride in (160, 4096):
    for mode, base, bar in (("sequential", "memcpy", 0.85), ("shuffled", "gather", 0.70)):
        group = f"{'seq' if mode == 'sequential' else 'shuf'}_{stride}B"
        for t in (0, 1, 2):
            b = result(group, f"{base}_{max(t, 1)}t")
            s = result(group, f"tessera_{t}t")
            if b and s:
                ratio = b[0] / s[0]
                if t == 0:
                    verdict = f"{ratio:6.2f}  (no bar: built on the consumer)"
                else:
                    verdict = f"{ratio:6.2f}  {'ok' if ratio >= bar else 'MISS'} (>= {bar:.2f})"
            else:
                verdict = "     -"
            print(f"{stride:>6}B {mode:<11} {t:>3}  {base:<7} {fmt(b, stride)}  "
                  f"{fmt(s, stride):>21}  {verdict}")
PY
