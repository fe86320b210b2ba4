"""A three-node Ray cluster on loopback that builds a spec with tessera.ray,
loses a worker node in the middle, and builds again; run by test_ray.py
inside a network namespace of its own (where loopback is the only
interface), so that no Ray traffic leaves the machine's loopback.

    python ray_cluster.py SPEC CACHE_DIR RESULT_JSON [global]

Starts SeaweedFS (an S3 server), copies SPEC's ``data/*.parquet`` into it
(the nodes read the inputs from the bucket, hashing their bytes, so the
artifact is the one a local build of SPEC makes), and a head and two worker
nodes (``ray start --block``, one CPU each), each in its own process group;
builds SPEC into
CACHE_DIR with ``tessera.ray.build``, published to the S3 server too; kills
worker node ``b`` (SIGKILL to its whole process group) as soon as two tasks
have written their outputs; after the build, builds again (a cache hit).
With ``global`` (a spec whose query is cut into stages), it kills node ``b``
once the first map task (stage 0) has written its index, and node ``a`` once
the first task of the next stage has, so that each stage loses a worker, and
keeps at most one task in flight per node.
Writes what happened to RESULT_JSON, with the blake3 of every file read back
from the store. Stops every node it started by process group, never with
``ray stop``, and the S3 server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List

PORT = 6390


def ray_cli() -> str:
    return os.path.join(os.path.dirname(sys.executable), "ray")


def start_node(name: str, temp_dir: str, head: bool, pause: str = "") -> subprocess.Popen:
    cmd = [ray_cli(), "start", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats", f"--resources={json.dumps({name: 1})}"]
    env = dict(os.environ)
    if pause:
        # Every `tessera task` this node runs stops at that fault point (its
        # files written, its index not), until the node is killed; the trace
        # tells the killer it got there.
        env["TESSERA_FAULT_PAUSE"] = pause
        env["TESSERA_FAULT_TRACE"] = os.path.join(temp_dir, f"trace-{name}")
    if head:
        cmd += ["--head", f"--port={PORT}", f"--temp-dir={temp_dir}", "--include-dashboard=false", "--object-store-memory=100000000"]
        # Notice a dead node in about 2 s instead of 14.
        env.update(RAY_health_check_period_ms="1000", RAY_health_check_failure_threshold="3", RAY_health_check_timeout_ms="1000")
    else:
        cmd += [f"--address=127.0.0.1:{PORT}", "--object-store-memory=100000000"]
    log = open(os.path.join(temp_dir, f"node-{name}.log"), "wb")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop(p: subprocess.Popen, sig: int = signal.SIGTERM, wait: float = 15.0) -> None:
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, sig)
        p.wait(timeout=wait)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait(timeout=wait)


def start_cluster(ray: Any, temp_dir: str, nodes: Dict[str, subprocess.Popen], pauses: Dict[str, str]) -> None:
    """Starts the head, connects this process to it, then workers ``a`` and
    ``b`` (each with its fault point from ``pauses``), one at a time, each
    registered before the next starts; ``nodes`` gets their processes as
    they start, so that the caller can stop them whatever happens."""
    nodes["head"] = start_node("head", temp_dir, head=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            ray.init(address=f"127.0.0.1:{PORT}", logging_level="ERROR", log_to_driver=False)
            break
        except ConnectionError:
            if time.monotonic() > deadline or nodes["head"].poll() is not None:
                raise
            time.sleep(1)
    for name in ("a", "b"):
        nodes[name] = start_node(name, temp_dir, head=False, pause=pauses.get(name, ""))
        while name not in alive_nodes(ray):
            if time.monotonic() > deadline or nodes[name].poll() is not None:
                raise SystemExit(f"node {name} did not come up: {alive_nodes(ray)} (see {temp_dir})")
            time.sleep(0.5)


def alive_nodes(ray: Any) -> List[str]:
    return sorted(k for n in ray.nodes() if n["Alive"] for k in n["Resources"] if k in ("a", "b", "head"))


def s3_fs(s3: Any) -> Any:
    import pyarrow.fs as pafs

    from s3 import KEY_ID, SECRET

    return pafs.S3FileSystem(
        access_key=KEY_ID,
        secret_key=SECRET,
        endpoint_override=s3.endpoint.removeprefix("http://"),
        scheme="http",
        region="us-east-1",
    )


def upload_inputs(s3: Any, spec: str) -> str:
    """Copies the spec's ``data/*.parquet`` into the bucket and writes a
    spec that reads them from there, hashing their bytes (so the artifact is
    the local build's, byte for byte). Returns the new spec's path."""
    fs = s3_fs(s3)
    root = os.path.dirname(os.path.abspath(spec))
    url = s3.url("ray-input")
    bucket_path = url.removeprefix("s3://")
    for name in sorted(os.listdir(os.path.join(root, "data"))):
        with open(os.path.join(root, "data", name), "rb") as src, fs.open_output_stream(f"{bucket_path}/{name}") as dst:
            dst.write(src.read())
    with open(spec) as f:
        text = f.read()
    local = "t: { path: data/*.parquet }"
    assert local in text, text
    remote = os.path.join(root, "spec-s3.yaml")
    with open(remote, "w") as f:
        f.write(text.replace(local, f't: {{ path: "{url}/*.parquet", fingerprint: bytes }}'))
    return remote


def main() -> None:
    spec, cache_dir, result_path = sys.argv[1:4]
    staged = len(sys.argv) > 4 and sys.argv[4] == "global"
    # Inside a network namespace of its own, with only loopback: no token
    # (Ray turns token authentication on when a token file exists in $HOME).
    os.environ["RAY_AUTH_MODE"] = "disabled"
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    nodes: Dict[str, subprocess.Popen] = {}
    result: Dict[str, Any] = {}
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from s3 import S3Server

    s3 = S3Server()
    os.environ.update(s3.env())
    # The inputs live in the bucket too: every node reads them from there.
    spec = upload_inputs(s3, spec)
    try:
        import ray

        import tessera.ray as tray

        # With stages: node b's map tasks and node a's reduce tasks hang once
        # their files are written, so each node dies with a task in flight.
        pauses = {"a": "shuffle.s001.written", "b": "shuffle.s000.written"} if staged else {}
        start_cluster(ray, temp_dir, nodes, pauses)
        result["node_ips"] = sorted({n["NodeManagerAddress"] for n in ray.nodes()})

        # Kill node b once two tasks have written their outputs, while the
        # rest are running or queued. The work directory is in the bucket:
        # the nodes share nothing but the store.
        work = s3.url("ray-work")
        fs = s3_fs(s3)
        killed: Dict[str, Any] = {}

        def killer() -> None:
            import pyarrow.fs as pafs

            deadline = time.monotonic() + 120
            selector = pafs.FileSelector(work.removeprefix("s3://"), recursive=True, allow_not_found=True)
            while time.monotonic() < deadline and "at" not in killed:
                infos = fs.get_file_info(selector)
                outputs = sum(1 for i in infos if i.path.endswith(".json") and not i.path.endswith("/plan.json"))
                if staged:
                    # A node dies once its task has reached the pause.
                    def paused(name: str, point: str) -> bool:
                        try:
                            with open(os.path.join(temp_dir, f"trace-{name}")) as f:
                                return point in f.read().split()
                        except OSError:
                            return False

                    maps = sum(1 for i in infos if "/shuffle/s000/t" in i.path and i.path.endswith(".json"))
                    if "map_at" not in killed and paused("b", "shuffle.s000.written"):
                        killed["map_at"] = time.monotonic()
                        killed["maps_before"] = maps
                        stop(nodes["b"], signal.SIGKILL, wait=5)
                    if "map_at" in killed and paused("a", "shuffle.s001.written"):
                        killed["reduces_before"] = sum(1 for i in infos if "/shuffle/s001/t" in i.path and i.path.endswith(".json"))
                        killed["outputs_before"] = outputs
                        killed["at"] = time.monotonic()
                        stop(nodes["a"], signal.SIGKILL, wait=5)
                        return
                elif outputs >= 2:
                    killed["outputs_before"] = outputs
                    killed["at"] = time.monotonic()
                    stop(nodes["b"], signal.SIGKILL, wait=5)
                    return
                time.sleep(0.02)

        t = threading.Thread(target=killer, daemon=True)
        t.start()
        t0 = time.monotonic()
        url = s3.url("ray/clicks")
        first = tray.build(spec, url, cache_dir=cache_dir, work_dir=work, progress=False, retries=5, max_in_flight=3 if staged else None)
        t.join(timeout=5)
        result["first"] = {"hash": first["hash"], "path": first["path"], "cache_hit": first["cache_hit"], "tasks": first["tasks"], "seconds": time.monotonic() - t0, "output": first.get("output"), "reruns": first.get("reruns"), "rerun": first.get("rerun"), "peak_rss_bytes": first.get("peak_rss_bytes")}
        result["killed"] = {k: v for k, v in killed.items() if not k.endswith("at")}
        result["killed_map_before_reduce"] = "map_at" in killed and "at" in killed and killed["map_at"] <= killed["at"]
        # What the store holds, read back through the reader (verified).
        import tessera

        remote = tessera.open(url, cache_dir=os.path.join(cache_dir, "..", "shard-cache"), storage_options=s3.storage_options())
        remote.verify()
        result["remote_len"] = len(remote)
        result["remote_splits"] = remote.splits
        result["killed_after_outputs"] = killed.get("outputs_before")
        result["killed_before_end"] = "at" in killed and killed["at"] < t0 + result["first"]["seconds"]
        time.sleep(3)
        result["alive_after"] = alive_nodes(ray)
        # The commit removed the work directory's objects.
        import pyarrow.fs as pafs

        result["work_left"] = [i.path for i in fs.get_file_info(pafs.FileSelector(work.removeprefix("s3://"), recursive=True, allow_not_found=True))]
        second = tray.build(spec, cache_dir=cache_dir, progress=False)
        result["second"] = {"hash": second["hash"], "path": second["path"], "cache_hit": second["cache_hit"], "tasks": second["tasks"]}
        ray.shutdown()
    finally:
        for name in ("b", "a", "head"):
            if name in nodes:
                stop(nodes[name])
        s3.stop()
        with open(result_path, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
