"""Batches: zero-copy views, deterministic order, ranks, resume, arguments."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tessera
from conftest import ids_of


def raw_buffer(batch: tessera.Batch) -> np.ndarray:
    """The batch's whole buffer, read through its address."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * batch.nbytes).from_address(batch.address))


def test_fields_are_views_into_one_batch_buffer(small_set: str, small_columns: dict) -> None:
    ds = tessera.open(small_set)
    offsets = {f.name: f.offset for f in ds.fields}
    loader = ds.loader(64, shuffle=False)
    batch = next(iter(loader))
    owner = batch["id"].base
    assert isinstance(owner, tessera.Batch)
    assert (owner.rows, owner.stride, owner.nbytes) == (64, ds.stride, 64 * ds.stride)
    for name, arr in batch.items():
        assert arr.base is owner, name
        assert not arr.flags.owndata and arr.flags.writeable and arr.flags.aligned
        assert arr.__array_interface__["data"][0] == owner.address + offsets[name]
        assert arr.strides[0] == ds.stride
        assert arr.shape == (64,) + small_columns[name].shape[1:]
    # The buffer holds the records exactly as the shard stores them.
    raw = raw_buffer(owner).reshape(64, ds.stride)
    dense = offsets["dense"]
    assert raw[:, dense:dense + 52].tobytes() == small_columns["dense"][:64].tobytes()
    # Writes through a view land in that one buffer (it is the batch's own copy).
    batch["label"][3] = 42.0
    lab = offsets["label"]
    assert raw[3, lab:lab + 4].view(np.float32)[0] == 42.0
    assert tessera.open(small_set)[3]["label"] == small_columns["label"][3]


def test_kept_batches_are_not_recycled(small_set: str) -> None:
    ds = tessera.open(small_set)
    kept = list(ds.loader(50, shuffle=True, seed=3, threads=2, prefetch=1))
    again = ids_of(ds.loader(50, shuffle=True, seed=3, threads=0))
    assert np.array_equal(ids_of(kept), again)
    assert len({b["id"].base.address for b in kept}) == len(kept)


def test_sequential_epoch_is_storage_order(small_set: str, small_columns: dict) -> None:
    ds = tessera.open(small_set)
    batches = list(ds.loader(64, shuffle=False, drop_last=False))
    assert [len(b["id"]) for b in batches] == [64] * 15 + [40]
    for name, col in small_columns.items():
        got = np.concatenate([b[name] for b in batches])
        assert got.tobytes() == col.tobytes(), name
    assert len(ds.loader(64, shuffle=False)) == 15
    assert len(ds.loader(64, shuffle=False, drop_last=False)) == 16


def test_copy_false_hands_out_read_only_views_of_the_map(small_set: str, small_columns: dict) -> None:
    ds = tessera.open(small_set)
    # About 50 records per shard: batches of 10 lie in one shard except
    # where a shard ends inside one (then they are copied, and read-only too).
    for threads in (0, 2):
        loader = ds.loader(10, shuffle=False, drop_last=False, threads=threads, copy=False)
        assert loader.copy is False and ds.loader(10).copy is True
        batches = list(loader)
        for name, col in small_columns.items():
            got = np.concatenate([b[name] for b in batches])
            assert got.tobytes() == col.tobytes(), name
        for b in batches:
            owner = b["id"].base
            for arr in b.values():
                assert arr.base is owner and not arr.flags.writeable
                with pytest.raises(ValueError):
                    arr.setflags(write=True)
            assert not owner.buffer().flags.writeable
        # Most batches lie in one shard: their records are the map's, at the
        # same address as a record read through the dataset (no copy).
        first = batches[0]["id"].base.address
        with pytest.raises(ValueError):
            batches[0]["id"][0] = 7
        assert first == ds[0]["id"].__array_interface__["data"][0] - dict(
            (f.name, f.offset) for f in ds.fields)["id"]
    # Shuffled batches are gathered copies either way, and the same batches.
    shuffled = ids_of(ds.loader(64, shuffle=True, seed=4, copy=False))
    assert np.array_equal(shuffled, ids_of(ds.loader(64, shuffle=True, seed=4)))


def test_shuffled_epoch_is_a_permutation(small_set: str, small_columns: dict) -> None:
    ds = tessera.open(small_set)
    batches = list(ds.loader(64, seed=11, drop_last=False))
    ids = ids_of(batches)
    assert sorted(ids.tolist()) == list(range(1000))
    assert not np.array_equal(ids, np.arange(1000))
    # Every field of a record travels together.
    for b in batches:
        assert b["dense"].tobytes() == small_columns["dense"][b["id"]].tobytes()
        assert b["img"].tobytes() == small_columns["img"][b["id"]].tobytes()
    dropped = ids_of(ds.loader(64, seed=11))
    assert len(dropped) == 960 and len(set(dropped.tolist())) == 960


def test_order_depends_only_on_seed_and_epoch(small_set: str) -> None:
    ds = tessera.open(small_set).split("train")
    ref = ids_of(ds.loader(32, seed=5, threads=0))
    for threads in [1, 2, 4]:
        for prefetch in [1, 3]:
            got = ids_of(ds.loader(32, seed=5, threads=threads, prefetch=prefetch))
            assert np.array_equal(got, ref), (threads, prefetch)
    loader = ds.loader(32, seed=5)
    assert np.array_equal(ids_of(loader), ref)
    assert np.array_equal(ids_of(loader), ref), "the epoch must not advance by itself"
    loader.set_epoch(1)
    assert loader.epoch == 1
    e1 = ids_of(loader)
    assert not np.array_equal(e1, ref)
    assert not np.array_equal(ids_of(ds.loader(32, seed=6)), ref)
    # Only train records.
    assert ref.max() < 900


def test_ranks_partition_an_epoch(small_set: str) -> None:
    ds = tessera.open(small_set)
    per_rank = [ids_of(ds.loader(48, seed=2, rank=r, world_size=3, drop_last=False)) for r in range(3)]
    union = np.concatenate(per_rank)
    assert sorted(union.tolist()) == list(range(1000))
    # Rank r takes the r-th slice of each global batch of the single-rank order.
    whole = ids_of(ds.loader(48 * 3, seed=2))
    assert np.array_equal(per_rank[1][:48], whole[48:96])


def test_resume_mid_epoch_equals_uninterrupted_run(small_set: str) -> None:
    ds = tessera.open(small_set)
    full = ids_of(ds.loader(40, seed=9, drop_last=False))
    for stop in [0, 1, 7, 24]:
        loader = ds.loader(40, seed=9, drop_last=False)
        it = iter(loader)
        # The state counts the batches handed out, so take exactly `stop`.
        seen = [next(it)["id"].copy() for _ in range(stop)]
        state = loader.state_dict()
        assert state["position"] == 40 * stop and state["seed"] == 9 and state["epoch"] == 0
        fresh = ds.loader(40, seed=9, drop_last=False, threads=1)
        fresh.load_state_dict(state)
        fresh.set_epoch(0)  # the usual loop calls it; it keeps the restored position
        rest = ids_of(fresh)
        got = np.concatenate(seen + [rest]) if seen else rest
        assert np.array_equal(got, full), stop
        # After the resumed pass, the next pass starts the epoch over.
        assert np.array_equal(ids_of(fresh), full)


def test_resume_in_a_later_epoch_with_another_world_size(small_set: str) -> None:
    ds = tessera.open(small_set)
    one = ds.loader(30, seed=4, drop_last=False)
    one.set_epoch(2)
    it = iter(one)
    first = [next(it)["id"].copy() for _ in range(4)]  # 4 steps of 30 on 1 rank = 2 steps of 2 x 30
    state = one.state_dict()
    assert (state["epoch"], state["position"]) == (2, 120)
    two = [ds.loader(30, seed=4, rank=r, world_size=2, drop_last=False) for r in range(2)]
    for l in two:
        l.load_state_dict(state)
    rest = np.concatenate([ids_of(l) for l in two])
    seen = np.concatenate(first)
    assert sorted(np.concatenate([seen, rest]).tolist()) == list(range(1000))


def test_set_epoch_discards_a_restored_position_of_another_epoch(small_set: str) -> None:
    ds = tessera.open(small_set)
    loader = ds.loader(100, seed=1)
    loader.load_state_dict({"seed": 1, "epoch": 0, "position": 500})
    loader.set_epoch(1)
    assert len(ids_of(loader)) == 1000
    loader.load_state_dict({"seed": 1, "epoch": 0, "position": 500})
    assert len(ids_of(loader)) == 500


def test_bad_loader_arguments(small_set: str) -> None:
    ds = tessera.open(small_set)
    cases = [
        dict(batch_size=0),
        dict(batch_size=-5),
        dict(batch_size=8, rank=2, world_size=2),
        dict(batch_size=8, world_size=0),
        dict(batch_size=8, threads=-1),
        dict(batch_size=8, threads=100000),
        dict(batch_size=8, prefetch=0),
        dict(batch_size=8, last_batch="sometimes"),
        dict(batch_size=8, worker=3, num_workers=3),
    ]
    for kwargs in cases:
        with pytest.raises(tessera.ArgumentError):
            ds.loader(**kwargs)
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        ds.loader(0)
    with pytest.raises(TypeError):
        ds.loader("eight")  # type: ignore[arg-type]
    loader = ds.loader(8, seed=1)
    with pytest.raises(tessera.ArgumentError, match="seed"):
        loader.load_state_dict({"seed": 2, "epoch": 0, "position": 0})
    with pytest.raises(tessera.ArgumentError, match="past the end"):
        loader.load_state_dict({"seed": 1, "epoch": 0, "position": 5000})
    with pytest.raises(tessera.ArgumentError, match="position"):
        loader.load_state_dict({"seed": 1, "epoch": 0})
    with pytest.raises(tessera.ArgumentError, match="records"):
        loader.load_state_dict({"seed": 1, "epoch": 0, "position": 0, "rows": 7})


def test_last_batch_pad_and_partial(small_set: str) -> None:
    ds = tessera.open(small_set)
    pad = list(ds.loader(300, seed=0, last_batch="pad"))
    assert [len(b["id"]) for b in pad] == [300] * 4
    assert set(ids_of(pad).tolist()) == set(range(1000))
    partial = list(ds.loader(300, seed=0, last_batch="partial"))
    assert [len(b["id"]) for b in partial] == [300, 300, 300, 100]
    assert ds.loader(300, drop_last=False).last_batch == "partial"


def test_the_gil_is_released_while_a_batch_is_built(small_set: str) -> None:
    import sys
    import threading

    ds = tessera.open(small_set)
    # threads=0 builds the batch inside next(): a 40 MB gather with the GIL
    # released. A long switch interval means the counting thread can only
    # run when the main thread lets go of the GIL by itself.
    loader = ds.loader(200_000, seed=1, threads=0, last_batch="pad")
    counter = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            counter[0] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    t = threading.Thread(target=spin)
    try:
        t.start()
        it = iter(loader)
        before = counter[0]
        batch = next(it)
        after = counter[0]
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
    assert len(batch["id"]) == 200_000
    assert after > before, "no Python thread ran while the batch was built"
    assert it.wait_seconds > 0
