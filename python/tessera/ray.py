"""``tessera.ray``: run a build's tasks on a Ray cluster.

A build is a DAG of tasks (``tessera plan`` writes it; each task names the
tasks whose outputs it reads): statistics partials, one per chunk of the
input; ``freeze``, which merges them in chunk order; shard tasks, one per
chunk; for a global query, a task per partition of each stage of its plan
(map and reduce sides of a shuffle) and the ``global`` task; then a commit that
assembles the outputs and publishes the artifact. :func:`build` plans on the
driver, runs the tasks as Ray tasks in the order their dependencies allow,
whatever their kind (each one is the ``tessera task`` command this package
ships, so workers run the same compiled code as a local build), and commits
on the driver. The artifact is byte-identical to a local ``tessera build`` of the
same spec, whichever node ran which task and however often a task was retried.

Every node must see the spec, its inputs, the cache directory and the work
directory at the same paths (a shared file system); the driver publishes into
the cache. ``output`` then copies the artifact where it is wanted (a
directory, or an object-store URL where the compiler supports one). Install
with ``pip install 'tessera-shards[ray]'``.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from tessera._build import PathArg, find_compiler
from tessera.errors import BuildError

__all__ = ["build", "TaskError"]


class TaskError(BuildError):
    """A task of the plan failed on a worker with an error of the build itself
    (bad data, a bad spec): rerunning it would fail the same way."""


class _Interrupted(Exception):
    """The task's process was killed (by a signal): worth retrying."""


def _run(cmd: List[str]) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)


#: Most plan tasks one Ray task runs (a retry redoes at most this many).
MAX_GROUP = 16


def _run_task(exe: str, plan: str, tasks: List[str]) -> Dict[str, Any]:
    """Body of one Ray task: ``tessera task PLAN TASK... --json`` on the
    worker (the spec loaded, the inputs checked and the query planned once
    for all); returns its seconds and the process's peak resident memory."""
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        exe = find_compiler()
    t0 = time.monotonic()
    p = _run([exe, "task", plan, *tasks, "--json"])
    what = ", ".join(tasks)
    if p.returncode < 0:
        raise _Interrupted(f"tasks {what}: killed by signal {-p.returncode}")
    if p.returncode != 0:
        raise TaskError(f"tasks {what} failed on {os.uname().nodename}:\n{p.stderr.strip()}")
    peak = None
    lines = p.stdout.strip().splitlines()
    if lines:
        try:
            peak = json.loads(lines[-1]).get("peak_rss_bytes")
        except ValueError:
            peak = None
    return {"tasks": tasks, "seconds": time.monotonic() - t0, "peak_rss_bytes": peak}


def groups(ids: List[str], cpus: int) -> List[List[str]]:
    """Plan tasks dealt into Ray tasks: one each when there are no more than
    twice the CPUs, else about twice the CPUs groups (at most ``MAX_GROUP``
    tasks each), dealt round-robin so that expensive and cheap chunks (a
    filter prunes neighbouring chunks alike) mix in every group. Grouping
    changes nothing in the outputs, only the processes that make them."""
    if not ids:
        return []
    n = max(min(len(ids), 2 * cpus), -(-len(ids) // MAX_GROUP))
    return [ids[k::n] for k in range(n)]


def build(
    spec: PathArg,
    output: Optional[str] = None,
    *,
    address: Optional[str] = None,
    cache_dir: Optional[PathArg] = None,
    work_dir: Optional[PathArg] = None,
    threads: Optional[int] = None,
    memory_limit: Optional[str] = None,
    max_in_flight: Optional[int] = None,
    retries: int = 3,
    allow_empty: bool = False,
    progress: bool = True,
) -> Dict[str, Any]:
    """Builds ``spec`` with its tasks run on a Ray cluster; returns the report.

    ``address`` is passed to ``ray.init`` when Ray is not initialized yet
    (``None``: a local Ray, or ``RAY_ADDRESS``). ``work_dir`` is where tasks
    leave their outputs: an object-store URL (``"s3://bucket/tmp/run1"``,
    credentials from the environment, which Ray's nodes must share), so the
    nodes need no shared file system, or a directory every node sees at the
    same path (default: one under the cache's ``tmp/``). The commit runs on
    the driver, into ``cache_dir``. ``threads`` and
    ``memory_limit`` (e.g. ``"2GiB"``) are those of a global query's single
    task; chunk tasks run on one core each. At most ``max_in_flight`` tasks
    are submitted at once (default: twice the cluster's CPUs). A task whose
    process or node dies is rerun up to ``retries`` times (only the plan
    tasks that Ray task held: every other output is already in the work
    directory); a task that fails with an error of the build raises
    :class:`TaskError` at once.

    When the cache already holds the artifact, no task is scheduled (and Ray
    is not even started). The report is ``tessera commit --json``'s (``hash``,
    ``path``, ``rows``, ...) plus ``cache_hit``, ``tasks`` (how many tasks
    completed; retried attempts are not counted), ``reruns`` (how many plan
    tasks ran again after their process or node died) and ``rerun`` (each
    retry: its tasks and why), ``peak_rss_bytes`` (per kind of task, the
    largest peak resident memory of a task process) and ``seconds`` per kind
    of task (``stages`` for the stage tasks of a global query, ``stats``,
    ``freeze``, ``shards``, the last with a global query's own task: first
    submission to last completion), ``plan``, ``commit`` and ``total``.
    With ``output``, the commit
    also places the artifact there (a directory, or an object-store URL it is
    pushed to, shards first and the manifest last; on a cache hit, ``tessera
    build -o OUTPUT`` does) and ``output`` is added to the report.
    """
    exe = find_compiler()
    spec_path = os.path.abspath(os.fspath(spec))
    common: List[str] = []
    if cache_dir is not None:
        common += ["--cache-dir", os.path.abspath(os.fspath(cache_dir))]
    t0 = time.monotonic()
    cmd = [exe, "plan", spec_path, "--json", *common]
    if work_dir is not None:
        wd = os.fspath(work_dir)
        cmd += ["--work-dir", wd if "://" in wd else os.path.abspath(wd)]
    if threads is not None:
        cmd += ["--threads", str(int(threads))]
    if memory_limit is not None:
        cmd += ["--memory-limit", str(memory_limit)]
    p = _run(cmd)
    if p.returncode != 0:
        raise BuildError(f"tessera plan {spec_path} failed:\n{p.stderr.strip()}", spec=spec_path, returncode=p.returncode, stderr=p.stderr)
    plan = json.loads(p.stdout.strip().splitlines()[-1])
    seconds = {"plan": time.monotonic() - t0}
    if plan.get("cached"):
        report: Dict[str, Any] = {"hash": plan["hash"], "path": plan["cached"], "cache_hit": True, "tasks": 0, "reruns": 0, "rerun": []}
        if output is not None:
            cmd = [exe, "build", spec_path, "-o", str(output), "--json", "-q", *common]
            if allow_empty:
                cmd.append("--allow-empty")
            p = _run(cmd)
            if p.returncode != 0:
                raise BuildError(f"placing the artifact at {output} failed:\n{p.stderr.strip()}", spec=spec_path, returncode=p.returncode, stderr=p.stderr)
    else:
        plan_file = plan["work_dir"].rstrip("/") + "/plan.json"
        ran, rerun = _run_on_ray(exe, plan, plan_file, address, max_in_flight, retries, progress, seconds)
        t1 = time.monotonic()
        cmd = [exe, "commit", plan_file, "--json"]
        if allow_empty:
            cmd.append("--allow-empty")
        if output is not None:
            cmd += ["-o", str(output)]
        p = _run(cmd)
        if p.returncode != 0:
            raise BuildError(f"tessera commit {plan_file} failed:\n{p.stderr.strip()}", spec=spec_path, returncode=p.returncode, stderr=p.stderr)
        seconds["commit"] = time.monotonic() - t1
        report = json.loads(p.stdout.strip().splitlines()[-1])
        report["cache_hit"] = False
        report["tasks"] = len(ran)
        report["reruns"] = sum(len(r["tasks"]) for r in rerun)
        report["rerun"] = rerun
        kinds = {t["id"]: t["kind"] for t in plan["tasks"]}
        peaks: Dict[str, int] = {}
        for r in ran:
            if r.get("peak_rss_bytes") is not None:
                k = kinds.get(r["task"], "?")
                peaks[k] = max(peaks.get(k, 0), int(r["peak_rss_bytes"]))
        report["peak_rss_bytes"] = peaks
    if output is not None:
        report["output"] = str(output)
    seconds["total"] = time.monotonic() - t0
    report["seconds"] = seconds
    return report


def _run_on_ray(
    exe: str,
    plan: Dict[str, Any],
    plan_file: str,
    address: Optional[str],
    max_in_flight: Optional[int],
    retries: int,
    progress: bool,
    seconds: Dict[str, float],
) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    try:
        ray: Any = importlib.import_module("ray")
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BuildError("tessera.ray needs Ray: pip install 'tessera-shards[ray]'") from e
    if not ray.is_initialized():
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    limit = max_in_flight if max_in_flight else 2 * cpus
    # Retries are the driver's (see _run_dag), so that the report can say
    # what ran again.
    remote = ray.remote(_run_task).options(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")
    rerun: List[Dict[str, Any]] = []
    done = _run_dag(ray, remote, exe, plan_file, plan["tasks"], cpus, limit, progress, seconds, retries, rerun)
    if progress and sys.stderr.isatty():
        sys.stderr.write("\n")
    return done, rerun


def ready(tasks: List[Dict[str, Any]], finished: Set[str], submitted: Set[str]) -> List[str]:
    """The ids of the tasks not yet submitted whose dependencies (``after``)
    have all finished, in plan order."""
    return [t["id"] for t in tasks if t["id"] not in submitted and all(d in finished for d in t.get("after", []))]


def check_dag(tasks: List[Dict[str, Any]]) -> None:
    """Refuses a plan whose tasks wait for a task it does not have, or for
    each other in a cycle (nothing would ever run them)."""
    ids = {t["id"] for t in tasks}
    for t in tasks:
        for d in t.get("after", []):
            if d not in ids:
                raise BuildError(f"the plan's task {t['id']} waits for {d!r}, which is not one of its tasks")
    finished: Set[str] = set()
    while True:
        step = ready(tasks, finished, finished)
        if not step:
            break
        finished.update(step)
    stuck = [t["id"] for t in tasks if t["id"] not in finished]
    if stuck:
        raise BuildError(f"the plan's tasks {', '.join(stuck)} wait for each other in a cycle")


def _stage(kind: str) -> str:
    """The report's ``seconds`` key of a task kind (shards and a global
    query's own task count as ``shards``, its stage tasks as ``stages``)."""
    if kind in ("shard", "global"):
        return "shards"
    return "stages" if kind == "stage" else kind


def _run_dag(
    ray: Any,
    remote: Any,
    exe: str,
    plan_file: str,
    tasks: List[Dict[str, Any]],
    cpus: int,
    limit: int,
    progress: bool,
    seconds: Dict[str, float],
    retries: int = 3,
    rerun: Optional[List[Dict[str, Any]]] = None,
) -> List[Dict[str, Any]]:
    """Runs the plan's tasks by their dependencies: a task is submitted as
    soon as every task it waits for (``after``) has finished, whatever its
    kind; tasks that become ready together are dealt into groups
    (:func:`groups`), at most ``limit`` groups in flight. A group whose
    process or node died is submitted again, up to ``retries`` times, and
    appended to ``rerun``; the first build error cancels the rest. Returns
    one entry per plan task; ``seconds`` gets, per kind, the time from its
    first submission to its last completion."""
    check_dag(tasks)
    kind = {t["id"]: t["kind"] for t in tasks}
    tty = sys.stderr.isatty()
    finished: Set[str] = set()
    submitted: Set[str] = set()
    pending: List[List[str]] = []
    running: Dict[Any, List[str]] = {}
    attempts: Dict[Tuple[str, ...], int] = {}
    results: List[Dict[str, Any]] = []
    spans: Dict[str, List[float]] = {}
    try:
        while len(finished) < len(tasks):
            new = ready(tasks, finished, submitted)
            submitted.update(new)
            pending += groups(new, cpus)
            while pending and len(running) < limit:
                batch = pending.pop(0)
                now = time.monotonic()
                for t in batch:
                    spans.setdefault(_stage(kind[t]), [now, now])
                running[remote.remote(exe, plan_file, batch)] = batch
            if not running:  # pragma: no cover - check_dag refuses such plans
                raise BuildError("no task of the plan can run: " + ", ".join(sorted(set(kind) - finished)))
            done_refs, _ = ray.wait(list(running), num_returns=1)
            for ref in done_refs:
                batch = running.pop(ref)
                try:
                    r = ray.get(ref)
                except Exception as e:  # Ray wraps the task's exception
                    cause = getattr(e, "cause", None)
                    if isinstance(cause, TaskError):
                        raise cause from None
                    key = tuple(batch)
                    attempts[key] = attempts.get(key, 0) + 1
                    if attempts[key] > retries:
                        raise BuildError(f"tasks {', '.join(batch)} failed after {retries} retries: {e}") from e
                    # The process or its node died: run the group again
                    # (its outputs are written under fixed names, so a
                    # straggling first attempt writes the same bytes).
                    if rerun is not None:
                        rerun.append({"tasks": list(batch), "error": str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__})
                    running[remote.remote(exe, plan_file, batch)] = batch
                    continue
                finished.update(batch)
                now = time.monotonic()
                for t in batch:
                    spans[_stage(kind[t])][1] = now
                results += [{"task": t, "group_seconds": r["seconds"], "peak_rss_bytes": r.get("peak_rss_bytes")} for t in batch]
            if progress and (tty or len(results) == len(tasks)):
                end = "" if tty else "\n"
                sys.stderr.write(f"\rtessera.ray: tasks {len(results)}/{len(tasks)} done, {sum(len(b) for b in running.values())} running{end}")
                sys.stderr.flush()
    except BaseException:
        for ref in running:
            ray.cancel(ref, force=True)
        raise
    for name, (start, end_) in spans.items():
        seconds[name] = end_ - start
    return results
