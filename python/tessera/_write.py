"""``tessera.write``: store NumPy arrays as a shard set, without the compiler."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from tessera import _tessera
from tessera.errors import AlreadyExistsError, ArgumentError

#: NumPy dtype kind+size -> tessera dtype name.
_FROM_NUMPY = {
    "u1": "u8",
    "i1": "i8",
    "u2": "u16",
    "i2": "i16",
    "u4": "u32",
    "i4": "i32",
    "u8": "u64",
    "i8": "i64",
    "f2": "f16",
    "f4": "f32",
    "f8": "f64",
    "b1": "u8",
}

SplitsArg = Union[Mapping[str, int], Sequence[Tuple[str, int]], None]


def write(
    path: Union[str, "os.PathLike[str]"],
    arrays: Mapping[str, Any],
    splits: SplitsArg = None,
    *,
    dtypes: Optional[Mapping[str, str]] = None,
    target_bytes: int = 64 << 20,
    name: Optional[str] = None,
    stats: Any = None,
) -> str:
    """Writes ``arrays`` as a new shard set in directory ``path``; returns the path.

    Each entry of ``arrays`` becomes a field: its first axis is the record
    axis (all arrays must have the same length) and the rest is the field's
    fixed shape. Element types map from NumPy (``uint8`` -> ``u8``, ...,
    ``float16`` -> ``f16``, ``float32`` -> ``f32``; ``bool`` is stored as
    ``u8``). ``dtypes`` overrides a field's stored type, for instance
    ``{"emb": "bf16"}`` with a float array (rounded to nearest even) or a
    ``uint16`` array of raw bfloat16 bits.

    ``splits`` names contiguous row ranges in order, as ``{"train": 900,
    "val": 100}`` or ``[("train", 900), ("val", 100)]``; the default is one
    split ``"train"`` holding every row. Shards hold about ``target_bytes``
    each. ``stats`` (anything JSON can encode) is stored as the manifest's
    ``stats``.

    The set is written into a temporary sibling directory and renamed into
    place, so ``path`` never holds a partial set; it must not exist yet (or be
    an empty directory).
    """
    target = os.fspath(path)
    if not isinstance(arrays, Mapping) or not arrays:
        raise ArgumentError("arrays must be a non-empty mapping of field name -> array")
    if target_bytes < 1:
        raise ArgumentError(f"target_bytes must be positive, got {target_bytes}")
    overrides = dict(dtypes or {})
    unknown = set(overrides) - set(arrays)
    if unknown:
        raise ArgumentError(f"dtypes names fields that are not in arrays: {sorted(unknown)}")

    fields = []
    columns = []
    rows: Optional[int] = None
    for field_name, value in arrays.items():
        arr = np.asarray(value)
        if arr.ndim == 0:
            raise ArgumentError(f"field {field_name!r}: expected an array with a record axis, got a scalar")
        if rows is None:
            rows = arr.shape[0]
        elif arr.shape[0] != rows:
            raise ArgumentError(
                f"field {field_name!r} has {arr.shape[0]} rows, the first field has {rows}"
            )
        dtype, arr = _stored(field_name, arr, overrides.get(field_name))
        shape = [int(d) for d in arr.shape[1:]]
        elems = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if elems == 0:
            raise ArgumentError(f"field {field_name!r} has a zero-sized shape {tuple(shape)}")
        little = arr.dtype.newbyteorder("<")
        raw = np.ascontiguousarray(arr, dtype=little).reshape(arr.shape[0], elems)
        columns.append(raw.view(np.uint8))
        fields.append((str(field_name), dtype, shape))
    assert rows is not None

    split_list = _split_list(splits, rows)
    stats_json = None if stats is None else json.dumps(stats)

    parent = os.path.dirname(os.path.abspath(target)) or "."
    if os.path.exists(target) and not (os.path.isdir(target) and not os.listdir(target)):
        raise AlreadyExistsError(errno.EEXIST, "already exists; tessera.write does not overwrite", target)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(target) + ".tmp-", dir=parent)
    try:
        _tessera.write_shard_set(tmp, fields, columns, split_list, int(target_bytes), name, stats_json)
        if os.path.isdir(target):
            os.rmdir(target)  # empty, checked above
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _stored(field_name: str, arr: np.ndarray, override: Optional[str]) -> Tuple[str, np.ndarray]:
    """The tessera dtype for ``arr`` and the array in that type's NumPy form."""
    if override is None:
        key = f"{arr.dtype.kind}{arr.dtype.itemsize}"
        if key not in _FROM_NUMPY:
            raise ArgumentError(
                f"field {field_name!r}: NumPy dtype {arr.dtype} has no tessera equivalent "
                "(use u8..u64, i8..i64, float16/32/64 or bool)"
            )
        if arr.dtype.kind == "b":
            arr = arr.view(np.uint8)
        return _FROM_NUMPY[key], arr
    if override == "bf16":
        if arr.dtype == np.uint16:
            return "bf16", arr
        if arr.dtype.kind != "f":
            raise ArgumentError(f"field {field_name!r}: bf16 needs a float or uint16 array, got {arr.dtype}")
        return "bf16", _to_bf16_bits(arr)
    numpy_names = {v: k for k, v in _FROM_NUMPY.items() if k != "b1"}
    if override not in numpy_names:
        raise ArgumentError(f"field {field_name!r}: unknown dtype {override!r}")
    return override, arr.astype(np.dtype(numpy_names[override]), copy=False)


def _to_bf16_bits(arr: np.ndarray) -> np.ndarray:
    """bfloat16 bits of ``arr``, rounded to nearest even (NaN stays NaN)."""
    f = np.ascontiguousarray(arr, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        out[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def _split_list(splits: SplitsArg, rows: int) -> Sequence[Tuple[str, int]]:
    if splits is None:
        return [("train", rows)]
    items: Iterable[Tuple[str, int]]
    items = splits.items() if isinstance(splits, Mapping) else splits
    out = []
    for item in items:
        try:
            split_name, n = item
        except (TypeError, ValueError):
            raise ArgumentError(f"splits must be (name, rows) pairs, got {item!r}") from None
        if int(n) < 0:
            raise ArgumentError(f"split {split_name!r} has a negative row count {n}")
        out.append((str(split_name), int(n)))
    total = sum(n for _, n in out)
    if total != rows:
        raise ArgumentError(f"splits cover {total} rows but the arrays hold {rows}")
    return out

