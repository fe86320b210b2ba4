"""The independent answer: DuckDB runs the query over the same files, and
Python applies what the spec's fields say (fill_null, hash_bucket, list
padding, standardize, the dtype, the split) following docs/SPEC.md.

Nothing here reads tessera's output; expected values come only from DuckDB
and the documented semantics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import duckdb
import numpy as np

from corpus import F, Q
from stablehash import hash_values, split_index

INT_RANGES = {
    "u8": (0, 2**8 - 1), "i8": (-(2**7), 2**7 - 1), "u16": (0, 2**16 - 1), "i16": (-(2**15), 2**15 - 1),
    "u32": (0, 2**32 - 1), "i32": (-(2**31), 2**31 - 1), "u64": (0, 2**64 - 1), "i64": (-(2**63), 2**63 - 1),
}
FLOATS = {"f16": np.float16, "f32": np.float32, "f64": np.float64}
NP_INTS = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16, "u32": np.uint32, "i32": np.int32,
           "u64": np.uint64, "i64": np.int64}


class OracleError(AssertionError):
    """The corpus asks for something the documented semantics reject (a null
    without fill_null, a value that does not fit): a corpus bug, not a
    tessera bug."""


@dataclass
class Expected:
    """Per split name (in spec order): field name -> values (rows, *shape)."""

    splits: Dict[str, Dict[str, np.ndarray]]

    def rows(self, split: str) -> int:
        cols = self.splits[split]
        return len(next(iter(cols.values()))) if cols else 0


def _values(arr: np.ndarray) -> List[object]:
    """Python values of a DuckDB column, None for nulls."""
    if isinstance(arr, np.ma.MaskedArray):
        mask = np.ma.getmaskarray(arr)
        data = arr.data
        return [None if m else v for v, m in zip(data.tolist(), mask.tolist())]
    return arr.tolist()


def _numeric(f: F, arr: np.ndarray) -> np.ndarray:
    """A scalar numeric field: nulls filled, converted to the dtype."""
    if isinstance(arr, np.ma.MaskedArray):
        mask = np.ma.getmaskarray(arr)
        data = np.asarray(arr.data)
    else:
        data = np.asarray(arr)
        mask = np.zeros(len(data), dtype=bool)
    if data.dtype == object:  # decimals and the like
        data = np.array([0 if m else v for v, m in zip(data.tolist(), mask.tolist())], dtype=np.float64)
    if data.dtype == bool:
        data = data.astype(np.int64)
    if mask.any():
        if f.fill_null is None:
            raise OracleError(f"field {f.name}: {int(mask.sum())} null(s) and no fill_null")
        data = np.where(mask, f.fill_null, data)
    if f.dtype in FLOATS:
        return data.astype(np.float64)
    vals = data
    if vals.dtype.kind == "f":
        if not np.all(np.isfinite(vals)) or not np.all(vals == np.round(vals)):
            raise OracleError(f"field {f.name}: non-integral values for {f.dtype}")
        if np.any(np.abs(vals) > 2**53):
            raise OracleError(f"field {f.name}: values beyond 2^53 arrived as floats")
        vals = vals.astype(np.int64)
    lo, hi = INT_RANGES[f.dtype]
    if len(vals) and (int(vals.min()) < lo or int(vals.max()) > hi):
        raise OracleError(f"field {f.name}: values outside {f.dtype}")
    return vals.astype(NP_INTS[f.dtype])


def _hashed(f: F, arr: np.ndarray) -> np.ndarray:
    assert f.hash is not None
    h = hash_values(_values(arr))
    return (h % np.uint64(f.hash)).astype(np.uint64).astype(NP_INTS[f.dtype])


def _list(f: F, arr: np.ndarray) -> np.ndarray:
    assert f.length is not None
    pad = 0.0 if f.pad is None else f.pad
    out = np.full((len(arr), f.length), pad, dtype=np.float64)
    for r, v in enumerate(_values(arr)):
        if v is None:
            continue  # a null list is all padding
        items = list(v)[: f.length]  # type: ignore[call-overload]
        for j, x in enumerate(items):
            if x is None:
                if f.fill_null is None:
                    raise OracleError(f"field {f.name}: null list element and no fill_null")
                x = f.fill_null
            out[r, j] = x
    if f.dtype in FLOATS:
        return out
    return out.astype(NP_INTS[f.dtype])


def _stats_split(q: Q) -> Optional[str]:
    if q.split is None:
        return None
    names = [n for n, _ in q.split.weights]
    return "train" if "train" in names else names[0]


def _finish_dtype(f: F, v: np.ndarray) -> np.ndarray:
    if f.dtype in FLOATS:
        return v.astype(FLOATS[f.dtype])
    return v


class DuckOracle:
    """A DuckDB connection with the inputs registered under the tables' names."""

    def __init__(self, views: Mapping[str, str], threads: int = 2):
        self.con = duckdb.connect(":memory:")
        self.con.execute(f"SET threads = {int(threads)}")
        for name, reader in views.items():
            self.con.execute(f"CREATE VIEW {name} AS SELECT * FROM {reader}")

    def sql_for(self, q: Q, order_by: Optional[str] = None) -> str:
        items = [f"{f.select_sql()} AS \"__f{i}\"" for i, f in enumerate(q.fields)]
        if q.split is not None:
            items.append(f"({q.split.key}) AS \"__split\"")
        sql = f"SELECT {', '.join(items)} FROM ({q.duck_sql}) AS \"__input\""
        if q.filter:
            sql += f" WHERE {q.filter}"
        if order_by:
            sql += f" ORDER BY {order_by}"
        return sql

    def expected(self, q: Q, order_by: Optional[str] = None) -> Expected:
        """The answer; rows in the order of `order_by` (SQL over the query's
        output, `"__input".col`) when given, else in no particular order."""
        sql = self.sql_for(q, order_by)
        try:
            cols = self.con.execute(sql).fetchnumpy()
        except duckdb.Error as e:  # the corpus must be valid DuckDB SQL
            raise OracleError(f"DuckDB rejected the oracle SQL of {q.id}: {e}\n{sql}") from e
        n = len(next(iter(cols.values())))
        per_field: Dict[str, np.ndarray] = {}
        for i, f in enumerate(q.fields):
            arr = cols[f"__f{i}"]
            if f.hash is not None:
                per_field[f.name] = _hashed(f, arr)
            elif f.length is not None:
                per_field[f.name] = _list(f, arr)
            else:
                per_field[f.name] = _numeric(f, arr)
        if q.split is None:
            names = ["all"]
            which = np.zeros(n, dtype=np.int64)
        else:
            names = [nm for nm, _ in q.split.weights]
            which = split_index(hash_values(_values(cols["__split"])), [w for _, w in q.split.weights])
        stats_rows = np.ones(n, dtype=bool) if q.split is None else which == names.index(_stats_split(q) or names[0])
        for f in q.fields:
            if f.standardize:
                v = per_field[f.name].astype(np.float64)
                s = v[stats_rows]
                mean = float(s.mean()) if len(s) else 0.0
                std = float(s.std()) if len(s) else 0.0
                per_field[f.name] = (v - mean) / (std if std != 0 else 1.0)
        for f in q.fields:
            per_field[f.name] = _finish_dtype(f, per_field[f.name])
        return Expected({nm: {k: v[which == s] for k, v in per_field.items()} for s, nm in enumerate(names)})


def split_names(q: Q) -> Sequence[str]:
    return ["all"] if q.split is None else [n for n, _ in q.split.weights]


def describe_views(views: Mapping[str, str]) -> List[Tuple[str, str]]:
    return sorted(views.items())
