"""Fixtures of the differential suite: the tessera binary ($TESSERA_BIN), the
generated inputs, the DuckDB oracle and a memoizing builder.

The suite's modules import each other by name; this directory is put on the
path here so it runs from any working directory."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Tuple

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from datagen import Inputs, generate  # noqa: E402
from oracle import DuckOracle  # noqa: E402
from tpch import TpchData, TpchQuery, generate as generate_tpch, load_query, query_ids  # noqa: E402
from tessera_run import Build, BuildFailed, Builder, duck_views, run_build, spec_text  # noqa: E402


@pytest.fixture(scope="session")
def tessera_bin() -> str:
    path = os.environ.get("TESSERA_BIN", "")
    if not path:
        pytest.fail("TESSERA_BIN is not set: point it at the tessera binary to test", pytrace=False)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"TESSERA_BIN={path!r} is not an executable file", pytrace=False)
    return path


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Inputs, specs and caches. TESSERA_DIFF_WORKDIR keeps them across runs
    (the inputs are then generated once; caches are per build anyway)."""
    keep = os.environ.get("TESSERA_DIFF_WORKDIR")
    if keep:
        p = Path(keep).resolve()
        p.mkdir(parents=True, exist_ok=True)
        # Stale artifacts from an earlier run would be cache hits.
        cache = p / "cache"
        if cache.exists():
            import shutil

            shutil.rmtree(cache)
        return p
    return tmp_path_factory.mktemp("differential")


@pytest.fixture(scope="session")
def inputs(workdir: Path) -> Inputs:
    return generate(workdir / "data")


@pytest.fixture(scope="session")
def duck(inputs: Inputs) -> DuckOracle:
    return DuckOracle(duck_views(inputs))


@pytest.fixture(scope="session")
def builder(tessera_bin: str, inputs: Inputs, workdir: Path) -> Builder:
    return Builder(tessera_bin, inputs, workdir)


# --------------------------------------------------------------- TPC-H

@pytest.fixture(scope="session")
def tpch_data(workdir: Path) -> TpchData:
    return generate_tpch(workdir / "tpch")


@pytest.fixture(scope="session")
def tpch_duck(tpch_data: TpchData) -> DuckOracle:
    return DuckOracle(tpch_data.duck_views())


@pytest.fixture(scope="session")
def tpch_queries(tpch_duck: DuckOracle) -> Dict[str, TpchQuery]:
    return {qid: load_query(qid, tpch_duck.con) for qid in query_ids()}


@dataclass
class TpchBuilder:
    """Builds each (query, layout, threads) once per session, each with a
    fresh cache (the thread count is not part of the artifact hash)."""

    binary: str
    data: TpchData
    workdir: Path
    _done: Dict[Tuple[str, str, int], Build] = field(default_factory=dict, repr=False)
    _failed: Dict[Tuple[str, str, int], BuildFailed] = field(default_factory=dict, repr=False)

    def get(self, tq: TpchQuery, layout: str, threads: int = 2) -> Build:
        key = (tq.qid, layout, threads)
        if key in self._failed:
            raise self._failed[key]
        if key not in self._done:
            specs = self.workdir / "tpch-specs"
            specs.mkdir(parents=True, exist_ok=True)
            spec = specs / f"{tq.qid}-{layout}.yaml"
            spec.write_text(spec_text(f"tpch-{tq.qid}-{layout}", tq.q, tq.sources(self.data, layout), None))
            cache = self.workdir / "cache" / f"tpch-{tq.qid}-{layout}-t{threads}"
            try:
                self._done[key] = run_build(self.binary, spec, threads, cache)
            except BuildFailed as e:
                self._failed[key] = e
                raise
        return self._done[key]


@pytest.fixture(scope="session")
def tpch_builder(tessera_bin: str, tpch_data: TpchData, workdir: Path) -> TpchBuilder:
    return TpchBuilder(tessera_bin, tpch_data, workdir)
