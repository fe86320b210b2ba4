"""CSV nulls (docs/SPEC.md, "Nulls in CSV"): an empty field is null with or
without ``null_values``, which only add strings read as null. Each build is
compared with pandas and pyarrow reading the same file under the semantics
the spec documents: ``na_values = ["", *null_values]`` and nothing else."""

from __future__ import annotations

import os
from typing import List, Optional

import numpy as np
import pandas as pd
import pyarrow.csv as pc
import pytest

import tessera

# `x` is a number column, `s` a text column; row 4 holds quoted empty fields.
# `na` and ` NA` are not `NA`: null values compare with the whole field.
CSV = 'id,x,s\n1,1.5,a\n2,,\n3,NA,NA\n4,"",""\n5,7,na\n6,2, NA\n7,-3,b\n'
# Without null_values the number column may not hold NA (it would be text).
CSV_NO_NA = 'id,x,s\n1,1.5,a\n2,,\n3,4,NA\n4,"",""\n5,7,na\n6,2, NA\n7,-3,b\n'

SPEC = """
version: 1
name: csv-nulls
sources:
  t: {{ path: {path}{options} }}
fields:
  id:     {{ dtype: i64, column: id }}
  x:      {{ dtype: f64, column: x, fill_null: -100 }}
  x_null: {{ dtype: u8, expr: "CAST(x IS NULL AS TINYINT)" }}
  s_null: {{ dtype: u8, expr: "CAST(s IS NULL AS TINYINT)" }}
  s_len:  {{ dtype: i64, expr: "COALESCE(length(s), -1)" }}
"""


def build(tmp: str, text: str, null_values: Optional[List[str]]) -> "tessera.Dataset":
    data = os.path.join(tmp, "rows.csv")
    with open(data, "w") as f:
        f.write(text)
    options = "" if null_values is None else ", null_values: [" + ", ".join(f'"{v}"' for v in null_values) + "]"
    spec = os.path.join(tmp, "spec.yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(path=data, options=options))
    return tessera.open(tessera.build(spec, cache_dir=os.path.join(tmp, "cache")))


def fields(ds: "tessera.Dataset") -> dict:
    batch = next(iter(ds.loader(batch_size=len(ds), shuffle=False, drop_last=False)))
    return {k: np.asarray(v) for k, v in batch.items()}


@pytest.mark.parametrize("null_values", [None, ["NA"], ["", "NA"], ["NA", "-3"]])
def test_empty_fields_stay_null_and_null_values_add(tmp_path: "os.PathLike[str]", null_values: Optional[List[str]]) -> None:
    text = CSV if null_values else CSV_NO_NA
    got = fields(build(str(tmp_path), text, null_values))
    na = [""] + list(null_values or [])
    path = os.path.join(str(tmp_path), "rows.csv")
    by_pandas = pd.read_csv(path, keep_default_na=False, na_values=na, dtype={"s": str})
    by_arrow = pc.read_csv(
        path, convert_options=pc.ConvertOptions(null_values=na, strings_can_be_null=True)
    ).to_pandas()
    for frame, what in [(by_pandas, "pandas"), (by_arrow, "pyarrow")]:
        assert got["id"].tolist() == frame["id"].tolist(), what
        x = pd.to_numeric(frame["x"])
        assert got["x_null"].tolist() == x.isna().astype(int).tolist(), what
        assert got["x"].tolist() == x.fillna(-100).tolist(), what
        assert got["s_null"].tolist() == frame["s"].isna().astype(int).tolist(), what
        lengths = [-1 if pd.isna(v) else len(v) for v in frame["s"]]
        assert got["s_len"].tolist() == lengths, what
    # The cases the issue names, spelled out: the empty field is null in both
    # columns whatever the list says; NA is text unless listed.
    assert got["x_null"][1] == 1 and got["s_null"][1] == 1
    assert got["x_null"][3] == 1 and got["s_null"][3] == 1
    assert got["s_null"][2] == (1 if null_values else 0)
