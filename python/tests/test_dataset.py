"""Opening shard sets and reading records: values equal what was written."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tessera


def test_fields_describe_the_layout(small_set: str) -> None:
    ds = tessera.open(small_set)
    fields = {f.name: f for f in ds.fields}
    assert [f.name for f in ds.fields] == ["id", "dense", "cat", "label", "img"]
    assert (fields["dense"].dtype, fields["dense"].shape) == ("f32", (13,))
    assert (fields["img"].dtype, fields["img"].shape) == ("u8", (2, 3, 5))
    assert fields["id"].shape == ()
    assert fields["cat"].numpy_dtype == np.dtype(np.int32)
    name, dtype, shape = fields["cat"]
    assert (name, dtype, shape) == ("cat", "i32", (26,))
    # Offsets are aligned and inside the stride.
    for f in ds.fields:
        assert f.offset % np.dtype(f.numpy_dtype).itemsize == 0
    # 198 bytes of fields, padded to a multiple of the 8-byte alignment.
    assert ds.stride == 200


def test_every_record_round_trips(small_set: str, small_columns: dict) -> None:
    ds = tessera.open(small_set)
    assert len(ds) == 1000
    everything = ds[:]
    for name, want in small_columns.items():
        got = everything[name]
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        assert got.tobytes() == want.tobytes(), name
    for i in [0, 1, 49, 50, 51, 500, 999, -1]:
        rec = ds[i]
        for name, want in small_columns.items():
            assert rec[name].shape == want.shape[1:]
            assert rec[name].tobytes() == want[i].tobytes()


def test_single_records_are_read_only_views_of_the_map(small_set: str) -> None:
    ds = tessera.open(small_set)
    rec = ds[7]
    assert all(a.base is ds for a in rec.values())
    assert not rec["dense"].flags.writeable
    with pytest.raises(ValueError):
        rec["dense"][0] = 1.0
    with pytest.raises(ValueError):
        rec["dense"].flags.writeable = True
    # Fields of one record sit at their offsets from one address.
    starts = {k: v.__array_interface__["data"][0] for k, v in rec.items()}
    offsets = {f.name: f.offset for f in ds.fields}
    base = starts["id"] - offsets["id"]
    assert all(starts[k] - base == offsets[k] for k in starts)
    # A copy is writable.
    c = rec["dense"].copy()
    c[0] = 5.0


def test_slices_and_index_lists_copy(small_set: str, small_columns: dict) -> None:
    ds = tessera.open(small_set)
    for key, rows in [
        (slice(40, 130), np.arange(40, 130)),
        (slice(990, 2000), np.arange(990, 1000)),
        (slice(None, None, 97), np.arange(0, 1000, 97)),
        (slice(None, 10, -3), np.arange(999, 10, -3)),
        ([5, 3, 999, -2], np.array([5, 3, 999, 998])),
        (np.array([7, 7, 0], dtype=np.int32), np.array([7, 7, 0])),
    ]:
        got = ds[key]
        for name, col in small_columns.items():
            assert got[name].tobytes() == col[rows].tobytes(), (key, name)
            assert got[name].flags.writeable
    assert ds[10:10]["dense"].shape == (0, 13)


def test_bad_indices(small_set: str) -> None:
    ds = tessera.open(small_set)
    with pytest.raises(IndexError, match="1000"):
        ds[1000]
    with pytest.raises(IndexError):
        ds[-1001]
    with pytest.raises(IndexError):
        ds[[1, 1000]]
    with pytest.raises(TypeError):
        ds["dense"]
    with pytest.raises(TypeError):
        ds[np.zeros((2, 2), dtype=np.int64)]
    with pytest.raises(TypeError, match="integers"):
        ds[np.array([True, False])]
    with pytest.raises(TypeError, match="integers"):
        ds[np.array([1.5])]


def test_splits_stats_and_manifest(tmp_path: "os.PathLike[str]", small_columns: dict) -> None:
    path = os.path.join(str(tmp_path), "s")
    out = tessera.write(path, small_columns, [("train", 700), ("val", 200), ("test", 100)],
                        name="demo", stats={"dense": {"mean": [0.0] * 13}})
    assert out == path
    ds = tessera.open(path)
    assert ds.splits == {"train": 700, "val": 200, "test": 100}
    assert ds.stats == {"dense": {"mean": [0.0] * 13}}
    m = ds.manifest
    assert m["name"] == "demo" and m["rows"] == 1000 and m["format_version"] == tessera.FORMAT_VERSION
    val = ds.split("val")
    assert len(val) == 200 and val.split_name == "val" and val.row_range == (700, 900)
    assert ds.split_name is None
    assert val[0]["id"] == 700
    assert val[:]["cat"].tobytes() == small_columns["cat"][700:900].tobytes()
    with pytest.raises(tessera.ArgumentError, match='no split named "nope"'):
        ds.split("nope")


def test_write_converts_dtypes(tmp_path: "os.PathLike[str]") -> None:
    n = 64
    x = np.linspace(-3, 3, n * 4).reshape(n, 4)
    cols = {
        "u8": np.arange(n, dtype=np.uint8), "i8": -np.arange(n, dtype=np.int8),
        "u16": np.arange(n, dtype=np.uint16) * 1000, "i16": -np.arange(n, dtype=np.int16),
        "u32": np.arange(n, dtype=np.uint32) << 20, "i32": -np.arange(n, dtype=np.int32),
        "u64": np.arange(n, dtype=np.uint64) << 40, "i64": -np.arange(n, dtype=np.int64) << 40,
        "f16": x.astype(np.float16), "f32": x.astype(np.float32), "f64": x,
        "flag": np.arange(n) % 3 == 0, "big": np.arange(n, dtype=">i4"),
        "bf": x.astype(np.float32),
    }
    path = os.path.join(str(tmp_path), "d")
    tessera.write(path, cols, dtypes={"bf": "bf16", "f64": "f32"})
    ds = tessera.open(path)
    kinds = {f.name: f.dtype for f in ds.fields}
    assert kinds["flag"] == "u8" and kinds["big"] == "i32" and kinds["bf"] == "bf16" and kinds["f64"] == "f32"
    got = ds[:]
    for name in ["u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f16", "f32"]:
        assert got[name].dtype == cols[name].dtype and np.array_equal(got[name], cols[name]), name
    assert np.array_equal(got["flag"], cols["flag"].astype(np.uint8))
    assert np.array_equal(got["big"], np.arange(n, dtype=np.int32))
    assert np.array_equal(got["f64"], x.astype(np.float32))
    # bf16 comes back as raw uint16 bits; widening them gives the rounded floats.
    assert got["bf"].dtype == np.uint16
    widened = (got["bf"].astype(np.uint32) << 16).view(np.float32)
    assert np.allclose(widened, x, rtol=1 / 128)


def test_write_rejects_bad_input(tmp_path: "os.PathLike[str]") -> None:
    p = os.path.join(str(tmp_path), "w")
    with pytest.raises(tessera.ArgumentError, match="rows"):
        tessera.write(p, {"a": np.zeros(3), "b": np.zeros(4)})
    with pytest.raises(tessera.ArgumentError, match="complex"):
        tessera.write(p, {"a": np.zeros(3, dtype=np.complex64)})
    with pytest.raises(tessera.ArgumentError, match="splits cover 5"):
        tessera.write(p, {"a": np.zeros(3)}, {"train": 5})
    with pytest.raises(tessera.ArgumentError):
        tessera.write(p, {"a": np.zeros(3)}, dtypes={"a": "f128"})
    assert not os.path.exists(p)
    tessera.write(p, {"a": np.zeros(3)})
    with pytest.raises(FileExistsError) as info:
        tessera.write(p, {"a": np.zeros(3)})
    assert isinstance(info.value, tessera.AlreadyExistsError) and info.value.filename == p
    # Nothing half-written is left beside it.
    assert sorted(os.listdir(str(tmp_path))) == ["w"]


def test_verify_passes_on_an_intact_set(small_set: str) -> None:
    tessera.open(small_set, verify=True).verify()
