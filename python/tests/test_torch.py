"""tessera.torch.IterableDataset with torch.utils.data.DataLoader."""

from __future__ import annotations

import os
import pickle
import warnings
from typing import List

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import tessera  # noqa: E402
import tessera.torch  # noqa: E402

# Tests use up to 4 workers on a 2-core machine on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def epoch_ids(data: "tessera.torch.IterableDataset", num_workers: int) -> List[np.ndarray]:
    loader = DataLoader(data, batch_size=None, num_workers=num_workers)
    return [b["id"].numpy().copy() for b in loader]


def test_every_sample_once_across_2_ranks_and_3_workers(small_set: str) -> None:
    seen = []
    for rank in range(2):
        data = tessera.torch.IterableDataset(small_set, 48, seed=3, last_batch="partial", rank=rank, world_size=2)
        data.set_epoch(1)
        batches = epoch_ids(data, num_workers=3)
        assert len(batches) == len(data)
        seen.append(np.concatenate(batches))
    union = np.concatenate(seen)
    assert len(union) == 1000
    assert sorted(union.tolist()) == list(range(1000))
    assert len(set(seen[0].tolist()) & set(seen[1].tolist())) == 0


def test_rank_sequence_is_the_same_for_any_num_workers(small_set: str) -> None:
    data = tessera.torch.IterableDataset(small_set, 32, split="train", seed=8, rank=1, world_size=2)
    reference = np.concatenate(epoch_ids(data, 0))
    ds = tessera.open(small_set).split("train")
    direct = np.concatenate([b["id"] for b in ds.loader(32, seed=8, rank=1, world_size=2)])
    assert np.array_equal(reference, direct)
    for workers in [1, 2, 4]:
        batches = epoch_ids(data, workers)
        assert np.array_equal(np.concatenate(batches), reference), workers
        assert all(len(b) == 32 for b in batches)


def test_distributed_rank_is_read_from_torch(small_set: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 3)
    data = tessera.torch.IterableDataset(small_set, 20, seed=1)
    assert data.ranks() == (1, 3)
    got = np.concatenate(epoch_ids(data, 0))
    want = np.concatenate([b["id"] for b in tessera.open(small_set).loader(20, seed=1, rank=1, world_size=3)])
    assert np.array_equal(got, want)
    # Pickling pins the rank, for spawned workers that have no process group.
    state = pickle.loads(pickle.dumps(data))
    assert (state.rank, state.world_size) == (1, 3)


def test_tensors_reach_the_loop_without_a_copy(small_set: str) -> None:
    data = tessera.torch.IterableDataset(small_set, 64, seed=0, threads=2)
    offsets = {f.name: f.offset for f in tessera.open(small_set).fields}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a read-only-memory warning would fail the test
        for i, batch in enumerate(DataLoader(data, batch_size=None, num_workers=0)):
            addresses = {name: t.data_ptr() for name, t in batch.items()}
            base = addresses["id"] - offsets["id"]
            for name, t in batch.items():
                assert isinstance(t, torch.Tensor)
                assert addresses[name] - base == offsets[name], name
                assert t.stride(0) * t.element_size() == 200
            assert batch["dense"].shape == (64, 13) and batch["dense"].dtype == torch.float32
            assert batch["img"].shape == (64, 2, 3, 5) and batch["img"].dtype == torch.uint8
            batch["dense"].mul_(2)  # writable: the buffer is the batch's own
            if i == 3:
                break


def test_dlpack_is_zero_copy_too(small_set: str) -> None:
    batch = next(iter(tessera.open(small_set).loader(16, shuffle=False)))
    t = torch.from_dlpack(batch["cat"])
    assert t.data_ptr() == batch["cat"].__array_interface__["data"][0]
    assert torch.equal(t, torch.from_numpy(batch["cat"].copy()))


def test_pin_memory_works(small_set: str) -> None:
    data = tessera.torch.IterableDataset(small_set, 100, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no accelerator" on CPU-only machines
        loader = DataLoader(data, batch_size=None, num_workers=0, pin_memory=True)
        batches = list(loader)
    assert len(batches) == 10
    if torch.cuda.is_available():
        assert all(t.is_pinned() for b in batches for t in b.values())
    ids = torch.cat([b["id"] for b in batches])
    assert sorted(ids.tolist()) == list(range(1000))


def test_resume_with_workers_equals_uninterrupted_run(small_set: str) -> None:
    data = tessera.torch.IterableDataset(small_set, 25, seed=6, last_batch="partial")
    data.set_epoch(2)
    full = np.concatenate(epoch_ids(data, 2))
    steps = 0
    first = []
    for batch in DataLoader(data, batch_size=None, num_workers=2):
        first.append(batch["id"].numpy().copy())
        steps += 1
        if steps == 13:
            break
    state = data.state_dict(steps)
    assert state["position"] == 13 * 25 and state["epoch"] == 2
    restored = tessera.torch.IterableDataset(small_set, 25, seed=6, last_batch="partial")
    restored.load_state_dict(state)
    restored.set_epoch(2)
    rest = epoch_ids(restored, 3)
    assert np.array_equal(np.concatenate(first + rest), full)
    assert restored.state_dict(len(rest))["position"] == 1000


def test_resume_in_process_counts_batches_itself(small_set: str) -> None:
    data = tessera.torch.IterableDataset(small_set, 30, seed=2)
    full = np.concatenate(epoch_ids(data, 0))
    it = iter(DataLoader(data, batch_size=None))
    head = [next(it)["id"].numpy().copy() for _ in range(5)]
    state = data.state_dict()
    assert state["position"] == 150
    del it
    again = tessera.torch.IterableDataset(small_set, 30, seed=2)
    again.load_state_dict(state)
    assert np.array_equal(np.concatenate(head + epoch_ids(again, 0)), full)


def test_pickles_from_configuration(small_set: str) -> None:
    data = tessera.torch.IterableDataset(small_set, 50, split="val", seed=4)
    blob = pickle.dumps(data)
    assert len(blob) < 2000
    copy = pickle.loads(blob)
    assert np.array_equal(np.concatenate(epoch_ids(copy, 0)), np.concatenate(epoch_ids(data, 0)))


def test_bf16_fields_become_bfloat16_tensors(tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), "bf")
    x = np.linspace(-2, 2, 40 * 3, dtype=np.float32).reshape(40, 3)
    tessera.write(path, {"x": x, "h": x.astype(np.float16)}, dtypes={"x": "bf16"})
    batch = next(iter(DataLoader(tessera.torch.IterableDataset(path, 40, shuffle=False), batch_size=None)))
    assert batch["x"].dtype == torch.bfloat16 and batch["h"].dtype == torch.float16
    assert torch.allclose(batch["x"].float(), torch.from_numpy(x), rtol=1 / 128)


def test_bad_configuration_fails_early(tmp_path: "os.PathLike[str]", small_set: str) -> None:
    with pytest.raises(tessera.NotFoundError):
        tessera.torch.IterableDataset(os.path.join(str(tmp_path), "missing"), 8)
    with pytest.raises(tessera.ArgumentError):
        tessera.torch.IterableDataset(small_set, 0)
    with pytest.raises(tessera.ArgumentError):
        tessera.torch.IterableDataset(small_set, 8, rank=1)


def test_a_batch_from_a_worker_is_one_shared_block(small_set: str) -> None:
    # Every field's tensor views one storage, so a worker sends one
    # shared-memory block per batch (not one copy of the buffer per field).
    data = tessera.torch.IterableDataset(small_set, 50, seed=1)
    for batch in DataLoader(data, batch_size=None, num_workers=2):
        ptrs = {t.untyped_storage().data_ptr() for t in batch.values()}
        assert len(ptrs) == 1
        assert batch["img"].shape == (50, 2, 3, 5)
        ids = batch["id"].numpy()
        ref = tessera.open(small_set)[ids.tolist()]
        for name, t in batch.items():
            assert np.array_equal(t.numpy(), ref[name]), name
        break
