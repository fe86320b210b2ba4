"""Multiset comparison of decoded records with the oracle's rows.

Rows are sorted on both sides (integer fields first, then floats rounded to
f32 for the sort key only) and compared position by position: integers
exactly, floats with a tight relative tolerance. A failure message says how
the two sides differ (row counts, rows only on one side, first differing
row), so a report can be written from it."""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from corpus import F

# f64: sums of a few thousand inexact values in different orders stay within
# ~1e-13 relative here; 1e-11 leaves room and still catches any real error.
RTOL = {"f64": 1e-11, "f32": 2.5e-7, "f16": 2e-3, "bf16": 1.6e-2}
ATOL = {"f64": 1e-12, "f32": 1e-30, "f16": 0.0, "bf16": 0.0}


def _is_float(f: F) -> bool:
    return f.dtype in RTOL


def _flat(a: np.ndarray) -> np.ndarray:
    return a.reshape(len(a), -1)


def sort_rows(cols: Dict[str, np.ndarray], fields: Sequence[F]) -> np.ndarray:
    keys: List[np.ndarray] = []
    for f in sorted(fields, key=_is_float):  # stable: integers first, in field order
        a = _flat(cols[f.name])
        for j in range(a.shape[1]):
            col = a[:, j]
            keys.append(col.astype(np.float32) if _is_float(f) else col)
    if not keys:
        return np.arange(0)
    return np.lexsort(tuple(reversed(keys)))


def _row_tuple(cols: Dict[str, np.ndarray], fields: Sequence[F], r: int, digits: int = 9) -> Tuple:
    out = []
    for f in fields:
        v = _flat(cols[f.name])[r]
        if _is_float(f):
            out.append(tuple(float(f"{float(x):.{digits}g}") for x in v))
        else:
            out.append(tuple(int(x) for x in v))
    return tuple(x[0] if len(x) == 1 else x for x in out)


def _sample_diff(actual: Dict[str, np.ndarray], expected: Dict[str, np.ndarray], fields: Sequence[F],
                 limit: int = 5) -> str:
    na = len(next(iter(actual.values())))
    ne = len(next(iter(expected.values())))
    ca = Counter(_row_tuple(actual, fields, r) for r in range(na))
    ce = Counter(_row_tuple(expected, fields, r) for r in range(ne))
    only_a = ca - ce
    only_e = ce - ca
    names = tuple(f.name for f in fields)
    lines = [f"  fields {names}"]
    lines.append(f"  {sum(only_a.values())} row(s) only in tessera, {sum(only_e.values())} only in DuckDB"
                 " (floats at 9 digits)")
    for title, c in (("only in tessera", only_a), ("only in DuckDB", only_e)):
        for row, k in sorted(c.items(), key=lambda kv: repr(kv[0]))[:limit]:
            lines.append(f"    {title}: {row}" + (f" x{k}" if k > 1 else ""))
    dup_a = sum(v - 1 for v in ca.values() if v > 1)
    dup_e = sum(v - 1 for v in ce.values() if v > 1)
    if dup_a != dup_e:
        lines.append(f"  repeated rows: tessera {dup_a}, DuckDB {dup_e}")
    return "\n".join(lines)


def multiset_mismatch(actual: Dict[str, np.ndarray], expected: Dict[str, np.ndarray], fields: Sequence[F],
                      rtol: Optional[Mapping[str, float]] = None) -> str:
    """'' when the two row multisets agree, else a description. `rtol`
    overrides the relative tolerance of some float dtypes."""
    tol = {**RTOL, **(rtol or {})}
    na = len(next(iter(actual.values())))
    ne = len(next(iter(expected.values())))
    if na != ne:
        return f"tessera stored {na} rows, DuckDB returned {ne}\n" + _sample_diff(actual, expected, fields)
    if na == 0:
        return ""
    oa = sort_rows(actual, fields)
    oe = sort_rows(expected, fields)
    bad = np.zeros(na, dtype=bool)
    worst: List[str] = []
    for f in fields:
        a = _flat(actual[f.name])[oa]
        e = _flat(expected[f.name])[oe]
        if a.shape != e.shape:
            return f"field {f.name}: shape {a.shape[1:]} in tessera, {e.shape[1:]} expected"
        if _is_float(f):
            a64 = a.astype(np.float64)
            e64 = e.astype(np.float64)
            ok = np.isclose(a64, e64, rtol=tol[f.dtype], atol=ATOL[f.dtype], equal_nan=True)
            # np.isclose is asymmetric in b; check both ways.
            ok &= np.isclose(e64, a64, rtol=tol[f.dtype], atol=ATOL[f.dtype], equal_nan=True)
        else:
            ok = a.astype(np.int64) == e.astype(np.int64) if f.dtype != "u64" else a == e
        row_bad = ~ok.all(axis=1)
        if row_bad.any():
            worst.append(f"field {f.name}: {int(row_bad.sum())} of {na} sorted rows differ")
        bad |= row_bad
    if not bad.any():
        return ""
    r = int(np.argmax(bad))
    first = (f"first differing sorted row {r}:\n    tessera {_row_tuple(actual, fields, int(oa[r]), 17)}\n"
             f"    DuckDB  {_row_tuple(expected, fields, int(oe[r]), 17)}")
    return "\n".join(worst) + "\n" + first + "\n" + _sample_diff(actual, expected, fields)
