"""Checkpoints through the PyTorch adapter: every failure listed in issue 9,
each pinned by a test that failed before the fix. The reference for every
order is the plain loader (`Dataset.loader`), read in this process."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import tessera  # noqa: E402
import tessera.torch  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

B = 10  # batch size: 1000 records -> 100 batches per epoch


def reference(path: str, epoch: int, seed: int = 5, **kw: Any) -> np.ndarray:
    loader = tessera.open(path).loader(B, seed=seed, **kw)
    loader.set_epoch(epoch)
    return np.concatenate([b["id"].copy() for b in loader])


def dataset(path: str, **kw: Any) -> "tessera.torch.IterableDataset":
    return tessera.torch.IterableDataset(path, B, seed=5, **kw)


def loader(data: Any, workers: int, persistent: bool = False) -> DataLoader:  # type: ignore[type-arg]
    return DataLoader(data, batch_size=None, num_workers=workers, persistent_workers=persistent and workers > 0)


def ids(batches: List[Dict[str, Any]]) -> np.ndarray:
    return np.concatenate([b["id"].numpy().copy() for b in batches]) if batches else np.empty(0, dtype=np.int64)


def test_persistent_workers_follow_set_epoch(small_set: str) -> None:
    data = dataset(small_set)
    dl = loader(data, 2, persistent=True)
    for epoch in range(3):
        data.set_epoch(epoch)
        got = ids(list(dl))
        assert np.array_equal(got, reference(small_set, epoch)), f"epoch {epoch}"


def test_persistent_workers_follow_load_state_dict(small_set: str) -> None:
    data = dataset(small_set)
    dl = loader(data, 2, persistent=True)
    list(dl)  # the workers exist and have run a pass
    data.load_state_dict({"seed": 5, "epoch": 1, "position": 500})
    data.set_epoch(1)
    rest = list(dl)
    assert len(rest) == 50
    assert np.array_equal(ids(rest), reference(small_set, 1)[500:])


@pytest.mark.parametrize("workers", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("persistent", [False, True])
def test_state_dict_is_exact_at_any_moment_without_a_step_count(small_set: str, workers: int, persistent: bool) -> None:
    data = dataset(small_set)
    dl = loader(data, workers, persistent)
    full = reference(small_set, 2)
    data.set_epoch(2)
    # Before the first batch.
    assert data.state_dict()["position"] == 0 and data.state_dict()["epoch"] == 2
    it = iter(dl)
    assert data.state_dict()["position"] == 0
    head = []
    for k in range(1, 8):
        head.append(next(it))
        # While iterating: workers have prefetched ahead; only what the loop
        # took counts.
        assert data.state_dict()["position"] == k * B, (k, data.state_dict())
    del it  # the loop breaks off
    state = data.state_dict()
    assert state["position"] == 7 * B and state["epoch"] == 2
    # Restore on another number of workers and finish the epoch.
    again = dataset(small_set)
    again.load_state_dict(state)
    again.set_epoch(2)
    assert again.state_dict()["position"] == 70
    rest = list(loader(again, (workers + 1) % 5, persistent))
    assert np.array_equal(np.concatenate([ids(head), ids(rest)]), full)
    # At the end.
    assert again.state_dict()["position"] == 1000


def test_resume_then_crossing_into_the_next_epoch_counts_from_its_start(small_set: str) -> None:
    data = dataset(small_set)
    data.load_state_dict({"seed": 5, "epoch": 0, "position": 500})
    dl = loader(data, 2)
    data.set_epoch(0)
    assert len(list(dl)) == 50
    data.set_epoch(1)
    it = iter(dl)
    first = [next(it) for _ in range(3)]
    assert data.state_dict(3)["position"] == 30
    assert data.state_dict()["position"] == 30 and data.state_dict()["epoch"] == 1
    del it
    restored = dataset(small_set)
    restored.load_state_dict(data.state_dict())
    restored.set_epoch(1)
    rest = list(loader(restored, 2))
    assert np.array_equal(np.concatenate([ids(first), ids(rest)]), reference(small_set, 1))


@pytest.mark.parametrize("workers", [0, 2])
def test_state_right_after_set_epoch_is_the_new_epochs_start(small_set: str, workers: int) -> None:
    data = dataset(small_set)
    dl = loader(data, workers)
    data.set_epoch(0)
    list(dl)
    assert data.state_dict()["position"] == 1000
    data.set_epoch(1)
    state = data.state_dict()
    assert (state["epoch"], state["position"]) == (1, 0)
    restored = dataset(small_set)
    restored.load_state_dict(state)
    restored.set_epoch(1)
    assert np.array_equal(ids(list(loader(restored, workers))), reference(small_set, 1))


def test_partial_positions_restore_from_any_ranks_checkpoint(tmp_path: "os.PathLike[str]") -> None:
    # N = 10, world 7, batch 1: ranks get [1, 1, 2, 1, 2, 1, 2] batches.
    path = os.path.join(str(tmp_path), "ten")
    tessera.write(path, {"id": np.arange(10, dtype=np.int64)})
    states = []
    counts = []
    for rank in range(7):
        data = tessera.torch.IterableDataset(path, 1, seed=3, last_batch="partial", rank=rank, world_size=7)
        got = list(loader(data, 2))
        counts.append(len(got))
        states.append(data.state_dict())
    assert counts == [1, 1, 2, 1, 2, 1, 2]
    assert {s["position"] for s in states} == {10}
    # Mid-epoch (after step 1) every rank saves the same position, and
    # restoring any rank's state on every rank reads the rest exactly once.
    mid = []
    for rank in range(7):
        data = tessera.torch.IterableDataset(path, 1, seed=3, last_batch="partial", rank=rank, world_size=7)
        it = iter(loader(data, 0))
        next(it)
        mid.append(data.state_dict())
    assert {s["position"] for s in mid} == {7}
    seen = []
    for rank in range(7):
        data = tessera.torch.IterableDataset(path, 1, seed=3, last_batch="partial", rank=rank, world_size=7)
        data.load_state_dict(mid[(rank * 3) % 7])
        seen.extend(ids(list(loader(data, 0))).tolist())
    whole = reference(path, 0, seed=3, last_batch="partial")
    assert sorted(seen) == sorted(whole[7:].tolist())


def test_every_rank_gets_the_same_batch_count_by_default(tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), "ten")
    tessera.write(path, {"id": np.arange(10, dtype=np.int64)})
    for world in [2, 3, 7]:
        lens = {len(tessera.torch.IterableDataset(path, 1, rank=r, world_size=world)) for r in range(world)}
        assert len(lens) == 1, world
        lens = {len(tessera.open(path).loader(1, rank=r, world_size=world)) for r in range(world)}
        assert len(lens) == 1, world


def test_iterating_twice_without_set_epoch_repeats_the_epoch(small_set: str) -> None:
    data = dataset(small_set)
    dl = loader(data, 2)
    data.set_epoch(4)
    assert np.array_equal(ids(list(dl)), ids(list(dl)))
    # A restored position is used by one pass only.
    data.load_state_dict({"seed": 5, "epoch": 4, "position": 900})
    assert len(list(dl)) == 10
    assert len(list(dl)) == 100


@pytest.mark.parametrize("workers", [0, 2])
def test_mixture_through_dataloader_workers_is_the_mixture_stream(tmp_path: "os.PathLike[str]", workers: int) -> None:
    a = os.path.join(str(tmp_path), "a")
    b = os.path.join(str(tmp_path), "b")
    tessera.write(a, {"id": np.arange(300, dtype=np.int64)})
    tessera.write(b, {"id": np.arange(1000, 1200, dtype=np.int64)})
    mixture = tessera.mix({"a": (a, 0.6), "b": (b, 0.4)}, seed=2)
    want = np.concatenate([batch["id"].copy() for batch in mixture.loader(B, drop_last=False)])
    data = tessera.torch.IterableDataset(mixture, B, last_batch="partial")
    dl = loader(data, workers)
    it = iter(dl)
    head = [next(it) for _ in range(7)]
    state = data.state_dict()
    del it
    assert state["position"] == 70
    assert state["counts"] == {"a": int((ids(head) < 1000).sum()), "b": int((ids(head) >= 1000).sum())}
    again = tessera.torch.IterableDataset(tessera.mix({"a": (a, 0.6), "b": (b, 0.4)}, seed=2), B, last_batch="partial")
    again.load_state_dict(state)
    rest = list(loader(again, workers))
    assert np.array_equal(np.concatenate([ids(head), ids(rest)]), want)


def test_mixture_weights_can_change_at_a_resume_through_workers(tmp_path: "os.PathLike[str]") -> None:
    a = os.path.join(str(tmp_path), "a")
    b = os.path.join(str(tmp_path), "b")
    tessera.write(a, {"id": np.arange(400, dtype=np.int64)})
    tessera.write(b, {"id": np.arange(1000, 1400, dtype=np.int64)})
    data = tessera.torch.IterableDataset(tessera.mix({"a": (a, 0.8), "b": (b, 0.2)}, seed=9), B)
    it = iter(loader(data, 2))
    head = ids([next(it) for _ in range(30)])
    state = data.state_dict()
    del it
    # Resume with the weights swapped.
    swapped = tessera.torch.IterableDataset(tessera.mix({"a": (a, 0.2), "b": (b, 0.8)}, seed=9), B)
    swapped.load_state_dict(state)
    rest = ids(list(loader(swapped, 2)))
    assert len(head) + len(rest) == 800
    tail_a = int((rest < 1000).sum())
    assert abs(tail_a - 0.2 * len(rest)) <= 2
    # No record of a component is repeated or lost within its epoch.
    for lo, hi in [(0, 400), (1000, 1400)]:
        got = np.concatenate([head[(head >= lo) & (head < hi)], rest[(rest >= lo) & (rest < hi)]])
        n = hi - lo
        for e in range(0, len(got), n):
            chunk = got[e:e + n]
            assert len(set(chunk.tolist())) == len(chunk)


def test_a_checkpoint_after_a_weight_change_restores_through_persistent_workers(tmp_path: "os.PathLike[str]") -> None:
    a = os.path.join(str(tmp_path), "a")
    b = os.path.join(str(tmp_path), "b")
    tessera.write(a, {"id": np.arange(100, dtype=np.int64)})
    tessera.write(b, {"id": np.arange(1000, 1300, dtype=np.int64)})

    def data(wa: float) -> "tessera.torch.IterableDataset":
        return tessera.torch.IterableDataset(tessera.mix({"a": (a, wa), "b": (b, 1 - wa)}, seed=9), B)

    first = data(0.5)
    it = iter(loader(first, 2))
    head = ids([next(it) for _ in range(10)])
    s1 = first.state_dict()
    del it
    # Resumed with other weights (workers started before the restore), then
    # saved again after the change.
    second = data(0.2)
    dl = loader(second, 2, persistent=True)
    assert len(ids(list(dl))) == 400
    second.load_state_dict(s1)
    it = iter(dl)
    mid = ids([next(it) for _ in range(10)])
    s2 = second.state_dict()
    rest = ids(list(it))
    assert len(head) + len(mid) + len(rest) == 400
    assert [c["at"] for c in s2["schedule_history"]] == [0, 100]
    # Restored into the same weights, by persistent workers already running:
    # exactly the rest of the run.
    third = data(0.2)
    dl = loader(third, 2, persistent=True)
    assert len(ids(list(dl))) == 400
    third.load_state_dict(s2)
    assert np.array_equal(ids(list(dl)), rest)
    # And by a plain loader of the mixture.
    plain = tessera.mix({"a": (a, 0.2), "b": (b, 0.8)}, seed=9).loader(B)
    plain.load_state_dict(s2)
    assert np.array_equal(np.concatenate([x["id"].copy() for x in plain]), rest)


def stateful_dataloader() -> Optional[Any]:
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:
        return None
    return StatefulDataLoader


@pytest.mark.parametrize("workers,persistent", [(0, False), (2, False), (2, True), (3, True)])
def test_torchdata_stateful_dataloader_protocol(small_set: str, workers: int, persistent: bool) -> None:
    SDL = stateful_dataloader()
    if SDL is None:
        pytest.skip("torchdata is not installed")
    data = dataset(small_set)
    data.set_epoch(3)
    dl = SDL(data, batch_size=None, num_workers=workers, persistent_workers=persistent)
    it = iter(dl)
    head = [next(it) for _ in range(13)]
    sd = dl.state_dict()
    del it
    fresh = dataset(small_set)
    fresh.set_epoch(3)
    dl2 = SDL(fresh, batch_size=None, num_workers=workers, persistent_workers=persistent)
    dl2.load_state_dict(sd)
    rest = list(dl2)
    assert np.array_equal(np.concatenate([ids(head), ids(rest)]), reference(small_set, 3))
    # The next epoch after the restored one is whole and reshuffled.
    fresh.set_epoch(4)
    assert np.array_equal(ids(list(dl2)), reference(small_set, 4))


def test_python_loader_ranks_save_the_same_end_of_epoch_state(tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), "ten")
    tessera.write(path, {"id": np.arange(10, dtype=np.int64)})
    ds = tessera.open(path)
    ends = set()
    for rank in range(7):
        loader = ds.loader(1, seed=3, rank=rank, world_size=7, last_batch="partial")
        list(loader)
        ends.add(loader.state_dict()["position"])
    assert ends == {10}


def test_a_checkpoint_restores_on_another_number_of_ranks_and_workers(small_set: str) -> None:
    # Two ranks with 2 workers each take 12 steps; any rank's state restores
    # three ranks with 3 workers, which read exactly the records left.
    seen: List[int] = []
    states = []
    for rank in range(2):
        data = dataset(small_set, last_batch="partial", rank=rank, world_size=2)
        data.set_epoch(6)
        it = iter(loader(data, 2))
        seen.extend(ids([next(it) for _ in range(12)]).tolist())
        states.append(data.state_dict())
        del it
    assert states[0] == states[1] and states[0]["position"] == 12 * B * 2
    for rank in range(3):
        data = dataset(small_set, last_batch="partial", rank=rank, world_size=3)
        data.load_state_dict(states[rank % 2])
        data.set_epoch(6)
        seen.extend(ids(list(loader(data, 3))).tolist())
    assert sorted(seen) == list(range(1000))
    whole = reference(small_set, 6, last_batch="partial")
    assert set(seen[:240]) == set(whole[:240].tolist())


def test_spawned_persistent_workers_follow_set_epoch_and_state(small_set: str) -> None:
    # Spawned workers get a pickled dataset: the shared block must travel
    # as shared memory, not as a copy.
    data = dataset(small_set)
    dl = DataLoader(data, batch_size=None, num_workers=2, persistent_workers=True, multiprocessing_context="spawn")
    data.set_epoch(0)
    assert np.array_equal(ids(list(dl)), reference(small_set, 0))
    data.set_epoch(1)
    it = iter(dl)
    head = [next(it) for _ in range(4)]
    assert data.state_dict()["position"] == 40
    rest = list(it)
    assert np.array_equal(np.concatenate([ids(head), ids(rest)]), reference(small_set, 1))
