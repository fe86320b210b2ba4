"""``tessera.ray`` schedules a plan by its task DAG, not by task kinds: a
stand-in for Ray (same calls: ``remote``, ``wait``, ``get``, ``cancel``)
finishes the submitted groups in a seeded random order and checks that no
task is submitted before every task it waits for has finished. The real
cluster run is ``test_ray.py``."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Set

import pytest

from tessera import ray as tray
from tessera.errors import BuildError


class _Ref:
    def __init__(self, batch: List[str]) -> None:
        self.batch = batch


class _FakeRay:
    def __init__(self, tasks: List[Dict[str, Any]], seed: int) -> None:
        self.after = {t["id"]: set(t["after"]) for t in tasks}
        self.finished: Set[str] = set()
        self.submitted: List[List[str]] = []
        self.rng = random.Random(seed)
        self.most_in_flight = 0
        self.in_flight = 0

    def remote(self, exe: str, plan_file: str, batch: List[str]) -> _Ref:
        for t in batch:
            missing = self.after[t] - self.finished
            assert not missing, f"{t} submitted before {sorted(missing)} finished"
        self.submitted.append(list(batch))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        return _Ref(batch)

    def wait(self, refs: List[_Ref], num_returns: int = 1) -> Any:
        ref = self.rng.choice(refs)
        self.finished.update(ref.batch)
        self.in_flight -= 1
        return [ref], [r for r in refs if r is not ref]

    def get(self, ref: _Ref) -> Dict[str, Any]:
        return {"tasks": ref.batch, "seconds": 0.0}

    def cancel(self, ref: _Ref, force: bool = False) -> None:
        pass


def _task(id: str, kind: str, after: List[str]) -> Dict[str, Any]:
    return {"id": id, "kind": kind, "chunk": None, "after": after}


def _chunked(n: int) -> List[Dict[str, Any]]:
    stats = [_task(f"stats-{i:05}", "stats", []) for i in range(n)]
    freeze = _task("freeze", "freeze", [t["id"] for t in stats])
    shards = [_task(f"shard-{i:05}", "shard", ["freeze"]) for i in range(n)]
    return stats + [freeze] + shards


def _run(tasks: List[Dict[str, Any]], seed: int, cpus: int = 2, limit: int = 4) -> Any:
    fake = _FakeRay(tasks, seed)
    seconds: Dict[str, float] = {}
    done = tray._run_dag(fake, fake, "tessera", "plan.json", tasks, cpus, limit, False, seconds)
    return fake, done, seconds


@pytest.mark.parametrize("seed", range(5))
def test_a_chunked_plan_runs_every_task_once_after_its_dependencies(seed: int) -> None:
    tasks = _chunked(40)
    fake, done, seconds = _run(tasks, seed)
    assert sorted(d["task"] for d in done) == sorted(t["id"] for t in tasks)
    assert sorted(t for b in fake.submitted for t in b) == sorted(t["id"] for t in tasks)
    assert fake.most_in_flight <= 4
    assert set(seconds) == {"stats", "freeze", "shards"}


@pytest.mark.parametrize("seed", range(5))
def test_a_kind_no_phase_knows_is_scheduled_by_what_it_waits_for(seed: int) -> None:
    # A shape a future plan may have (stages of a shuffle): map tasks, reduce
    # tasks that each wait for every map task, and a task of a new kind after
    # two of the reduces. Phases by kind would drop "sample" or run it early.
    maps = [_task(f"map-{i}", "map", []) for i in range(6)]
    reduces = [_task(f"reduce-{i}", "reduce", [m["id"] for m in maps]) for i in range(3)]
    sample = _task("sample", "sample", ["reduce-0", "reduce-2"])
    tail = _task("tail", "shard", ["sample", "reduce-1"])
    tasks = [tail, sample] + reduces + maps  # listed out of order on purpose
    fake, done, seconds = _run(tasks, seed)
    assert sorted(d["task"] for d in done) == sorted(t["id"] for t in tasks)
    order = [t for b in fake.submitted for t in b]
    assert order.index("sample") > max(order.index(f"reduce-{i}") for i in (0, 2))
    assert {"map", "reduce", "sample", "shards"} <= set(seconds)


def test_unknown_and_cyclic_dependencies_are_refused_before_anything_runs() -> None:
    with pytest.raises(BuildError, match="waits for 'nope'"):
        _run([_task("a", "shard", ["nope"])], 0)
    with pytest.raises(BuildError, match="cycle"):
        _run([_task("a", "shard", ["b"]), _task("b", "shard", ["a"]), _task("c", "shard", [])], 0)


class _WorkerDied(Exception):
    """What Ray raises when a task's worker or node dies."""


class _LosingRay(_FakeRay):
    """Loses the groups holding ``lose`` (each once, or ``times`` times)."""

    def __init__(self, tasks: List[Dict[str, Any]], seed: int, lose: Set[str], times: int = 1) -> None:
        super().__init__(tasks, seed)
        self.lose = {t: times for t in lose}

    def wait(self, refs: List[_Ref], num_returns: int = 1) -> Any:
        ref = self.rng.choice(refs)
        self.in_flight -= 1
        if not any(self.lose.get(t, 0) > 0 for t in ref.batch):
            self.finished.update(ref.batch)
        return [ref], [r for r in refs if r is not ref]

    def get(self, ref: _Ref) -> Dict[str, Any]:
        hit = [t for t in ref.batch if self.lose.get(t, 0) > 0]
        if hit:
            for t in hit:
                self.lose[t] -= 1
            raise _WorkerDied(f"worker died running {ref.batch}")
        return {"tasks": ref.batch, "seconds": 0.0}


def _stages() -> List[Dict[str, Any]]:
    maps = [_task(f"stage0-{i:05}", "stage", []) for i in range(4)]
    reduces = [_task(f"stage1-{i:05}", "stage", [m["id"] for m in maps]) for i in range(4)]
    top = _task("global", "global", [r["id"] for r in reduces])
    return maps + reduces + [top]


@pytest.mark.parametrize("seed", range(4))
def test_a_lost_map_and_a_lost_reduce_rerun_only_their_groups(seed: int) -> None:
    tasks = _stages()
    fake = _LosingRay(tasks, seed, {"stage0-00002", "stage1-00001"})
    rerun: List[Dict[str, Any]] = []
    seconds: Dict[str, float] = {}
    done = tray._run_dag(fake, fake, "tessera", "plan.json", tasks, 2, 4, False, seconds, 3, rerun)
    assert sorted(d["task"] for d in done) == sorted(t["id"] for t in tasks)
    # Two groups were lost (one task each: eight ready tasks, four groups
    # of two at most); exactly they ran again, once.
    again = sorted(t for r in rerun for t in r["tasks"])
    assert "stage0-00002" in again and "stage1-00001" in again
    assert len(rerun) == 2 and all(len(r["tasks"]) <= 2 for r in rerun), rerun
    submitted = [t for b in fake.submitted for t in b]
    for t in tasks:
        want = 2 if t["id"] in again else 1
        assert submitted.count(t["id"]) == want, (t["id"], submitted)
    assert {"stages", "shards"} <= set(seconds)


def test_a_group_lost_more_often_than_the_retries_fails_the_build() -> None:
    tasks = _stages()
    fake = _LosingRay(tasks, 0, {"stage0-00001"}, times=5)
    with pytest.raises(BuildError, match="after 2 retries"):
        tray._run_dag(fake, fake, "tessera", "plan.json", tasks, 2, 4, False, {}, 2, [])
