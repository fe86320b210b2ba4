"""tessera.mix: the Python constructor, its arguments, pickling, and a run
whose weights change mid-way (by schedule and at a resume), counted per
component."""

from __future__ import annotations

import json
import os
import pickle
from typing import Tuple

import numpy as np
import pytest

import tessera


@pytest.fixture()
def two_sets(tmp_path: "os.PathLike[str]") -> Tuple[str, str]:
    web = os.path.join(str(tmp_path), "web")
    code = os.path.join(str(tmp_path), "code")
    x = np.arange(600, dtype=np.float32)
    tessera.write(web, {"id": np.arange(600, dtype=np.int64), "x": x}, {"train": 500, "val": 100})
    tessera.write(code, {"id": np.arange(10_000, 10_400, dtype=np.int64), "x": x[:400]})
    return web, code


def component_of(ids: np.ndarray) -> np.ndarray:
    return (ids >= 10_000).astype(np.int64)  # 0 = web, 1 = code


def test_mix_reads_components_in_proportion_without_replacement(two_sets: Tuple[str, str]) -> None:
    web, code = two_sets
    m = tessera.mix({"web": (web, "train", 0.7), "code": (code, 0.3)}, seed=4)
    assert m.names == ["web", "code"] and len(m) == 900
    ids = np.concatenate([b["id"].copy() for b in m.loader(100, drop_last=False)])
    assert len(ids) == 900
    counts = np.bincount(component_of(ids), minlength=2)
    assert abs(counts[0] - 630) <= 2 and abs(counts[1] - 270) <= 2
    assert m.counts_at(900) == {"web": int(counts[0]), "code": int(counts[1])}
    # 630 web samples from 500 records: one whole epoch, then 130 more.
    w = ids[ids < 10_000]
    assert sorted(w[:500].tolist()) == list(range(500))
    assert len(set(w[500:].tolist())) == len(w) - 500
    # pick() names the same records the loader read.
    name, i = m.pick(17)
    assert (name == "web" and ids[17] == i) or (name == "code" and ids[17] == 10_000 + i)


def test_a_mixture_pickles_from_its_configuration(two_sets: Tuple[str, str]) -> None:
    web, code = two_sets
    m = tessera.mix({"web": (tessera.open(web).split("val"), 1.0), "code": (code, 2.0)}, seed=7,
                    schedule=[(150, {"web": 0.0})])
    copy = pickle.loads(pickle.dumps(m))
    as_dict = tessera.mix({"web": (tessera.open(web).split("val"), 1.0), "code": (code, 2.0)}, seed=7,
                          schedule={150: {"web": 0.0}})
    assert as_dict.schedule == m.schedule
    assert copy.schedule == m.schedule == [(0, {"web": 1.0, "code": 2.0}), (150, {"web": 0.0, "code": 2.0})]
    a = np.concatenate([b["id"].copy() for b in m.loader(50)])
    b = np.concatenate([b["id"].copy() for b in copy.loader(50)])
    assert np.array_equal(a, b)
    assert (component_of(a[150:]) == 1).all()


def test_weights_changed_mid_run_are_counted_per_component(two_sets: Tuple[str, str]) -> None:
    web, code = two_sets
    spec = {"web": (web, 0.5), "code": (code, 0.5)}
    m = tessera.mix(spec, seed=1, schedule=[(2_000, {"web": 0.9, "code": 0.1})], epoch_samples=1_000)
    loader = m.loader(100)
    ids = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        if epoch == 2:
            # Save halfway through epoch 2, resume with new weights.
            it = iter(loader)
            for _ in range(5):
                ids.append(next(it)["id"].copy())
            state = loader.state_dict()
            del it
            break
        ids.extend(b["id"].copy() for b in loader)
    first = np.concatenate(ids)
    c = np.bincount(component_of(first), minlength=2)
    # 2000 samples at 0.5/0.5, then 500 at 0.9/0.1.
    assert abs(c[0] - (1000 + 450)) <= 3 and abs(c[1] - (1000 + 50)) <= 3
    assert state["counts"] == {"web": int(c[0]), "code": int(c[1])}
    # Resume with code dominant from here on.
    resumed = tessera.mix(spec, seed=1, schedule=[(2_000, {"web": 0.2, "code": 0.8})], epoch_samples=1_000)
    loader = resumed.loader(100)
    loader.load_state_dict(state)
    loader.set_epoch(2)
    rest = np.concatenate([b["id"].copy() for b in loader])
    assert len(rest) == 500
    r = np.bincount(component_of(rest), minlength=2)
    assert abs(r[0] - 100) <= 2 and abs(r[1] - 400) <= 2
    # No component record repeated inside one of its epochs, across the resume.
    both = np.concatenate([first, rest])
    for lo, n in [(0, 600), (10_000, 400)]:
        mine = both[(both >= lo) & (both < lo + n)]
        for e in range(0, len(mine), n):
            assert len(set(mine[e:e + n].tolist())) == len(mine[e:e + n])


def test_bad_mixtures_name_the_problem(two_sets: Tuple[str, str], tmp_path: "os.PathLike[str]") -> None:
    web, code = two_sets
    with pytest.raises(tessera.ArgumentError, match="non-empty dict"):
        tessera.mix({})
    with pytest.raises(tessera.ArgumentError, match="'web'"):
        tessera.mix({"web": (web,)})  # type: ignore[dict-item]
    with pytest.raises(tessera.ArgumentError, match="unknown components"):
        tessera.mix({"web": (web, 1.0)}, schedule=[(10, {"wbe": 1.0})])
    with pytest.raises(tessera.ArgumentError, match="all zero"):
        tessera.mix({"web": (web, 0.0), "code": (code, 0.0)})
    with pytest.raises(tessera.ArgumentError, match="finite"):
        tessera.mix({"web": (web, -1.0), "code": (code, 1.0)})
    other = os.path.join(str(tmp_path), "other")
    tessera.write(other, {"y": np.zeros(3, dtype=np.int32)})
    with pytest.raises(tessera.ArgumentError, match="'other'|\"other\""):
        tessera.mix({"web": (web, 1.0), "other": (other, 1.0)})
    with pytest.raises(tessera.NotFoundError):
        tessera.mix({"web": (os.path.join(str(tmp_path), "nope"), 1.0)})


def test_weights_and_counts_of_the_wrong_kind_name_the_argument(two_sets: Tuple[str, str]) -> None:
    web, code = two_sets
    # Strings and bools used to be converted silently ("0.5" -> 0.5, True -> 1.0).
    with pytest.raises(TypeError, match="'web' at sample 0 must be a number, got str '0.5'"):
        tessera.mix({"web": (web, "0.5"), "code": (code, 1.0)})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="'code' at sample 0 must be a number, got bool True"):
        tessera.mix({"web": (web, 1.0), "code": (code, True)})
    with pytest.raises(TypeError, match="'code' at sample 100 must be a number, got bool"):
        tessera.mix({"web": (web, 1.0), "code": (code, 1.0)}, schedule=[(100, {"code": np.True_})])
    with pytest.raises(tessera.ArgumentError, match="'web' at sample 0 is inf"):
        tessera.mix({"web": (web, float("inf")), "code": (code, 1.0)})
    with pytest.raises(TypeError, match="global sample .* got str '10'"):
        tessera.mix({"web": (web, 1.0)}, schedule=[("10", {"web": 1.0})])  # type: ignore[list-item]
    # A negative epoch length was a bare OverflowError from the native side.
    with pytest.raises(tessera.ArgumentError, match="epoch_samples must be an integer in 1..2\\*\\*64-1, got -1"):
        tessera.mix({"web": (web, 1.0)}, epoch_samples=-1)
    with pytest.raises(tessera.ArgumentError, match="epoch_samples .* got 0"):
        tessera.mix({"web": (web, 1.0)}, epoch_samples=0)
    with pytest.raises(TypeError, match="epoch_samples must be an integer, got float"):
        tessera.mix({"web": (web, 1.0)}, epoch_samples=1.5)  # type: ignore[arg-type]
    with pytest.raises(tessera.ArgumentError, match="seed must be an integer in 0..2\\*\\*64-1, got -3"):
        tessera.mix({"web": (web, 1.0)}, seed=-3)
    # numpy numbers are numbers.
    m = tessera.mix({"web": (web, np.float32(1.0)), "code": (code, np.int64(1))}, seed=np.uint64(3), epoch_samples=np.int64(10))
    assert len(m) == 10 and m.seed == 3


def test_huge_weights_keep_their_proportions(two_sets: Tuple[str, str]) -> None:
    web, code = two_sets
    # 1e308 + 1e308 overflows a float; the weights used to become equal.
    third = os.path.join(os.path.dirname(web), "third")
    tessera.write(third, {"id": np.arange(20_000, 20_300, dtype=np.int64), "x": np.zeros(300, dtype=np.float32)})
    m = tessera.mix({"web": (web, 1e308), "code": (code, 1e308), "third": (third, 1.0)}, seed=2)
    counts = m.counts_at(1000)
    assert abs(counts["web"] - 500) <= 2 and abs(counts["code"] - 500) <= 2, counts
    assert counts["third"] <= 1, counts


def take(it: object, n: int) -> np.ndarray:
    return np.concatenate([next(it)["id"].copy() for _ in range(n)])  # type: ignore[call-overload]


def rest_of(it: object) -> np.ndarray:
    parts = [b["id"].copy() for b in it]  # type: ignore[attr-defined]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


@pytest.fixture()
def small_pair(tmp_path: "os.PathLike[str]") -> Tuple[str, str]:
    """The issue's case: components of 100 and 300 records."""
    a = os.path.join(str(tmp_path), "a")
    b = os.path.join(str(tmp_path), "b")
    tessera.write(a, {"id": np.arange(100, dtype=np.int64)})
    tessera.write(b, {"id": np.arange(1000, 1300, dtype=np.int64)})
    return a, b


def test_checkpoints_after_weight_changes_restore_the_same_stream(small_pair: Tuple[str, str]) -> None:
    a, b = small_pair

    def loader(wa: float, wb: float) -> tessera.Loader:
        return tessera.mix({"a": (a, wa), "b": (b, wb)}, seed=3).loader(50)

    # Run: weights 0.5/0.5, saved at 100; resumed with 0.2/0.8, saved at 200.
    first = loader(0.5, 0.5)
    it = iter(first)
    head = take(it, 2)
    s1 = first.state_dict()
    second = loader(0.2, 0.8)
    second.load_state_dict(s1)
    it = iter(second)
    mid = take(it, 2)
    s2 = second.state_dict()
    rest = rest_of(it)
    assert len(head) + len(mid) + len(rest) == 400
    assert [c["at"] for c in s2["schedule_history"]] == [0, 100]
    # The checkpoint after the change, restored into the same weights: the
    # uninterrupted run's remaining sequence, exactly (it used to differ in
    # 273 of 300 positions).
    again = loader(0.2, 0.8)
    again.load_state_dict(s2)
    assert np.array_equal(rest_of(again), rest)
    # Through a JSON file (tuples become lists), the same.
    again = loader(0.2, 0.8)
    again.load_state_dict(json.loads(json.dumps(s2)))
    assert np.array_equal(rest_of(again), rest)
    # No record of a component lost or repeated over the two weight regimes.
    both = np.concatenate([head, mid, rest])
    for lo, n in [(0, 100), (1000, 300)]:
        mine = both[(both >= lo) & (both < lo + n)]
        for e in range(0, len(mine), n):
            assert len(set(mine[e:e + n].tolist())) == len(mine[e:e + n])

    # A second pass over the epoch: what the run read at each sample (the
    # first weights before 100, the second after), and its state loads.
    second_pass = rest_of(iter(second))
    assert np.array_equal(second_pass, np.concatenate([head, mid, rest]))
    it = iter(second)
    take(it, 1)
    s3 = second.state_dict()
    assert s3["position"] == 50 and [c["at"] for c in s3["schedule_history"]] == [0, 100]
    again = loader(0.2, 0.8)
    again.load_state_dict(s3)
    assert np.array_equal(rest_of(again), second_pass[50:])

    # A second weight change (0.9/0.1 from 250), then a checkpoint restored
    # into those weights: again the same remaining sequence.
    third = loader(0.9, 0.1)
    it = iter(second)
    take(it, 5)
    s4 = second.state_dict()
    assert s4["position"] == 250
    third.load_state_dict(s4)
    it = iter(third)
    take(it, 1)
    s5 = third.state_dict()
    assert [c["at"] for c in s5["schedule_history"]] == [0, 100, 250]
    tail = rest_of(it)
    again = loader(0.9, 0.1)
    again.load_state_dict(s5)
    assert np.array_equal(rest_of(again), tail)
    # The shares after the change follow the last weights.
    assert len(tail) == 100 and abs(int((tail < 1000).sum()) - 90) <= 2


def test_a_state_whose_counts_disagree_with_its_history_is_refused(small_pair: Tuple[str, str]) -> None:
    a, b = small_pair
    m = tessera.mix({"a": (a, 0.5), "b": (b, 0.5)}, seed=3)
    loader = m.loader(50)
    it = iter(loader)
    take(it, 2)
    state = loader.state_dict()
    state["counts"] = {"a": state["counts"]["a"] + 1, "b": state["counts"]["b"] - 1}
    with pytest.raises(tessera.ArgumentError, match="not what its schedule_history gives"):
        m.loader(50).load_state_dict(state)
    state = loader.state_dict()
    state["schedule_history"][0]["steps"][0][1] = {"a": 1.0}
    with pytest.raises(tessera.ArgumentError, match="no weight for \"b\""):
        m.loader(50).load_state_dict(state)
    state = loader.state_dict()
    state["schedule_history"].append({"at": 0, "counts": {"a": 0, "b": 0}, "steps": [[0, {"a": 1.0, "b": 1.0}]]})
    with pytest.raises(tessera.ArgumentError, match="increasing samples"):
        m.loader(50).load_state_dict(state)
    # An epoch whose global sample number cannot be counted is a clear error.
    state = loader.state_dict()
    state["epoch"] = 2**63
    with pytest.raises(tessera.ArgumentError, match="does not fit in 64 bits"):
        m.loader(50).load_state_dict(state)
