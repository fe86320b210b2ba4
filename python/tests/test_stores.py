"""Google Cloud Storage (gs://), Azure Blob Storage (az://) and plain HTTP
(http://) against real servers on loopback: fake-gcs-server, Azurite, and
SeaweedFS's filer (see stores.py and s3.py). For each store, Parquet files
uploaded with the store's own REST API build the same shards as the local
copies, with row-group pruning and a cache hit on a rebuild; a changed
object is a new input; a set pushed there by ``build -o URL`` reads back
the same batches as the local set, from Python and from the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from typing import Dict, Iterator, List, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tessera

sys.path.insert(0, os.path.dirname(__file__))
from s3 import S3Server  # noqa: E402
from stores import AzuriteServer, GcsServer  # noqa: E402

Server = Union[GcsServer, AzuriteServer]

FIELDS = """
filter: "day >= 27"
fields:
  id:  { dtype: i64, column: id }
  day: { dtype: i32, column: day }
  x:   { dtype: f32, column: x, fill_null: 0 }
split: { key: id, weights: { train: 0.8, val: 0.2 } }
shards: { target_bytes: 64KiB }
"""


def write_inputs(folder: str, seed: int, files: int = 4, rows: int = 400_000) -> List[str]:
    """Parquet files whose `day` rises through the files and their row
    groups (5,000 rows each), so `day >= 27` keeps about a tenth of them."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    per = rows // files
    paths = []
    for f in range(files):
        ids = np.arange(f * per, (f + 1) * per, dtype=np.int64)
        day = (ids * 30 // rows).astype(np.int32)
        x = rng.normal(size=per).astype(np.float32)
        mask = rng.random(per) < 0.1
        table = pa.table({
            "id": ids, "day": day, "x": pa.array(x, mask=mask),
            "tag": pa.array([f"t{v}" for v in rng.integers(0, 50, per)]),
        })
        p = os.path.join(folder, f"part-{f:03}.parquet")
        pq.write_table(table, p, row_group_size=5000)
        paths.append(p)
    return paths


def upload(server: Server, files: List[str], prefix: str) -> None:
    for p in files:
        with open(p, "rb") as f:
            server.put(f"{prefix}/{os.path.basename(p)}", f.read())


def run(args: List[str], env: Dict[str, str]) -> Dict[str, object]:
    out = subprocess.run([tessera.find_compiler(), *args], capture_output=True, text=True,
                         env=dict(os.environ, **env))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip().startswith("{") else {"stdout": out.stdout}


def build(spec: str, cache: str, env: Dict[str, str], *extra: str) -> Dict[str, object]:
    return run(["build", spec, "--cache-dir", cache, "--json", "-q", *extra], env)


def shard_hashes(path: str) -> List[Tuple[str, str]]:
    ds = tessera.open(path)
    out = []
    for s in ds.manifest["shards"]:
        with open(os.path.join(path, s["file"]), "rb") as f:
            out.append((s["file"], hashlib.sha256(f.read()).hexdigest()))
    return out


def storage_yaml(options: Dict[str, str]) -> str:
    return "{ " + ", ".join(f'{k}: "{v}"' for k, v in options.items()) + " }"


def spec_file(folder: str, name: str, path: str, options: Dict[str, str], extra: str = "") -> str:
    p = os.path.join(folder, f"{name}.yaml")
    storage = f"    storage: {storage_yaml(options)}\n" if options else ""
    with open(p, "w") as f:
        f.write(f"version: 1\nname: ev\nsources:\n  events:\n    path: \"{path}\"\n{storage}{extra}{FIELDS}")
    return p


@pytest.fixture(scope="module", params=["gs", "az"])
def store(request: pytest.FixtureRequest) -> Iterator[Server]:
    server: Server = GcsServer() if request.param == "gs" else AzuriteServer()
    try:
        yield server
    finally:
        server.stop()


def env_of(server: Server) -> Dict[str, str]:
    return server.env() if isinstance(server, AzuriteServer) else {}


def test_a_bucket_builds_the_local_shards_and_reads_back_by_url(store: Server, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    root = str(tmp_path)
    files = write_inputs(os.path.join(root, "data"), seed=3)
    input_bytes = sum(os.path.getsize(p) for p in files)
    upload(store, files, "raw/events")
    assert store.list("raw/events/") == [f"raw/events/{os.path.basename(p)}" for p in files]
    env = env_of(store)
    opts = store.storage_options()
    cache = os.path.join(root, "cache")

    local = build(spec_file(root, "local", os.path.join(root, "data", "*.parquet"), {}), cache, env)
    glob = build(spec_file(root, "glob", store.url("raw/events/*.parquet"), opts), cache, env)
    prefix = build(spec_file(root, "prefix", store.url("raw/events/"), opts), cache, env)
    assert local["rows_kept"] == glob["rows_kept"] == prefix["rows_kept"]
    kept = int(local["rows_kept"])  # type: ignore[call-overload]
    assert 20_000 < kept < 100_000
    assert shard_hashes(str(local["path"])) == shard_hashes(str(glob["path"])) == shard_hashes(str(prefix["path"]))
    # Only the footers and the row groups the filter keeps were fetched.
    fetched = int(glob["bytes_fetched"])  # type: ignore[call-overload]
    assert 0 < fetched * 3 < input_bytes, (fetched, input_bytes)
    assert local["bytes_fetched"] == 0

    # The manifest fingerprints the objects by what the store says of them.
    with open(os.path.join(str(glob["path"]), "manifest.json")) as f:
        inputs = json.load(f)["inputs"]
    assert [i["path"] for i in inputs] == [os.path.basename(p) for p in files]
    assert all(i.get("etag") or i.get("version") for i in inputs), inputs

    # Unchanged objects: a cache hit that reads no byte, with the options
    # given on the command line rather than in the spec.
    flags = [a for k, v in opts.items() for a in ("--storage", f"{k}={v}")]
    again = build(spec_file(root, "bare", store.url("raw/events/*.parquet"), {}), cache, env, *flags)
    assert again["cache_hit"] is True and again["hash"] == glob["hash"]
    assert again["bytes_fetched"] == 0

    # A changed object is a new input with new rows.
    changed = write_inputs(os.path.join(root, "changed"), seed=4)
    upload(store, changed[3:], "raw/events")
    after = build(spec_file(root, "glob", store.url("raw/events/*.parquet"), opts), cache, env)
    assert after["cache_hit"] is False and after["hash"] != glob["hash"]

    # Build and push in one step, then read the set back by URL.
    # fake-gcs-server has no XML API upload (object_store's PUT), so on gs://
    # the set is uploaded with the server's own API, manifest last.
    set_url = store.url("sets/ev")
    if isinstance(store, GcsServer):
        art = str(after["path"])
        names_here = sorted(os.listdir(art), key=lambda n: n == "manifest.json")
        for name in names_here:
            with open(os.path.join(art, name), "rb") as f:
                store.put(f"sets/ev/{name}", f.read())
    else:
        pushed = build(spec_file(root, "glob", store.url("raw/events/*.parquet"), opts), cache, env,
                       "-o", set_url, *flags)
        assert pushed["cache_hit"] is True
    names = store.list("sets/ev/")
    assert "sets/ev/manifest.json" in names and len(names) > 3, names
    verified = run(["verify", set_url, *flags], env)
    assert str(verified["stdout"]).startswith("ok:"), verified
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    here = tessera.open(str(after["path"]))
    there = tessera.open(set_url, cache_dir=os.path.join(root, "read-cache"), storage_options=opts)
    assert there.is_cached and len(there) == len(here)
    for split in ("train", "val"):
        a = here.split(split).loader(512, seed=7, shuffle_window=2)
        b = there.split(split).loader(512, seed=7, shuffle_window=2)
        for e in (0, 1):
            a.set_epoch(e)
            b.set_epoch(e)
            xs, ys = list(a), list(b)
            assert len(xs) == len(ys) > 1
            for x, y in zip(xs, ys):
                assert all(np.array_equal(x[k], y[k]) for k in x)


def test_an_http_object_builds_the_local_shards(tmp_path) -> None:  # type: ignore[no-untyped-def]
    root = str(tmp_path)
    files = write_inputs(os.path.join(root, "data"), seed=5, files=1)
    s3 = S3Server()
    try:
        with open(files[0], "rb") as f:
            s3.put_http("raw/one.parquet", f.read())
        url = s3.http_url("raw/one.parquet")
        cache = os.path.join(root, "cache")
        local = build(spec_file(root, "local", files[0], {}), cache, {})
        remote = build(spec_file(root, "http", url, {"allow_http": "true"}), cache, {})
        assert shard_hashes(str(local["path"])) == shard_hashes(str(remote["path"]))
        fetched = int(remote["bytes_fetched"])  # type: ignore[call-overload]
        assert 0 < fetched * 3 < os.path.getsize(files[0])
        again = build(spec_file(root, "http", url, {"allow_http": "true"}), cache, {})
        assert again["cache_hit"] is True and again["bytes_fetched"] == 0
        # A glob needs a listing, which a plain web server does not give.
        bad = subprocess.run(
            [tessera.find_compiler(), "build", spec_file(root, "glob", url.replace("one", "*"), {"allow_http": "true"}),
             "--cache-dir", cache], capture_output=True, text=True)
        assert bad.returncode != 0 and "sources.events.path" in bad.stderr, bad.stderr
    finally:
        s3.stop()
