#!/usr/bin/env python3
"""A global GROUP BY over 20 M generated rows: `tessera build --threads 2`
against DuckDB running the same query into Parquet with `COPY (...) TO`, side
by side in one run, each in its own process: wall time and peak RSS (from
/usr/bin/time -f %M, else the child's ru_maxrss from os.wait4).

The bar (issue 8): tessera within 2x DuckDB's time, with peak RSS under the
memory limit the build was given.

    python benches/global_query.py                       # 20 M rows in 8 files under data/bench/
    python benches/global_query.py --rows 2000000        # quick look
    python benches/global_query.py --memory-limit 1GiB --repeat 3

The memory limit is passed as `tessera build --memory-limit` when the binary
has that option (the script says so when it does not) and as DuckDB's
`memory_limit`, so both engines get the same budget. DuckDB runs with 2
threads too. Data generation is never timed; the files are read once before
timing so both engines start from the page cache.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
TIME_BAR = 2.0
QUERY = ("SELECT u, COUNT(*) AS n, SUM(x) AS sx, AVG(y) AS ay, MIN(z) AS mn, MAX(z) AS mx "
         "FROM t GROUP BY u")
FIELDS = [("u", "i64"), ("n", "i64"), ("sx", "f64"), ("ay", "f64"), ("mn", "i64"), ("mx", "i64")]

DUCK_CHILD = r"""
import sys, duckdb
files, out, threads, limit = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
con = duckdb.connect(":memory:")
con.execute(f"SET threads = {int(threads)}")
if limit:
    con.execute(f"SET memory_limit = '{limit}'")
con.execute(f"SET temp_directory = '{out}.tmp'")
con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet({files})")
con.execute(f"COPY ({sys.argv[5]}) TO '{out}' (FORMAT parquet)")
"""

UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(s: str) -> int:
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", s)
    if not m or m.group(2).lower() not in UNITS | {"": 1}:
        sys.exit(f"cannot read the size {s!r} (use e.g. 1GiB, 512MiB)")
    return int(float(m.group(1)) * UNITS.get(m.group(2).lower(), 1))


def duck_size(n: int) -> str:
    """DuckDB's spelling of a byte count."""
    return f"{n // 2**20}MiB"


def generate(directory: Path, rows: int, files: int, keys: int, seed: int = 5) -> List[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / f".done-{rows}-{files}-{keys}"
    paths = [directory / f"part-{i:03d}.parquet" for i in range(files)]
    if marker.exists():
        return paths
    rng = np.random.default_rng(seed)
    per = -(-rows // files)
    for i, p in enumerate(paths):
        n = min(per, rows - i * per)
        t = pa.table({
            "id": pa.array(np.arange(i * per, i * per + n, dtype=np.int64)),
            "u": pa.array(rng.integers(0, keys, size=n, dtype=np.int64)),
            "x": pa.array(rng.standard_normal(n)),
            "y": pa.array(rng.random(n) * 100.0),
            "z": pa.array(rng.integers(-10**6, 10**6, size=n, dtype=np.int64)),
        })
        pq.write_table(t, p, row_group_size=250_000)
    marker.write_text("ok\n")
    return paths


def run_measured(cmd: List[str]) -> Tuple[float, int, str, str]:
    """Runs `cmd` as a child; returns wall seconds, the child's peak RSS in
    bytes, stdout and stderr. The peak comes from `/usr/bin/time -f %M` when
    present: a child forked straight from this (large) Python process would
    report the parent's resident size as its own peak (Linux counts the
    forked copy of the address space before exec), which /usr/bin/time, a
    small process, avoids. Without it, os.wait4's ru_maxrss is used."""
    timer = Path("/usr/bin/time")
    with tempfile.TemporaryDirectory() as tmp:
        rss_file = Path(tmp) / "rss"
        full = [str(timer), "-f", "%M", "-o", str(rss_file), *cmd] if timer.exists() else cmd
        with open(Path(tmp) / "out", "w+b") as out, open(Path(tmp) / "err", "w+b") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(full, stdout=out, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            code = os.waitstatus_to_exitcode(status)
            out.seek(0)
            err.seek(0)
            so, se = out.read().decode(), err.read().decode()
        if code != 0:
            sys.exit(f"{' '.join(cmd[:3])} ... failed (exit {code}):\n{se[-3000:]}")
        if timer.exists():
            peak_kib = int(rss_file.read_text().split()[-1])
        else:
            peak_kib = usage.ru_maxrss
    return wall, peak_kib * 1024, so, se


def tessera_spec(paths: List[Path]) -> str:
    glob = str(paths[0].parent / "part-*.parquet")
    fields = "\n".join(f"  {n}: {{ dtype: {d}, column: {n} }}" for n, d in FIELDS)
    return (f"version: 1\nname: bench-global-group-by\nsources:\n  t: {{ path: {json.dumps(glob)} }}\n"
            f"query: {json.dumps(QUERY)}\nfields:\n{fields}\nshards: {{ target_bytes: 64MiB }}\n")


def has_memory_limit(binary: str) -> bool:
    h = subprocess.run([binary, "build", "--help"], capture_output=True, text=True)
    return "--memory-limit" in h.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=REPO / "data" / "bench")
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--keys", type=int, default=2_000_000, help="distinct GROUP BY keys")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--tessera", default=os.environ.get("TESSERA_BIN", ""), help="binary (default $TESSERA_BIN)")
    args = ap.parse_args()
    if not args.tessera:
        sys.exit("set TESSERA_BIN or pass --tessera")
    limit = parse_bytes(args.memory_limit)

    data_dir = args.data_dir / f"global-{args.rows}-{args.files}-{args.keys}"
    t0 = time.perf_counter()
    paths = generate(data_dir, args.rows, args.files, args.keys)
    gen = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in paths)
    print(f"input: {args.rows:,} rows, {args.keys:,} keys, {len(paths)} Parquet files, {size / 1e6:.0f} MB"
          f" (ready in {gen:.1f} s, not timed)")
    for p in paths:
        p.read_bytes()

    supports_limit = has_memory_limit(args.tessera)
    scratch = Path(tempfile.mkdtemp(prefix="tessera-global-", dir=args.data_dir))
    results: Dict[str, List[Tuple[float, int]]] = {"tessera": [], "duckdb": []}
    rows_out: Dict[str, Optional[int]] = {"tessera": None, "duckdb": None}
    try:
        spec = scratch / "spec.yaml"
        spec.write_text(tessera_spec(paths))
        files_sql = "[" + ", ".join("'" + str(p) + "'" for p in paths) + "]"
        for i in range(args.repeat):
            cache = scratch / f"cache-{i}"
            cmd = [args.tessera, "build", str(spec), "--json", "-q", "--threads", str(args.threads),
                   "--cache-dir", str(cache)]
            if supports_limit:
                cmd += ["--memory-limit", args.memory_limit]
            wall, rss, so, _ = run_measured(cmd)
            results["tessera"].append((wall, rss))
            rows_out["tessera"] = int(sum(json.loads(so.strip().splitlines()[-1])["rows"].values()))
            shutil.rmtree(cache, ignore_errors=True)

            out = scratch / f"duck-{i}.parquet"
            wall, rss, _, _ = run_measured([sys.executable, "-c", DUCK_CHILD, files_sql, str(out),
                                            str(args.threads), duck_size(limit), QUERY])
            results["duckdb"].append((wall, rss))
            rows_out["duckdb"] = pq.ParquetFile(out).metadata.num_rows
            out.unlink()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    med = {k: (statistics.median(w for w, _ in v), max(r for _, r in v)) for k, v in results.items()}
    print()
    print(f"query: {QUERY}")
    print(f"| engine | wall s (median of {args.repeat}) | peak RSS MiB | output rows |")
    print("|---|---:|---:|---:|")
    print(f"| tessera build --threads {args.threads}"
          f"{' --memory-limit ' + args.memory_limit if supports_limit else ''} | {med['tessera'][0]:.2f} "
          f"| {med['tessera'][1] / 2**20:.0f} | {rows_out['tessera']} |")
    print(f"| DuckDB COPY ... TO parquet, {args.threads} threads, memory_limit {duck_size(limit)} "
          f"| {med['duckdb'][0]:.2f} | {med['duckdb'][1] / 2**20:.0f} | {rows_out['duckdb']} |")
    print()
    same = rows_out["tessera"] == rows_out["duckdb"]
    if not same:
        print(f"WARNING: output row counts differ (tessera {rows_out['tessera']}, DuckDB {rows_out['duckdb']}):"
              " tessera's answer is wrong, so its time is not comparable")
    ratio = med["tessera"][0] / med["duckdb"][0]
    verdict = ("not comparable: wrong answer" if not same
               else "meets the bar of <= %.1fx" % TIME_BAR if ratio <= TIME_BAR
               else "misses the bar of <= %.1fx" % TIME_BAR)
    print(f"time ratio tessera / DuckDB: {ratio:.2f}x ({verdict})")
    rss = med["tessera"][1]
    if supports_limit:
        print(f"tessera peak RSS {rss / 2**20:.0f} MiB vs memory limit {limit / 2**20:.0f} MiB: "
              f"{'under' if rss < limit else 'OVER'} the limit")
    else:
        print(f"note: this tessera binary has no --memory-limit option; built without one "
              f"(peak RSS {rss / 2**20:.0f} MiB, against the {limit / 2**20:.0f} MiB the bar would set)")
    print("DuckDB's RSS includes its Python interpreter (about 40 MiB).")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
