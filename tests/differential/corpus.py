"""The query corpus: each entry is a spec `query` (plus fields, and maybe a
spec `filter` and `split`), the SQL DuckDB runs for the same answer when its
dialect needs other text, and the plan tessera must choose.

SQL is written in the common subset of DataFusion and DuckDB: explicit NULLS
FIRST/LAST wherever order matters, total orders in windows and ORDER BY ...
LIMIT (ties broken by `id`), no integer `/` (DuckDB's is a float division),
no CAST of floats to integers (DuckDB rounds, DataFusion truncates), no
hashing of floats, booleans or dates (their text differs between engines).

Tables: fact (the chunked source), dimk (Parquet), dimc (CSV), dimu (NDJSON),
events (hive-partitioned, region/day partition columns, read as strings),
fcsv and fjson (the fact table's scalar columns as CSV and NDJSON files, the
chunked source of the queries that read them), fcsvq (fcsv with line breaks
inside some quoted strings).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

CHUNKED = "chunked"
GLOBAL = "global"
EITHER = "either"  # both plans are correct; the record checks decide

TABLES = ("fact", "dimk", "dimc", "dimu", "events", "fcsv", "fjson", "fcsvq")
# Tables whose files are cut (exactly one per query).
CUT_TABLES = ("fact", "events", "fcsv", "fjson", "fcsvq")


@dataclass(frozen=True)
class F:
    """One output field. `expr` is SQL over the query's output columns
    (default: the column named like the field). `hash` stores
    `hash_bucket: N` of the value's text; `length`/`pad` store a list."""

    name: str
    dtype: str
    expr: Optional[str] = None
    column: Optional[str] = None
    fill_null: Optional[float] = None
    hash: Optional[int] = None
    length: Optional[int] = None
    pad: Optional[float] = None
    standardize: bool = False

    @property
    def source_column(self) -> str:
        return self.column or self.name

    def select_sql(self) -> str:
        """The field's input as DuckDB evaluates it over the query's output."""
        if self.expr is not None:
            return f"({self.expr})"
        return '"' + self.source_column.replace('"', '""') + '"'


@dataclass(frozen=True)
class Split:
    key: str
    weights: Tuple[Tuple[str, float], ...] = (("train", 0.75), ("val", 0.25))


@dataclass(frozen=True)
class Q:
    id: str
    sql: str
    fields: Tuple[F, ...]
    plan: str
    duck: Optional[str] = None  # DuckDB's text, when it must differ
    filter: Optional[str] = None
    split: Optional[Split] = None
    shuffle: Optional[int] = None  # order: { shuffle_seed }
    note: str = ""

    @property
    def duck_sql(self) -> str:
        return self.duck if self.duck is not None else self.sql

    @property
    def tables(self) -> List[str]:
        text = self.sql + " " + (self.filter or "")
        return [t for t in TABLES if re.search(rf"\b{t}\b", text)]

    @property
    def cut_table(self) -> str:
        """The table whose files are cut: fact, events (hive), fcsv or fjson."""
        cut = [t for t in self.tables if t in CUT_TABLES]
        if len(cut) != 1:
            raise ValueError(f"{self.id}: reads {cut or 'none'} of {CUT_TABLES}; exactly one is cut")
        return cut[0]


def fs(*fields: F) -> Tuple[F, ...]:
    return tuple(fields)


ID = F("id", "i64")

QUERIES: List[Q] = [
    # ------------------------------------------------------------ row-local
    Q("projection", "SELECT id, k, x, y, n, c FROM fact",
      fs(ID, F("k", "i32", fill_null=-1), F("x", "f64", fill_null=0.25), F("y", "f32"),
         F("n", "i64", fill_null=7), F("c", "u8")), CHUNKED),
    Q("filter_in_query", "SELECT id, x * 2 + 1 AS x2, n FROM fact WHERE x > 0 AND n % 3 <> 0",
      fs(ID, F("x2", "f64"), F("n", "i64")), CHUNKED),
    Q("spec_filter", "SELECT id, k, s, x FROM fact",
      fs(ID, F("k", "i32", fill_null=-1), F("s", "i32", hash=1009), F("x", "f64", fill_null=0)),
      CHUNKED, filter="k IN (1, 2, 3) OR x < -150"),
    Q("case_when",
      "SELECT id, CASE WHEN x IS NULL THEN -1 WHEN x < 0 THEN 0 WHEN x < 100 THEN 1 ELSE 2 END AS bucket, "
      "CASE c WHEN 1 THEN 'one' WHEN 2 THEN 'two' ELSE 'many' END AS cname FROM fact",
      fs(ID, F("bucket", "i8"), F("cname", "i32", hash=97)), CHUNKED),
    Q("string_functions",
      "SELECT id, length(s) AS len, upper(s) AS up, lower(s) AS low, substr(s, 2, 3) AS sub, "
      "s || '-' || CAST(c AS VARCHAR) AS cat, strpos(s, 'a') AS pos, replace(s, 'a', 'A') AS rep, "
      "trim(concat('  ', s, ' ')) AS tr FROM fact",
      fs(ID, F("len", "i32", fill_null=-1), F("up", "i64", hash=1 << 40), F("low", "i64", hash=1 << 40),
         F("sub", "i64", hash=1 << 40), F("cat", "i64", hash=1 << 40), F("pos", "i32", fill_null=-1),
         F("rep", "i64", hash=1 << 40), F("tr", "i64", hash=1 << 40)), CHUNKED),
    Q("string_expr_fields", "SELECT id, s, c FROM fact",
      fs(ID, F("ls", "i32", expr="character_length(s)", fill_null=-1),
         F("left2", "i32", expr="left(s, 2)", hash=4096),
         F("sc", "i32", expr="concat(s, '#', CAST(c AS VARCHAR))", hash=65536)), CHUNKED,
      filter="s IS NOT NULL"),
    Q("date_arithmetic",
      "SELECT id, EXTRACT(YEAR FROM d) AS yr, EXTRACT(MONTH FROM d) AS mo, EXTRACT(DOW FROM d) AS dow, "
      "EXTRACT(DAY FROM d + INTERVAL '10 days') AS d10, EXTRACT(MONTH FROM d - INTERVAL '1 month') AS prev_mo, "
      "EXTRACT(HOUR FROM ts) AS hr, EXTRACT(EPOCH FROM ts) AS ep, "
      "EXTRACT(EPOCH FROM date_trunc('month', ts)) AS ep_month, "
      "EXTRACT(YEAR FROM CAST(ts AS DATE)) AS ts_year FROM fact",
      fs(ID, F("yr", "i32", fill_null=0), F("mo", "i32", fill_null=0), F("dow", "i32", fill_null=-1),
         F("d10", "i32", fill_null=-1), F("prev_mo", "i32", fill_null=-1), F("hr", "i32"), F("ep", "f64"),
         F("ep_month", "f64"), F("ts_year", "i32")), CHUNKED),
    Q("date_filter", "SELECT id, d, ts FROM fact WHERE d >= DATE '2022-03-01' AND d < DATE '2022-09-15'",
      fs(ID, F("dm", "i32", expr="EXTRACT(DAY FROM d)"), F("tsh", "f64", expr="EXTRACT(EPOCH FROM ts)")), CHUNKED,
      filter="ts > TIMESTAMP '2020-06-01 00:00:00'"),
    Q("math_and_coalesce",
      "SELECT id, COALESCE(n, 0) + COALESCE(k, 0) AS nk, abs(n) AS an, floor(y) AS fy, ceil(y) AS cy, "
      "sqrt(abs(y)) AS sq, ln(abs(y) + 1) AS lg, power(y, 2) AS p2, CAST(k AS BIGINT) * 1000 + c AS kc, "
      "round(y * 100) AS ry FROM fact",
      fs(ID, F("nk", "i64"), F("an", "i64", fill_null=-1), F("fy", "f64"), F("cy", "f64"), F("sq", "f64"),
         F("lg", "f64"), F("p2", "f64"), F("kc", "i64", fill_null=-1), F("ry", "f64")), CHUNKED),
    Q("join_parquet_dim", "SELECT f.id, f.x, dm.name, dm.weight, dm.tier FROM fact f JOIN dimk dm ON f.k = dm.k",
      fs(ID, F("x", "f64", fill_null=0), F("name", "i32", hash=100003), F("weight", "f32"),
         F("tier", "i64", fill_null=-1)), CHUNKED),
    Q("left_join_keeps_fact", "SELECT f.id, u.country, u.age, u.score FROM fact f LEFT JOIN dimu u ON f.u = u.u",
      fs(ID, F("country", "i16", hash=1000), F("age", "i32", fill_null=-1), F("score", "f64", fill_null=0)),
      CHUNKED),
    Q("join_csv_filtered",
      "SELECT f.id, c.label, c.factor * f.y AS fy FROM fact f JOIN dimc c ON f.c = c.c WHERE c.label <> 'gamma'",
      fs(ID, F("label", "i32", hash=7919), F("fy", "f64")), CHUNKED),
    Q("join_three_dims",
      "SELECT f.id, dm.weight * c.factor AS wf, u.age, c.label, dm.name FROM fact f "
      "JOIN dimk dm ON f.k = dm.k LEFT JOIN dimc c ON f.c = c.c LEFT JOIN dimu u ON f.u = u.u",
      fs(ID, F("wf", "f64"), F("age", "i32", fill_null=-1), F("label", "i32", hash=7919),
         F("name", "i32", hash=100003)), CHUNKED, filter="age IS NULL OR age > 30"),
    Q("semi_join_dim", "SELECT id, x FROM fact WHERE k IN (SELECT k FROM dimk WHERE tier = 1)",
      fs(ID, F("x", "f64", fill_null=0)), EITHER,
      note="an IN subquery over a dimension keeps fact rows one by one"),
    Q("anti_join_dim", "SELECT id, u FROM fact f WHERE NOT EXISTS (SELECT 1 FROM dimu du WHERE du.u = f.u)",
      fs(ID, F("u", "i64")), EITHER, note="NOT EXISTS over a dimension keeps fact rows one by one"),
    Q("unnest_list", "SELECT id, unnest(tags) AS tag FROM fact",
      fs(ID, F("tag", "i16")), CHUNKED),
    Q("list_field", "SELECT id, tags FROM fact",
      fs(ID, F("tags", "i32", length=4, pad=-99)), CHUNKED),
    Q("hive_partition_columns", "SELECT id, region, day, amount, k FROM events",
      fs(ID, F("region", "i32", hash=1 << 20), F("day", "i32", hash=1 << 20), F("amount", "f64", fill_null=0),
         F("k", "i32")), CHUNKED),
    Q("hive_partition_filter", "SELECT id, amount, s FROM events WHERE region = 'eu' AND day >= '2021-01-02'",
      fs(ID, F("amount", "f64", fill_null=0), F("s", "i32", hash=3001)), CHUNKED),
    Q("hive_spec_filter", "SELECT id, region, amount, k FROM events",
      fs(ID, F("region", "i32", hash=1 << 20), F("amount", "f64", fill_null=0), F("k", "i32")), CHUNKED,
      filter="region <> 'us' AND k < 20"),
    Q("split_row_local", "SELECT id, u, x, y FROM fact",
      fs(ID, F("u", "i64"), F("x", "f64", fill_null=0), F("ys", "f64", column="y", standardize=True)), CHUNKED,
      split=Split("u")),
    Q("pruned_id_range", "SELECT id, x, s FROM fact",
      fs(ID, F("x", "f64", fill_null=0), F("s", "i32", hash=1 << 20)), CHUNKED,
      filter="id >= 22500 AND id < 26700", note="row groups and files pruned by statistics; crosses a file"),
    Q("shuffled_join", "SELECT f.id, f.u, c.label FROM fact f JOIN dimc c ON f.c = c.c WHERE f.x > -100",
      fs(ID, F("u", "i64"), F("label", "i32", hash=7919)), CHUNKED, split=Split("u"), shuffle=7),
    Q("empty_result", "SELECT id, x FROM fact WHERE x > 1000", fs(ID, F("x", "f64")), CHUNKED),
    Q("csv_projection", "SELECT id, k, x, s, length(s) AS ls FROM fcsv",
      fs(ID, F("k", "i32", fill_null=-1), F("x", "f64", fill_null=0), F("s", "i32", hash=1 << 20),
         F("ls", "i32", fill_null=-1)), CHUNKED),
    Q("csv_join_filter", "SELECT f.id, f.y * c.factor AS v, c.label FROM fcsv f JOIN dimc c ON f.c = c.c WHERE f.n > 0",
      fs(ID, F("v", "f64"), F("label", "i32", hash=7919)), CHUNKED, filter="v > -20"),
    Q("csv_quoted_line_breaks", "SELECT id, s, length(s) AS ls, x FROM fcsvq",
      fs(ID, F("s", "i64", hash=1 << 40), F("ls", "i32", fill_null=-1), F("x", "f64", fill_null=0)), CHUNKED,
      note="a byte range that starts after a line break inside quotes starts mid-record"),
    Q("json_projection", "SELECT id, u, x, s FROM fjson WHERE k < 50",
      fs(ID, F("u", "i64"), F("x", "f64", fill_null=0), F("s", "i32", hash=1 << 20)), CHUNKED),
    Q("json_left_join", "SELECT f.id, dm.name, dm.weight FROM fjson f LEFT JOIN dimk dm ON f.k = dm.k",
      fs(ID, F("name", "i32", hash=100003), F("weight", "f64", fill_null=0)), CHUNKED),
    # --------------------------------------------------------------- global
    Q("union_all_duplicates", "SELECT c FROM fact UNION ALL SELECT c FROM dimc",
      fs(F("c", "i64")), GLOBAL),
    Q("shuffled_group_by", "SELECT u, COUNT(*) AS n, SUM(y) AS sy FROM fact GROUP BY u",
      fs(F("u", "i64"), F("n", "i64"), F("sy", "f64")), GLOBAL, shuffle=11),
    Q("group_by_empty", "SELECT k, COUNT(*) AS n FROM fact WHERE x > 1000 GROUP BY k",
      fs(F("k", "i32", fill_null=-1), F("n", "i64")), GLOBAL),
    Q("count_star_empty", "SELECT COUNT(*) AS n, COUNT(x) AS nx FROM fact WHERE x > 1000",
      fs(F("n", "i64"), F("nx", "i64")), GLOBAL),
    Q("csv_group_by", "SELECT s, COUNT(*) AS cnt, SUM(x) AS sx, AVG(y) AS ay FROM fcsv GROUP BY s",
      fs(F("s", "i32", hash=1 << 20), F("cnt", "i64"), F("sx", "f64", fill_null=0), F("ay", "f64")), GLOBAL),
    Q("csv_quoted_line_breaks_count", "SELECT COUNT(*) AS n, COUNT(DISTINCT s) AS ds, SUM(x) AS sx FROM fcsvq",
      fs(F("n", "i64"), F("ds", "i64"), F("sx", "f64")), GLOBAL),
    Q("json_window", "SELECT id, ROW_NUMBER() OVER (PARTITION BY c ORDER BY id) AS rn FROM fjson",
      fs(ID, F("rn", "i64")), GLOBAL),
    Q("json_count_distinct", "SELECT COUNT(DISTINCT s) AS ds, COUNT(*) AS n FROM fjson",
      fs(F("ds", "i64"), F("n", "i64")), GLOBAL),
    Q("group_by_count", "SELECT k, COUNT(*) AS n FROM fact GROUP BY k",
      fs(F("k", "i32", fill_null=-1), F("n", "i64")), GLOBAL),
    Q("group_by_aggregates",
      "SELECT c, COUNT(x) AS nx, SUM(x) AS sx, MIN(n) AS mn, MAX(n) AS mx, AVG(y) AS ay, SUM(y) AS sy, "
      "stddev_pop(y) AS sdy FROM fact GROUP BY c",
      fs(F("c", "i32"), F("nx", "i64"), F("sx", "f64"), F("mn", "i64"), F("mx", "i64"), F("ay", "f64"),
         F("sy", "f64"), F("sdy", "f64")), GLOBAL),
    Q("group_by_having", "SELECT k, s, COUNT(*) AS n, SUM(n) AS sn FROM fact GROUP BY k, s HAVING COUNT(*) > 5",
      fs(F("k", "i32", fill_null=-1), F("s", "i64", hash=1 << 40), F("n", "i64"), F("sn", "i64", fill_null=0)),
      GLOBAL),
    Q("group_by_spec_filter", "SELECT u, COUNT(*) AS n, SUM(x) AS sx FROM fact GROUP BY u",
      fs(F("u", "i64"), F("n", "i64"), F("sx", "f64", fill_null=0)), GLOBAL, filter="n >= 65"),
    Q("distinct", "SELECT DISTINCT k, c FROM fact",
      fs(F("k", "i32", fill_null=-1), F("c", "i32")), GLOBAL),
    Q("count_distinct", "SELECT COUNT(DISTINCT s) AS ds, COUNT(DISTINCT k) AS dk, COUNT(DISTINCT u) AS du FROM fact",
      fs(F("ds", "i64"), F("dk", "i64"), F("du", "i64")), GLOBAL),
    Q("count_star", "SELECT COUNT(*) AS n FROM fact", fs(F("n", "i64")), GLOBAL),
    Q("count_star_filtered", "SELECT COUNT(*) AS n, SUM(n) AS total, COUNT(d) AS nd, MIN(s) AS ms FROM fact WHERE x > 10",
      fs(F("n", "i64"), F("total", "i64"), F("nd", "i64"), F("ms", "i64", hash=1 << 40)), GLOBAL),
    Q("order_by_limit", "SELECT id, x FROM fact ORDER BY x DESC NULLS LAST, id LIMIT 100",
      fs(ID, F("x", "f64", fill_null=0)), GLOBAL),
    Q("order_by_limit_offset", "SELECT id, n FROM fact ORDER BY n NULLS FIRST, id DESC LIMIT 50 OFFSET 1500",
      fs(ID, F("n", "i64", fill_null=0)), GLOBAL),
    Q("window_row_number", "SELECT id, k, ROW_NUMBER() OVER (PARTITION BY k ORDER BY id) AS rn FROM fact",
      fs(ID, F("k", "i32", fill_null=-1), F("rn", "i64")), GLOBAL),
    Q("window_running_sum",
      "SELECT id, SUM(x) OVER (PARTITION BY c ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS rs "
      "FROM fact",
      fs(ID, F("rs", "f64", fill_null=0)), GLOBAL),
    Q("window_lag_rank",
      "SELECT id, LAG(n, 1) OVER (ORDER BY id) AS prev_n, "
      "RANK() OVER (PARTITION BY c ORDER BY k NULLS FIRST) AS rk FROM fact",
      fs(ID, F("prev_n", "i64", fill_null=0), F("rk", "i64")), GLOBAL),
    Q("scalar_subquery", "SELECT id, x - (SELECT AVG(x) FROM fact) AS dx FROM fact WHERE x IS NOT NULL",
      fs(ID, F("dx", "f64")), GLOBAL),
    Q("scalar_subquery_in_filter", "SELECT id, n FROM fact WHERE n > (SELECT AVG(n) FROM fact) + 500000000",
      fs(ID, F("n", "i64")), GLOBAL),
    Q("correlated_subquery", "SELECT id, k, x FROM fact f WHERE x = (SELECT MAX(x) FROM fact g WHERE g.k = f.k)",
      fs(ID, F("k", "i32"), F("x", "f64")), GLOBAL),
    Q("in_subquery_over_fact", "SELECT dm.k, dm.name FROM dimk dm WHERE dm.k IN (SELECT k FROM fact WHERE x > 190)",
      fs(F("k", "i32"), F("name", "i32", hash=100003)), GLOBAL),
    Q("not_exists_over_fact",
      "SELECT dm.k, dm.name FROM dimk dm WHERE NOT EXISTS (SELECT 1 FROM fact f WHERE f.k = dm.k)",
      fs(F("k", "i32"), F("name", "i32", hash=100003)), GLOBAL),
    # NOT IN over a nullable column: one NULL in the subquery empties the
    # answer (DataFusion's null-aware anti join, which must see the whole
    # subquery in one process), then the same with the NULLs filtered out.
    Q("not_in_over_nullable_fact", "SELECT dm.k, dm.name FROM dimk dm WHERE dm.k NOT IN (SELECT k FROM fact)",
      fs(F("k", "i32"), F("name", "i32", hash=100003)), GLOBAL),
    Q("not_in_over_fact",
      "SELECT dm.k, dm.name FROM dimk dm WHERE dm.k NOT IN (SELECT k FROM fact WHERE k IS NOT NULL AND x > 150)",
      fs(F("k", "i32"), F("name", "i32", hash=100003)), GLOBAL),
    Q("not_exists_self", "SELECT id, n FROM fact f WHERE NOT EXISTS (SELECT 1 FROM fact g WHERE g.id = f.id + 1)",
      fs(ID, F("n", "i64", fill_null=0)), GLOBAL),
    Q("dim_left_join_fact", "SELECT dm.k, dm.name, f.id FROM dimk dm LEFT JOIN fact f ON dm.k = f.k",
      fs(F("k", "i32"), F("name", "i32", hash=100003), F("id", "i64", fill_null=-1)), GLOBAL),
    Q("fact_right_join_dim", "SELECT f.id, dm.k AS dk, f.x FROM fact f RIGHT JOIN dimk dm ON f.k = dm.k",
      fs(F("id", "i64", fill_null=-1), F("dk", "i32"), F("x", "f64", fill_null=0)), GLOBAL),
    Q("full_outer_join", "SELECT c.c AS cc, f.id, c.label FROM dimc c FULL OUTER JOIN fact f ON c.c = f.c",
      fs(F("cc", "i32", fill_null=-1), F("id", "i64", fill_null=-1), F("label", "i32", hash=7919)), GLOBAL),
    Q("dim_left_join_count", "SELECT dm.k, COUNT(f.id) AS n FROM dimk dm LEFT JOIN fact f ON dm.k = f.k GROUP BY dm.k",
      fs(F("k", "i32"), F("n", "i64")), GLOBAL),
    Q("self_join", "SELECT a.id, b.x - a.x AS dx, b.s AS bs FROM fact a JOIN fact b ON b.id = a.id + 1",
      fs(ID, F("dx", "f64", fill_null=0), F("bs", "i32", hash=1 << 20)), GLOBAL),
    Q("union_all_fact_twice",
      "SELECT id, x AS v FROM fact WHERE k < 3 UNION ALL SELECT id, y AS v FROM fact WHERE k >= 150",
      fs(ID, F("v", "f64", fill_null=0)), GLOBAL),
    Q("union_all_with_dim",
      "SELECT id AS key, 0 AS src FROM fact WHERE c = 1 UNION ALL SELECT CAST(k AS BIGINT) AS key, 1 AS src FROM dimk",
      fs(F("key", "i64"), F("src", "u8")), GLOBAL),
    Q("union_distinct", "SELECT c FROM fact UNION SELECT c FROM dimc",
      fs(F("c", "i64")), GLOBAL),
    Q("three_table_group_by",
      "SELECT c.label, u.country, COUNT(*) AS n, SUM(f.x) AS sx FROM fact f "
      "JOIN dimc c ON f.c = c.c JOIN dimu u ON f.u = u.u GROUP BY c.label, u.country",
      fs(F("label", "i32", hash=7919), F("country", "i32", hash=7919), F("n", "i64"), F("sx", "f64", fill_null=0)),
      GLOBAL),
    Q("hive_group_by", "SELECT region, day, COUNT(*) AS n, SUM(amount) AS sa FROM events GROUP BY region, day",
      fs(F("region", "i32", hash=1 << 20), F("day", "i32", hash=1 << 20), F("n", "i64"), F("sa", "f64")),
      GLOBAL),
    Q("hive_distinct_filter", "SELECT DISTINCT region, k FROM events WHERE day = '2021-01-03'",
      fs(F("region", "i32", hash=1 << 20), F("k", "i32")), GLOBAL),
    Q("split_group_by", "SELECT u, COUNT(*) AS n, AVG(y) AS ay FROM fact GROUP BY u",
      fs(F("u", "i64"), F("n", "i64"), F("ay", "f64")), GLOBAL, split=Split("u")),
    Q("standardize_group_by", "SELECT k, AVG(x) AS ax, COUNT(*) AS n FROM fact GROUP BY k",
      fs(F("k", "i32", fill_null=-1), F("ax", "f64", fill_null=0, standardize=True), F("n", "i64")), GLOBAL),
]

BY_ID: Dict[str, Q] = {q.id: q for q in QUERIES}


def check_corpus(queries: Sequence[Q]) -> None:
    ids = [q.id for q in queries]
    assert len(ids) == len(set(ids)), "duplicate query ids"
    for q in queries:
        assert q.plan in (CHUNKED, GLOBAL, EITHER), q.id
        assert q.tables, f"{q.id}: names no table"
        q.cut_table  # noqa: B018 (raises on a bad mix)


check_corpus(QUERIES)
