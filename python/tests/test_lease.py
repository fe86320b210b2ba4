"""Leases: a shard set open in Python, in another process, or in PyTorch
DataLoader workers is kept by `tessera cache gc`, which removes it once
nothing has it open. Uses the real compiler ($TESSERA_BIN or PATH)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from typing import List, Tuple

import numpy as np
import pytest

import tessera
from tessera._build import find_compiler


def compiler() -> str:
    try:
        return find_compiler()
    except tessera.BuildError as e:
        pytest.skip(f"SKIPPED: no tessera compiler to build and collect with ({e})")
    raise AssertionError("unreachable")


def built(tmp_path: "os.PathLike[str]", rows: int = 3000) -> Tuple[str, str]:
    """A real artifact in a private cache: (cache dir, artifact path)."""
    d = str(tmp_path)
    with open(os.path.join(d, "data.csv"), "w") as f:
        f.write("id,x\n")
        for i in range(rows):
            f.write(f"{i},{i * 0.5}\n")
    spec = os.path.join(d, "spec.yaml")
    with open(spec, "w") as f:
        f.write(
            "version: 1\nname: lease\nsources:\n  t: { path: data.csv }\n"
            "fields:\n  id: { dtype: i64, column: id }\n  x: { dtype: f32, column: x }\n"
            "shards: { target_bytes: 64KiB }\n"
        )
    cache = os.path.join(d, "cache")
    compiler()  # skips the test when there is none
    return cache, tessera.build(spec, cache_dir=cache)


def collect(cache: str) -> str:
    """`tessera cache gc --older-than 0s`: everything not protected goes."""
    time.sleep(0.02)  # older than zero seconds
    out = subprocess.run(
        [compiler(), "cache", "gc", "--older-than", "0s", "--cache-dir", cache],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


def test_an_open_dataset_is_kept_until_closed(tmp_path: "os.PathLike[str]") -> None:
    cache, path = built(tmp_path)
    ds = tessera.open(path)
    train = ds.split("all")
    del ds
    out = collect(cache)
    assert "open in a reader" in out and os.path.isdir(path), out
    assert len(train) == 3000
    del train
    gc.collect()
    out = collect(cache)
    assert "removed" in out and not os.path.exists(path), out


def test_another_process_holds_its_own_lease(tmp_path: "os.PathLike[str]") -> None:
    cache, path = built(tmp_path)
    code = (
        "import sys, tessera\n"
        "ds = tessera.open(sys.argv[1])\n"
        "print('open', flush=True)\n"
        "sys.stdin.readline()\n"
        "print(sum(int(b['id'].sum()) for b in ds.loader(512, last_batch='partial')), flush=True)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == "open"
    out = collect(cache)
    assert "open in a reader" in out and os.path.isdir(path), out
    child.stdin.write("go\n")
    child.stdin.flush()
    assert int(child.stdout.readline()) == sum(range(3000))
    assert child.wait(timeout=60) == 0
    out = collect(cache)
    assert not os.path.exists(path), out


def test_dataloader_workers_hold_leases(tmp_path: "os.PathLike[str]") -> None:
    torch = pytest.importorskip("torch")
    import tessera.torch as ttorch

    cache, path = built(tmp_path)
    ds = ttorch.IterableDataset(path, 100, shuffle=False, last_batch="partial", tensors=False)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    it = iter(loader)
    seen: List[np.ndarray] = [np.asarray(next(it)["id"]).copy() for _ in range(2)]
    # The training process lets go of its own handle: only the workers,
    # which opened the set themselves, have it open now.
    ds._ds = None
    gc.collect()
    out = collect(cache)
    assert "open in a reader" in out and os.path.isdir(path), out
    seen.extend(np.asarray(b["id"]).copy() for b in it)
    ids = np.sort(np.concatenate(seen))
    assert np.array_equal(ids, np.arange(3000))
    del it, loader, ds
    gc.collect()
    # Worker processes exit when the iterator is done; give them a moment.
    deadline = time.time() + 30
    while os.path.exists(path) and time.time() < deadline:
        collect(cache)
        time.sleep(0.2)
    assert not os.path.exists(path), "gc kept the set after every reader had gone"
