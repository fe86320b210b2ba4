"""Shard sets in an object store, read from Python: ``tessera.push``,
``tessera.open(url)``, loaders, the PyTorch adapter and mixtures over a set at
a URL, against a real S3 server on loopback (SeaweedFS, started and stopped
by the fixture)."""

from __future__ import annotations

import os
import sys
from typing import Dict, Iterator, List

import numpy as np
import pytest

import tessera

sys.path.insert(0, os.path.dirname(__file__))
from conftest import ids_of, make_columns  # noqa: E402
from s3 import S3Server  # noqa: E402


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def pushed(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """A 3000-record set of ~30 shards, local and pushed."""
    local = str(tmp_path_factory.mktemp("remote") / "set")
    tessera.write(local, make_columns(3000, seed=3), {"train": 2700, "val": 300}, target_bytes=4096 + 100 * 320)
    url = s3.url("py/set")
    report = tessera.push(local, url, storage_options=s3.storage_options())
    assert report["uploaded_files"] == len(tessera.open(local).manifest["shards"])
    assert not report["already_there"]
    return {"local": local, "url": url}


def open_remote(s3: S3Server, url: str, cache: str, **kw: object) -> tessera.Dataset:
    return tessera.open(url, cache_dir=cache, storage_options=s3.storage_options(), **kw)  # type: ignore[arg-type]


def all_ids(loader: tessera.Loader, epochs: List[int]) -> np.ndarray:
    out = []
    for e in epochs:
        loader.set_epoch(e)
        out.append(ids_of(loader))
    return np.concatenate(out)


def test_a_url_reads_the_same_batches_as_the_local_set(s3: S3Server, pushed: Dict[str, str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    local = tessera.open(pushed["local"])
    remote = open_remote(s3, pushed["url"], str(tmp_path / "cache"))
    assert remote.is_cached and not local.is_cached
    assert remote.path == pushed["url"]
    assert len(remote) == len(local) == 3000
    for kw in (dict(shuffle=False), dict(seed=5), dict(seed=5, shuffle_window=3)):
        a = local.split("train").loader(128, **kw)  # type: ignore[arg-type]
        b = remote.split("train").loader(128, **kw)  # type: ignore[arg-type]
        assert np.array_equal(all_ids(a, [0, 1]), all_ids(b, [0, 1])), kw
    # Whole batches, every field, byte for byte.
    for x, y in zip(local.loader(300, seed=2, shuffle_window=2), remote.loader(300, seed=2, shuffle_window=2)):
        for name in x:
            assert np.array_equal(x[name], y[name])
    # Records and slices.
    for i in (0, 1234, 2999, -1):
        r, l = remote[i], local[i]
        assert all(np.array_equal(r[k], l[k]) for k in l)
    assert np.array_equal(remote[100:110]["dense"], local[100:110]["dense"])
    stats = remote.cache_stats()
    assert stats is not None and stats["fetched_shards"] == len(local.manifest["shards"])
    assert local.cache_stats() is None
    # A second push of the same set sends nothing.
    again = tessera.push(pushed["local"], pushed["url"], storage_options=s3.storage_options())
    assert again["already_there"] and again["uploaded_files"] == 0


def test_a_window_state_dict_must_match(s3: S3Server, pushed: Dict[str, str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    remote = open_remote(s3, pushed["url"], str(tmp_path / "cache"), cache_bytes=10 * (4096 + 100 * 320))
    loader = remote.loader(100, seed=1, shuffle_window=2)
    it = iter(loader)
    first = [next(it)["id"].copy() for _ in range(4)]
    state = loader.state_dict()
    assert state["shuffle_window"] == 2
    rest = ids_of(it)
    resumed = remote.loader(100, seed=1, shuffle_window=2)
    resumed.load_state_dict(state)
    assert np.array_equal(ids_of(resumed), rest)
    assert len(np.unique(np.concatenate(first + [rest]))) == 3000 // 100 * 100
    with pytest.raises(tessera.ArgumentError, match="shuffle_window"):
        remote.loader(100, seed=1).load_state_dict(state)


def test_the_torch_adapter_and_its_workers_read_a_url(s3: S3Server, pushed: Dict[str, str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    import tessera.torch as ttorch

    cache = str(tmp_path / "cache")
    local = ttorch.IterableDataset(pushed["local"], 100, seed=4, shuffle_window=2, tensors=False)
    remote = ttorch.IterableDataset(
        pushed["url"], 100, seed=4, shuffle_window=2, tensors=False,
        cache_dir=cache, storage_options=s3.storage_options(),
    )
    want = ids_of(torch.utils.data.DataLoader(local, batch_size=None))
    got = ids_of(torch.utils.data.DataLoader(remote, batch_size=None, num_workers=2))
    assert np.array_equal(want, got)
    # The worker processes shared one cache: one copy of each shard.
    files = [f for f in os.listdir(cache) if f.endswith(".shard")]
    assert len(files) == len(tessera.open(pushed["local"]).manifest["shards"])


def test_a_mixture_takes_a_url_component(s3: S3Server, pushed: Dict[str, str], tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Components opened by URL take the cache and the store from the
    # environment, as DataLoader workers would.
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("TESSERA_SHARD_CACHE", str(tmp_path / "cache"))
    a = tessera.mix({"web": (pushed["local"], 0.5), "code": (pushed["local"], "val", 0.5)}, seed=3)
    b = tessera.mix({"web": (pushed["url"], 0.5), "code": (pushed["url"], "val", 0.5)}, seed=3)
    la, lb = a.loader(64), b.loader(64)
    assert np.array_equal(all_ids(la, [0, 1]), all_ids(lb, [0, 1]))


def test_a_url_without_a_set_says_so(s3: S3Server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(tessera.StorageError, match="no manifest here"):
        open_remote(s3, s3.url("py/nothing"), str(tmp_path / "cache"))
    with pytest.raises(tessera.TesseraError, match="unknown storage option"):
        tessera.open(s3.url("py/set"), storage_options={"no_such_option": "1"})
