"""The type stubs match the native module, and typed code using the API checks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mypy")


def run(*args: str, cwd: str) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    # mypy's cache goes to the temporary directory, not the source tree.
    env = dict(os.environ, MYPY_CACHE_DIR=os.path.join(cwd, ".mypy_cache"))
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_stubs_match_the_runtime_module(tmp_path: "os.PathLike[str]") -> None:
    out = run("mypy.stubtest", "tessera._tessera", "--ignore-missing-stub", cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_typed_usage_checks_under_strict_mypy(tmp_path: "os.PathLike[str]") -> None:
    src = os.path.join(str(tmp_path), "usage.py")
    with open(src, "w") as f:
        f.write(textwrap.dedent('''
            from typing import Any, Dict, List
            import numpy as np
            import numpy.typing as npt
            import tessera

            def first_labels(path: str) -> List[float]:
                ds: tessera.Dataset = tessera.open(path, verify=True)
                names: List[str] = [f.name for f in ds.fields]
                loader: tessera.Loader = ds.split("train").loader(256, shuffle=True, seed=1)
                loader.set_epoch(3)
                state: Dict[str, Any] = loader.state_dict()
                loader.load_state_dict(state)
                out: List[float] = []
                for batch in loader:
                    labels: npt.NDArray[Any] = batch["label"]
                    out.append(float(labels[0]))
                    owner = labels.base
                    assert isinstance(owner, tessera.Batch)
                    n: int = owner.rows + len(loader) + len(ds) + len(names)
                rec = ds[0]
                _ = rec["label"]
                p: str = tessera.write(path + "2", {"x": np.zeros(3)}, {"train": 3})
                q: str = tessera.build("spec.yaml", cache_dir=None)
                return out
            '''))
    out = run("mypy", "--strict", "--no-incremental", src, cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_package_sources_check_under_strict_mypy(tmp_path: "os.PathLike[str]") -> None:
    # tessera.torch is left out: checking it means analysing all of torch.
    mods = ["tessera", "tessera._write", "tessera._build", "tessera.errors", "tessera.ray"]
    args = [a for m in mods for a in ("-m", m)]
    out = run("mypy", "--strict", "--no-incremental", *args, cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
