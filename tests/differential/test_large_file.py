"""The single-large-file case: millions of rows in one Parquet file with many
row groups must give the same records as the same rows split over several
files, cut into row-group chunks or not, and agree with DuckDB.

TESSERA_DIFF_BIG_ROWS sets the row count (default 2,500,000)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict

import pytest

from compare import multiset_mismatch
from corpus import CHUNKED, GLOBAL, F, Q, fs
from datagen import generate_big
from oracle import DuckOracle
from tessera_run import Build, SourceDecl, run_build, run_staged, spec_text

ROWS = int(os.environ.get("TESSERA_DIFF_BIG_ROWS", "2500000"))
GROUP_ROWS = 20_000
FILES = 8
CHUNK_TARGET = "4MiB"

BIG_QUERIES = [
    Q("big_row_local", "SELECT id, k, x * 2 AS x2, length(s) AS ls, s FROM big WHERE x > -50",
      fs(F("id", "i64"), F("k", "i32", fill_null=-1), F("x2", "f64"), F("ls", "i32"), F("s", "i32", hash=4096)),
      CHUNKED, filter="k IS NULL OR k <> 3"),
    Q("big_group_by", "SELECT k, COUNT(*) AS n, SUM(x) AS sx, SUM(y) AS sy FROM big GROUP BY k",
      fs(F("k", "i32", fill_null=-1), F("n", "i64"), F("sx", "f64", fill_null=0), F("sy", "f64")), GLOBAL),
]
IDS = [q.id for q in BIG_QUERIES]


@pytest.fixture(scope="module")
def big_dirs(workdir: Path) -> Dict[str, Path]:
    return generate_big(workdir / "big", ROWS, GROUP_ROWS, FILES)


@pytest.fixture(scope="module")
def big_builds() -> Dict[tuple, Build]:
    """Builds done so far in this module, by (query, layout, chunked)."""
    return {}


def _build(q: Q, layout: str, chunked: bool, tessera_bin: str, dirs: Dict[str, Path], workdir: Path,
           memo: Dict[tuple, Build]) -> Build:
    key = (q.id, layout, chunked)
    if key not in memo:
        name = f"{q.id}-{layout}{'-chunked' if chunked else ''}"
        spec = workdir / "specs" / f"{name}.yaml"
        spec.parent.mkdir(parents=True, exist_ok=True)
        src = {"big": SourceDecl(str(dirs[layout] / "*.parquet"), chunk=True)}
        spec.write_text(spec_text(name, q, src, CHUNK_TARGET if chunked else None))
        memo[key] = run_build(tessera_bin, spec, 2, workdir / "cache" / name)
    return memo[key]


@pytest.mark.parametrize("q", BIG_QUERIES, ids=IDS)
def test_large_file_same_records_as_split_files(q: Q, tessera_bin: str, big_dirs, workdir, big_builds) -> None:
    one = _build(q, "one", False, tessera_bin, big_dirs, workdir, big_builds)
    many = _build(q, "many", False, tessera_bin, big_dirs, workdir, big_builds)
    a, b = one.shards.record_stream_digest(), many.shards.record_stream_digest()
    assert a == b, f"{q.id}: {ROWS} rows as 1 file vs {FILES} files: (rows, sha256) per split {a} vs {b}"


@pytest.mark.parametrize("q", BIG_QUERIES, ids=IDS)
def test_large_file_cut_into_row_group_chunks(q: Q, tessera_bin: str, big_dirs, workdir, big_builds) -> None:
    chunked = _build(q, "one", True, tessera_bin, big_dirs, workdir, big_builds)
    many = _build(q, "many", False, tessera_bin, big_dirs, workdir, big_builds)
    a, b = chunked.shards.record_stream_digest(), many.shards.record_stream_digest()
    assert a == b, f"{q.id}: 1 file in {CHUNK_TARGET} chunks vs {FILES} files: {a} vs {b}"
    if q.plan == CHUNKED:
        n = chunked.report.get("chunks")
        assert isinstance(n, int) and n >= 2, (
            f"{q.id}: one {ROWS}-row file with chunks.target_bytes {CHUNK_TARGET} was cut into {n!r} chunk(s)")


@pytest.mark.parametrize("q", BIG_QUERIES, ids=IDS)
def test_large_file_matches_duckdb(q: Q, tessera_bin: str, big_dirs, workdir, big_builds) -> None:
    b = _build(q, "one", False, tessera_bin, big_dirs, workdir, big_builds)
    files = sorted(big_dirs["many"].glob("*.parquet"))
    duck = DuckOracle({"big": "read_parquet([" + ", ".join(f"'{p}'" for p in files) + "])"})
    expected = duck.expected(q).splits["all"]
    msg = multiset_mismatch(b.shards.decoded(), expected, q.fields)
    assert not msg, f"{q.id}: tessera's records differ from DuckDB's answer\n{msg}"


def test_big_group_by_staged_gives_the_local_bytes(tessera_bin: str, big_dirs: Dict[str, Path], workdir: Path, big_builds: Dict[tuple, Build], tmp_path: Path) -> None:
    """The large GROUP BY cut into stages in 4 partitions, as a cluster runs
    it: the local build's bytes."""
    q = BIG_QUERIES[1]
    local = _build(q, "one", False, tessera_bin, big_dirs, workdir, big_builds)
    plan = run_staged(tessera_bin, local.spec, 4, tmp_path, local.report, seed=5)
    assert plan.get("staged"), plan.get("unstaged")
