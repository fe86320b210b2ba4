#!/usr/bin/env python3
"""A build on Ray against the same build run locally, in one run.

The Criteo-like set (scripts/gen_criteo.py: 4 M rows in 8 files by default)
compiled with specs/criteo.yaml twice per round, each into a fresh cache:
`tessera build --threads N` (local), and `tessera.ray.build` on a Ray
instance with N CPUs started once before timing (the cluster's start-up is
reported apart: a cluster outlives builds). Both must give the same hash and
the same shard bytes. The bar (issue 14): the Ray build costs at most 25%
more wall time than the local one.

It also reports per-task figures for docs/SCALING.md: MB/s of Parquet read and
records written per second by one task, and the scheduling overhead per task
(Ray's wall time minus the tasks' own time over the CPUs, per task).

    python benches/ray_build.py                    # 4 M rows, 3 rounds
    python benches/ray_build.py --rows 1000000 --rounds 1

Needs the tessera-shards package (with its compiler) and ray installed.
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
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]


def shard_digests(path: str) -> Dict[str, str]:
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".bin") or name == "manifest.json":
            with open(os.path.join(path, name), "rb") as f:
                out[name] = hashlib.blake2b(f.read(), digest_size=16).hexdigest()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--data", type=Path, default=REPO / "data" / "bench")
    args = ap.parse_args()

    import ray

    import tessera
    import tessera.ray as tray

    exe = tessera.find_compiler()
    data = args.data / f"criteo-{args.rows}x{args.files}"
    if not (data / "_generator.json").exists():
        subprocess.run(
            [sys.executable, str(REPO / "scripts" / "gen_criteo.py"), "--rows", str(args.rows), "--files", str(args.files), "--out", str(data), "--quiet"],
            check=True,
        )
    work = Path(tempfile.mkdtemp(prefix="tessera-ray-bench-"))
    try:
        spec = work / "spec.yaml"
        text = (REPO / "specs" / "criteo.yaml").read_text().replace("../data/criteo/*.parquet", str(data / "*.parquet"))
        spec.write_text(text)
        input_mb = sum(p.stat().st_size for p in data.glob("*.parquet")) / 1e6
        # Warm the page cache and the compiler's stat cache for both sides.
        subprocess.run([exe, "build", str(spec), "--cache-dir", str(work / "warm"), "-q"], check=True)

        t = time.monotonic()
        ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        ray_start = time.monotonic() - t

        local_s: List[float] = []
        ray_s: List[float] = []
        phases: List[Dict[str, float]] = []
        tasks = 0
        for r in range(args.rounds):
            cache = work / f"local-{r}"
            t = time.monotonic()
            out = subprocess.run([exe, "build", str(spec), "--cache-dir", str(cache), "--threads", str(args.cpus), "--json", "-q"], check=True, stdout=subprocess.PIPE, text=True)
            local_s.append(time.monotonic() - t)
            local = json.loads(out.stdout.strip().splitlines()[-1])

            cache = work / f"ray-{r}"
            t = time.monotonic()
            rep = tray.build(str(spec), cache_dir=str(cache), progress=False)
            ray_s.append(time.monotonic() - t)
            phases.append(rep["seconds"])
            tasks = rep["tasks"]
            if rep["hash"] != local["hash"] or shard_digests(rep["path"]) != shard_digests(local["path"]):
                raise SystemExit("the Ray build differs from the local build")
            rows = sum(local["rows"].values()) if isinstance(local["rows"], dict) else local["rows"]
            shutil.rmtree(work / f"local-{r}")
            shutil.rmtree(work / f"ray-{r}")

        lm, rm = statistics.median(local_s), statistics.median(ray_s)
        print(f"input: {args.rows:,} rows in {args.files} files, {input_mb:.0f} MB of Parquet; {args.cpus} CPUs")
        print(f"ray start-up (once, not in the build times): {ray_start:.1f} s")
        print(f"local build: median {lm:.2f} s  ({', '.join(f'{x:.2f}' for x in local_s)})")
        print(f"ray build:   median {rm:.2f} s  ({', '.join(f'{x:.2f}' for x in ray_s)}), {tasks} tasks")
        print(f"ray / local: {rm / lm:.2f}x  (bar: at most 1.25x)")
        last = phases[-1]
        print("ray phases (last round): " + ", ".join(f"{k} {v:.2f} s" for k, v in last.items()))
        # One task's throughput: the local build runs the same tasks on
        # the same CPUs, so its time over the CPUs is a task's cost.
        task_s = lm * args.cpus
        print(f"per core: {input_mb / task_s:.1f} MB/s of Parquet in, {rows / task_s:,.0f} records/s out")
        print(f"scheduling overhead: {(rm - lm) * args.cpus / max(tasks, 1) * 1000:.0f} ms per task ({tasks} tasks)")
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
