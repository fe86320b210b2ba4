#!/usr/bin/env python3
"""A global query (GROUP BY) built on Ray, cut into stages, against the same
build run locally, in one run.

The data: --rows rows (default 20 M) in --files Parquet files, a key `k` with
--groups distinct values (default 4 M, about five rows a group), two float
columns and a small string. The spec:

    SELECT k, COUNT(*) AS n, SUM(x) AS sx, AVG(y) AS ay, MIN(s) AS s
    FROM t GROUP BY k           (chunks: { partitions: P })

Per round, each into a fresh cache:

  local    `tessera build SPEC --threads N`: one process runs the whole
           query (its wall time and peak resident memory)
  single   the same query as one task: `tessera plan` with `partitions: 1`,
           then `tessera task PLAN global` (the single-task build's peak
           memory, what a cluster had before stages)
  ray      `tessera.ray.build` on a Ray instance with N CPUs, started once
           before timing, the query cut into P partitions: map tasks,
           reduce tasks, the global task (its wall time, and the largest
           peak memory of any one task process by kind)

All three must give the same artifact hash and the same shard and manifest
bytes. The bars (issue 24): ray at most 1.5x local's wall time; with 4
partitions on 2 cores, every task's peak memory at most half the single
task's. Also prints the seconds per stage of the Ray build, for
docs/SCALING.md.

    python benches/ray_global.py                       # 20 M rows, 4 partitions, 2 rounds
    python benches/ray_global.py --rows 2000000 --rounds 1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

REPO = Path(__file__).resolve().parents[1]

SPEC = """\
version: 1
name: groups
sources:
  t: {{ path: "{data}/*.parquet" }}
query: SELECT k, COUNT(*) AS n, SUM(x) AS sx, AVG(y) AS ay, MIN(s) AS s FROM t GROUP BY k
fields:
  k:  {{ dtype: i64, column: k }}
  n:  {{ dtype: i64, column: n }}
  sx: {{ dtype: f64, column: sx }}
  ay: {{ dtype: f32, column: ay }}
  s:  {{ dtype: i32, column: s, transform: {{ hash_bucket: 1000 }} }}
chunks: {{ partitions: {partitions} }}
"""


def make_data(out: Path, rows: int, files: int, groups: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    marker = out / "_generated.json"
    want = {"rows": rows, "files": files, "groups": groups}
    if marker.exists() and json.loads(marker.read_text()) == want:
        return
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rng = np.random.default_rng(24)
    per = rows // files
    words = np.array([f"w{i:03d}" for i in range(300)])
    for f in range(files):
        n = per if f < files - 1 else rows - per * (files - 1)
        t = pa.table(
            {
                "k": rng.integers(0, groups, n, dtype=np.int64),
                "x": rng.normal(100.0, 30.0, n),
                "y": rng.lognormal(0.0, 1.0, n),
                "s": words[rng.integers(0, len(words), n)],
            }
        )
        pq.write_table(t, out / f"part-{f:03d}.parquet", row_group_size=1 << 20)
    marker.write_text(json.dumps(want))


def run_peak(cmd: List[str]) -> Tuple[float, int, str]:
    """Runs `cmd` in a child process of its own (a one-line Python that
    waits for it) so that RUSAGE_CHILDREN is that command's alone; returns
    wall seconds, peak resident bytes and stdout."""
    code = (
        "import resource,subprocess,sys,json;"
        "p=subprocess.run(sys.argv[1:],stdout=subprocess.PIPE,stderr=subprocess.PIPE);"
        "r=resource.getrusage(resource.RUSAGE_CHILDREN);"
        "sys.stderr.write(p.stderr.decode());"
        "print(json.dumps({'rc':p.returncode,'maxrss_kb':r.ru_maxrss,'out':p.stdout.decode()}))"
    )
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if r["rc"] != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed:\n{p.stderr[-3000:]}")
    return wall, int(r["maxrss_kb"]) * 1024, r["out"]


def digests(path: str) -> Dict[str, str]:
    return {
        n: hashlib.blake2b((Path(path) / n).read_bytes(), digest_size=16).hexdigest()
        for n in sorted(os.listdir(path))
        if n.endswith(".bin") or n == "manifest.json"
    }


def mb(b: float) -> str:
    return f"{b / 2**20:,.0f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--groups", type=int, default=4_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--data", type=Path, default=REPO / "data" / "bench")
    args = ap.parse_args()

    import ray

    import tessera
    import tessera.ray as tray

    exe = os.environ.get("TESSERA_BIN") or tessera.find_compiler()
    data = args.data / f"groups-{args.rows}x{args.files}-{args.groups}"
    t = time.monotonic()
    make_data(data, args.rows, args.files, args.groups)
    input_mb = sum(p.stat().st_size for p in data.glob("*.parquet")) / 1e6
    print(f"input: {args.rows:,} rows, {args.groups:,} groups, {args.files} files, {input_mb:,.0f} MB of Parquet ({time.monotonic() - t:.1f} s to make or find)")
    work = Path(tempfile.mkdtemp(prefix="tessera-ray-global-"))
    try:
        spec = work / "spec.yaml"
        spec.write_text(SPEC.format(data=data, partitions=args.partitions))
        single_spec = work / "single.yaml"
        single_spec.write_text(SPEC.format(data=data, partitions=1))
        # Warm the page cache and the stat cache.
        subprocess.run([exe, "build", str(spec), "--cache-dir", str(work / "warm"), "-q", "--threads", str(args.cpus)], check=True)
        t = time.monotonic()
        ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        print(f"ray start-up (once, not in the build times): {time.monotonic() - t:.1f} s; {args.cpus} CPUs, {args.partitions} partitions")

        local_s: List[float] = []
        ray_s: List[float] = []
        local_peak = single_peak = 0
        ray_peaks: Dict[str, int] = {}
        last: Dict[str, Any] = {}
        for r in range(args.rounds):
            wall, peak, out = run_peak([exe, "build", str(spec), "--cache-dir", str(work / f"local{r}"), "--threads", str(args.cpus), "--json", "-q"])
            local = json.loads(out.strip().splitlines()[-1])
            local_s.append(wall)
            local_peak = max(local_peak, peak)

            plan = json.loads(subprocess.run([exe, "plan", str(single_spec), "--cache-dir", str(work / f"single{r}"), "--threads", str(args.cpus), "--json"], check=True, stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1])
            assert [t["id"] for t in plan["tasks"]] == ["global"], plan["tasks"]
            plan_file = str(Path(plan["work_dir"]) / "plan.json")
            _, peak, _ = run_peak([exe, "task", plan_file, "global"])
            single_peak = max(single_peak, peak)
            single = json.loads(subprocess.run([exe, "commit", plan_file, "--json"], check=True, stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1])

            t = time.monotonic()
            rep = tray.build(str(spec), cache_dir=str(work / f"ray{r}"), threads=args.cpus, progress=False)
            ray_s.append(time.monotonic() - t)
            for k, v in rep.get("peak_rss_bytes", {}).items():
                ray_peaks[k] = max(ray_peaks.get(k, 0), v)
            last = rep
            if not (local["hash"] == single["hash"] == rep["hash"]):
                raise SystemExit(f"hashes differ: local {local['hash']}, single {single['hash']}, ray {rep['hash']}")
            if not (digests(local["path"]) == digests(single["path"]) == digests(rep["path"])):
                raise SystemExit("the artifacts' bytes differ")
        lm, rm = statistics.median(local_s), statistics.median(ray_s)
        print(f"rows out: {local['rows']['all']:,}; local, single task and ray artifacts: the same bytes")
        print(f"local build: median {lm:.2f} s  ({', '.join(f'{x:.2f}' for x in local_s)}), peak {mb(local_peak)}")
        print(f"ray build:   median {rm:.2f} s  ({', '.join(f'{x:.2f}' for x in ray_s)}), {last['tasks']} tasks")
        print(f"ray / local: {rm / lm:.2f}x  (bar: at most 1.5x)")
        secs = last.get("seconds", {})
        print("ray phases (last round): " + ", ".join(f"{k} {v:.2f} s" for k, v in secs.items()))
        worst = max(ray_peaks.values()) if ray_peaks else 0
        print(f"single-task build peak: {mb(single_peak)}")
        print("ray task peaks by kind: " + ", ".join(f"{k} {mb(v)}" for k, v in sorted(ray_peaks.items())))
        print(f"largest task / single task: {worst / single_peak:.2f}  (bar: at most 0.5 with 4 partitions)")
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
