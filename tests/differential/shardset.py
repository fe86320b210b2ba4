"""An independent decoder of tessera shard sets, written from docs/FORMAT.md
with numpy alone (it does not use tessera's own reader, so a bug shared by
the writer and the reader cannot hide here).

It checks what a reader must check before trusting a byte (sizes, header
fields against the manifest) and returns the record bytes and the decoded
fields."""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

HEADER_LEN = 4096
MAGIC = b"TSRSHARD"

# dtype name -> (numpy little-endian dtype, element size)
DTYPES: Dict[str, Tuple[str, int]] = {
    "u8": ("<u1", 1),
    "i8": ("<i1", 1),
    "u16": ("<u2", 2),
    "i16": ("<i2", 2),
    "u32": ("<u4", 4),
    "i32": ("<i4", 4),
    "u64": ("<u8", 8),
    "i64": ("<i8", 8),
    "f16": ("<f2", 2),
    "bf16": ("<u2", 2),  # widened to f32 below
    "f32": ("<f4", 4),
    "f64": ("<f8", 8),
}


class FormatViolation(AssertionError):
    """The set breaks a rule of docs/FORMAT.md."""


@dataclass
class Field:
    name: str
    dtype: str
    shape: Tuple[int, ...]
    offset: int

    @property
    def elements(self) -> int:
        e = 1
        for s in self.shape:
            e *= s
        return e

    @property
    def nbytes(self) -> int:
        return DTYPES[self.dtype][1] * self.elements


@dataclass
class ShardSet:
    path: Path
    manifest: Dict[str, Any]
    stride: int
    fields: List[Field]
    records: np.ndarray  # (rows, stride) uint8, all shards in manifest order
    shard_sha256: List[str]

    @property
    def rows(self) -> int:
        return int(self.records.shape[0])

    def splits(self) -> List[Tuple[str, int, int]]:
        return [(s["name"], int(s["start"]), int(s["rows"])) for s in self.manifest["splits"]]

    def split_records(self, name: str) -> np.ndarray:
        for n, start, rows in self.splits():
            if n == name:
                return self.records[start : start + rows]
        raise KeyError(name)

    def field(self, name: str, records: "np.ndarray | None" = None) -> np.ndarray:
        """Field `name` of every record (or of `records`), shape (rows, *shape)."""
        recs = self.records if records is None else records
        f = next((f for f in self.fields if f.name == name), None)
        if f is None:
            raise KeyError(f"no field {name!r} in {self.path}")
        np_dtype, _ = DTYPES[f.dtype]
        raw = np.ascontiguousarray(recs[:, f.offset : f.offset + f.nbytes])
        vals = raw.view(np_dtype).reshape((recs.shape[0],) + f.shape)
        if f.dtype == "bf16":
            vals = (vals.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return vals

    def decoded(self, records: "np.ndarray | None" = None) -> Dict[str, np.ndarray]:
        return {f.name: self.field(f.name, records) for f in self.fields}

    def fingerprint(self) -> Dict[str, Any]:
        """What must be byte-identical between builds of one spec: every shard
        file's bytes (sha256), the manifest's shard list, row count, splits
        and layout."""
        m = self.manifest
        return {
            "shard_files_sha256": self.shard_sha256,
            "shards": m["shards"],
            "rows": m["rows"],
            "splits": m["splits"],
            "layout": m["layout"],
            "layout_digest": m["layout_digest"],
            "artifact_hash": m.get("artifact_hash", ""),
        }

    def record_stream_digest(self) -> Dict[str, Tuple[int, str]]:
        """Per split: (rows, sha256 of its records' bytes in order). Equal
        digests mean equal record sequences, wherever shard boundaries fall."""
        out = {}
        for name, start, rows in self.splits():
            data = np.ascontiguousarray(self.records[start : start + rows]).tobytes()
            out[name] = (rows, hashlib.sha256(data).hexdigest())
        return out


def _fail(path: Path, msg: str) -> FormatViolation:
    return FormatViolation(f"{path}: {msg}")


def read_shard_set(path: Path) -> ShardSet:
    path = Path(path)
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    if manifest.get("format") != "tessera-shards":
        raise _fail(path, f"format is {manifest.get('format')!r}")
    if manifest.get("format_version") != 1:
        raise _fail(path, f"format_version is {manifest.get('format_version')!r}")
    layout = manifest["layout"]
    stride = int(layout["stride"])
    fields = [Field(f["name"], f["dtype"], tuple(int(s) for s in f["shape"]), int(f["offset"])) for f in layout["fields"]]
    for f in fields:
        if f.dtype not in DTYPES:
            raise _fail(path, f"field {f.name}: unknown dtype {f.dtype}")
        size = DTYPES[f.dtype][1]
        if f.offset % size or f.offset + f.nbytes > stride:
            raise _fail(path, f"field {f.name}: misplaced (offset {f.offset}, {f.nbytes} bytes, stride {stride})")
    digest = bytes.fromhex(manifest["layout_digest"])
    parts: List[np.ndarray] = []
    sha: List[str] = []
    total = 0
    for k, sh in enumerate(manifest["shards"]):
        name = sh["file"]
        if "/" in name or name.startswith("."):
            raise _fail(path, f"shard {k}: bad file name {name!r}")
        data = (path / name).read_bytes()
        rows = int(sh["rows"])
        if len(data) != int(sh["bytes"]) or len(data) != HEADER_LEN + rows * stride:
            raise _fail(path, f"{name}: {len(data)} bytes, manifest says {sh['bytes']} for {rows} rows of {stride}")
        if data[:8] != MAGIC:
            raise _fail(path, f"{name}: bad magic {data[:8]!r}")
        version, header_len, h_stride, h_rows, flags, reserved = struct.unpack_from("<IIQQII", data, 8)
        if (version, header_len, h_stride, h_rows, flags, reserved) != (1, HEADER_LEN, stride, rows, 0, 0):
            raise _fail(path, f"{name}: header {(version, header_len, h_stride, h_rows, flags, reserved)}")
        if data[40:72] != digest:
            raise _fail(path, f"{name}: layout digest differs from the manifest's")
        if any(data[72:HEADER_LEN]):
            raise _fail(path, f"{name}: header padding is not zero")
        sha.append(hashlib.sha256(data).hexdigest())
        parts.append(np.frombuffer(data, dtype=np.uint8, offset=HEADER_LEN).reshape(rows, stride))
        total += rows
    if total != int(manifest["rows"]):
        raise _fail(path, f"shards hold {total} rows, manifest says {manifest['rows']}")
    start = 0
    for s in manifest["splits"]:
        if int(s["start"]) != start:
            raise _fail(path, f"split {s['name']} starts at {s['start']}, expected {start}")
        start += int(s["rows"])
    if start != total:
        raise _fail(path, f"splits cover {start} rows of {total}")
    records = np.concatenate(parts) if parts else np.zeros((0, stride), dtype=np.uint8)
    return ShardSet(path, manifest, stride, fields, records, sha)
