"""Shared fixtures: small shard sets written through tessera.write."""

from __future__ import annotations

import os
from typing import Dict

import numpy as np
import pytest

import tessera


def make_columns(n: int, seed: int = 0) -> Dict[str, np.ndarray]:
    """Columns with an `id` field (the row number) and values derived from it,
    so any record read back can be checked against what was written."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64)
    return {
        "id": ids,
        "dense": rng.standard_normal((n, 13)).astype(np.float32),
        "cat": rng.integers(-(2**31), 2**31 - 1, size=(n, 26), dtype=np.int32),
        "label": (ids % 2).astype(np.float32),
        "img": rng.integers(0, 256, size=(n, 2, 3, 5), dtype=np.uint8),
    }


@pytest.fixture(scope="session")
def small_columns() -> Dict[str, np.ndarray]:
    return make_columns(1000)


@pytest.fixture(scope="session")
def small_set(tmp_path_factory: pytest.TempPathFactory, small_columns: Dict[str, np.ndarray]) -> str:
    """1000 records over several shards, split train 900 / val 100."""
    path = str(tmp_path_factory.mktemp("sets") / "small")
    # ~50 records per shard: many shard boundaries inside batches.
    tessera.write(path, small_columns, {"train": 900, "val": 100}, target_bytes=4096 + 50 * 320)
    ds = tessera.open(path)
    assert len(ds.manifest["shards"]) > 10
    return path


@pytest.fixture()
def fresh_set(tmp_path: "os.PathLike[str]", small_columns: Dict[str, np.ndarray]) -> str:
    """A private copy that a test may damage."""
    path = os.path.join(str(tmp_path), "set")
    tessera.write(path, small_columns, {"train": 900, "val": 100}, target_bytes=4096 + 200 * 320)
    return path


def ids_of(batches) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The `id` values of a sequence of batches, concatenated (copied)."""
    parts = [np.asarray(b["id"]).copy() for b in batches]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
