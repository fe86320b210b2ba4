"""Checks of the suite's own machinery, so that a passing differential run
means something: the decoder reads the worked example of docs/FORMAT.md
section 15, the comparison notices a changed, missing or repeated row, and
the hash and split helpers behave as docs/SPEC.md describes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from compare import multiset_mismatch
from corpus import F
from shardset import FormatViolation, read_shard_set
from stablehash import NULL_KEY, hash_values, split_index, stable_hash

# From docs/FORMAT.md section 15.
EXAMPLE_DIGEST = "c3351128211452ca44e718247cd7561988c46d522489fec8c002b99b541bdf6c"


def _shard(rows: list, stride: int) -> bytes:
    header = bytearray(4096)
    header[0:8] = b"TSRSHARD"
    struct.pack_into("<IIQQII", header, 8, 1, 4096, stride, len(rows), 0, 0)
    header[40:72] = bytes.fromhex(EXAMPLE_DIGEST)
    body = b"".join(struct.pack("<qff", label, x0, x1) for label, x0, x1 in rows)
    return bytes(header) + body


def _write_example(d: Path) -> None:
    shards = [[(0, 0.5, -0.0), (1, 1.5, -1.0)], [(2, 2.5, 3.0)]]
    entries = []
    for i, rows in enumerate(shards):
        data = _shard(rows, 16)
        (d / f"shard-{i:05d}.bin").write_bytes(data)
        entries.append({"file": f"shard-{i:05d}.bin", "rows": len(rows), "bytes": len(data), "blake3": "0" * 64})
    manifest = {
        "format": "tessera-shards", "format_version": 1,
        "layout": {"stride": 16, "fields": [
            {"name": "x", "dtype": "f32", "shape": [2], "offset": 8},
            {"name": "label", "dtype": "i64", "shape": [], "offset": 0}]},
        "layout_digest": EXAMPLE_DIGEST, "rows": 3, "shards": entries,
        "splits": [{"name": "train", "start": 0, "rows": 2}, {"name": "val", "start": 2, "rows": 1}],
    }
    (d / "manifest.json").write_text(json.dumps(manifest))


def test_decoder_reads_the_format_example(tmp_path: Path) -> None:
    _write_example(tmp_path)
    s = read_shard_set(tmp_path)
    assert s.rows == 3 and s.stride == 16
    assert s.field("label").tolist() == [0, 1, 2]
    assert s.field("x").tolist() == [[0.5, -0.0], [1.5, -1.0], [2.5, 3.0]]
    assert np.signbit(s.field("x")[0, 1])
    val = s.split_records("val")
    assert s.decoded(val)["label"].tolist() == [2]
    # The record area starts at 4096: bytes 4096.. of shard 0 are record 0.
    raw = (tmp_path / "shard-00000.bin").read_bytes()
    assert raw[4096 + 8:4096 + 12] == struct.pack("<f", 0.5)


def test_decoder_rejects_a_header_that_disagrees(tmp_path: Path) -> None:
    _write_example(tmp_path)
    p = tmp_path / "shard-00001.bin"
    data = bytearray(p.read_bytes())
    data[100] = 1  # header padding must be zero
    p.write_bytes(bytes(data))
    with pytest.raises(FormatViolation, match="padding"):
        read_shard_set(tmp_path)


FIELDS = (F("id", "i64"), F("v", "f64"), F("h", "i32"))


def _cols(ids, vs, hs):
    return {"id": np.array(ids, np.int64), "v": np.array(vs, np.float64), "h": np.array(hs, np.int32)}


def test_comparison_accepts_reordering_and_float_noise() -> None:
    a = _cols([1, 2, 3], [0.1, 1e9, -5.0], [7, 8, 9])
    e = _cols([3, 1, 2], [-5.0, 0.1 * (1 + 1e-13), 1e9], [9, 7, 8])
    assert multiset_mismatch(a, e, FIELDS) == ""


@pytest.mark.parametrize("case", ["value", "missing", "repeated", "float"])
def test_comparison_notices_differences(case: str) -> None:
    e = _cols([1, 2, 3], [0.5, 1.5, 2.5], [7, 8, 9])
    a = {
        "value": _cols([1, 2, 3], [0.5, 1.5, 2.5], [7, 8, 10]),
        "missing": _cols([1, 2], [0.5, 1.5], [7, 8]),
        "repeated": _cols([1, 2, 2], [0.5, 1.5, 1.5], [7, 8, 8]),
        "float": _cols([1, 2, 3], [0.5, 1.5, 2.5 * (1 + 1e-9)], [7, 8, 9]),
    }[case]
    assert multiset_mismatch(a, e, FIELDS) != ""


def test_stable_hash_follows_spec() -> None:
    # The empty input leaves FNV's offset basis; then the finalizer.
    m = (1 << 64) - 1
    h = 0xCBF29CE484222325
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & m
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & m
    assert stable_hash(b"") == h ^ (h >> 31)
    # Integers hash as their decimal text; nulls as b"\xffnull".
    assert hash_values([12, "12", None]).tolist() == [stable_hash(b"12"), stable_hash(b"12"), stable_hash(NULL_KEY)]
    with pytest.raises(TypeError):
        hash_values([1.5])


def test_split_shares_follow_weights() -> None:
    h = hash_values(list(range(20000)))
    idx = split_index(h, [0.75, 0.25])
    assert abs((idx == 0).mean() - 0.75) < 0.02
