"""Packed token sets checked from outside: documents written with pyarrow,
packed by `tessera build`, read back with tessera and with NumPy alone, and
exported for Megatron, whose .idx/.bin pair is read here by a reader written
from Megatron's documented layout (not by tessera)."""

from __future__ import annotations

import os
import subprocess
from typing import Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tessera
from tessera._build import find_compiler


def corpus(n: int, seed: int) -> List[np.ndarray]:
    """Documents whose tokens name them: document d, token k is d*1000 + k + 1."""
    rng = np.random.default_rng(seed)
    lens = np.minimum(rng.lognormal(4.0, 1.0, size=n).astype(np.int64), 900)
    return [np.arange(d * 1000 + 1, d * 1000 + 1 + int(n_), dtype=np.int64) for d, n_ in enumerate(lens)]


def write_docs(root: str, docs: List[np.ndarray], files: int) -> None:
    os.makedirs(os.path.join(root, "data"), exist_ok=True)
    per = -(-len(docs) // files)
    for f in range(files):
        part = docs[f * per:(f + 1) * per]
        table = pa.table({
            "id": pa.array(np.arange(f * per, f * per + len(part), dtype=np.int64)),
            "ids": pa.array([d.tolist() for d in part], type=pa.list_(pa.int64())),
        })
        pq.write_table(table, os.path.join(root, "data", f"doc-{f:02}.parquet"), row_group_size=97)


def build(root: str, pack: str, threads: int = 2) -> str:
    spec = os.path.join(root, "spec.yaml")
    with open(spec, "w") as f:
        f.write(
            "version: 1\nname: packed\nsources:\n  docs: { path: \"data/*.parquet\" }\n"
            "fields:\n  tokens: { dtype: u32, column: ids }\n"
            "chunks: { target_bytes: 16KiB }\n"
            f"pack: {pack}\n"
        )
    return tessera.build(spec, cache_dir=os.path.join(root, f"cache-{threads}"), threads=threads)


def read_megatron(prefix: str) -> List[np.ndarray]:
    """Megatron's MMIDIDX layout: magic, version u64, dtype code u8, sequence
    count u64, document count u64, lengths int32[S], pointers int64[S],
    document indices int64[D]; token ids in the .bin at the pointers."""
    codes: Dict[int, type] = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
                              6: np.float64, 7: np.float32, 8: np.uint16}
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00"
    version = np.frombuffer(idx, np.uint64, 1, 9)[0]
    assert version == 1
    dtype = codes[idx[17]]
    s = int(np.frombuffer(idx, np.uint64, 1, 18)[0])
    d = int(np.frombuffer(idx, np.uint64, 1, 26)[0])
    off = 34
    lengths = np.frombuffer(idx, np.int32, s, off)
    off += 4 * s
    pointers = np.frombuffer(idx, np.int64, s, off)
    off += 8 * s
    docs = np.frombuffer(idx, np.int64, d, off)
    assert off + 8 * d == len(idx)
    assert list(docs) == list(range(s + 1))
    data = np.memmap(prefix + ".bin", dtype=np.uint8, mode="r")
    return [np.frombuffer(data, dtype, int(n), int(p)) for n, p in zip(lengths, pointers)]


@pytest.mark.parametrize("algorithm", ["best_fit", "concat"])
def test_windows_hold_every_document_token_once(tmp_path: "os.PathLike[str]", algorithm: str) -> None:
    root = str(tmp_path)
    docs = corpus(1500, seed=3)
    write_docs(root, docs, files=3)
    length = 512
    groups = ", group_docs: 400" if algorithm == "best_fit" else ""
    path = build(root, f"{{ length: {length}, algorithm: {algorithm}, labels: true{groups} }}")
    ds = tessera.open(path)
    rec = ds[0:len(ds)]
    tokens, seg, pos, mask = (np.asarray(rec[k]) for k in ("tokens", "segment_ids", "positions", "loss_mask"))
    assert tokens.shape == (len(ds), length + 1) and mask.shape == (len(ds), length)
    assert ((tokens == 0) == (seg == 0)).all()
    # The loss mask, recomputed from the segments: the target is real and in
    # the same piece.
    want = (seg[:, 1:] != 0) & (seg[:, 1:] == seg[:, :-1])
    assert (mask == want).all()
    # Positions restart at each piece.
    starts = (seg != 0) & np.concatenate([np.ones((len(ds), 1), bool), seg[:, 1:] != seg[:, :-1]], axis=1)
    assert (pos[starts] == 0).all()
    inner = (seg != 0) & ~starts
    prev = np.concatenate([np.zeros((len(ds), 1), pos.dtype), pos[:, :-1]], axis=1)
    assert (pos[inner] == prev[inner] + 1).all()
    real = tokens[tokens != 0].astype(np.int64)
    every = np.concatenate(docs)
    if algorithm == "concat":
        # Consecutive windows share one token: inputs cover the stream once.
        inputs = tokens[:, :length]
        got = inputs[inputs != 0]
        # The stream's last token is an input only if the last window is
        # padded; otherwise it is that window's final (target) slot.
        tail = tokens[-1, length:][tokens[-1, length:] != 0]
        np.testing.assert_array_equal(np.concatenate([got, tail]), every)
    else:
        np.testing.assert_array_equal(np.sort(real), np.sort(every))
        # A document that fits a window is in one window.
        doc_of = (real - 1) // 1000
        win_of = np.repeat(np.arange(len(ds)), (tokens != 0).sum(axis=1))
        fits = np.array([len(d) <= length + 1 for d in docs])
        pairs = np.unique(np.stack([doc_of, win_of]), axis=1)
        per_doc = np.bincount(pairs[0], minlength=len(docs))
        assert (per_doc[fits & (np.array([len(d) for d in docs]) > 0)] == 1).all()
    report = ds.manifest["build"]["pack"]["all"]
    assert report["windows"] == len(ds)
    assert report["tokens"] == len(every)


def test_megatron_export_reads_back_with_an_independent_reader(tmp_path: "os.PathLike[str]") -> None:
    root = str(tmp_path)
    docs = corpus(600, seed=5)
    write_docs(root, docs, files=2)
    path = build(root, "{ length: 256, algorithm: best_fit }")
    prefix = os.path.join(root, "mega")
    out = subprocess.run([find_compiler(), "export-megatron", path, "-o", prefix],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    seqs = read_megatron(prefix)
    ds = tessera.open(path)
    assert len(seqs) == len(ds)
    rec = ds[0:len(ds)]
    for i, s in enumerate(seqs):
        w = np.asarray(rec["tokens"][i])
        real = w[np.asarray(rec["segment_ids"][i]) != 0]
        assert s.dtype == np.int32
        np.testing.assert_array_equal(s, real.astype(np.int32))


def test_a_set_that_is_not_packed_is_refused_by_the_export(tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), "plain")
    tessera.write(path, {"x": np.arange(10, dtype=np.float32)})
    out = subprocess.run([find_compiler(), "export-megatron", path, "-o", os.path.join(str(tmp_path), "m")],
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert "not a packed set" in out.stderr
