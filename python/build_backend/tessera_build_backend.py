"""PEP 517 build backend of tessera-shards: maturin, behind a check for Rust.

Both pyproject.toml files use it: the repository root's (the whole tool: the
binding plus the compiler CLI) and python/'s (the binding alone).

- Without ``cargo`` on PATH, maturin's own backend silently downloads a Rust
  toolchain (about 1 GB) and builds for many minutes. This backend stops at
  the first hook instead and says how to install without Rust: the prebuilt
  wheel. A source build is a deliberate choice (the compiler's first build
  compiles DataFusion, about 25 minutes on 2 cores), so it starts only where
  the user has installed Rust.
- The root project ships the compiler in its wheel (``[tool.maturin] data``).
  Its wheel is built by scripts/build-wheel.sh, the one recipe the demo and the
  tests use too: the CLI built with the same flags and target directory, so
  DataFusion is compiled once per machine whichever way the tool is built.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any, List, Mapping, Optional

import maturin  # type: ignore[import-untyped]

ConfigSettings = Optional[Mapping[str, Any]]

NO_RUST = """
tessera-shards: building from source needs Rust (cargo >= 1.94), and `cargo` is
not on PATH. Nothing was downloaded or built.

To install without Rust, install a prebuilt wheel, which holds the `tessera`
package and the `tessera` compiler:
    pip install tessera_shards-VERSION-cp39-abi3-PLATFORM.whl
(`scripts/build-wheel.sh` makes one on any machine with Rust; `pip install
tessera-shards` takes it from the package index where one is published for
this platform).

To build from source, install Rust (https://rustup.rs) and run this again; the
first build compiles DataFusion (about 25 minutes on 2 cores).
"""


def _require_cargo() -> None:
    if shutil.which("cargo") is None:
        sys.stderr.write(NO_RUST)
        sys.stderr.flush()
        raise SystemExit(1)


def _bundles_compiler() -> bool:
    """True for the root project, whose wheel ships the compiler CLI."""
    return bool(maturin.get_config().get("data"))


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> List[str]:
    _require_cargo()
    return list(maturin.get_requires_for_build_wheel(config_settings))


def get_requires_for_build_editable(config_settings: ConfigSettings = None) -> List[str]:
    _require_cargo()
    return list(maturin.get_requires_for_build_editable(config_settings))


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> List[str]:
    _require_cargo()
    return list(maturin.get_requires_for_build_sdist(config_settings))


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    _require_cargo()
    return str(maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings))


def build_wheel(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: Optional[str] = None,
) -> str:
    _require_cargo()
    if not _bundles_compiler():
        return str(maturin.build_wheel(wheel_directory, config_settings, metadata_directory))
    # The root project: the same recipe as the demo and the tests.
    env = dict(os.environ, PYTHON=sys.executable)
    # pip puts the build environment's scripts (maturin among them) on PATH.
    found = shutil.which("maturin")
    if found:
        env["MATURIN"] = found
    proc = subprocess.run(
        ["bash", os.path.join("scripts", "build-wheel.sh"), "--out", wheel_directory],
        stdout=subprocess.PIPE,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        sys.stderr.write(f"scripts/build-wheel.sh failed (exit status {proc.returncode})\n")
        raise SystemExit(1)
    lines = proc.stdout.decode(errors="replace").split()
    if not lines or not lines[-1].endswith(".whl"):
        sys.stderr.write("scripts/build-wheel.sh named no wheel\n")
        raise SystemExit(1)
    return os.path.basename(lines[-1])


def build_editable(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: Optional[str] = None,
) -> str:
    _require_cargo()
    if _bundles_compiler():
        sys.stderr.write(
            "tessera-shards: an editable install is for working on the binding: "
            "`pip install -e ./python` (the compiler then comes from $TESSERA_BIN or PATH)\n"
        )
        raise SystemExit(1)
    return str(maturin.build_editable(wheel_directory, config_settings, metadata_directory))


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    _require_cargo()
    if _bundles_compiler():
        # maturin's sdist holds the binding's crates only, not the compiler's.
        sys.stderr.write(
            "tessera-shards is distributed as wheels: build one with scripts/build-wheel.sh "
            "(or `pip wheel .`); from a clone, `cargo install --locked --path .` installs the CLI\n"
        )
        raise SystemExit(1)
    return str(maturin.build_sdist(sdist_directory, config_settings))
