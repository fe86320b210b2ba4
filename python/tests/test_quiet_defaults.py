"""Defaults that used to do something surprising without a word: a loader
over every split at once, a batch larger than its split, ``tessera.open``
not taking the names the CLI takes, and ``--allow-empty`` out of reach from
Python."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import warnings
from typing import List

import numpy as np
import pytest

import tessera

SPEC = """
version: 1
name: {name}
sources:
  t: {{ path: {data} }}
{filter}
fields:
  id: {{ dtype: i64, column: id }}
  x:  {{ dtype: f32, column: x }}
split: {{ key: id, weights: {{ train: 0.8, val: 0.2 }} }}
"""


def write_spec(tmp: str, name: str, rows: int = 200, filter: str = "") -> str:
    data = os.path.join(tmp, f"{name}.csv")
    with open(data, "w") as f:
        f.write("id,x\n")
        for i in range(rows):
            f.write(f"{i},{i * 0.5}\n")
    spec = os.path.join(tmp, f"{name}.yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(name=name, data=data, filter=filter))
    return spec


def mixed_split_warnings(record: List[warnings.WarningMessage]) -> List[str]:
    return [str(w.message) for w in record if "reads all" in str(w.message)]


def test_a_loader_over_several_splits_says_so(small_set: str, tmp_path: "os.PathLike[str]") -> None:
    ds = tessera.open(small_set)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ds.loader(100)
    said = mixed_split_warnings(record)
    assert len(said) == 1, said
    assert "train (900 records), val (100 records)" in said[0]
    assert 'ds.split("train").loader' in said[0] and small_set in said[0]
    assert all(w.category is UserWarning for w in record if "reads all" in str(w.message))
    # One split chosen, or a set of one split: nothing to say.
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ds.split("val").loader(10)
        one = os.path.join(str(tmp_path), "one")
        tessera.write(one, {"x": np.zeros(5, dtype=np.float32)})
        tessera.open(one).loader(5)
    assert mixed_split_warnings(record) == []


def test_a_mixture_component_over_several_splits_says_so(small_set: str, tmp_path: "os.PathLike[str]") -> None:
    other = os.path.join(str(tmp_path), "other")
    cols = {k: np.asarray(v) for k, v in tessera.open(small_set)[0:50].items()}
    tessera.write(other, cols)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        tessera.mix({"a": (small_set, 1.0), "b": (other, 1.0)})
    said = mixed_split_warnings(record)
    assert len(said) == 1 and "'a'" in said[0] and "(path, 'train', weight)" in said[0], said
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        tessera.mix({"a": (small_set, "train", 1.0), "b": (other, 1.0)})
    assert mixed_split_warnings(record) == []


def test_a_batch_larger_than_its_split_is_an_error_when_the_tail_is_dropped(small_set: str) -> None:
    val = tessera.open(small_set).split("val")  # 100 records
    with pytest.raises(tessera.ArgumentError, match=r'batch_size 128 is more than the 100 records of split "val"'):
        val.loader(128)
    with pytest.raises(tessera.ArgumentError, match=r"batch_size 64 x world_size 2 = 128 records per step .* 100 records"):
        val.loader(64, rank=1, world_size=2, last_batch="drop")
    # Every other way to read it still reads it.
    assert sum(len(b["id"]) for b in val.loader(128, drop_last=False)) == 100
    assert sum(len(b["id"]) for b in val.loader(128, last_batch="pad")) == 128
    assert sum(len(b["id"]) for b in val.loader(100)) == 100
    # A mixture whose epoch is shorter than a batch: the same.
    m = tessera.mix({"v": (small_set, "val", 1.0)}, epoch_samples=50)
    with pytest.raises(tessera.ArgumentError, match="batch_size 64 is more than the 50 records of a mixture epoch"):
        m.loader(64)


def test_open_takes_a_spec_a_name_and_a_hash_prefix_as_the_cli_does(
    tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = str(tmp_path)
    cache = os.path.join(tmp, "cache")
    spec = write_spec(tmp, "quiet-a")
    path = tessera.build(spec, cache_dir=cache)
    want = len(tessera.open(path))
    assert want == 200
    hash_ = os.path.basename(path)
    for target in (spec, "quiet-a", hash_[:8], hash_[:4].upper()):
        ds = tessera.open(target, artifact_cache_dir=cache)
        assert os.path.realpath(ds.path) == os.path.realpath(path), target
        assert len(ds) == want
    # A mixture component can be named the same way (in the compiler's
    # default cache, here set by the environment).
    monkeypatch.setenv("TESSERA_CACHE_DIR", cache)
    m = tessera.mix({"a": ("quiet-a", "train", 1.0)})
    assert len(m) == len(tessera.open(path).split("train"))

    exe = tessera.find_compiler()

    def cli_error(target: str) -> str:
        p = subprocess.run([exe, "inspect", target, "--cache-dir", cache], capture_output=True, text=True)
        assert p.returncode != 0
        return p.stderr.strip().removeprefix("error: ")

    # Not built, not a name, an ambiguous prefix: the CLI's words.
    unbuilt = write_spec(tmp, "quiet-b", rows=30)
    nowhere = os.path.join(tmp, "nowhere")
    # A second artifact whose hash shares the first 4 digits: a copy under
    # another hash (the cache checks that the manifest names its directory).
    twin_hash = hash_[:4] + ("0" if hash_[4] != "0" else "1") + hash_[5:]
    twin = os.path.join(cache, twin_hash)
    shutil.copytree(path, twin)
    with open(os.path.join(twin, "manifest.json")) as f:
        manifest = json.load(f)
    manifest["artifact_hash"] = twin_hash
    with open(os.path.join(twin, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    assert len(tessera.open(twin)) == want
    for target, words in [(unbuilt, "has not been built"), ("no-such-name", "not a shard-set directory"),
                          (nowhere, "not a shard-set directory"), (hash_[:4], "matches 2 cached artifacts")]:
        with pytest.raises(tessera.NotFoundError) as info:
            tessera.open(target, artifact_cache_dir=cache)
        message = cli_error(target)
        assert words in message, message
        assert message in str(info.value)


def test_build_passes_allow_empty(tmp_path: "os.PathLike[str]") -> None:
    tmp = str(tmp_path)
    cache = os.path.join(tmp, "cache")
    spec = write_spec(tmp, "quiet-empty", filter='filter: "id < 0"')
    with pytest.raises(tessera.BuildError, match="--allow-empty"):
        tessera.build(spec, cache_dir=cache)
    path = tessera.build(spec, cache_dir=cache, allow_empty=True)
    ds = tessera.open(path)
    assert len(ds) == 0 and dict(ds.splits) == {"train": 0, "val": 0}
