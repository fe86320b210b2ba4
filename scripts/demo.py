"""The tessera demo: generate data, compile two specs, hit the cache, stream.

Run through ./demo.sh, which installs and builds what this needs. Prints a
summary table at the end: rows, bytes, build time, cache-hit time, and loader
throughput from Rust and from Python, sequential and shuffled.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tessera_bin() -> str:
    exe = os.environ.get("TESSERA_BIN") or shutil.which("tessera")
    if not exe:
        sys.exit("demo: the tessera binary was not found (run ./demo.sh, or set TESSERA_BIN)")
    return exe


def run(cmd: list[str], capture: bool = False) -> subprocess.CompletedProcess:
    print("$", " ".join(str(c) for c in cmd), flush=True)
    r = subprocess.run(cmd, text=True, stdout=subprocess.PIPE if capture else None)
    if r.returncode != 0:
        sys.exit(f"demo: command failed with exit code {r.returncode}: {' '.join(map(str, cmd))}")
    return r


def build(spec: Path, cache: Path) -> tuple[dict, float]:
    t = time.perf_counter()
    r = run([tessera_bin(), "build", str(spec), "--cache-dir", str(cache), "--json"], capture=True)
    return json.loads(r.stdout), time.perf_counter() - t


def rust_bench(path: str, shuffle: bool) -> float:
    cmd = [tessera_bin(), "bench", path, "--split", "train", "--batch-size", "4096", "--threads", "2", "--epochs", "2", "--json"]
    if shuffle:
        cmd.append("--shuffle")
    r = run(cmd, capture=True)
    return json.loads(r.stdout)["samples_per_sec"]


def python_bench(path: str, shuffle: bool) -> float:
    import tessera

    ds = tessera.open(path).split("train")
    loader = ds.loader(batch_size=4096, shuffle=shuffle, seed=0, threads=2, drop_last=False)
    best = 0.0
    for epoch in range(2):
        loader.set_epoch(epoch)
        n = 0
        t = time.perf_counter()
        for batch in loader:
            n += len(next(iter(batch.values())))
        best = max(best, n / (time.perf_counter() - t))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=2_000_000, help="generated Criteo-like rows")
    ap.add_argument("--cache-dir", default=str(ROOT / "data" / "cache"))
    args = ap.parse_args()
    cache = Path(args.cache_dir)
    py = sys.executable

    print("== data")
    run([py, str(ROOT / "scripts" / "gen_criteo.py"), "--rows", str(args.rows), "--out", str(ROOT / "data" / "criteo")])
    run([py, str(ROOT / "scripts" / "fetch_flights.py")])

    rows = []
    for name, spec in [("criteo", ROOT / "specs" / "criteo.yaml"), ("flights", ROOT / "specs" / "flights.yaml")]:
        print(f"== build {name}")
        t = time.perf_counter()
        run([tessera_bin(), "build", str(spec), "--cache-dir", str(cache)])
        first = time.perf_counter() - t
        print(f"== build {name} again (cache hit)")
        report, hit = build(spec, cache)
        assert report["cache_hit"], "the second build should be a cache hit"
        path = report["path"]
        run([tessera_bin(), "head", path, "-n", "3"])
        print(f"== stream {name}")
        rows.append(
            {
                "dataset": name,
                "rows": " / ".join(f"{k} {v:,}" for k, v in report["rows"].items()),
                "MB": report["bytes"] / 1e6,
                "build_s": first,
                "hit_s": hit,
                "rust_seq": rust_bench(path, False),
                "rust_shuf": rust_bench(path, True),
                "py_seq": python_bench(path, False),
                "py_shuf": python_bench(path, True),
            }
        )

    print()
    print("| dataset | rows | MB | build s | cache hit s | Rust seq samples/s | Rust shuffled | Python seq | Python shuffled |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['dataset']} | {r['rows']} | {r['MB']:.1f} | {r['build_s']:.2f} | {r['hit_s']:.3f} | "
            f"{r['rust_seq']:,.0f} | {r['rust_shuf']:,.0f} | {r['py_seq']:,.0f} | {r['py_shuf']:,.0f} |"
        )
    print(f"\n(build s includes the command's start-up; {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
