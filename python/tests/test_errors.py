"""Missing and damaged shard sets raise clear Python exceptions naming the file."""

from __future__ import annotations

import errno
import json
import os

import pytest

import tessera


def shard(path: str, k: int = 1) -> str:
    return os.path.join(path, f"shard-{k:05d}.bin")


def test_missing_path(tmp_path: "os.PathLike[str]") -> None:
    missing = os.path.join(str(tmp_path), "nope")
    with pytest.raises(FileNotFoundError) as info:
        tessera.open(missing)
    e = info.value
    assert isinstance(e, tessera.NotFoundError) and isinstance(e, tessera.TesseraError)
    assert e.errno == errno.ENOENT and e.filename == missing
    assert missing in str(e)


def test_directory_without_manifest(tmp_path: "os.PathLike[str]") -> None:
    with pytest.raises(tessera.NotFoundError, match="manifest.json is missing"):
        tessera.open(str(tmp_path))


def test_missing_shard(fresh_set: str) -> None:
    os.remove(shard(fresh_set))
    with pytest.raises(tessera.NotFoundError) as info:
        tessera.open(fresh_set)
    assert info.value.filename == shard(fresh_set)
    assert "shard-00001.bin" in str(info.value)


def test_corrupt_header(fresh_set: str) -> None:
    with open(shard(fresh_set), "r+b") as f:
        f.write(b"NOTSHARD")
    with pytest.raises(tessera.FormatError, match="shard-00001.bin.*magic") as info:
        tessera.open(fresh_set)
    assert isinstance(info.value, ValueError)


def test_truncated_shard(fresh_set: str) -> None:
    size = os.path.getsize(shard(fresh_set))
    os.truncate(shard(fresh_set), size - 200)
    with pytest.raises(tessera.FormatError, match="shard-00001.bin.*truncated"):
        tessera.open(fresh_set)


def test_damaged_records_fail_verification(fresh_set: str) -> None:
    with open(shard(fresh_set, 2), "r+b") as f:
        f.seek(4096 + 1234)
        byte = f.read(1)
        f.seek(4096 + 1234)
        f.write(bytes([byte[0] ^ 0xFF]))
    ds = tessera.open(fresh_set)  # headers are intact: opening is cheap and succeeds
    with pytest.raises(tessera.ChecksumError, match="shard-00002.bin"):
        ds.verify()
    with pytest.raises(tessera.FormatError, match="checksum mismatch"):
        tessera.open(fresh_set, verify=True)


def test_garbage_manifest(fresh_set: str) -> None:
    manifest = os.path.join(fresh_set, "manifest.json")
    with open(manifest, "w") as f:
        f.write("{ not json")
    with pytest.raises(tessera.FormatError, match="manifest.json.*not valid JSON"):
        tessera.open(fresh_set)


def test_manifest_from_the_future(fresh_set: str) -> None:
    manifest = os.path.join(fresh_set, "manifest.json")
    with open(manifest) as f:
        m = json.load(f)
    m["format_version"] = 99
    with open(manifest, "w") as f:
        json.dump(m, f)
    with pytest.raises(tessera.UnsupportedVersionError, match="version 99"):
        tessera.open(fresh_set)


def test_shard_paired_with_the_wrong_manifest(fresh_set: str, tmp_path: "os.PathLike[str]") -> None:
    import numpy as np

    other = os.path.join(str(tmp_path), "other")
    tessera.write(other, {"x": np.zeros((1000, 50), dtype=np.float32)}, {"train": 900, "val": 100},
                  target_bytes=4096 + 200 * 320)
    with open(shard(other, 0), "rb") as src, open(shard(fresh_set, 0), "wb") as dst:
        dst.write(src.read())
    with pytest.raises(tessera.FormatError, match="shard-00000.bin"):
        tessera.open(fresh_set)


def test_path_is_a_file(tmp_path: "os.PathLike[str]") -> None:
    f = os.path.join(str(tmp_path), "file.bin")
    open(f, "w").close()
    with pytest.raises(tessera.NotFoundError, match="is a directory"):
        tessera.open(f)
