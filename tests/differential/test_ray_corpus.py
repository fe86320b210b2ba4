"""Every global query of the suite (the corpus's and TPC-H's 22) built by
tessera.ray on a real three-node Ray cluster on loopback, cut into stages
(3 partitions: `--threads 3`): each artifact is the local build's, file by
file. The cluster runs in a network namespace of its own (``unshare -n``),
which needs root, as CI has; elsewhere the test is skipped and says why.
test_stages.py checks the same queries with each task in its own
`tessera task` process and no Ray.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from conftest import TpchBuilder
from corpus import GLOBAL, QUERIES
from tessera_run import Builder, artifact_digests
from tpch import query_ids

HERE = Path(__file__).resolve().parent


def can_run() -> str:
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("tessera") is None:
        return "needs ray and the tessera package installed"
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return "a network namespace of its own needs root (CI runs as root)"
    if subprocess.run(["unshare", "-n", "true"], check=False).returncode != 0:
        return "unshare -n is not allowed here"
    return ""


@pytest.mark.skipif(bool(can_run()), reason=can_run() or "runs")
def test_every_global_query_on_a_ray_cluster_gives_the_local_bytes(builder: Builder, tpch_builder: TpchBuilder, tpch_queries: Dict[str, object], tmp_path: Path) -> None:
    local: Dict[str, Dict[str, object]] = {}
    jobs = []
    for q in (q for q in QUERIES if q.plan == GLOBAL):
        local[q.id] = builder.get(q, "many", 2).report
        jobs.append({"id": q.id, "spec": str(builder.spec_path(q, "many")), "cache": str(tmp_path / "cache" / q.id)})
    for qid in query_ids():
        tq = tpch_queries[qid]
        local[f"tpch-{qid}"] = tpch_builder.get(tq, "shuffled").report
        spec = tpch_builder.workdir / "tpch-specs" / f"{qid}-shuffled.yaml"
        jobs.append({"id": f"tpch-{qid}", "spec": str(spec), "cache": str(tmp_path / "cache" / f"tpch-{qid}")})
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    result_path = tmp_path / "result.json"
    script = f"ip link set lo up && exec {sys.executable} {HERE / 'ray_corpus.py'} {tmp_path / 'jobs.json'} {result_path}"
    proc = subprocess.run(["unshare", "-n", "sh", "-c", script], timeout=1800, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    assert result_path.exists(), proc.stdout[-4000:]
    r = json.loads(result_path.read_text())
    assert proc.returncode == 0, (proc.stdout[-4000:], sorted(r.get("builds", {})))
    assert r["nodes"] == ["a", "b", "head"], r["nodes"]
    builds = r["builds"]
    assert sorted(builds) == sorted(local)
    differ = []
    for qid, b in builds.items():
        if b["hash"] != local[qid]["hash"] or artifact_digests(Path(b["path"])) != artifact_digests(Path(str(local[qid]["path"]))):
            differ.append(qid)
    assert not differ, f"cluster artifacts differ from the local ones: {differ}"
    # Most of them really ran as stages (the rest say why they stay whole).
    staged = [qid for qid, b in builds.items() if b["stages"]]
    assert len(staged) >= len(builds) // 2, (staged, sorted(builds))
