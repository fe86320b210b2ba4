"""``ds.transform(rows, fields=[...])``: a service computes the features
without the label's input column, and gets for them the arrays the whole
transform gives; an unknown field, or a field whose input is absent, is an
error naming it (docs/SERVING.md, "Some fields only")."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import tessera

SPEC = """
version: 1
name: served-fields
sources:
  t: {{ path: {data} }}
filter: arr_delay IS NOT NULL
fields:
  delay:  {{ dtype: f32, column: dep_delay, fill_null: 0, transform: standardize }}
  route:  {{ dtype: i64, expr: "origin || '/' || COALESCE(sex, '?')", transform: {{ hash_bucket: 64 }} }}
  origin: {{ dtype: i32, column: origin, transform: vocab }}
  label:  {{ dtype: f32, expr: "CAST(arr_delay > 15 AS FLOAT)" }}
"""


def test_fields_serve_rows_without_the_label(tmp_path: "os.PathLike[str]") -> None:
    tmp = str(tmp_path)
    rng = np.random.default_rng(3)
    n = 300
    table = pa.table({
        "origin": pa.array([["JFK", "LGA", "EWR"][i % 3] for i in range(n)]),
        "sex": pa.array([None if i % 5 == 0 else ["MALE", "FEMALE"][i % 2] for i in range(n)]),
        "dep_delay": pa.array([None if i % 7 == 0 else float(rng.normal(5, 20)) for i in range(n)]),
        "arr_delay": pa.array([None if i % 9 == 0 else int(rng.integers(-30, 90)) for i in range(n)]),
    })
    data = os.path.join(tmp, "rows.parquet")
    pq.write_table(table, data)
    spec = os.path.join(tmp, "spec.yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(data=data))
    ds = tessera.open(tessera.build(spec, cache_dir=os.path.join(tmp, "cache")))
    # The rows the build kept (a null label is an error without the filter).
    kept = table.filter(pc.is_valid(table["arr_delay"]))
    whole = ds.transform(kept)
    features = kept.drop_columns(["arr_delay"])
    names = ["delay", "route", "origin"]
    got = ds.transform(features, fields=names)
    assert list(got) == names
    for k in names:
        assert got[k].dtype == whole[k].dtype and got[k].shape == whole[k].shape, k
        assert got[k].tobytes() == whole[k].tobytes(), k
    # Record order, whatever the order asked; a subset asked again is reused.
    assert list(ds.transform(features, fields=["origin", "delay"])) == ["delay", "origin"]
    as_dict = {c: features.column(c).to_pylist() for c in features.column_names}
    assert ds.transform(as_dict, fields=["route"])["route"].tobytes() == whole["route"].tobytes()
    # The label's input is absent: the error names the field and the column.
    with pytest.raises(tessera.TransformError, match=r'fields\.label reads column "arr_delay"'):
        ds.transform(features, fields=["delay", "label"])
    with pytest.raises(tessera.TransformError, match=r'fields\.label reads column "arr_delay"'):
        ds.transform(features)
    with pytest.raises(tessera.TransformError, match=r'no field "nope".*delay, route, origin, label'):
        ds.transform(features, fields=["nope"])
    with pytest.raises(TypeError):
        ds.transform(features, fields="delay")
