"""tessera.build runs the compiler CLI; exercised with stand-in compilers."""

from __future__ import annotations

import os
import stat
import sys

import numpy as np
import pytest

import tessera


def fake_compiler(tmp_path: "os.PathLike[str]", body: str) -> str:
    exe = os.path.join(str(tmp_path), "fake-tessera")
    with open(exe, "w") as f:
        f.write(f"#!{sys.executable}\nimport sys, os\n{body}\n")
    os.chmod(exe, os.stat(exe).st_mode | stat.S_IXUSR)
    return exe


def test_build_returns_the_artifact_path(tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> None:
    artifact = os.path.join(str(tmp_path), "cache", "abc123")
    tessera.write(artifact, {"x": np.arange(10, dtype=np.float32)})
    log = os.path.join(str(tmp_path), "argv.txt")
    exe = fake_compiler(tmp_path, f"""
open({log!r}, "w").write("\\n".join(sys.argv[1:]))
print("rows read: 10, rows kept: 10", file=sys.stderr)
print("hash abc123")
import json
print(json.dumps({{"hash": "abc123", "cache_hit": False, "path": {artifact!r}}}))
""")
    monkeypatch.setenv("TESSERA_BIN", exe)
    spec = os.path.join(str(tmp_path), "spec.yaml")
    path = tessera.build(spec, cache_dir=os.path.join(str(tmp_path), "cache"))
    assert path == artifact
    assert open(log).read().split("\n") == [
        "build", spec, "--json", "--cache-dir", os.path.join(str(tmp_path), "cache"), "--quiet"
    ]
    path2 = tessera.build(spec, threads=3, progress=True)
    assert path2 == artifact
    assert open(log).read().split("\n") == ["build", spec, "--json", "--threads", "3"]
    assert len(tessera.open(path)) == 10


def test_build_failure_carries_the_compiler_error(tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> None:
    exe = fake_compiler(tmp_path, """
print("error: specs/ctr.yaml: fields.dense.dtype: unknown dtype \\"float\\" (line 12)", file=sys.stderr)
sys.exit(2)
""")
    monkeypatch.setenv("TESSERA_BIN", exe)
    with pytest.raises(tessera.BuildError) as info:
        tessera.build("specs/ctr.yaml")
    e = info.value
    assert e.returncode == 2 and e.spec == "specs/ctr.yaml"
    assert 'fields.dense.dtype: unknown dtype "float" (line 12)' in str(e)
    assert "exit status 2" in str(e)


def test_build_without_a_path_in_the_output(tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_BIN", fake_compiler(tmp_path, 'print("done")'))
    with pytest.raises(tessera.BuildError, match="names no shard set"):
        tessera.build("s.yaml")


def test_missing_compiler(tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TESSERA_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    # As in a build of the binding alone, which ships no compiler.
    monkeypatch.setattr(tessera._build, "bundled_compiler", lambda: None)
    with pytest.raises(tessera.CompilerNotFoundError, match="not on PATH.*TESSERA_BIN") as info:
        tessera.build("s.yaml")
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, tessera.BuildError)
    monkeypatch.setenv("TESSERA_BIN", os.path.join(str(tmp_path), "nothing-here"))
    with pytest.raises(tessera.CompilerNotFoundError, match="TESSERA_BIN="):
        tessera.build("s.yaml")


def test_artifact_path_parsing(tmp_path: "os.PathLike[str]") -> None:
    from tessera._build import artifact_path

    d = os.path.join(str(tmp_path), "art")
    tessera.write(d, {"x": np.zeros(2)})
    assert artifact_path(f'{{"hash": "h", "path": "{d}"}}\n') == d
    assert artifact_path(f"cache hit in 0.001s\nhash: abc\npath: {d}\n\n") == d
    assert artifact_path(f"{d}\n") == d
    assert artifact_path("nothing\n") is None
    assert artifact_path("") is None


def test_compiler_lookup_order(tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> None:
    # $TESSERA_BIN, then the compiler this package's wheel installed, then PATH
    # (where another distribution's `tessera` command may sit).
    on_path_dir = os.path.join(str(tmp_path), "path")
    os.mkdir(on_path_dir)
    on_path = fake_compiler(on_path_dir, "")
    os.rename(on_path, os.path.join(on_path_dir, "tessera"))
    bundled = fake_compiler(tmp_path, "")
    explicit = os.path.join(str(tmp_path), "explicit")
    os.link(bundled, explicit)
    monkeypatch.setenv("PATH", on_path_dir)
    monkeypatch.setattr(tessera._build, "bundled_compiler", lambda: bundled)
    monkeypatch.setenv("TESSERA_BIN", explicit)
    assert tessera.find_compiler() == explicit
    monkeypatch.delenv("TESSERA_BIN")
    assert tessera.find_compiler() == bundled
    monkeypatch.setattr(tessera._build, "bundled_compiler", lambda: None)
    assert tessera.find_compiler() == os.path.join(on_path_dir, "tessera")
