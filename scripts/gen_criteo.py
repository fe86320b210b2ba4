#!/usr/bin/env python3
"""Generate a deterministic, Criteo-like click log as Parquet files.

The output imitates the Criteo display-advertising logs closely enough to
exercise a dataset compiler and to show learning in a small model:

    label    int32    0/1 click, about 25% positive, driven by a hidden
                      per-row propensity that also shapes I- and C-columns
    I1..I13  int64    heavy-tailed counts (log-normal), 5-20% nulls per
                      column; I2 also takes the values -1, -2, -3 as in Criteo
    C1..C26  string   8-hex-digit tokens drawn with Zipf-like frequencies from
                      per-column vocabularies of 3 to 200,000 values; some
                      columns have nulls; several carry click signal
    day      int32    0..23; the default `--sort-by day` orders all rows by
                      day across and within files, so Parquet row-group
                      statistics let a `day >= 14` filter skip row groups
    id       int64    global row number 0..rows-1 (unique, a split key)

`day >= 14` keeps about 40% of the rows (the exact fraction is printed).

Same arguments give byte-identical files: every random draw comes from a
generator seeded by (seed, purpose, file index), and the Parquet writer puts
no timestamp in the file. Files are generated one at a time, so memory stays
around a few hundred MB whatever `--rows` is.

Files are named part-00000.parquet, ...; a `_generator.json` beside them
records the arguments and per-file row counts (pyarrow.dataset and most
readers skip names starting with `_`).

Example:
    python scripts/gen_criteo.py --rows 2000000 --files 8 --out data/criteo
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO_ROOT = Path(__file__).resolve().parent.parent
N_DAYS = 24
FILTER_DAY_MIN = 14  # the selectivity reported after generation is for day >= this

# Dense columns: (log-scale mean, log-scale sigma, correlation with the
# propensity, null rate). value = max(floor(exp(mu + sigma * latent)) - 1, 0).
DENSE_PARAMS = [
    (0.8, 1.3, 0.45, 0.18),   # I1
    (1.5, 1.6, 0.10, 0.05),   # I2 (also negatives, see below)
    (1.9, 1.4, -0.25, 0.12),  # I3
    (1.4, 1.1, 0.30, 0.15),   # I4
    (7.5, 2.0, -0.15, 0.06),  # I5: large counts, like Criteo's I5
    (3.0, 1.8, 0.05, 0.11),   # I6
    (1.6, 1.7, 0.35, 0.07),   # I7
    (2.6, 1.2, 0.00, 0.05),   # I8
    (4.2, 1.5, 0.20, 0.09),   # I9
    (0.3, 0.8, 0.40, 0.20),   # I10: mostly 0..3
    (0.9, 1.0, 0.30, 0.08),   # I11
    (0.1, 1.4, -0.30, 0.19),  # I12
    (1.8, 1.3, 0.15, 0.10),   # I13
]

# Categorical columns: (vocabulary size, Zipf exponent, null rate, click
# signal scale). Rank 0 is the most frequent token of a column.
CAT_PARAMS = [
    (1_400, 1.10, 0.00, 0.6),    # C1
    (550, 1.05, 0.00, 0.0),      # C2
    (200_000, 1.05, 0.03, 0.4),  # C3
    (80_000, 1.10, 0.03, 0.0),   # C4
    (300, 1.20, 0.00, 0.3),      # C5
    (24, 1.30, 0.10, 0.0),       # C6
    (12_000, 1.05, 0.00, 0.0),   # C7
    (630, 1.15, 0.00, 0.0),      # C8
    (3, 1.50, 0.00, 0.2),        # C9
    (40_000, 1.05, 0.00, 0.0),   # C10
    (5_600, 1.10, 0.00, 0.5),    # C11
    (150_000, 1.05, 0.03, 0.0),  # C12
    (3_200, 1.10, 0.00, 0.0),    # C13
    (27, 1.20, 0.00, 0.3),       # C14
    (14_000, 1.05, 0.00, 0.0),   # C15
    (120_000, 1.05, 0.03, 0.4),  # C16
    (10, 1.40, 0.00, 0.0),       # C17
    (5_000, 1.10, 0.00, 0.0),    # C18
    (2_100, 1.10, 0.40, 0.3),    # C19
    (4, 1.50, 0.40, 0.0),        # C20
    (100_000, 1.05, 0.03, 0.0),  # C21
    (18, 1.30, 0.75, 0.0),       # C22
    (15, 1.30, 0.00, 0.3),       # C23
    (60_000, 1.05, 0.03, 0.0),   # C24
    (100, 1.20, 0.40, 0.2),      # C25
    (45_000, 1.05, 0.40, 0.0),   # C26
]

TARGET_CTR = 0.25
PROPENSITY_WEIGHT = 1.1

# Stream identifiers for the seeded generators, so that adding a column or a
# purpose never shifts the draws of another.
STREAM_EFFECTS = 1
STREAM_CALIBRATION = 2
STREAM_BLOCK = 3

# Rows are drawn in fixed blocks of global row ids, each from its own seeded
# generator: the values of a row depend on (seed, rows, sort-by) only, not on
# how the rows are cut into files and row groups, and memory stays bounded.
BLOCK_ROWS = 65_536


def schema() -> pa.Schema:
    fields = [pa.field("label", pa.int32(), nullable=False)]
    fields += [pa.field(f"I{j}", pa.int64()) for j in range(1, 14)]
    fields += [pa.field(f"C{j}", pa.string()) for j in range(1, 27)]
    fields += [pa.field("day", pa.int32(), nullable=False), pa.field("id", pa.int64(), nullable=False)]
    return pa.schema(fields)


def mix32(x: np.ndarray) -> np.ndarray:
    """An invertible 32-bit integer mix (xorshift-multiply), so distinct inputs give distinct tokens."""
    x = x.astype(np.uint32)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def hex_tokens(values: np.ndarray) -> pa.Array:
    """Format uint32 values as 8-character lowercase hex strings, without a Python loop."""
    n = len(values)
    shifts = np.arange(28, -1, -4, dtype=np.uint32)
    nibbles = (values[:, None] >> shifts[None, :]) & np.uint32(0xF)
    chars = _HEX[nibbles].reshape(-1)
    offsets = np.arange(0, 8 * n + 1, 8, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())])


def day_weights() -> np.ndarray:
    """Relative traffic per day: a weekly cycle around a flat level."""
    d = np.arange(N_DAYS)
    w = 1.0 + 0.12 * np.sin(2 * np.pi * d / 7.0)
    return w / w.sum()


def day_boundaries(rows: int) -> np.ndarray:
    """First global row of each day 1..23 when rows are sorted by day."""
    return np.round(np.cumsum(day_weights())[:-1] * rows).astype(np.int64)


class Vocabularies:
    """Per-column tokens and click effects; shared by all files."""

    def __init__(self, seed: int):
        self.tokens: list[pa.Array] = []
        self.effects: list[np.ndarray | None] = []
        for c, (size, _s, _null, scale) in enumerate(CAT_PARAMS):
            ranks = np.arange(size, dtype=np.uint32)
            self.tokens.append(hex_tokens(mix32((np.uint32(c + 1) << np.uint32(24)) | ranks)))
            if scale > 0:
                rng = np.random.default_rng([seed, STREAM_EFFECTS, c])
                self.effects.append(rng.normal(0.0, scale, size))
            else:
                self.effects.append(None)

    @staticmethod
    def draw(rng: np.random.Generator, c: int, n: int) -> np.ndarray:
        """Ranks with P(rank k) roughly proportional to (k + 1) ** -s.

        Inverse CDF of the continuous power law on [1, size + 1), floored:
        a closed form, several times faster than a search in the discrete CDF.
        """
        size, s = CAT_PARAMS[c][0], CAT_PARAMS[c][1]
        a = 1.0 - s
        top = (size + 1.0) ** a - 1.0
        x = np.power(1.0 + rng.random(n) * top, 1.0 / a)
        return np.clip(x.astype(np.int64) - 1, 0, size - 1).astype(np.int32)


def draw_latent(rng: np.random.Generator, vocab: Vocabularies, n: int):
    """Propensity z, category ranks per column, and the click logit without intercept."""
    z = rng.standard_normal(n)
    ranks = [vocab.draw(rng, c, n) for c in range(len(CAT_PARAMS))]
    logit = PROPENSITY_WEIGHT * z
    for c, eff in enumerate(vocab.effects):
        if eff is not None:
            logit += eff[ranks[c]]
    return z, ranks, logit


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def calibrate_intercept(seed: int, vocab: Vocabularies) -> float:
    """Intercept giving a TARGET_CTR click rate, found by bisection on a fixed sample."""
    rng = np.random.default_rng([seed, STREAM_CALIBRATION])
    _z, _ranks, logit = draw_latent(rng, vocab, 200_000)
    lo, hi = -10.0, 10.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sigmoid(logit + mid).mean() < TARGET_CTR:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def day_effect(day: np.ndarray) -> np.ndarray:
    """Slow click-rate drift over the days, so later days differ a little."""
    return 0.015 * (day - N_DAYS / 2)


def generate_block(
    seed: int, block: int, total_rows: int, sort_by: str, vocab: Vocabularies, intercept: float,
) -> pa.Table:
    """Rows with ids block * BLOCK_ROWS .. (block + 1) * BLOCK_ROWS - 1 (fewer in the last block)."""
    first_row = block * BLOCK_ROWS
    n = min(BLOCK_ROWS, total_rows - first_row)
    rng = np.random.default_rng([seed, STREAM_BLOCK, block])
    z, ranks, logit = draw_latent(rng, vocab, n)

    rows = np.arange(first_row, first_row + n, dtype=np.int64)
    if sort_by == "day":
        day = np.searchsorted(day_boundaries(total_rows), rows, side="right").astype(np.int32)
    else:
        day = rng.choice(N_DAYS, size=n, p=day_weights()).astype(np.int32)

    p = sigmoid(logit + intercept + day_effect(day))
    label = (rng.random(n) < p).astype(np.int32)

    columns: dict[str, pa.Array] = {"label": pa.array(label)}
    for j, (mu, sigma, rho, null_rate) in enumerate(DENSE_PARAMS, start=1):
        latent = rho * z + np.sqrt(1.0 - rho * rho) * rng.standard_normal(n)
        values = np.maximum(np.floor(np.exp(mu + sigma * latent)) - 1.0, 0.0).astype(np.int64)
        if j == 2:
            # Criteo's I2 has a few negative values (-1 mostly, rarely -2, -3).
            neg = rng.random(n)
            values = np.where(neg < 0.08, -1, values)
            values = np.where(neg < 0.012, -2, values)
            values = np.where(neg < 0.004, -3, values)
        nulls = rng.random(n) < null_rate
        columns[f"I{j}"] = pa.array(values, type=pa.int64(), mask=nulls)
    for c, (_size, _s, null_rate, _scale) in enumerate(CAT_PARAMS):
        nulls = rng.random(n) < null_rate if null_rate > 0 else None
        idx = pa.array(ranks[c], type=pa.int32(), mask=nulls)
        columns[f"C{c + 1}"] = vocab.tokens[c].take(idx)
    columns["day"] = pa.array(day)
    columns["id"] = pa.array(rows)
    return pa.Table.from_pydict(columns, schema=schema())


def file_ranges(rows: int, files: int) -> list[tuple[int, int]]:
    bounds = [rows * k // files for k in range(files + 1)]
    return [(bounds[k], bounds[k + 1] - bounds[k]) for k in range(files)]


class FileWriter:
    """Writes one Parquet file from row pieces, one row group per `row_group_size` rows.

    The file is written under a temporary name and renamed when complete.
    No option of this writer stores a time; `created_by` names only the
    library version, so equal rows give equal bytes.
    """

    def __init__(self, path: Path, row_group_size: int, compression: str | None):
        self.path = path
        self.tmp = path.with_name(path.name + ".tmp")
        self.row_group_size = row_group_size
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.writer = pq.ParquetWriter(
            self.tmp, schema(), compression=compression, write_statistics=True,
            write_page_index=True, version="2.6",
        )

    def write(self, piece: pa.Table) -> None:
        self.pending.append(piece)
        self.pending_rows += piece.num_rows
        while self.pending_rows >= self.row_group_size:
            self._flush(self.row_group_size)

    def _flush(self, n: int) -> None:
        table = pa.concat_tables(self.pending).combine_chunks()
        self.writer.write_table(table.slice(0, n), row_group_size=n)
        rest = table.slice(n)
        self.pending = [rest] if rest.num_rows else []
        self.pending_rows = rest.num_rows

    def close(self) -> None:
        if self.pending_rows:
            self._flush(self.pending_rows)
        self.writer.close()
        os.replace(self.tmp, self.path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Schema: label int32; I1..I13 int64 (nullable); C1..C26 string (8 hex digits, some null); "
        "day int32 0..23; id int64. `day >= 14` keeps about 40% of rows.",
    )
    ap.add_argument("--rows", type=int, default=2_000_000, help="total rows (default 2000000)")
    ap.add_argument("--files", type=int, default=8, help="number of Parquet files (default 8)")
    ap.add_argument("--row-group-size", type=int, default=131_072, help="rows per row group (default 131072)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "data" / "criteo",
                    help="output directory (default <repo>/data/criteo)")
    ap.add_argument("--sort-by", choices=["day", "none"], default="day",
                    help="'day' (default): rows ordered by day so row-group statistics prune day filters; "
                    "'none': days drawn at random per row")
    ap.add_argument("--compression", default="snappy",
                    choices=["snappy", "zstd", "gzip", "lz4", "brotli", "none"],
                    help="Parquet compression codec (default snappy)")
    ap.add_argument("--quiet", action="store_true", help="print only the summary line")
    args = ap.parse_args(argv)
    if args.rows < 1:
        ap.error(f"--rows must be at least 1, got {args.rows}")
    if not 1 <= args.files <= args.rows:
        ap.error(f"--files must be between 1 and --rows ({args.rows}), got {args.files}")
    if args.row_group_size < 1:
        ap.error(f"--row-group-size must be at least 1, got {args.row_group_size}")
    if args.seed < 0:
        ap.error(f"--seed must be non-negative, got {args.seed}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: Path = args.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"gen_criteo: cannot create output directory {out}: {e}", file=sys.stderr)
        return 1

    t0 = time.perf_counter()
    vocab = Vocabularies(args.seed)
    intercept = calibrate_intercept(args.seed, vocab)
    compression = None if args.compression == "none" else args.compression

    names = [f"part-{k:05d}.parquet" for k in range(args.files)]
    for stale in sorted(out.glob("part-*.parquet")):
        if stale.name not in names:
            stale.unlink()

    positives = 0
    kept = 0
    per_file = []
    cached: tuple[int, pa.Table] | None = None  # a block straddling two files is drawn once
    for k, (first, n) in enumerate(file_ranges(args.rows, args.files)):
        path = out / names[k]
        try:
            writer = FileWriter(path, args.row_group_size, compression)
            for block in range(first // BLOCK_ROWS, (first + n - 1) // BLOCK_ROWS + 1):
                if cached is None or cached[0] != block:
                    cached = (block, generate_block(args.seed, block, args.rows, args.sort_by, vocab, intercept))
                table = cached[1]
                lo = max(first - block * BLOCK_ROWS, 0)
                hi = min(first + n - block * BLOCK_ROWS, table.num_rows)
                piece = table.slice(lo, hi - lo)
                positives += int(np.asarray(piece.column("label")).sum())
                kept += int((np.asarray(piece.column("day")) >= FILTER_DAY_MIN).sum())
                writer.write(piece)
            writer.close()
        except OSError as e:
            print(f"gen_criteo: cannot write {path}: {e}", file=sys.stderr)
            return 1
        per_file.append({"file": names[k], "first_id": first, "rows": n})
        if not args.quiet:
            print(f"  {path}  rows {first}..{first + n - 1}  {path.stat().st_size / 2**20:.1f} MiB",
                  file=sys.stderr)

    meta = {
        "generator": "scripts/gen_criteo.py",
        "rows": args.rows, "files": args.files, "row_group_size": args.row_group_size,
        "seed": args.seed, "sort_by": args.sort_by, "compression": args.compression,
        "positive_rate": positives / args.rows,
        "filter": f"day >= {FILTER_DAY_MIN}", "filter_selectivity": kept / args.rows,
        "per_file": per_file,
    }
    (out / "_generator.json").write_text(json.dumps(meta, indent=2) + "\n")
    elapsed = time.perf_counter() - t0
    size = sum((out / n).stat().st_size for n in names)
    print(f"gen_criteo: wrote {args.rows} rows in {args.files} files ({size / 2**20:.1f} MiB) to {out} "
          f"in {elapsed:.1f}s; positive rate {positives / args.rows:.3f}; "
          f"day >= {FILTER_DAY_MIN} keeps {kept / args.rows:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
