"""``tessera.open``: a shard set named the way the command line names one.

A directory or URL is opened by the native reader directly. Anything else
(a spec file, a hash prefix, a dataset name) is resolved by the compiler,
``tessera inspect --path TARGET``, so that the rules and their errors are
the command line's own (one implementation, in ``src/artifact.rs``).
"""

from __future__ import annotations

import os
import subprocess
from typing import Dict, Optional, Union

from tessera import _tessera
from tessera._build import find_compiler
from tessera.errors import CompilerNotFoundError, NotFoundError

PathArg = Union[str, "os.PathLike[str]"]


def open(
    path: PathArg,
    verify: bool = False,
    *,
    cache_dir: Optional[PathArg] = None,
    cache_bytes: Optional[int] = None,
    storage_options: Optional[Dict[str, str]] = None,
    fetch_threads: Optional[int] = None,
    artifact_cache_dir: Optional[PathArg] = None,
) -> _tessera.Dataset:
    """Opens a shard set: a directory, an object-store URL, or, as the
    ``tessera`` command line accepts, a spec file (``.yaml`` or ``.yml``:
    the artifact it builds, if it is in the artifact cache; nothing is
    built), a hash prefix of at least 4 hex digits of one cached artifact,
    or a dataset name (its most recently used cached artifact).

    Names, specs and prefixes are looked up in ``artifact_cache_dir``
    (default: the compiler's, ``$TESSERA_CACHE_DIR`` then
    ``~/.cache/tessera/artifacts``) by the compiler; a prefix that matches
    several artifacts, or a name found nowhere, raises ``NotFoundError``
    with the compiler's message.

    Reads ``manifest.json``, memory-maps every shard and checks each shard's
    header and size against the manifest. With ``verify=True`` it also
    checks the blake3 checksum of every byte (reads the whole set once).

    For a URL (``s3://bucket/prefix``, ``gs://``, ``az://``, ``http(s)://``,
    ``file://``) only the manifest is read at open, and shards are fetched,
    verified and kept in the local shard cache as batches need them
    (``cache_dir``, default ``$TESSERA_SHARD_CACHE`` or
    ``~/.cache/tessera/shards``), within ``cache_bytes`` (default
    ``$TESSERA_SHARD_CACHE_BYTES``, else no limit; it must hold the largest
    shard). When the store cannot be reached but an earlier open kept the
    set's manifest in that cache and every shard is there (and matches its
    blake3), the kept manifest is used, with a ``UserWarning`` saying so
    (docs/USAGE.md, "Object storage"). ``storage_options`` are object-store
    settings (``endpoint``, ``region``, ``allow_http``, ...) on top of the
    environment's (``AWS_ENDPOINT``, ``AWS_REGION``, ...).

    Raises ``NotFoundError`` (a ``FileNotFoundError``) when there is no
    shard set at ``path``, ``FormatError`` (a ``ValueError``) when a file is
    corrupt or does not match the manifest, ``ChecksumError`` when
    ``verify`` finds a damaged shard, and ``StorageError`` when an object
    store cannot be read.
    """
    target = os.fspath(path)
    if _names_an_artifact(target):
        target = _resolve(target, artifact_cache_dir)
    return _tessera.open(
        target,
        verify,
        cache_dir=cache_dir,
        cache_bytes=cache_bytes,
        storage_options=storage_options,
        fetch_threads=fetch_threads,
    )


def _names_an_artifact(target: str) -> bool:
    """Whether ``target`` is for the compiler to resolve: not a URL, not a
    directory, and, if it is a file, a YAML spec (any other file is a wrong
    path, and the reader's "a shard set is a directory" says so best)."""
    if "://" in target or os.path.isdir(target):
        return False
    if os.path.isfile(target):
        return target.endswith((".yaml", ".yml"))
    return True


def _resolve(target: str, artifact_cache_dir: Optional[PathArg]) -> str:
    """The shard-set directory a spec, hash prefix or name stands for."""
    try:
        exe = find_compiler()
    except CompilerNotFoundError as e:
        if os.path.exists(target):
            raise NotFoundError(
                2,
                f"a spec, not a shard-set directory; opening its artifact needs the tessera compiler ({e})",
                target,
            ) from None
        # Without the compiler a name cannot be looked up: the native
        # reader's "no such directory" is the honest answer.
        return target
    cmd = [exe, "inspect", "--path", target]
    if artifact_cache_dir is not None:
        cmd += ["--cache-dir", os.fspath(artifact_cache_dir)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise NotFoundError(2, f"could not run {exe} to resolve it: {e}", target) from None
    if proc.returncode != 0:
        message = proc.stderr.strip().removeprefix("error: ") or f"{exe} exited with status {proc.returncode}"
        raise NotFoundError(2, message, target)
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise NotFoundError(2, f"{exe} inspect --path printed nothing", target)
    return lines[-1]
