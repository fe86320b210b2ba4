"""Fixtures of the differential suite: the tessera binary ($TESSERA_BIN), the
generated inputs, the DuckDB oracle and a memoizing builder.

The suite's modules import each other by name; this directory is put on the
path here so it runs from any working directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from datagen import Inputs, generate  # noqa: E402
from oracle import DuckOracle  # noqa: E402
from tessera_run import Builder, duck_views  # noqa: E402


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
