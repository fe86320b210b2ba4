#!/usr/bin/env python3
"""Serving-transform latency: microseconds per call for one row and batches
of 1..4096 rows, for the Criteo-like specs, in one run:

  rust     `tessera bench-transform` (Transform::apply in Rust, no DataFusion,
           rows already in memory as Arrow)
  python   `ds.transform(table)` from Python (pyarrow Table in, dict of NumPy
           arrays out: the binding's conversions included)
  pandas   a straightforward NumPy/pandas reimplementation of the same
           transforms with the artifact's frozen statistics (fillna, clip,
           log1p, standardize vectorized; the documented hash per token in a
           Python loop, as NumPy has no FNV-1a), checked against ds.transform
           before it is timed

Two specs over the same generated data (scripts/gen_criteo.py): specs/criteo.yaml
(label, 13 stacked counts, 26 stacked tokens: 3 fields over 40 columns) and
its 40-field form (one field per column).

  python benches/serving_latency.py [--rows 50000] [--seconds 0.5] [--json OUT]

Needs the tessera package (and its CLI) installed, pandas and pyarrow.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

import tessera

REPO = Path(__file__).resolve().parent.parent
SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
DENSE = [f"I{i}" for i in range(1, 14)]
CATS = [f"C{i}" for i in range(1, 27)]
BUCKETS = 1 << 20


def spec_40_fields(data: str) -> str:
    lines = [
        "version: 1",
        "name: criteo-40-fields",
        f"sources:\n  clicks: {{ path: {data} }}",
        "filter: day >= 14",
        "fields:",
        '  label: { dtype: f32, expr: "CAST(label AS FLOAT)" }',
    ]
    for c in DENSE:
        lines.append(f"  {c}: {{ dtype: f32, column: {c}, fill_null: 0, transform: [ {{ clip: {{ min: 0 }} }}, log1p, standardize ] }}")
    for c in CATS:
        lines.append(f"  {c}: {{ dtype: i32, column: {c}, transform: {{ hash_bucket: {BUCKETS} }} }}")
    lines.append("split: { key: id, weights: { train: 0.9, val: 0.1 } }")
    return "\n".join(lines) + "\n"


# --- the reimplementation -------------------------------------------------

MASK = (1 << 64) - 1


def stable_hash(b: bytes) -> int:
    """FNV-1a 64, then the SplitMix64 finalizer (docs/SPEC.md)."""
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & MASK
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & MASK
    return h ^ (h >> 31)


NULL = b"\xffnull"


def hash_column(col: pd.Series) -> np.ndarray:
    return np.fromiter(
        (stable_hash(NULL if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else v.encode()) % BUCKETS
         for v in col.to_numpy(dtype=object)),
        dtype=np.int32,
        count=len(col),
    )


def dense_column(col: pd.Series, stat: Dict) -> np.ndarray:
    x = col.astype("float64").fillna(0.0).to_numpy()
    x = np.log1p(np.maximum(x, 0.0))
    std = stat["std"] if stat["std"] > 0 else 1.0
    return ((x - stat["mean"]) / std).astype(np.float32)


def pandas_stacked(stats: Dict) -> Callable[[pd.DataFrame], Dict[str, np.ndarray]]:
    dense_stats = stats["dense"]

    def run(df: pd.DataFrame) -> Dict[str, np.ndarray]:
        return {
            "label": df["label"].astype(np.float32).to_numpy(),
            "dense": np.stack([dense_column(df[c], dense_stats[j]) for j, c in enumerate(DENSE)], axis=1),
            "cats": np.stack([hash_column(df[c]) for c in CATS], axis=1),
        }

    return run


def pandas_40(stats: Dict) -> Callable[[pd.DataFrame], Dict[str, np.ndarray]]:
    def run(df: pd.DataFrame) -> Dict[str, np.ndarray]:
        out = {"label": df["label"].astype(np.float32).to_numpy()}
        for c in DENSE:
            out[c] = dense_column(df[c], stats[c][0])
        for c in CATS:
            out[c] = hash_column(df[c])
        return out

    return run


# --- timing ---------------------------------------------------------------


def percentiles(fn: Callable[[int], object], n_slices: int, seconds: float) -> Dict[str, float]:
    for i in range(min(n_slices, 5)):
        fn(i)
    times: List[float] = []
    start = time.perf_counter()
    i = 0
    while len(times) < 200_000 and (len(times) < 50 or time.perf_counter() - start < seconds):
        t0 = time.perf_counter()
        fn(i % n_slices)
        times.append(time.perf_counter() - t0)
        i += 1
    a = np.sort(np.array(times)) * 1e6
    return {"calls": len(a), "p50_us": float(a[int(round((len(a) - 1) * 0.5))]), "p99_us": float(a[int(round((len(a) - 1) * 0.99))])}


def check_same(ours: Dict[str, np.ndarray], theirs: Dict[str, np.ndarray], name: str) -> None:
    for k, v in ours.items():
        w = theirs[k]
        if v.dtype.kind == "f":
            if not np.allclose(v, w, rtol=1e-6, atol=1e-6):
                raise SystemExit(f"{name}: the pandas reimplementation differs from ds.transform in {k}")
        elif not np.array_equal(v, w):
            raise SystemExit(f"{name}: the pandas reimplementation differs from ds.transform in {k}")


def bench_spec(name: str, spec: str, data_file: str, table: pa.Table, df: pd.DataFrame,
               reimpl: Callable[[Dict], Callable[[pd.DataFrame], Dict[str, np.ndarray]]],
               seconds: float, cache: str) -> List[Dict]:
    ds = tessera.open(tessera.build(spec, cache_dir=cache))
    impl = reimpl(ds.stats)
    check_same(ds.transform(table.slice(0, 4096)), impl(df.iloc[:4096]), name)
    exe = tessera.find_compiler()
    out = subprocess.run(
        [exe, "bench-transform", ds.path, data_file, "--rows", ",".join(map(str, SIZES)),
         "--seconds", str(seconds), "--json"],
        check=True, capture_output=True, text=True,
    )
    rust = {r["rows"]: r for r in json.loads(out.stdout)}
    rows = []
    for size in SIZES:
        n = len(df) // size
        tables = [table.slice(i * size, size) for i in range(min(n, 64))]
        frames = [df.iloc[i * size:(i + 1) * size] for i in range(min(n, 64))]
        py = percentiles(lambda i: ds.transform(tables[i]), len(tables), seconds)
        pdx = percentiles(lambda i: impl(frames[i]), len(frames), seconds)
        r = rust[size]
        rows.append({
            "spec": name, "rows": size,
            "rust_p50_us": r["p50_us"], "rust_p99_us": r["p99_us"],
            "python_p50_us": py["p50_us"], "python_p99_us": py["p99_us"],
            "pandas_p50_us": pdx["p50_us"], "pandas_p99_us": pdx["p99_us"],
        })
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=50_000, help="generated rows (default 50000)")
    ap.add_argument("--seconds", type=float, default=0.5, help="seconds per batch size and path (default 0.5)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "criteo")
        subprocess.run([sys.executable, str(REPO / "scripts" / "gen_criteo.py"), "--rows", str(args.rows),
                        "--files", "1", "--out", data, "--quiet"], check=True)
        data_file = os.path.join(data, "part-00000.parquet")
        table = pq.read_table(data_file)
        df = table.to_pandas()
        stacked = os.path.join(tmp, "criteo.yaml")
        text = (REPO / "specs" / "criteo.yaml").read_text().replace("../data/criteo/*.parquet", data_file)
        Path(stacked).write_text(text)
        forty = os.path.join(tmp, "criteo40.yaml")
        Path(forty).write_text(spec_40_fields(data_file))
        cache = os.path.join(tmp, "cache")
        results = bench_spec("criteo.yaml (3 fields)", stacked, data_file, table, df, pandas_stacked, args.seconds, cache)
        results += bench_spec("criteo, 40 fields", forty, data_file, table, df, pandas_40, args.seconds, cache)
    print(f"{'spec':<24} {'rows':>5} | {'rust p50':>9} {'p99':>9} | {'python p50':>10} {'p99':>9} | "
          f"{'pandas p50':>10} {'p99':>10} | pandas/rust p50")
    for r in results:
        print(f"{r['spec']:<24} {r['rows']:>5} | {r['rust_p50_us']:>9.1f} {r['rust_p99_us']:>9.1f} | "
              f"{r['python_p50_us']:>10.1f} {r['python_p99_us']:>9.1f} | {r['pandas_p50_us']:>10.1f} "
              f"{r['pandas_p99_us']:>10.1f} | {r['pandas_p50_us'] / r['rust_p50_us']:>7.1f}x")
    print("microseconds per call; rust: Transform::apply (no DataFusion); python: ds.transform(pyarrow Table)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
