"""``tessera.build``: run the tessera compiler on a spec and return the artifact."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from typing import List, Optional, Tuple, Union

from tessera.errors import BuildError, CompilerNotFoundError

PathArg = Union[str, "os.PathLike[str]"]

#: Environment variable naming the compiler binary, checked first.
BIN_ENV = "TESSERA_BIN"

#: The distribution whose wheel ships the compiler as its ``tessera`` script.
DISTRIBUTION = "tessera-shards"


def find_compiler() -> str:
    """The path of the ``tessera`` compiler.

    In order: ``$TESSERA_BIN``; the compiler installed by this package's wheel
    (beside the interpreter, found through the wheel's file list, so it is
    used even when that directory is not on ``PATH``); ``tessera`` on ``PATH``.
    Raises :class:`CompilerNotFoundError` saying how to get it when none exists.
    """
    explicit = os.environ.get(BIN_ENV)
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        raise CompilerNotFoundError(
            f"{BIN_ENV}={explicit!r} is not an executable file; point it at the tessera compiler "
            "(built with `cargo build --release` in the tessera repository: target/release/tessera)"
        )
    bundled = bundled_compiler()
    if bundled:
        return bundled
    found = shutil.which("tessera")
    if found:
        return found
    raise CompilerNotFoundError(
        "the tessera compiler was not found: this installation of the package does not ship it "
        "(a development build of the binding alone), it is not on PATH and TESSERA_BIN is not set. "
        "Install the tessera-shards wheel, which holds the compiler, or build it with "
        "`cargo install --locked --path .` in the tessera repository (or set TESSERA_BIN to a "
        "`cargo build --release` binary: target/release/tessera)."
    )


def bundled_compiler() -> Optional[str]:
    """The ``tessera`` executable that this package's wheel installed, if any.

    The wheel carries the compiler as a script (``*.data/scripts/tessera``);
    pip installs it into the environment's scripts directory and lists it in
    the distribution's ``RECORD``, which is read here. A build of the binding
    alone (``pip install ./python``) lists none.
    """
    from importlib import metadata

    try:
        files = metadata.files(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    for f in files or ():
        if f.name == "tessera" and len(f.parts) >= 2 and f.parts[-2] == "bin":
            path = os.path.normpath(str(f.locate()))
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None


def build(
    spec: PathArg,
    cache_dir: Optional[PathArg] = None,
    *,
    threads: Optional[int] = None,
    progress: bool = False,
    allow_empty: bool = False,
) -> str:
    """Compiles the YAML ``spec`` with the ``tessera`` CLI and returns the artifact's path.

    Runs ``tessera build SPEC --json [--cache-dir CACHE_DIR] [--threads N] [--allow-empty]``;
    a repeated build of unchanged inputs is a cache hit that returns at once.
    The default cache is the compiler's (``$TESSERA_CACHE_DIR``, then
    ``~/.cache/tessera/artifacts``). The compiler is found through
    :func:`find_compiler`. With ``progress=True`` the compiler's progress
    output is passed through to ``sys.stderr``. ``allow_empty=True``
    (``--allow-empty``) publishes the artifact even when a split, or the
    whole artifact, holds no rows; by default that is a build error.

    On failure raises :class:`BuildError`, whose message holds the compiler's
    error text (which names the spec file and the key at fault).
    """
    exe = find_compiler()
    spec_path = os.fspath(spec)
    cmd = [exe, "build", spec_path, "--json"]
    if cache_dir is not None:
        cmd += ["--cache-dir", os.fspath(cache_dir)]
    if threads is not None:
        cmd += ["--threads", str(int(threads))]
    if allow_empty:
        cmd.append("--allow-empty")
    if not progress:
        cmd.append("--quiet")
    try:
        returncode, stdout, stderr = _run(cmd, echo_stderr=progress)
    except OSError as e:
        raise BuildError(f"could not run {exe}: {e}", spec=spec_path) from e
    if returncode != 0:
        detail = stderr.strip() or stdout.strip() or "(no output)"
        raise BuildError(
            f"tessera build {spec_path} failed (exit status {returncode}):\n{detail}",
            spec=spec_path,
            returncode=returncode,
            stderr=stderr,
        )
    path = artifact_path(stdout)
    if path is None:
        raise BuildError(
            f"tessera build {spec_path} succeeded but its output names no shard set "
            f"(expected a JSON report with a \"path\" key):\n{stdout.strip()}",
            spec=spec_path,
            returncode=returncode,
            stderr=stderr,
        )
    return path


def _run(cmd: List[str], echo_stderr: bool) -> Tuple[int, str, str]:
    """Runs ``cmd``; returns its status, stdout and stderr (stderr also echoed
    line by line to ``sys.stderr`` when ``echo_stderr``)."""
    if not echo_stderr:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr
    lines: List[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None and p.stderr is not None
        out: List[str] = []
        reader = threading.Thread(target=lambda: out.append(p.stdout.read() if p.stdout else ""))
        reader.start()
        for line in p.stderr:
            lines.append(line)
            sys.stderr.write(line)
        reader.join()
        return p.wait(), "".join(out), "".join(lines)


def artifact_path(stdout: str) -> Optional[str]:
    """The artifact directory named in the compiler's standard output.

    The compiler's ``--json`` report is one JSON object with a ``"path"`` key
    on the last line. Failing that, the last line if it is a shard-set
    directory, else the last whitespace-separated token of any line that is
    one (``path: /cache/<hash>`` in the human-readable output).
    """
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines:
        return None
    last = lines[-1]
    if last.startswith("{"):
        try:
            obj = json.loads(last)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("path"), str):
            return str(obj["path"])
    if _is_shard_set(last):
        return last
    for line in reversed(lines):
        for token in reversed(line.split()):
            if _is_shard_set(token):
                return token
    return None


def _is_shard_set(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "manifest.json"))
