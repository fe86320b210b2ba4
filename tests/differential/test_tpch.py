"""TPC-H's 22 queries, built by tessera over generated data and checked
against DuckDB (tpch.py says how the data, layouts and fields are made):

1. in every layout, the stored records equal DuckDB's answer as a multiset
   (integers and hashed strings exactly, decimals and floats within a
   relative 1e-12), and a query with ORDER BY is stored in DuckDB's order of
   its sort keys (ties may be stored in either order);
2. builds with 1 and 2 threads are byte-identical (shuffled layout);
3. the three layouts give the same record sequence: a global query's stored
   order is a function of the data, and every aggregate here is exact
   (decimal sums, counts, AVG of a decimal), so not even the row order of
   the shuffled layout may change a byte;
4. the plan is global (every query aggregates, sorts or limits).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

from compare import multiset_mismatch
from corpus import GLOBAL, F
from oracle import DuckOracle
from conftest import TpchBuilder
from tessera_run import fingerprint_diff, run_staged
from tpch import LAYOUTS, SF, TpchQuery, order_keys, query_ids, tables_of

IDS = query_ids()
RTOL = {"f64": 1e-12}


def test_tpch_has_the_22_queries(tpch_queries: Dict[str, TpchQuery]) -> None:
    assert IDS == [f"q{i:02d}" for i in range(1, 23)]
    # The queries without ORDER BY are the single-row ones.
    assert sorted(qid for qid, tq in tpch_queries.items() if not tq.order) == ["q06", "q14", "q17", "q19"]


def test_order_keys_and_tables_are_read_from_the_sql() -> None:
    sql = "select a, b, c from t, u -- order by x\nwhere s = 'orders' order by a desc, b,\n c asc limit 10"
    assert order_keys(sql) == (("a", True), ("b", False), ("c", False))
    assert order_keys("select count(*) from lineitem") == ()
    with pytest.raises(ValueError):
        order_keys("select a from t order by a + 1")
    assert tables_of("select * from lineitem l1, part where p_name like '%orders%' -- supplier") == (
        "lineitem", "part")


def test_order_mismatch_sees_a_swap_and_not_equal_keys() -> None:
    keys = [F("k", "i64"), F("x", "f64")]
    duck = {"k": np.array([1, 1, 2, 3]), "x": np.array([5.0, 5.0, 1.0, 0.5])}
    same = {"k": np.array([1, 1, 2, 3]), "x": np.array([5.0, 5.0 * (1 + 1e-13), 1.0, 0.5])}
    swapped = {"k": np.array([1, 2, 1, 3]), "x": np.array([5.0, 1.0, 5.0, 0.5])}
    off = {"k": np.array([1, 1, 2, 3]), "x": np.array([5.0, 5.0, 1.0 + 1e-9, 0.5])}
    assert order_mismatch(same, duck, keys) == ""
    assert "at 2 of 4 stored positions; first at record 1" in order_mismatch(swapped, duck, keys)
    assert "first at record 2" in order_mismatch(off, duck, keys)


def _key_row(cols: Dict[str, np.ndarray], keys: List[F], r: int) -> Tuple:
    return tuple(float(cols[f.name][r]) if f.dtype == "f64" else int(cols[f.name][r]) for f in keys)


def order_mismatch(actual: Dict[str, np.ndarray], expected: Dict[str, np.ndarray], keys: List[F]) -> str:
    """'' when the stored sequence of sort keys is DuckDB's, else where not."""
    n = len(next(iter(actual.values())))
    if n != len(next(iter(expected.values()))):
        return ""  # the multiset check reports the counts
    bad = np.zeros(n, dtype=bool)
    for f in keys:
        a, e = actual[f.name].reshape(n), expected[f.name].reshape(n)
        if f.dtype == "f64":
            ok = np.isclose(a, e, rtol=RTOL["f64"], atol=0.0) & np.isclose(e, a, rtol=RTOL["f64"], atol=0.0)
        else:
            ok = a.astype(np.int64) == e.astype(np.int64)
        bad |= ~ok
    if not bad.any():
        return ""
    r = int(np.argmax(bad))
    names = tuple(f.name for f in keys)
    return (f"sort keys {names} differ at {int(bad.sum())} of {n} stored positions; first at record {r}:\n"
            f"    tessera {_key_row(actual, keys, r)}\n    DuckDB  {_key_row(expected, keys, r)}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("qid", IDS)
def test_tpch_matches_duckdb(qid: str, layout: str, tpch_queries: Dict[str, TpchQuery], tpch_duck: DuckOracle,
                             tpch_builder: TpchBuilder) -> None:
    tq = tpch_queries[qid]
    b = tpch_builder.get(tq, layout)
    expected = tpch_duck.expected(tq.q, order_by=tq.duck_order_by() or None).splits["all"]
    assert [n for n, _, _ in b.shards.splits()] == ["all"]
    actual = b.shards.decoded(b.shards.split_records("all"))
    problems = []
    msg = multiset_mismatch(actual, expected, tq.fields, rtol=RTOL)
    if msg:
        problems.append(msg)
    if tq.order:
        by_name = {f.name: f for f in tq.fields}
        msg = order_mismatch(actual, expected, [by_name[k] for k, _ in tq.order])
        if msg:
            problems.append(msg)
    assert not problems, (f"TPC-H {qid} (SF {SF}, layout {layout}): tessera's records differ from DuckDB's\n"
                          + "\n".join(problems))


@pytest.mark.parametrize("qid", IDS)
def test_tpch_thread_counts_give_identical_bytes(qid: str, tpch_queries: Dict[str, TpchQuery],
                                                 tpch_builder: TpchBuilder) -> None:
    tq = tpch_queries[qid]
    one = tpch_builder.get(tq, "shuffled", 1).shards.fingerprint()
    two = tpch_builder.get(tq, "shuffled", 2).shards.fingerprint()
    d = fingerprint_diff(one, two)
    assert not d, f"TPC-H {qid}: --threads 1 and --threads 2 give different artifacts: " + "; ".join(d)


@pytest.mark.parametrize("qid", IDS)
def test_tpch_layouts_give_same_records(qid: str, tpch_queries: Dict[str, TpchQuery],
                                        tpch_builder: TpchBuilder) -> None:
    tq = tpch_queries[qid]
    base = tpch_builder.get(tq, LAYOUTS[0]).shards.record_stream_digest()
    for layout in LAYOUTS[1:]:
        other = tpch_builder.get(tq, layout).shards.record_stream_digest()
        assert other == base, (f"TPC-H {qid}: layouts {LAYOUTS[0]!r} and {layout!r} store different records "
                               f"(rows, sha256): {base} vs {other}")


@pytest.mark.parametrize("qid", IDS)
def test_tpch_plan_is_global(qid: str, tpch_queries: Dict[str, TpchQuery], tpch_builder: TpchBuilder) -> None:
    report = tpch_builder.get(tpch_queries[qid], "one").report
    assert report.get("plan") == GLOBAL, f"TPC-H {qid}: plan {report.get('plan')!r} ({report.get('plan_reason')!r})"


@pytest.mark.parametrize("qid", IDS)
def test_tpch_staged_build_gives_the_local_bytes(qid: str, tpch_queries: Dict[str, TpchQuery], tpch_builder: TpchBuilder, tessera_bin: str, tmp_path: Path) -> None:
    """Each query cut into stages in 4 partitions, its tasks run one process
    each in a random order (as a cluster runs them): the local build's
    bytes."""
    local = tpch_builder.get(tpch_queries[qid], "shuffled")
    spec = tpch_builder.workdir / "tpch-specs" / f"{qid}-shuffled.yaml"
    run_staged(tessera_bin, spec, 4, tmp_path, local.report, seed=int(qid[1:]))
