"""`pip install` from the source tree on a machine without Rust stops at once,
with a message pointing at the prebuilt wheel, instead of downloading a Rust
toolchain (maturin's default) and building for half an hour."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUST_TOOLS = ("cargo", "rustc", "rustup")


def path_without_rust() -> str:
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    kept = [d for d in dirs if d and not any(os.path.exists(os.path.join(d, t)) for t in RUST_TOOLS)]
    return os.pathsep.join(kept)


@pytest.mark.parametrize("project", [".", "python"])
def test_source_install_without_cargo_fails_fast(project: str, tmp_path: Path) -> None:
    source = REPO / project
    assert (source / "pyproject.toml").is_file(), source
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CARGO", "RUSTUP", "MATURIN"))}
    env["PATH"] = path_without_rust()
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--target", str(tmp_path / "site"), str(source)],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "building from source needs Rust" in text, text
    assert "prebuilt wheel" in text
    # Nothing fetched a toolchain (maturin's fallback installs `puccinialin`).
    assert "puccinialin" not in text and "Rust not found, installing" not in text, text
    assert not (tmp_path / "site").exists() or not any((tmp_path / "site").iterdir())
