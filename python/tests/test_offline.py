"""A set read from an object store once is read again while the store is
down: a new process uses the manifest kept in the shard cache, with a
warning, when every shard is there and matches its blake3; otherwise the
open fails, saying why. Against a real S3 server on loopback (SeaweedFS),
stopped in the middle of the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, Iterator

import numpy as np
import pytest

import tessera

sys.path.insert(0, os.path.dirname(__file__))
from conftest import ids_of, make_columns  # noqa: E402
from s3 import S3Server  # noqa: E402

# A fresh process: opens the set, reads two epochs of each split, and prints
# the ids and the warnings it saw.
READER = """
import json, sys, warnings
import numpy as np
import tessera
url, cache, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    try:
        ds = tessera.open(url, cache_dir=cache, storage_options=options)
    except tessera.TesseraError as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
        sys.exit(0)
ids = []
for split in ("train", "val"):
    loader = ds.split(split).loader(100, seed=9)
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        ids.extend(int(i) for b in loader for i in b["id"])
print(json.dumps({"ids": ids, "warnings": [str(w.message) for w in seen],
                  "fetched": ds.cache_stats()["fetched_shards"]}))
"""


def read_in_new_process(url: str, cache: str, options: Dict[str, str]) -> Dict[str, Any]:
    p = subprocess.run([sys.executable, "-c", READER, url, cache, json.dumps(options)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out: Dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


@pytest.fixture()
def s3() -> Iterator[S3Server]:
    server = S3Server()  # this test stops it: a server of its own
    try:
        yield server
    finally:
        server.stop()


def test_a_cached_set_reopens_while_the_store_is_down(s3: S3Server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    local = str(tmp_path / "set")
    tessera.write(local, make_columns(1200, seed=5), {"train": 1000, "val": 200}, target_bytes=4096 + 100 * 320)
    url = s3.url("offline/set")
    tessera.push(local, url, storage_options=s3.storage_options())
    options = s3.storage_options()
    cache = str(tmp_path / "cache")
    partial = str(tmp_path / "partial")
    want_ids = []
    for split in ("train", "val"):
        want_loader = tessera.open(local).split(split).loader(100, seed=9)
        for epoch in (0, 1):
            want_loader.set_epoch(epoch)
            want_ids.append(ids_of(want_loader))
    want = np.concatenate(want_ids)

    # With the store up: a full read fills the cache (and keeps the manifest).
    up = read_in_new_process(url, cache, options)
    assert "error" not in up, up
    assert np.array_equal(np.array(up["ids"]), want)
    assert up["warnings"] == [] and up["fetched"] == len(tessera.open(local).manifest["shards"])
    # Another cache that holds only some of the shards (one batch of val).
    partial_ds = tessera.open(url, cache_dir=partial, storage_options=options)
    next(iter(partial_ds.split("val").loader(100, shuffle=False)))
    assert 0 < len([f for f in os.listdir(partial) if f.endswith(".shard")]) < up["fetched"]

    s3.stop()

    # The store is down: a new process reads the same batches from the
    # cache, fetching nothing, and is told why.
    down = read_in_new_process(url, cache, options)
    assert "error" not in down, down
    assert np.array_equal(np.array(down["ids"]), want)
    assert down["fetched"] == 0
    assert len(down["warnings"]) == 1, down["warnings"]
    said = down["warnings"][0]
    assert "could not be read" in said and "manifest.json" in said and "kept in the shard cache" in said, said

    # A cache that lacks shards cannot stand in: the store's error, and why.
    lacking = read_in_new_process(url, partial, options)
    assert lacking.get("error") == "StorageError", lacking
    assert "cannot stand in for the store" in lacking["message"], lacking
    assert "is not in the cache" in lacking["message"], lacking
    # Nor a cache that never saw the set.
    empty = read_in_new_process(url, str(tmp_path / "empty"), options)
    assert empty.get("error") == "StorageError" and "never opened" in empty["message"], empty
    # A damaged cached shard is found (its blake3), not read.
    victim = sorted(f for f in os.listdir(cache) if f.endswith(".shard"))[0]
    with open(os.path.join(cache, victim), "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0xFF]))
    damaged = read_in_new_process(url, cache, options)
    assert "error" in damaged and "cannot stand in" in damaged["message"], damaged
    assert victim.removesuffix(".shard") in damaged["message"], damaged


def test_the_cli_warns_when_it_reads_the_kept_manifest(s3: S3Server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    local = str(tmp_path / "set")
    tessera.write(local, make_columns(300, seed=6), target_bytes=4096 + 100 * 320)
    url = s3.url("offline/cli")
    tessera.push(local, url, storage_options=s3.storage_options())
    cache = str(tmp_path / "cache")
    ds = tessera.open(url, cache_dir=cache, storage_options=s3.storage_options())
    assert len(ids_of(ds.loader(100, shuffle=False))) == 300
    s3.stop()
    env = dict(os.environ, **s3.env(), TESSERA_SHARD_CACHE=cache)
    p = subprocess.run([tessera.find_compiler(), "head", url, "-n", "2"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert "warning:" in p.stderr and "kept in the shard cache" in p.stderr, p.stderr
