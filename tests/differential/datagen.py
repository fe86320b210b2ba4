"""Deterministic inputs for the differential suite, written with pyarrow.

Tables (names are the SQL table names both engines see):

  fact    the fact table: ids in order, a skewed nullable key `k`, small
          categories, nullable dyadic floats (exact sums in any order), a
          Gaussian float (inexact sums: thread-order sensitive), wide
          integers with negatives, strings with non-ASCII text, dates,
          timestamps, an integer list column and a boolean.
          Written three ways over the same rows in the same order:
            fact_5/  five files, several row groups each (the default), and
                     two empty ones between them
            fact_1/  one file, many row groups (cut by `chunks:` in a variant)
  fcsv    the fact table's scalar columns as CSV (fcsv_5/, fcsv_1/): strings
          quoted, with commas and quotes inside, nulls as empty fields
  fjson   the same as newline-delimited JSON (fjson_5/, fjson_1/)
  fcsvq   fcsv with line breaks inside some quoted strings (fcsvq_5/, fcsvq_1/)
  dimk    Parquet dimension on `k`, with keys that no fact row has
  dimc    CSV dimension on `c`
  dimu    newline-delimited JSON dimension on `u` (missing keys are nulls)
  events  hive-partitioned Parquet (`region=.../day=.../part-N.parquet`),
          written with one file per partition and with three.

Everything is derived from fixed seeds, so two runs write identical files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FACT_ROWS = 60_000
FACT_FILES = 5
FACT_GROUP_ROWS = 2_000
EVENTS_ROWS_PER_PARTITION = 2_500
EVENTS_GROUP_ROWS = 500

# Words with ASCII, accented and CJK characters (all single code points, so
# every engine agrees on their length), several sharing prefixes.
WORDS = [
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta",
    "banana", "bandana", "cabana", "apple", "appletree", "café", "crème",
    "naïve", "日本", "東京都", "x", "yy", "", "a b c", "Mixed Case", "UPPER",
    "trailing ", " leading", "dash-ed", "under_score", "42", "-7",
    "comma, inside", 'quote "q" inside', "semi;colon",
]
# Columns of the fact table also written as CSV and NDJSON (no dates: their
# inference from text is engine-specific).
TEXT_COLUMNS = ["id", "k", "c", "u", "x", "y", "n", "s"]
COUNTRIES = ["de", "fr", "us", "jp", "br", "in", "ng", "au"]
LABELS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
REGIONS = ["apac", "eu", "us"]
DAY_2020 = 18262  # 2020-01-01 in days since 1970-01-01
DAYS = ["2021-01-01", "2021-01-02", "2021-01-03"]


def _dyadic(rng: np.random.Generator, n: int, scale: int) -> np.ndarray:
    """Floats that are multiples of 1/1024: sums of a few million of them are
    exact in f64, so the answer does not depend on summation order."""
    return rng.integers(-scale * 1024, scale * 1024, size=n) / 1024.0


def _mask(rng: np.random.Generator, n: int, share: float) -> np.ndarray:
    return rng.random(n) < share


def fact_table(n: int = FACT_ROWS, seed: int = 8) -> pa.Table:
    """The fact table's rows, in id order."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64)
    # Skewed key: a Zipf-like draw folded into 0..199; a few nulls.
    k = (rng.zipf(1.3, size=n) - 1) % 200
    k_null = _mask(rng, n, 0.02)
    c = rng.integers(0, 10, size=n)
    u = rng.integers(0, 1000, size=n)
    x = _dyadic(rng, n, 200)
    x_null = _mask(rng, n, 0.05)
    y = rng.standard_normal(n) * 37.0 + 3.0
    wide = rng.integers(-(10**9), 10**9, size=n)
    wide_null = _mask(rng, n, 0.03)
    s_idx = (rng.zipf(1.5, size=n) - 1) % len(WORDS)
    s_null = _mask(rng, n, 0.03)
    days = rng.integers(0, 4 * 365, size=n)
    d_null = _mask(rng, n, 0.02)
    base_us = np.datetime64("2020-01-01T00:00:00", "us").astype(np.int64)
    ts = base_us + rng.integers(0, 4 * 365 * 86_400, size=n) * 1_000_000 + rng.integers(0, 1_000_000, size=n)
    tag_len = rng.integers(0, 6, size=n)
    tag_null = _mask(rng, n, 0.04)
    tag_vals = rng.integers(-50, 50, size=int(tag_len.sum()))
    tags: List[object] = []
    pos = 0
    for i in range(n):
        ln = int(tag_len[i])
        tags.append(None if tag_null[i] else [int(v) for v in tag_vals[pos : pos + ln]])
        pos += ln
    flag = rng.random(n) < 0.3
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array(k.astype(np.int32), pa.int32(), mask=k_null),
            "c": pa.array(c.astype(np.int32), pa.int32()),
            "u": pa.array(u.astype(np.int64), pa.int64()),
            "x": pa.array(x, pa.float64(), mask=x_null),
            "y": pa.array(y, pa.float64()),
            "n": pa.array(wide.astype(np.int64), pa.int64(), mask=wide_null),
            "s": pa.array([WORDS[i] for i in s_idx], pa.string(), mask=s_null),
            "d": pa.array((days + DAY_2020).astype(np.int32), pa.int32(), mask=d_null).cast(pa.date32()),
            "ts": pa.array(ts, pa.int64()).cast(pa.timestamp("us")),
            "tags": pa.array(tags, pa.list_(pa.int32())),
            "flag": pa.array(flag, pa.bool_()),
        }
    )


def write_split(table: pa.Table, directory: Path, files: int, group_rows: int, stem: str = "part") -> List[Path]:
    """Writes `table` as `files` contiguous slices, in row order, named so that
    sorted paths are row order."""
    directory.mkdir(parents=True, exist_ok=True)
    n = table.num_rows
    bounds = [n * i // files for i in range(files + 1)]
    paths = []
    for i in range(files):
        p = directory / f"{stem}-{i:03d}.parquet"
        pq.write_table(table.slice(bounds[i], bounds[i + 1] - bounds[i]), p, row_group_size=group_rows)
        paths.append(p)
    return paths


def text_fact(table: pa.Table) -> pa.Table:
    """The fact columns written as text. An empty string would read back as
    null in one engine and as "" in the other, so it is spelled out."""
    t = table.select(TEXT_COLUMNS)
    s = pa.array([None if v is None else (v or "(empty)") for v in t.column("s").to_pylist()], pa.string())
    return t.set_column(t.schema.get_field_index("s"), "s", s)


def write_text_split(table: pa.Table, directory: Path, files: int, fmt: str) -> None:
    """Like write_split, as CSV (header in every file) or NDJSON."""
    import pyarrow.csv as pacsv

    directory.mkdir(parents=True, exist_ok=True)
    n = table.num_rows
    bounds = [n * i // files for i in range(files + 1)]
    for i in range(files):
        part = table.slice(bounds[i], bounds[i + 1] - bounds[i])
        if fmt == "csv":
            pacsv.write_csv(part, directory / f"part-{i:03d}.csv")
        else:
            with (directory / f"part-{i:03d}.jsonl").open("w", encoding="utf-8") as f:
                for row in part.to_pylist():
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")


def with_line_breaks(text: pa.Table) -> pa.Table:
    """The text fact with line breaks inside some quoted strings (valid CSV:
    a line start is not always a record start)."""
    vals = text.column("s").to_pylist()
    out = [v if v is None or i % 11 else f"{v}\nsecond line, {i % 5}" for i, v in enumerate(vals)]
    return text.set_column(text.schema.get_field_index("s"), "s", pa.array(out, pa.string()))


def write_empty_parts(inputs: "Inputs", fact: pa.Table, text: pa.Table) -> None:
    """Exports often hold empty part files. The multi-file layouts get them
    between their files (the names sort there): Parquet files with no row
    group and with one empty row group, and a CSV file with only its header."""
    import pyarrow.csv as pacsv

    pq.ParquetWriter(inputs.fact_dir("5") / "part-001a.parquet", fact.schema).close()
    pq.write_table(fact.slice(0, 0), inputs.fact_dir("5") / "part-003a.parquet")
    pacsv.write_csv(text.slice(0, 0), inputs.table_dir("fcsv", "5") / "part-001a.csv")


def dimk_table(seed: int = 9) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = 250  # keys 200..249 have no fact row
    keys = np.arange(n, dtype=np.int32)
    names = [f"{WORDS[i % len(WORDS)]}-{i}" for i in range(n)]
    weight = _dyadic(rng, n, 8)
    tier = rng.integers(0, 4, size=n)
    return pa.table(
        {
            "k": pa.array(keys, pa.int32()),
            "name": pa.array(names, pa.string()),
            "weight": pa.array(weight, pa.float64()),
            "tier": pa.array(tier.astype(np.int64), pa.int64(), mask=_mask(rng, n, 0.1)),
        }
    )


def write_dimc(path: Path) -> None:
    """CSV: c 0..11 (10 and 11 absent from the fact table); no empty fields."""
    lines = ["c,label,factor"]
    for c in range(12):
        lines.append(f"{c},{LABELS[c]},{(c * 3 - 7) / 4}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_dimu(path: Path, seed: int = 10) -> None:
    """NDJSON: users 0..1099 except multiples of 7; `age` missing for some."""
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as f:
        for u in range(1100):
            if u % 7 == 0:
                continue
            row: Dict[str, object] = {"u": u, "country": COUNTRIES[int(rng.integers(0, len(COUNTRIES)))]}
            age = int(rng.integers(16, 90))
            row["age"] = None if rng.random() < 0.1 else age
            row["score"] = float(rng.integers(-4000, 4000)) / 16.0
            f.write(json.dumps(row) + "\n")


def events_table(region: str, day: str, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = EVENTS_ROWS_PER_PARTITION
    r_i = REGIONS.index(region)
    d_i = DAYS.index(day)
    first = (r_i * len(DAYS) + d_i) * n
    return pa.table(
        {
            "id": pa.array(np.arange(first, first + n, dtype=np.int64), pa.int64()),
            "amount": pa.array(_dyadic(rng, n, 500), pa.float64(), mask=_mask(rng, n, 0.05)),
            "k": pa.array(rng.integers(0, 40, size=n).astype(np.int32), pa.int32()),
            "s": pa.array([WORDS[int(i)] for i in rng.integers(0, len(WORDS), size=n)], pa.string()),
        }
    )


def write_events(root: Path, files_per_partition: int) -> None:
    for r_i, region in enumerate(REGIONS):
        for d_i, day in enumerate(DAYS):
            t = events_table(region, day, seed=100 + r_i * 10 + d_i)
            write_split(t, root / f"region={region}" / f"day={day}", files_per_partition, EVENTS_GROUP_ROWS)


@dataclass
class Inputs:
    """Where every generated input lives."""

    root: Path

    def fact_dir(self, layout: str) -> Path:
        return self.root / f"fact_{layout}"

    def table_dir(self, table: str, layout: str) -> Path:
        return self.root / f"{table}_{layout}"

    def events_dir(self, layout: str) -> Path:
        return self.root / f"events_{layout}"

    @property
    def dimk(self) -> Path:
        return self.root / "dimk.parquet"

    @property
    def dimc(self) -> Path:
        return self.root / "dimc.csv"

    @property
    def dimu(self) -> Path:
        return self.root / "dimu.jsonl"


def generate(root: Path) -> Inputs:
    """Writes every input under `root` (skipped when a finished marker from an
    identical generation is present)."""
    root.mkdir(parents=True, exist_ok=True)
    marker = root / ".generated-v5"
    inputs = Inputs(root)
    if marker.exists():
        return inputs
    fact = fact_table()
    write_split(fact, inputs.fact_dir("5"), FACT_FILES, FACT_GROUP_ROWS)
    write_split(fact, inputs.fact_dir("1"), 1, FACT_GROUP_ROWS)
    text = text_fact(fact)
    for layout, files in (("5", FACT_FILES), ("1", 1)):
        write_text_split(text, inputs.table_dir("fcsv", layout), files, "csv")
        write_text_split(text, inputs.table_dir("fjson", layout), files, "json")
    write_empty_parts(inputs, fact, text)
    quoted = with_line_breaks(text)
    for layout, files in (("5", FACT_FILES), ("1", 1)):
        write_text_split(quoted, inputs.table_dir("fcsvq", layout), files, "csv")
    pq.write_table(dimk_table(), inputs.dimk, row_group_size=100)
    write_dimc(inputs.dimc)
    write_dimu(inputs.dimu)
    # Events: "1" = one file per partition, "3" = three files per partition.
    write_events(inputs.events_dir("1"), 1)
    write_events(inputs.events_dir("3"), 3)
    marker.write_text("ok\n")
    return inputs


def big_table(rows: int, seed: int = 21) -> pa.Table:
    """The large single-file case: simple columns, generated vectorized."""
    rng = np.random.default_rng(seed)
    k = (rng.zipf(1.3, size=rows) - 1) % 200
    s_idx = rng.integers(0, len(WORDS), size=rows)
    words = pa.array(WORDS, pa.string())
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "k": pa.array(k.astype(np.int32), pa.int32(), mask=_mask(rng, rows, 0.01)),
            "x": pa.array(_dyadic(rng, rows, 100), pa.float64(), mask=_mask(rng, rows, 0.05)),
            "y": pa.array(rng.standard_normal(rows), pa.float64()),
            "s": words.take(pa.array(s_idx)),
        }
    )


def generate_big(root: Path, rows: int, group_rows: int, files: int) -> Dict[str, Path]:
    """One Parquet file of `rows` rows and the same rows over `files` files."""
    marker = root / f".generated-big-{rows}-{group_rows}-{files}"
    dirs = {"one": root / f"big_{rows}_1", "many": root / f"big_{rows}_{files}"}
    if marker.exists():
        return dirs
    t = big_table(rows)
    write_split(t, dirs["one"], 1, group_rows)
    write_split(t, dirs["many"], files, group_rows)
    marker.write_text("ok\n")
    return dirs


if __name__ == "__main__":  # handy for looking at the data by hand
    import sys

    out = Path(sys.argv[1] if len(sys.argv) > 1 else os.getcwd()) / "diff-data"
    print(generate(out).root)
