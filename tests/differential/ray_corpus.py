"""Builds a list of specs with tessera.ray on a three-node Ray cluster on
loopback (a head and two workers, one CPU each, as python/tests/ray_cluster.py
starts them), each into its own cache; run by test_ray_corpus.py inside a
network namespace of its own.

    python ray_corpus.py JOBS_JSON RESULT_JSON

JOBS_JSON is a list of {"id", "spec", "cache"}; RESULT_JSON gets, per id,
the report's hash, path, tasks and whether the plan was cut into stages.
The nodes share this machine's file system (inputs, work directories and
caches at the same paths). Stops every node it started by process group.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Any, Dict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))

from ray_cluster import alive_nodes, start_cluster, stop  # noqa: E402


def main() -> None:
    jobs_path, result_path = sys.argv[1:3]
    jobs = json.load(open(jobs_path))
    os.environ["RAY_AUTH_MODE"] = "disabled"
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    nodes: Dict[str, Any] = {}
    result: Dict[str, Any] = {"builds": {}}
    try:
        import ray

        import tessera.ray as tray

        start_cluster(ray, temp_dir, nodes, {})
        result["nodes"] = alive_nodes(ray)
        for job in jobs:
            t = time.monotonic()
            r = tray.build(job["spec"], cache_dir=job["cache"], threads=3, allow_empty=True, progress=False)
            result["builds"][job["id"]] = {
                "hash": r["hash"],
                "path": r["path"],
                "tasks": r["tasks"],
                "stages": "stages" in r.get("seconds", {}),
                "seconds": time.monotonic() - t,
            }
        ray.shutdown()
    finally:
        for name in ("b", "a", "head"):
            if name in nodes:
                stop(nodes[name])
        with open(result_path, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
