"""The corpus, built by tessera and checked four ways per query:

1. the stored records, decoded independently, equal DuckDB's answer as a
   multiset (per split);
2. builds with 1, 2 and 4 threads are byte-identical;
3. the same rows as 1 file or 5 files give the same record sequence, and so
   does 1 file cut into row-group chunks (byte ranges for CSV and NDJSON) by
   `chunks: { target_bytes }`, which must then make more than one chunk;
4. `tessera build --json` reports the plan: "chunked" for row-local queries,
   "global" (with a non-empty "plan_reason") for the others.
"""

from __future__ import annotations

import numpy as np
import pytest

from compare import multiset_mismatch
from corpus import CHUNKED, EITHER, GLOBAL, QUERIES, Q
from oracle import DuckOracle, split_names
from tessera_run import Build, Builder, fingerprint_diff

THREADS = (1, 2, 4)
IDS = [q.id for q in QUERIES]


def test_corpus_covers_what_issue_8_names() -> None:
    """At least 30 queries, global and chunked, every category present."""
    assert len(QUERIES) >= 30
    ids = set(IDS)
    for needed in ("group_by_count", "distinct", "count_star", "order_by_limit", "window_row_number",
                   "scalar_subquery", "not_exists_over_fact", "dim_left_join_fact", "self_join",
                   "union_all_fact_twice", "projection", "filter_in_query", "join_parquet_dim",
                   "left_join_keeps_fact", "join_three_dims", "case_when", "date_arithmetic",
                   "string_functions", "hive_partition_columns", "hive_partition_filter", "spec_filter"):
        assert needed in ids, needed
    plans = {q.plan for q in QUERIES}
    assert {CHUNKED, GLOBAL} <= plans


def _check_against_oracle(q: Q, b: Build, duck: DuckOracle) -> None:
    expected = duck.expected(q)
    got_names = [n for n, _, _ in b.shards.splits()]
    assert got_names == list(split_names(q)), f"splits {got_names}, expected {list(split_names(q))}"
    problems = []
    for name in got_names:
        recs = b.shards.split_records(name)
        actual = b.shards.decoded(recs)
        msg = multiset_mismatch(actual, expected.splits[name], q.fields)
        if msg:
            problems.append(f"split {name!r}: {msg}")
    assert not problems, f"{q.id}: tessera's records differ from DuckDB's answer\n" + "\n".join(problems)


@pytest.mark.parametrize("q", QUERIES, ids=IDS)
def test_records_match_duckdb(q: Q, builder: Builder, duck: DuckOracle) -> None:
    _check_against_oracle(q, builder.get(q, "many", 2), duck)


@pytest.mark.parametrize("q", QUERIES, ids=IDS)
def test_thread_counts_give_identical_bytes(q: Q, builder: Builder) -> None:
    builds = {t: builder.get(q, "many", t) for t in THREADS}
    base = builds[THREADS[0]].shards.fingerprint()
    diffs = []
    for t in THREADS[1:]:
        d = fingerprint_diff(base, builds[t].shards.fingerprint())
        if d:
            diffs.append(f"--threads {THREADS[0]} vs --threads {t}: " + "; ".join(d))
    assert not diffs, f"{q.id}: artifacts differ between thread counts\n" + "\n".join(diffs)


def _same_sequence(q: Q, a: Build, b: Build, what: str) -> None:
    da = a.shards.record_stream_digest()
    db = b.shards.record_stream_digest()
    if da == db:
        return
    lines = []
    for name in sorted(set(da) | set(db)):
        ra, rb = da.get(name), db.get(name)
        if ra == rb:
            continue
        ca = ra[0] if ra else None
        cb = rb[0] if rb else None
        line = f"split {name!r}: {ca} vs {cb} rows"
        if ca == cb and ca:
            line += ", " + _how_sequences_differ(q, a.shards.split_records(name), b.shards.split_records(name), a, b)
        lines.append(line)
    raise AssertionError(f"{q.id}: {what}: record sequences differ\n" + "\n".join(lines))


def _how_sequences_differ(q: Q, ra: np.ndarray, rb: np.ndarray, a: Build, b: Build) -> str:
    """Same records in another order, or other values (which fields, by how much)."""
    diff_rows = np.nonzero((ra != rb).any(axis=1))[0]
    first = int(diff_rows[0])
    va = ra.view(np.dtype((np.void, ra.shape[1]))).ravel()
    vb = rb.view(np.dtype((np.void, rb.shape[1]))).ravel()
    if np.array_equal(np.sort(va), np.sort(vb)):
        return f"the same records in another order ({len(diff_rows)} positions differ, first at record {first})"
    fa, fb = a.shards.decoded(ra), b.shards.decoded(rb)
    parts = []
    for f in q.fields:
        x, y = fa[f.name], fb[f.name]
        neq = (x != y).reshape(len(x), -1).any(axis=1)
        if neq.any():
            part = f"{f.name}: {int(neq.sum())} rows"
            if x.dtype.kind == "f":
                rel = np.abs(x.astype(np.float64) - y) / np.maximum(np.abs(y.astype(np.float64)), 1e-300)
                part += f" (max relative difference {float(np.nanmax(rel)):.2e})"
            parts.append(part)
    return f"other values, first at record {first}: " + "; ".join(parts)


@pytest.mark.parametrize("q", QUERIES, ids=IDS)
def test_one_file_and_five_files_give_same_records(q: Q, builder: Builder) -> None:
    _same_sequence(q, builder.get(q, "many", 2), builder.get(q, "one", 2),
                   f"{q.cut_table} as several files vs as one file")


@pytest.mark.parametrize("q", QUERIES, ids=IDS)
def test_row_group_chunks_give_same_records(q: Q, builder: Builder) -> None:
    chunked = builder.get(q, "one_chunked", 2)
    _same_sequence(q, builder.get(q, "many", 2), chunked,
                   f"{q.cut_table} as several files vs one file cut by chunks.target_bytes")
    if chunked.report.get("plan") == CHUNKED and q.cut_table != "events":
        # Otherwise the comparison above would hold trivially. (A hive
        # partition's files are smaller than the target, so they may group.)
        n = chunked.report.get("chunks")
        assert isinstance(n, int) and n >= 2, f"{q.id}: one file with chunks.target_bytes was cut into {n!r} chunk(s)"


@pytest.mark.parametrize("q", QUERIES, ids=IDS)
def test_plan_is_reported(q: Q, builder: Builder) -> None:
    report = builder.get(q, "many", 2).report
    plan = report.get("plan")
    assert plan in (CHUNKED, GLOBAL), f"{q.id}: build --json has plan={plan!r}, want 'chunked' or 'global'"
    if q.plan != EITHER:
        assert plan == q.plan, f"{q.id}: plan {plan!r}, expected {q.plan!r} (reason: {report.get('plan_reason')!r})"
    if plan == GLOBAL:
        reason = report.get("plan_reason")
        assert isinstance(reason, str) and reason.strip(), f"{q.id}: global plan without a plan_reason ({reason!r})"


# Global queries whose only order-sensitive parts were float SUM/AVG: they now
# run in all partitions (exact sums), so the build must not fall back to one.
PARALLEL_FLOAT_SUMS = ("shuffled_group_by", "csv_group_by", "csv_quoted_line_breaks_count",
                       "group_by_spec_filter", "split_group_by", "standardize_group_by")


@pytest.mark.parametrize("qid", PARALLEL_FLOAT_SUMS)
def test_float_sums_run_in_all_partitions(qid: str, builder: Builder) -> None:
    q = next(x for x in QUERIES if x.id == qid)
    report = builder.get(q, "many", 2).report
    assert report.get("plan") == GLOBAL, f"{qid}: plan {report.get('plan')!r}"
    assert report.get("plan_serial") is None, \
        f"{qid}: ran in one partition because of {report.get('plan_serial')!r}"


def test_float_sums_are_the_exactly_rounded_sums(builder: Builder, duck: DuckOracle) -> None:
    """SUM(y) per group equals math.fsum (the correctly rounded sum, computed
    here from the rows DuckDB reads) bit for bit, whatever the thread count:
    not merely close, as an engine adding in row order would be."""
    import math
    q = next(x for x in QUERIES if x.id == "shuffled_group_by")
    rows = duck.con.execute("SELECT u, y FROM fact WHERE y IS NOT NULL").fetchall()
    groups: dict = {}
    for u, y in rows:
        groups.setdefault(u, []).append(y)
    want = {u: math.fsum(ys) for u, ys in groups.items()}
    assert any(math.fsum(ys) != sum(ys) for ys in groups.values()), \
        "the data must have a group whose naive sum is not the exact one"
    for threads in THREADS:
        fields = builder.get(q, "many", threads).shards.decoded()
        got = dict(zip(fields["u"].tolist(), fields["sy"].tolist()))
        bad = [(u, got.get(u), w) for u, w in want.items() if got.get(u) != w]
        assert not bad, f"--threads {threads}: {len(bad)} group sums are not exact, e.g. {bad[:3]}"
