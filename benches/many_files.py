#!/usr/bin/env python3
"""Many small files: `tessera build` over N Parquet files of 250 rows against
reading the same files with `pyarrow.dataset` (every row, every column), in
one run. The bar (issue 11): 100,000 files build in no more than twice the
time pyarrow.dataset takes to read them, into a handful of shards.

    python benches/many_files.py                     # 100,000 files under data/bench/
    python benches/many_files.py --files 10000       # a quicker look
    python benches/many_files.py --old-tessera BIN   # also time another build of tessera

The files are generated once (fixed seed) and reused; generation is not
timed. Each tool reads the files once before timing, so both start from the
page cache. Builds use a fresh cache directory each time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
ROWS = 250


def generate(root: Path, files: int) -> Path:
    d = root / f"many-{files}x{ROWS}"
    done = d / "_COMPLETE"
    if done.exists():
        return d
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    rng = np.random.default_rng(11)
    for i in range(files):
        ids = np.arange(i * ROWS, (i + 1) * ROWS, dtype=np.int64)
        t = pa.table({
            "id": ids,
            "x": rng.normal(size=ROWS),
            "k": rng.integers(0, 1000, ROWS),
            "s": pa.array([f"w{v}" for v in rng.integers(0, 5000, ROWS)]),
        })
        pq.write_table(t, d / f"part-{i:06d}.parquet")
    done.write_text("ok\n")
    return d


def spec_for(data: Path) -> str:
    return "\n".join([
        "version: 1",
        "name: many-files",
        "sources:",
        f"  t: {{ path: {json.dumps(str(data / '*.parquet'))} }}",
        "fields:",
        "  id: { dtype: i64, column: id }",
        "  x:  { dtype: f32, column: x }",
        "  k:  { dtype: i32, column: k }",
        "  s:  { dtype: i32, column: s, transform: { hash_bucket: 65536 } }",
        "",
    ])


def warm(data: Path) -> None:
    for p in data.glob("*.parquet"):
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


def time_build(binary: str, spec: Path, threads: int) -> Dict[str, object]:
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        proc = subprocess.run([binary, "build", str(spec), "--json", "-q", "--threads", str(threads),
                               "--cache-dir", cache], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{binary} failed:\n{proc.stderr}")
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        shards = len(json.loads(Path(report["path"], "manifest.json").read_text())["shards"])
        return {"wall": wall, "rows": sum(report["rows"].values()), "shards": shards,
                "chunks": report.get("chunks")}


def time_pyarrow(data: Path) -> Dict[str, object]:
    t0 = time.perf_counter()
    table = pads.dataset(str(data), format="parquet").to_table()
    wall = time.perf_counter() - t0
    return {"wall": wall, "rows": table.num_rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--data-dir", type=Path, default=REPO / "data" / "bench")
    ap.add_argument("--tessera", default=os.environ.get("TESSERA_BIN", "tessera"))
    ap.add_argument("--old-tessera", default=None, help="another tessera binary to time the same way")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()

    data = generate(args.data_dir, args.files)
    spec = args.data_dir / f"many-{args.files}.yaml"
    spec.write_text(spec_for(data))
    warm(data)

    rows: List[List[str]] = []
    best_py: Optional[float] = None
    best_tessera: Optional[float] = None
    for _ in range(args.repeat):
        py = time_pyarrow(data)
        best_py = min(best_py or py["wall"], py["wall"])  # type: ignore[type-var]
        b = time_build(args.tessera, spec, args.threads)
        best_tessera = min(best_tessera or b["wall"], b["wall"])  # type: ignore[type-var]
        rows.append(["pyarrow.dataset to_table", f"{py['wall']:.2f}", f"{py['rows']:,}", "-", "-"])
        rows.append([f"tessera build --threads {args.threads}", f"{b['wall']:.2f}", f"{b['rows']:,}",
                     str(b["shards"]), str(b["chunks"])])
        if args.old_tessera:
            o = time_build(args.old_tessera, spec, args.threads)
            rows.append([f"{args.old_tessera} build", f"{o['wall']:.2f}", f"{o['rows']:,}",
                         str(o["shards"]), str(o["chunks"])])
    print(f"{args.files:,} Parquet files of {ROWS} rows ({sum(p.stat().st_size for p in data.glob('*.parquet')) / 1e6:.0f} MB)\n")
    print("| what | wall s | rows | shards | chunks |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    assert best_py is not None and best_tessera is not None
    ratio = best_tessera / best_py
    print(f"\ntessera / pyarrow.dataset: {ratio:.2f}x (bar: <= 2x); files per second: "
          f"{args.files / best_tessera:,.0f}")
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
