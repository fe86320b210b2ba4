"""The baselines' side of benches/compare/compare.py: the transform set of
specs/criteo.yaml written with NumPy and pyarrow (hashes, split, filter,
statistics, transforms), the batching, and the consumer every method feeds.
See compare.py's docstring for what these compute and how they differ from
tessera's own functions.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

# --- The transform set; keep in step with specs/criteo.yaml. ----------------
FILTER_DAY_MIN = 14                     # filter: day >= 14 (about 42% of rows)
SPLIT_KEY = "id"
SPLIT_TRAIN_FRACTION = 0.9              # train 0.9 / val 0.1
HASH_BUCKETS = 1 << 20                  # buckets per categorical column
DENSE_COLUMNS = [f"I{j}" for j in range(1, 14)]
CAT_COLUMNS = [f"C{j}" for j in range(1, 27)]
LABEL_COLUMN = "label"
NEEDED_COLUMNS = [LABEL_COLUMN, *DENSE_COLUMNS, *CAT_COLUMNS, "day", SPLIT_KEY]

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)


# --- Hashes -----------------------------------------------------------------

def fnv1a64_strings(arr) -> np.ndarray:
    """FNV-1a 64 of each string's UTF-8 bytes, vectorized over byte positions."""
    import pyarrow as pa

    if arr.type != pa.string():
        arr = arr.cast(pa.string())
    n = len(arr)
    _validity, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1, offset=arr.offset * 4)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(1, np.uint8)
    if len(data) == 0:
        data = np.zeros(1, np.uint8)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts  # null slots have length 0: they hash as ""
    h = np.full(n, FNV_OFFSET, dtype=np.uint64)
    last = len(data) - 1
    for j in range(int(lengths.max()) if n else 0):
        byte = data[np.minimum(starts + j, last)].astype(np.uint64)
        np.copyto(h, (h ^ byte) * FNV_PRIME, where=lengths > j)
    return h


def hash_buckets(column) -> np.ndarray:
    """Bucket ids (int32) of a string or dictionary-of-string column (Array or ChunkedArray)."""
    import pyarrow as pa

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = []
    for chunk in chunks:
        if pa.types.is_dictionary(chunk.type):
            # Hash each distinct value once; nulls take the hash of "".
            dict_buckets = np.empty(len(chunk.dictionary) + 1, dtype=np.int32)
            dict_buckets[:-1] = fnv1a64_strings(chunk.dictionary) % np.uint64(HASH_BUCKETS)
            dict_buckets[-1] = FNV_OFFSET % np.uint64(HASH_BUCKETS)
            codes = chunk.indices.fill_null(len(chunk.dictionary)).to_numpy()
            parts.append(dict_buckets[codes])
        else:
            parts.append((fnv1a64_strings(chunk) % np.uint64(HASH_BUCKETS)).astype(np.int32))
    if not parts:
        return np.empty(0, dtype=np.int32)
    return np.concatenate(parts) if len(parts) != 1 else parts[0]


def split_is_train(ids: np.ndarray) -> np.ndarray:
    """splitmix64(id) mod 10000 < 10000 * SPLIT_TRAIN_FRACTION."""
    z = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return (z % np.uint64(10000)) < np.uint64(round(10000 * SPLIT_TRAIN_FRACTION))


# --- The shared transform pipeline of the pyarrow baselines ---------------------

def dense_unscaled(table) -> np.ndarray:
    """I1..I13 -> (n, 13) float32: nulls -> 0, clip at 0, log1p."""
    out = np.empty((table.num_rows, len(DENSE_COLUMNS)), dtype=np.float32)
    for j, name in enumerate(DENSE_COLUMNS):
        out[:, j] = table.column(name).fill_null(0).to_numpy()
    np.maximum(out, 0.0, out=out)
    np.log1p(out, out=out)
    return out


def train_rows(table):
    """The train split of an already filtered table."""
    import pyarrow as pa

    mask = split_is_train(table.column(SPLIT_KEY).to_numpy())
    return table.filter(pa.array(mask))


def transform(table, stats: dict) -> dict[str, np.ndarray]:
    dense = dense_unscaled(table)
    dense -= stats["mean"]
    dense /= stats["std"]
    cats = np.empty((table.num_rows, len(CAT_COLUMNS)), dtype=np.int32)
    for j, name in enumerate(CAT_COLUMNS):
        cats[:, j] = hash_buckets(table.column(name))
    label = table.column(LABEL_COLUMN).to_numpy().astype(np.float32)
    return {"label": label, "dense": dense, "cats": cats}


def filtered_tables_naive(data: Path):
    """(a): whole files, all columns, filter and split in memory."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for path in parquet_files(data):
        table = pq.read_table(path, read_dictionary=CAT_COLUMNS)
        table = table.filter(pc.greater_equal(table.column("day"), FILTER_DAY_MIN))
        if table.num_rows:
            yield train_rows(table)


def filtered_tables_dataset(data: Path, dictionary: bool = True):
    """(b): filter and projection pushed into the pyarrow.dataset scan.

    With `dictionary=False` (method c0) the categorical columns arrive as plain
    strings and every row's string is hashed: the straightforward script.
    """
    import pyarrow as pa
    import pyarrow.dataset as pads

    opts = pads.ParquetReadOptions(dictionary_columns=CAT_COLUMNS if dictionary else [])
    fmt = pads.ParquetFileFormat(read_options=opts)
    dataset = pads.dataset([str(p) for p in parquet_files(data)], format=fmt)
    columns = [LABEL_COLUMN, *DENSE_COLUMNS, *CAT_COLUMNS, SPLIT_KEY]
    scanner = dataset.scanner(columns=columns, filter=pads.field("day") >= FILTER_DAY_MIN)
    for batch in scanner.to_batches():
        if batch.num_rows:
            yield train_rows(pa.Table.from_batches([batch]))


def parquet_files(data: Path) -> list[Path]:
    files = sorted(data.glob("*.parquet"))
    if not files:
        raise SystemExit(f"compare: no .parquet files in {data}")
    return files


def compute_stats(tables) -> dict:
    """Train-split mean and population std of the unscaled dense features (float64 sums)."""
    n = 0
    s = np.zeros(len(DENSE_COLUMNS))
    ss = np.zeros(len(DENSE_COLUMNS))
    for table in tables:
        x = dense_unscaled(table).astype(np.float64)
        n += len(x)
        s += x.sum(axis=0)
        ss += np.square(x).sum(axis=0)
    mean = s / n
    std = np.sqrt(np.maximum(ss / n - mean * mean, 0.0))
    std[std == 0] = 1.0
    return {"rows": n, "mean": mean.astype(np.float32).tolist(), "std": std.astype(np.float32).tolist()}


def stats_arrays(stats: dict) -> dict:
    return {"mean": np.asarray(stats["mean"], np.float32), "std": np.asarray(stats["std"], np.float32)}


# --- Batching and consuming ----------------------------------------------------

def rebatch(chunks, batch_size: int):
    """Batches of exactly batch_size rows (the last may be short) from a stream of array dicts."""
    carry: list[dict] = []
    carry_rows = 0
    for chunk in chunks:
        n = len(chunk["label"])
        start = 0
        if carry_rows:
            take = min(batch_size - carry_rows, n)
            carry.append({k: v[:take] for k, v in chunk.items()})
            carry_rows += take
            start = take
            if carry_rows == batch_size:
                yield {k: np.concatenate([c[k] for c in carry]) for k in chunk}
                carry, carry_rows = [], 0
        while n - start >= batch_size:
            yield {k: v[start:start + batch_size] for k, v in chunk.items()}
            start += batch_size
        if start < n:
            carry.append({k: v[start:] for k, v in chunk.items()})
            carry_rows += n - start
    if carry_rows:
        yield {k: np.concatenate([c[k] for c in carry]) for k in carry[0]}


def shuffled_batches(arrays: dict[str, np.ndarray], batch_size: int, seed: int):
    n = len(arrays["label"])
    perm = np.random.default_rng(seed).permutation(n)
    for k in range(0, n, batch_size):
        idx = perm[k:k + batch_size]
        yield {name: a[idx] for name, a in arrays.items()}


def sequential_copies(arrays: dict[str, np.ndarray], batch_size: int):
    n = len(arrays["label"])
    for k in range(0, n, batch_size):
        yield {name: np.array(a[k:k + batch_size]) for name, a in arrays.items()}


def consume(batches) -> dict:
    """Run a pass; returns rows, label sum and seconds."""
    t0 = time.perf_counter()
    rows = 0
    label_sum = 0.0
    for batch in batches:
        first = next(iter(batch.values()))
        rows += len(first)
        if "label" in batch:
            label_sum += float(np.asarray(batch["label"], dtype=np.float64).sum())
    return {"rows": rows, "label_sum": label_sum, "seconds": time.perf_counter() - t0}
