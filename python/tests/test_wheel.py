"""The tessera-shards wheel as a user installs it: a fresh virtual environment
on a PATH with no Rust toolchain, then the `tessera` command, `tessera.build`
and `import tessera` reading what the command built.

The wheel is the one ./test.sh built (scripts/build-wheel.sh), named by
$TESSERA_WHEEL; scripts/test-python.sh always sets it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Tuple

import pytest

WHEEL = os.environ.get("TESSERA_WHEEL", "")

pytestmark = pytest.mark.skipif(
    not WHEEL, reason="TESSERA_WHEEL is not set (scripts/test-python.sh sets it to the wheel it installs)"
)

RUST_TOOLS = ("cargo", "rustc", "rustup")


def path_without_rust() -> str:
    """This process's PATH less every directory that holds a Rust tool."""
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    kept = [d for d in dirs if d and not any(os.path.exists(os.path.join(d, t)) for t in RUST_TOOLS)]
    return os.pathsep.join(kept)


@pytest.fixture(scope="module")
def user_env(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, Dict[str, str]]:
    """A new virtual environment with the wheel installed by pip, with no Rust on PATH."""
    root = tmp_path_factory.mktemp("user")
    venv = root / "venv"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CARGO", "RUSTUP", "TESSERA_", "VIRTUAL_ENV", "PYTHON"))
    }
    env["PATH"] = path_without_rust()
    env["HOME"] = str(root)  # nothing of the developer's (caches, configs) but pip's cache
    env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR") or os.path.expanduser("~/.cache/pip")
    for tool in RUST_TOOLS:
        assert shutil.which(tool, path=env["PATH"]) is None, tool
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, cwd=root)
    # --only-binary: if anything had to be compiled, the install fails rather than builds.
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--only-binary", ":all:", WHEEL],
        check=True,
        env=env,
        cwd=root,
    )
    return venv, env


def test_wheel_is_abi3_for_linux_x86_64() -> None:
    name = os.path.basename(WHEEL)
    assert name.startswith("tessera_shards-"), name
    python_tag, abi_tag, platform_tag = name[: -len(".whl")].split("-")[-3:]
    assert (python_tag, abi_tag) == ("cp39", "abi3")
    assert platform_tag.endswith("_x86_64") and platform_tag.startswith(("manylinux", "linux")), platform_tag


def test_the_command_is_the_compiler_on_path(user_env: Tuple[Path, Dict[str, str]]) -> None:
    venv, env = user_env
    path = os.pathsep.join([str(venv / "bin"), env["PATH"]])
    exe = shutil.which("tessera", path=path)
    assert exe is not None and Path(exe).resolve() == (venv / "bin" / "tessera").resolve()
    with open(exe, "rb") as f:
        assert f.read(4) == b"\x7fELF", "the command is the compiler itself, not a Python launcher"
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, env=dict(env, PATH=path), check=False)
    assert out.returncode == 0, out.stderr
    for command in ("build", "inspect", "verify"):
        assert command in out.stdout


def test_build_then_read_in_the_user_environment(
    user_env: Tuple[Path, Dict[str, str]], tmp_path: Path
) -> None:
    venv, env = user_env
    rows = [(0.5, 1), (-2.0, 7), (3.25, -4), (10.0, 0), (0.125, 12)]
    (tmp_path / "points.csv").write_text("x,n\n" + "".join(f"{x},{n}\n" for x, n in rows))
    spec = tmp_path / "points.yaml"
    spec.write_text(
        textwrap.dedent(
            """\
            version: 1
            name: points
            sources:
              points: { path: points.csv }
            fields:
              x: { dtype: f32, column: x }
              n: { dtype: i64, column: n }
              y: { dtype: f64, expr: "x * 2 + n" }
            """
        )
    )
    cache = tmp_path / "cache"

    # The command, from the environment's bin directory as an activated shell has it.
    with_bin = dict(env, PATH=os.pathsep.join([str(venv / "bin"), env["PATH"]]))
    out = subprocess.run(
        ["tessera", "build", str(spec), "--cache-dir", str(cache), "--json", "--quiet"],
        capture_output=True, text=True, env=with_bin, cwd=tmp_path, check=False,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["cache_hit"] is False

    # Python, with the bin directory NOT on PATH (a script run by the
    # environment's interpreter directly): tessera.build still finds the
    # compiler the wheel installed, and the build is a cache hit.
    script = textwrap.dedent(
        f"""\
        import json, os, tessera
        exe = tessera.find_compiler()
        path = tessera.build({str(spec)!r}, cache_dir={str(cache)!r})
        ds = tessera.open(path, verify=True)
        rows = [ds[i] for i in range(len(ds))]
        print(json.dumps({{
            "exe": exe,
            "package": os.path.dirname(tessera.__file__),
            "path": path,
            "fields": [f.name for f in ds.fields],
            "x": [float(r["x"]) for r in rows],
            "n": [int(r["n"]) for r in rows],
            "y": [float(r["y"]) for r in rows],
        }}))
        """
    )
    res = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert Path(got["exe"]).resolve() == (venv / "bin" / "tessera").resolve()
    assert Path(got["package"]).resolve().is_relative_to(venv.resolve())
    assert got["path"] == report["path"]
    assert sorted(got["fields"]) == ["n", "x", "y"]
    # Recomputed here from the CSV text (all values exact in f32 and f64).
    assert got["x"] == [x for x, _ in rows]
    assert got["n"] == [n for _, n in rows]
    assert got["y"] == [x * 2 + n for x, n in rows]
