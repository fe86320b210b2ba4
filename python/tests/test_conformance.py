"""The conformance file of ``tessera export-transform``, checked by a second
implementation: the records are computed here, in Python, from
``transform.json`` and docs/SERVING.md alone (no tessera code), and compared
byte for byte with the file's expected records. The document is validated
against the schema written beside it."""

from __future__ import annotations

import json
import math
import os
import subprocess
from typing import Any, Dict, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import tessera
from test_transform import generated_rows

SPEC = """
version: 1
name: conformance
sources:
  t: {{ path: {data} }}
fields:
  id:   {{ dtype: i64, column: id }}
  x:    {{ dtype: f32, column: x, fill_null: 0, transform: [ {{ clip: {{ min: 0 }} }}, log1p, standardize ] }}
  xh:   {{ dtype: f16, column: x, fill_null: -1 }}
  xm:   {{ dtype: f64, column: x, fill_null: 2, transform: min_max }}
  pair: {{ dtype: f64, columns: [x, i], fill_null: -1, transform: standardize }}
  kh:   {{ dtype: i32, column: k, transform: {{ hash_bucket: 97 }} }}
  kv:   {{ dtype: i64, column: k, transform: {{ vocab: {{ min_count: 2, oov: 0 }} }} }}
  u:    {{ dtype: u8, column: u, transform: {{ one_hot: 5 }} }}
  i16:  {{ dtype: i16, column: i }}
  seq:  {{ dtype: i32, column: seq, length: 4, pad: -1 }}
  raw:  {{ dtype: u8, column: b, bytes: 4 }}
split: {{ key: id, weights: {{ train: 0.7, val: 0.3 }} }}
"""

MASK = (1 << 64) - 1


def scalar(arg: Any) -> int:
    """A step's single argument (``{"buckets": 97}`` or ``97``)."""
    if isinstance(arg, dict):
        (value,) = arg.values()
        return int(value)
    return int(arg)


class Doc:
    """The transform of one ``transform.json``."""

    def __init__(self, doc: Dict[str, Any]) -> None:
        self.doc = doc
        h = doc["hash"]
        self.basis = int(h["fnv_offset_basis"], 16)
        self.prime = int(h["fnv_prime"], 16)
        self.finalizer = [(s["shift"], None if s["multiply"] is None else int(s["multiply"], 16))
                          for s in h["finalizer"]]
        self.null = bytes.fromhex(h["null"])

    def hash(self, b: bytes) -> int:
        x = self.basis
        for c in b:
            x = ((x ^ c) * self.prime) & MASK
        for shift, mul in self.finalizer:
            x ^= x >> shift
            if mul is not None:
                x = (x * mul) & MASK
        return x

    def record(self, row: Dict[str, Any]) -> bytes:
        out = bytearray(self.doc["record"]["stride"])
        for f in self.doc["fields"]:
            arr = self.field(f, row)
            data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
            out[f["offset"]:f["offset"] + len(data)] = data
        return bytes(out)

    def field(self, f: Dict[str, Any], row: Dict[str, Any]) -> np.ndarray:
        dtype = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16, "u32": np.uint32,
                 "i32": np.int32, "u64": np.uint64, "i64": np.int64, "f16": np.float16,
                 "f32": np.float32, "f64": np.float64}[f["dtype"]]
        inp = f["input"]
        if f["kind"] == "bytes":
            return np.frombuffer(bytes.fromhex(row[inp["column"]]["hex"]), dtype=np.uint8)
        if "columns" in inp:
            values = [row[c] for c in inp["columns"]]
        elif f["length"] is not None:
            lst = row[inp["column"]] or []
            values = list(lst[: f["length"]])
        else:
            values = [row[inp["column"]]]
        out: List[Any] = []
        for j, v in enumerate(values):
            out.append(self.value(f, j, v))
        one_hot = next((scalar(s["one_hot"]) for s in f["steps"] if isinstance(s, dict) and "one_hot" in s), None)
        if f["length"] is not None:
            while len(out) < f["length"]:
                out.append(None)  # padding, stored as `pad`
        if one_hot is not None:
            rows = []
            for k in out:
                v = [0] * one_hot
                v[int(k)] = 1
                rows.append(v)
            arr = np.array(rows, dtype=dtype)
            return arr.reshape(f["shape"]) if f["shape"] else arr.reshape(-1)
        stored = [f["pad"] if v is None else v for v in out]
        return np.array(stored, dtype=dtype).reshape(f["shape"] or (1,))

    def value(self, f: Dict[str, Any], j: int, v: Any) -> Any:
        if v is None and f["kind"] in ("float", "int"):
            v = f["fill_null"]
            assert v is not None, f"{f['name']}: a null without fill_null in a case"
        if isinstance(v, str) and f["kind"] in ("float", "int"):
            v = float(v)  # "NaN", "inf", "-inf"
        for s in f["steps"]:
            name, arg = (s, None) if isinstance(s, str) else next(iter(s.items()))
            if name == "clip":
                if arg.get("min") is not None and v < arg["min"]:
                    v = arg["min"]
                if arg.get("max") is not None and v > arg["max"]:
                    v = arg["max"]
            elif name == "log1p":
                v = math.log1p(v) if v >= -1 else float("nan")
            elif name == "standardize":
                std = arg["std"][j] if arg["std"][j] > 0 else 1.0
                v = (float(v) - arg["mean"][j]) / std
            elif name == "min_max":
                lo, hi = arg["min"][j], arg["max"][j]
                v = (float(v) - lo) / (hi - lo) if hi > lo else 0.0
            elif name == "hash_bucket":
                b = self.null if v is None else str(v).encode()
                v = self.hash(b) % scalar(arg)
            elif name == "vocab":
                values = arg["values"][j] if j < len(arg["values"]) else arg["values"][0]
                v = values.index(v) + 1 if v is not None and v in values else arg["oov"]
            elif name == "one_hot":
                pass  # applied to the field's values above
            else:
                raise AssertionError(f"step {name} not implemented here")
        return v


def test_conformance_file_checked_independently(tmp_path: "os.PathLike[str]") -> None:
    tmp = str(tmp_path)
    rows = generated_rows(1500, 3)
    table = pa.table({
        "id": pa.array(rows["id"], pa.int64()), "i": pa.array(rows["i"], pa.int32()),
        "u": pa.array(rows["u"], pa.int16()), "x": pa.array(rows["x"], pa.float64()),
        "k": pa.array(rows["k"], pa.string()), "seq": pa.array(rows["seq"], pa.list_(pa.int64())),
        "b": pa.array(rows["b"], pa.binary()),
    })
    data = os.path.join(tmp, "data.parquet")
    pq.write_table(table, data)
    spec = os.path.join(tmp, "spec.yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(data=data))
    path = tessera.build(spec, cache_dir=os.path.join(tmp, "cache"))
    out = os.path.join(tmp, "export")
    subprocess.run([tessera.find_compiler(), "export-transform", path, "-o", out, "--cases", "300",
                    "--rows", data], check=True, capture_output=True)
    with open(os.path.join(out, "transform.json")) as f:
        doc = json.load(f)
    with open(os.path.join(out, "transform.schema.json")) as f:
        schema = json.load(f)
    import jsonschema  # installed by scripts/setup.sh --test

    jsonschema.validate(doc, schema)
    assert doc["format"] == "tessera-transform" and doc["version"] == 1
    with open(os.path.join(out, "conformance.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    header, cases = lines[0], lines[1:]
    assert header["cases"] == len(cases) and header["stride"] == doc["record"]["stride"]
    assert len(cases) > 300  # generated cases, then rows of the file
    impl = Doc(doc)
    kinds = {"null x": 0, "oov": 0, "short list": 0}
    vocab = set(next(s for s in doc["fields"] if s["name"] == "kv")["steps"][0]["vocab"]["values"][0])
    for n, case in enumerate(cases):
        row = case["row"]
        kinds["null x"] += row.get("x") is None
        kinds["oov"] += row.get("k") is not None and row["k"] not in vocab
        kinds["short list"] += row.get("seq") is not None and len(row["seq"]) < 4
        got = impl.record(row)
        want = bytes.fromhex(case["record"])
        if got != want:
            at = next(i for i in range(len(got)) if got[i] != want[i])
            field = max((f for f in doc["fields"] if f["offset"] <= at), key=lambda f: f["offset"])
            raise AssertionError(f"case {n}: field {field['name']} differs (row {row})")
    assert all(v > 0 for v in kinds.values()), kinds
    # The case of the file's first row holds the record the build stored
    # for that row (the spec has no filter, so it is in one of the splits).
    ds = tessera.open(path)
    stored = {}
    for name in ds.splits:
        part = ds.split(name)
        batch = next(iter(part.loader(batch_size=len(part), shuffle=False, drop_last=False)))
        ids = np.asarray(batch["id"])
        if 0 in ids:
            stored = {k: np.asarray(v)[int(np.nonzero(ids == 0)[0][0])] for k, v in batch.items()}
    file_row = {c: rows[c][0] for c in ("id", "i", "u", "x", "k", "seq")}
    first = next(c for c in cases if all(c["row"].get(k) == v for k, v in file_row.items()))
    rec = bytes.fromhex(first["record"])
    for f in doc["fields"]:
        v = stored[f["name"]]
        assert rec[f["offset"]:f["offset"] + v.nbytes] == v.tobytes(), f["name"]
