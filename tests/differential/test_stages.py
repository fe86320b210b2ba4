"""Every global query of the corpus, built as a cluster builds it: `tessera
plan` cuts it into stages at the exchanges of DataFusion's plan, each task
runs in its own `tessera task` process in a seeded random order that only
respects the plan's dependencies (some tasks twice, as a retry after a lost
worker would), and `tessera commit` publishes. Every file of the artifact
must equal the single-process build's, for 3 and for 5 partitions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpus import GLOBAL, QUERIES, Q
from tessera_run import Builder, run, run_staged

GLOBAL_QUERIES = [q for q in QUERIES if q.plan == GLOBAL]


@pytest.mark.parametrize("partitions", [3, 5])
@pytest.mark.parametrize("q", GLOBAL_QUERIES, ids=[q.id for q in GLOBAL_QUERIES])
def test_staged_build_gives_the_local_bytes(q: Q, partitions: int, builder: Builder, tessera_bin: str, tmp_path: Path) -> None:
    local = builder.get(q, "many", 2)
    run_staged(tessera_bin, builder.spec_path(q, "many"), partitions, tmp_path, local.report, seed=len(q.id) * 31 + partitions)


def test_most_global_queries_are_cut_into_stages(builder: Builder, tessera_bin: str, tmp_path: Path) -> None:
    """A GROUP BY, a DISTINCT and a join over the fact table spread over
    tasks; queries whose answer could depend on row order stay whole, and
    say why."""
    staged, whole = [], {}
    for q in GLOBAL_QUERIES:
        spec = builder.spec_path(q, "many")
        plan = json.loads(run([tessera_bin, "plan", str(spec), "--json", "--threads", "4", "--cache-dir", str(tmp_path / q.id)]).strip().splitlines()[-1])
        if plan.get("staged"):
            staged.append(q.id)
        else:
            whole[q.id] = plan.get("unstaged")
    for must in ("shuffled_group_by", "group_by_count", "group_by_having", "distinct"):
        if must in {q.id for q in GLOBAL_QUERIES}:
            assert must in staged, (must, whole.get(must))
    assert len(staged) >= len(GLOBAL_QUERIES) // 2, (staged, whole)
    assert all(why for why in whole.values()), whole
