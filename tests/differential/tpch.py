"""TPC-H for the differential suite: the data, generated at test time by
`tpchgen-cli` (a TPC-H generator installed from PyPI, see scripts/setup.sh),
laid out in several ways, and the 22 queries of tests/differential/tpch/,
turned into specs whose fields are every output column of the query.

Layouts (the same rows each time; DuckDB reads `one`):

  one       one Parquet file per table, as the generator writes it
  eight     each table's rows, in the generator's order, cut into 8 files
  shuffled  each table's rows in a seeded random order, cut into 8 files of
            small row groups (DataFusion then splits scans by row group)

Fields: a string column is stored as `hash_bucket: 2^40` of its text, a date
as the integer yyyymmdd, integers as i64, and decimals and floats as f64.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from corpus import GLOBAL, F, Q
from tessera_run import SourceDecl

# Scale factor 0.1: 600k lineitem rows, and every query but the single-row
# ones answers with 2 to 2,762 rows (TESSERA_DIFF_TPCH_SF changes it).
SF = float(os.environ.get("TESSERA_DIFF_TPCH_SF", "0.1"))
TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
# The largest table a query reads is its `chunk: true` source (all 22 queries
# are global, so this must not change the answer).
BY_SIZE = ("lineitem", "orders", "partsupp", "customer", "part", "supplier", "nation", "region")
LAYOUTS = ("one", "eight", "shuffled")
PARTS = 8
SHUFFLE_SEED = 20240917
SMALL_ROW_GROUP = 1000
QUERY_DIR = Path(__file__).resolve().parent / "tpch"
STRING_BUCKETS = 1 << 40


def query_ids() -> List[str]:
    return sorted(p.stem for p in QUERY_DIR.glob("q*.sql"))


def tpchgen_binary() -> Optional[str]:
    """`tpchgen-cli` beside the running interpreter (a virtual environment's
    bin directory), else on PATH."""
    beside = Path(sys.executable).parent / "tpchgen-cli"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("tpchgen-cli")


@dataclass(frozen=True)
class TpchData:
    root: Path
    sf: float

    def source(self, layout: str, table: str, chunk: bool = False) -> SourceDecl:
        if layout == "one":
            return SourceDecl(str(self.root / "one" / f"{table}.parquet"), chunk=chunk)
        if layout in LAYOUTS:
            return SourceDecl(str(self.root / layout / table / "*.parquet"), chunk=chunk)
        raise ValueError(layout)

    def duck_views(self) -> Dict[str, str]:
        def lit(p: Path) -> str:
            return "'" + str(p).replace("'", "''") + "'"

        return {t: f"read_parquet({lit(self.root / 'one' / f'{t}.parquet')})" for t in TABLES}


def _write_parts(table: pa.Table, out_dir: Path, row_group_size: Optional[int]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, table.num_rows, PARTS + 1).astype(np.int64)
    for i in range(PARTS):
        part = table.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i]))
        # Tables smaller than PARTS rows (region) leave some files empty.
        pq.write_table(part, out_dir / f"part-{i}.parquet", row_group_size=row_group_size or None)


def generate(root: Path, sf: float = SF) -> TpchData:
    """The three layouts under `root`, made once (a marker file records that
    a complete set for this scale factor is there)."""
    data = TpchData(root, sf)
    marker = root / f".complete-sf{sf}"
    if marker.exists():
        return data
    exe = tpchgen_binary()
    if exe is None:
        raise RuntimeError("tpchgen-cli not found beside the Python interpreter or on PATH: "
                           "install it with `pip install tpchgen-cli` (scripts/setup.sh --test does)")
    if root.exists():
        shutil.rmtree(root)
    one = root / "one"
    proc = subprocess.run([exe, "parquet", "--scale-factor", str(sf), "--output-dir", str(one), "--quiet"],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"tpchgen-cli failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    for i, t in enumerate(TABLES):
        tbl = pq.read_table(one / f"{t}.parquet")
        _write_parts(tbl, root / "eight" / t, None)
        perm = np.random.default_rng(SHUFFLE_SEED + i).permutation(tbl.num_rows)
        # pyarrow's take has no string_view kernel (the generator writes
        # string_view): permute as string, then restore the schema.
        plain = pa.schema([pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else f.type, f.nullable,
                                    f.metadata) for f in tbl.schema], metadata=tbl.schema.metadata)
        shuffled = tbl.cast(plain).take(pa.array(perm)).cast(tbl.schema)
        _write_parts(shuffled, root / "shuffled" / t, SMALL_ROW_GROUP)
    marker.write_text("ok\n")
    return data


def _strip_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


def read_sql(qid: str, sf: float = SF) -> str:
    text = (QUERY_DIR / f"{qid}.sql").read_text()
    # Q11's FRACTION is 0.0001 / SF.
    return text.replace("{FRACTION}", repr(round(0.0001 / sf, 12))).strip().rstrip(";")


def tables_of(sql: str) -> Tuple[str, ...]:
    code = re.sub(r"'[^']*'", "''", _strip_comments(sql).lower())  # not words inside string literals
    words = set(re.findall(r"[a-z_0-9]+", code))
    return tuple(t for t in BY_SIZE if t in words)


def order_keys(sql: str) -> Tuple[Tuple[str, bool], ...]:
    """The top-level ORDER BY as (output column, descending) pairs. In these
    queries it is the last clause but LIMIT, and subqueries have none."""
    body = _strip_comments(sql).lower()
    at = body.rfind("order by")
    if at < 0:
        return ()
    clause = re.sub(r"\blimit\s+\d+\s*$", "", body[at + len("order by"):].strip()).strip()
    keys = []
    for item in clause.split(","):
        words = item.split()
        if not (1 <= len(words) <= 2) or not re.fullmatch(r"[a-z_][a-z_0-9]*", words[0]):
            raise ValueError(f"cannot read the ORDER BY item {item.strip()!r}")
        if len(words) == 2 and words[1] not in ("asc", "desc"):
            raise ValueError(f"cannot read the ORDER BY item {item.strip()!r}")
        keys.append((words[0], len(words) == 2 and words[1] == "desc"))
    return tuple(keys)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def field_for(name: str, typ: pa.DataType) -> F:
    """The field that stores output column `name` of Arrow type `typ` (as
    DuckDB types it; tessera must read DataFusion's type into the same)."""
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return F(name, "i64", hash=STRING_BUCKETS)
    if pa.types.is_date(typ):
        c = _quoted(name)
        expr = f"date_part('year', {c}) * 10000 + date_part('month', {c}) * 100 + date_part('day', {c})"
        return F(name, "i32", expr=expr, fill_null=-1)
    # DuckDB sums integers into HUGEINT, a decimal of scale 0 in Arrow.
    if pa.types.is_integer(typ) or (pa.types.is_decimal(typ) and typ.scale == 0):
        return F(name, "i64", fill_null=-1)
    if pa.types.is_decimal(typ) or pa.types.is_floating(typ):
        return F(name, "f64", fill_null=-1)
    raise ValueError(f"output column {name!r}: no field mapping for Arrow type {typ}")


@dataclass(frozen=True)
class TpchQuery:
    qid: str
    sql: str
    fields: Tuple[F, ...]
    order: Tuple[Tuple[str, bool], ...]
    tables: Tuple[str, ...]

    @property
    def q(self) -> Q:
        return Q(id=f"tpch_{self.qid}", sql=self.sql, fields=self.fields, plan=GLOBAL)

    def sources(self, data: TpchData, layout: str) -> Dict[str, SourceDecl]:
        return {t: data.source(layout, t, chunk=(t == self.tables[0])) for t in self.tables}

    def duck_order_by(self) -> str:
        return ", ".join(f'"__input".{_quoted(k)}' + (" DESC" if desc else " ASC") for k, desc in self.order)


def load_query(qid: str, con: "object", sf: float = SF) -> TpchQuery:
    """The query with a field for every output column, typed from DuckDB's
    schema of the answer (`con` is a DuckDB connection with the tables)."""
    sql = read_sql(qid, sf)
    schema = con.sql(f"SELECT * FROM ({sql}) AS t LIMIT 0").to_arrow_table().schema  # type: ignore[attr-defined]
    fields = tuple(field_for(f.name, f.type) for f in schema)
    order = order_keys(sql)
    names = {f.name for f in fields}
    for k, _ in order:
        if k not in names:
            raise ValueError(f"{qid}: ORDER BY key {k!r} is not an output column")
    return TpchQuery(qid, sql, fields, order, tables_of(sql))
