#!/usr/bin/env python3
"""TPC-H through specs against DuckDB, side by side in one run.

Generates TPC-H at --sf (default 1: 6M lineitem rows) with `tpchgen-cli` (one
Parquet file per table, kept under --dir for the next run), then for each of
the 22 queries of tests/differential/tpch/ (the spec the differential suite
builds: a field for every output column, strings as `hash_bucket`, dates as
yyyymmdd, decimals as f64):

  tessera   `tessera build SPEC --threads T` into a fresh cache (process start,
            planning, the query, the stored order, statistics, encoding,
            writing and publishing: everything a user waits for)
  duckdb    DuckDB (threads T) running the same SQL and writing its answer
            to Parquet: `COPY (query) TO 'q.parquet'`, in one process that
            has already started (its start is not counted)

and prints each query's seconds, the totals and their ratio (the bar of issue
21: tessera's total within 1.5x DuckDB's). With --check-threads it also builds
every query with 1 thread and checks that the artifact hash equals the
T-thread build's.

    python benches/tpch.py                    # SF 1, 2 threads
    python benches/tpch.py --sf 0.1 --check-threads
    python benches/tpch.py --queries q01,q06 --rounds 3

Needs the compiler ($TESSERA_BIN, else the release binary in the shared
target directory), duckdb, pyarrow and tpchgen-cli (scripts/setup.sh --test
installs them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import duckdb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "differential"))

import tpch  # noqa: E402  (the differential suite's TPC-H helpers)
from tessera_run import spec_text  # noqa: E402


def tessera_bin() -> str:
    env = os.environ.get("TESSERA_BIN")
    if env:
        return env
    target = os.environ.get("CARGO_TARGET_DIR", str(Path.home() / ".cache" / "tessera" / "target"))
    return str(Path(target) / "release" / "tessera")


def generate(root: Path, sf: float) -> tpch.TpchData:
    """One Parquet file per table (the `one` layout), made once per scale."""
    data = tpch.TpchData(root, sf)
    marker = root / f".one-sf{sf}"
    if marker.exists():
        return data
    exe = tpch.tpchgen_binary()
    if exe is None:
        sys.exit("tpchgen-cli not found: pip install tpchgen-cli (scripts/setup.sh --test does)")
    shutil.rmtree(root, ignore_errors=True)
    subprocess.run([exe, "parquet", "--scale-factor", str(sf), "--output-dir", str(root / "one"), "--quiet"],
                   check=True, timeout=1800)
    marker.write_text("ok\n")
    return data


def build(binary: str, spec: Path, threads: int, work: Path) -> Dict[str, object]:
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
    try:
        t = time.perf_counter()
        proc = subprocess.run([binary, "build", str(spec), "--json", "-q", "--allow-empty", "--threads", str(threads),
                               "--cache-dir", str(cache)], capture_output=True, text=True)
        secs = time.perf_counter() - t
        if proc.returncode != 0:
            sys.exit(f"tessera build {spec.name} failed:\n{proc.stderr[-3000:]}")
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        return {"seconds": secs, "hash": report.get("hash"), "serial": report.get("plan_serial")}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def duck_copy(con: duckdb.DuckDBPyConnection, sql: str, out: Path) -> float:
    t = time.perf_counter()
    con.execute(f"COPY ({sql}) TO '{out}' (FORMAT parquet)")
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1, help="median of this many runs per query and side")
    ap.add_argument("--queries", default="", help="comma-separated ids (q01,...); default all 22")
    ap.add_argument("--check-threads", action="store_true", help="also build with 1 thread; hashes must match")
    target = os.environ.get("CARGO_TARGET_DIR", str(Path.home() / ".cache" / "tessera" / "target"))
    ap.add_argument("--dir", default=os.path.join(target, "tmp", "tpch-bench"))
    a = ap.parse_args()

    root = Path(a.dir) / f"sf{a.sf}"
    data = generate(root, a.sf)
    work = Path(a.dir) / "work"
    shutil.rmtree(work, ignore_errors=True)
    (work / "specs").mkdir(parents=True)
    con = duckdb.connect(":memory:")
    con.execute(f"SET threads = {a.threads}")
    for t, view in data.duck_views().items():
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM {view}")
    ids = [q for q in a.queries.split(",") if q] or tpch.query_ids()
    binary = tessera_bin()
    load = os.getloadavg()[0]
    print(f"TPC-H SF {a.sf}, {a.threads} threads, {os.cpu_count()} CPUs, load average {load:.2f}, "
          f"median of {a.rounds} round(s)")
    print(f"{'query':6} {'tessera s':>10} {'duckdb s':>9} {'ratio':>6}  note")
    tot_t = tot_d = 0.0
    bad: List[str] = []
    for qid in ids:
        q = tpch.load_query(qid, con, a.sf)
        spec = work / "specs" / f"{qid}.yaml"
        spec.write_text(spec_text(f"tpch-{qid}", q.q, q.sources(data, "one"), None))
        runs = [build(binary, spec, a.threads, work) for _ in range(a.rounds)]
        ts = statistics.median(float(r["seconds"]) for r in runs)  # type: ignore[arg-type]
        ds = statistics.median(duck_copy(con, q.sql, work / f"{qid}-{i}.parquet") for i in range(a.rounds))
        tot_t += ts
        tot_d += ds
        note = f"one partition: {runs[0]['serial']}" if runs[0]["serial"] else ""
        if a.check_threads:
            one = build(binary, spec, 1, work)
            if one["hash"] is None or one["hash"] != runs[0]["hash"]:
                bad.append(qid)
                note += f" HASH DIFFERS at 1 thread ({one['hash']} vs {runs[0]['hash']})"
        print(f"{qid:6} {ts:10.2f} {ds:9.2f} {ts / ds:6.2f}  {note}", flush=True)
    print(f"{'total':6} {tot_t:10.2f} {tot_d:9.2f} {tot_t / tot_d:6.2f}  (bar: 1.5)")
    if a.check_threads:
        print("1 and %d threads: %s" % (a.threads, "identical artifact hashes" if not bad else f"DIFFER for {bad}"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
