"""The stable hash of docs/SPEC.md ("hash_bucket and split use one stable
64-bit hash"), written from that page alone: FNV-1a 64 over the UTF-8 bytes of
the value's SQL text, then the SplitMix64 finalizer; a null is the bytes
b"\\xffnull". Used to predict `hash_bucket` ids and split assignment from
DuckDB's answer."""

from __future__ import annotations

from typing import Dict, Iterable, List, Sequence

import numpy as np

MASK = (1 << 64) - 1
NULL_KEY = b"\xffnull"


def stable_hash(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & MASK
    return h ^ (h >> 31)


def sql_text(value: object) -> bytes:
    """The bytes tessera hashes for a value: its text as SQL's
    CAST(x AS VARCHAR) writes it. Only strings and integers are accepted here;
    other types (floats, booleans, dates) have engine-specific text forms and
    the corpus must not hash them."""
    if value is None:
        return NULL_KEY
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"refusing to hash a boolean ({value!r}): its text differs between engines")
    if isinstance(value, (int, np.integer)):
        return str(int(value)).encode("ascii")
    raise TypeError(f"refusing to hash {type(value).__name__} {value!r}: its text form is engine-specific")


def hash_values(values: Sequence[object]) -> np.ndarray:
    """Stable hashes (uint64) of many values, hashing each distinct one once."""
    memo: Dict[object, int] = {}
    out = np.empty(len(values), dtype=np.uint64)
    for i, v in enumerate(values):
        key = (type(v).__name__, v) if v is not None else None
        h = memo.get(key)
        if h is None:
            h = stable_hash(sql_text(v))
            memo[key] = h
        out[i] = h
    return out


def split_index(hashes: np.ndarray, weights: Iterable[float]) -> np.ndarray:
    """The split of each hash: u = (h >> 11) / 2^53, the first split whose
    cumulative normalized weight exceeds u, else the last."""
    w = [float(x) for x in weights]
    total = sum(w)
    cumulative: List[float] = []
    acc = 0.0
    for x in w:
        acc += x / total
        cumulative.append(acc)
    u = (hashes >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    idx = np.full(len(hashes), len(w) - 1, dtype=np.int64)
    assigned = np.zeros(len(hashes), dtype=bool)
    for s, c in enumerate(cumulative):
        hit = ~assigned & (u < c)
        idx[hit] = s
        assigned |= hit
    return idx

