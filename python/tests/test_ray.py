"""tessera.ray on a real three-node Ray cluster on loopback, with SeaweedFS as
the only thing the nodes share (the inputs, the tasks' work directory and the
published set are in its bucket): the same bytes as a local build from local
files although a worker node dies mid-build, the set in the store verified,
the work directory emptied, and a second build of the same hash schedules
nothing.

The cluster runs in a network namespace of its own (``unshare -n``), where
loopback is the only interface: Ray would otherwise move to the machine's
main address. That needs root, as CI has.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tessera

HERE = Path(__file__).resolve().parent

SPEC = """\
version: 1
name: clicks
sources:
  t: { path: data/*.parquet }
filter: "day >= 2"
fields:
  id:    { dtype: i64, column: id }
  x:     { dtype: f32, column: x, transform: standardize }
  cat:   { dtype: i32, column: cat, transform: { vocab: { min_count: 2 } } }
  h:     { dtype: i32, column: cat, transform: { hash_bucket: 1024 } }
split: { key: id, weights: { train: 0.9, val: 0.1 } }
chunks: { target_bytes: 1MiB }
"""


def write_data(root: Path, files: int = 8, rows: int = 150_000) -> None:
    (root / "data").mkdir()
    rng = np.random.default_rng(7)
    for f in range(files):
        ids = np.arange(f * rows, (f + 1) * rows, dtype=np.int64)
        t = pa.table(
            {
                "id": ids,
                "x": rng.lognormal(0.0, 1.5, rows),
                "cat": pa.array([f"c{v}" for v in rng.zipf(1.3, rows) % 50_000]),
                "day": (ids % 10).astype(np.int32),
            }
        )
        pq.write_table(t, root / "data" / f"part-{f}.parquet", row_group_size=30_000)
    (root / "spec.yaml").write_text(SPEC)


def digests(path: str) -> Dict[str, str]:
    return {n: hashlib.sha256((Path(path) / n).read_bytes()).hexdigest() for n in sorted(os.listdir(path)) if not n.startswith(".")}


def can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "-n", "true"], check=False).returncode == 0


def local_and_cluster(tmp_path: Path, *mode: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The local build of ``tmp_path/spec.yaml`` (its report), and what
    ray_cluster.py (in a network namespace of its own) says of building it
    on the cluster."""
    spec = str(tmp_path / "spec.yaml")
    local = subprocess.run(
        [tessera.find_compiler(), "build", spec, "--cache-dir", str(tmp_path / "local"), "--json", "-q"],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    local_report = json.loads(local.stdout.strip().splitlines()[-1])
    result_path = tmp_path / "result.json"
    script = f"ip link set lo up && exec {sys.executable} {HERE / 'ray_cluster.py'} {spec} {tmp_path / 'cluster'} {result_path} {' '.join(mode)}"
    proc = subprocess.run(["unshare", "-n", "sh", "-c", script], timeout=600, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    assert result_path.exists(), proc.stdout[-4000:]
    r = json.loads(result_path.read_text())
    assert proc.returncode == 0, (r, proc.stdout[-4000:])
    return local_report, r


@pytest.mark.skipif(not can_unshare(), reason="a network namespace of its own needs root (CI runs as root)")
def test_three_nodes_a_killed_worker_the_local_bytes_and_a_cache_hit(tmp_path: Path) -> None:
    write_data(tmp_path)
    local_report, r = local_and_cluster(tmp_path)

    assert r["node_ips"] == ["127.0.0.1"], r
    first = r["first"]
    assert not first["cache_hit"]
    assert first["hash"] == local_report["hash"]
    # Node b died while the build had tasks left to run, and stayed dead.
    assert r["killed_after_outputs"] is not None and r["killed_before_end"], r
    assert "b" not in r["alive_after"] and "a" in r["alive_after"], r
    # The tasks' outputs went through the bucket, and the commit removed them.
    assert r["work_left"] == [], r
    assert first["tasks"] > 10, r
    # Every shard and the manifest: the local build's bytes.
    assert digests(first["path"]) == digests(local_report["path"])
    # Published to the S3 server too, and it reads back verified, whole.
    assert first["output"].startswith("s3://"), r
    local_set = tessera.open(local_report["path"])
    assert r["remote_len"] == len(local_set) and r["remote_splits"] == local_set.splits, r
    # Built again: a cache hit, no task scheduled.
    second = r["second"]
    assert second["cache_hit"] and second["tasks"] == 0 and second["path"] == first["path"], r


GLOBAL_SPEC = """\
version: 1
name: clicks-by-cat
sources:
  t: { path: data/*.parquet }
query: SELECT cat, COUNT(*) AS n, SUM(x) AS sx, AVG(x) AS ax, MIN(id) AS id FROM t WHERE day >= 1 GROUP BY cat
fields:
  id:  { dtype: i64, column: id }
  n:   { dtype: i64, column: n }
  sx:  { dtype: f64, column: sx }
  ax:  { dtype: f32, column: ax, transform: standardize }
  cat: { dtype: i32, column: cat, transform: { hash_bucket: 4096 } }
split: { key: id, weights: { train: 0.9, val: 0.1 } }
chunks: { partitions: 6 }
"""


@pytest.mark.skipif(not can_unshare(), reason="a network namespace of its own needs root (CI runs as root)")
def test_three_nodes_a_global_query_loses_a_worker_in_each_stage(tmp_path: Path) -> None:
    """A GROUP BY cut into stages: node b dies during the map stage, node a
    during the reduce stage; the build finishes on what is left, reruns only
    the Ray tasks that were on the dead nodes, and gives the local bytes."""
    write_data(tmp_path)
    (tmp_path / "spec.yaml").write_text(GLOBAL_SPEC)
    local_report, r = local_and_cluster(tmp_path, "global")

    first = r["first"]
    assert not first["cache_hit"] and first["hash"] == local_report["hash"], r
    # One worker died in each stage, and stayed dead.
    assert r["killed_map_before_reduce"], r
    assert "a" not in r["alive_after"] and "b" not in r["alive_after"], r
    # Each dead node held one Ray task of one plan task (b a map task, a a
    # reduce task, both paused once their files were written; one in flight
    # per node): exactly those two ran again, and the report says so.
    assert first["reruns"] == 2 and len(first["rerun"]) == 2, first
    again = sorted(g["tasks"][0] for g in first["rerun"] if len(g["tasks"]) == 1)
    assert len(again) == 2 and again[0].startswith("stage0-") and again[1].startswith("stage1-"), first
    assert first["tasks"] >= 13, first  # 6 map, 6 reduce, the global task
    assert r["work_left"] == [], r
    assert digests(first["path"]) == digests(local_report["path"])
    assert set(first["peak_rss_bytes"]) == {"stage", "global"}, first
    second = r["second"]
    assert second["cache_hit"] and second["tasks"] == 0 and second["path"] == first["path"], r
