"""Exceptions raised by tessera.

Every exception derives from :class:`TesseraError`, and also from the built-in
exception a caller would expect, so either can be caught::

    try:
        ds = tessera.open(path)
    except FileNotFoundError:      # also tessera.NotFoundError
        ...
    except ValueError:             # also tessera.FormatError
        ...

Messages name the file they are about.
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "TesseraError",
    "FormatError",
    "ChecksumError",
    "UnsupportedVersionError",
    "StorageError",
    "NotFoundError",
    "AlreadyExistsError",
    "ArgumentError",
    "TransformError",
    "BuildError",
    "CompilerNotFoundError",
]


class TesseraError(Exception):
    """Base class of every exception tessera raises on purpose."""


class FormatError(TesseraError, ValueError):
    """A shard set's files are corrupt, truncated, or disagree with the manifest."""


class ChecksumError(FormatError):
    """A shard file's blake3 checksum does not match the manifest (``verify=True``)."""


class UnsupportedVersionError(FormatError):
    """The shard set was written in a format version this reader does not read."""


class StorageError(TesseraError, OSError):
    """An operating-system error on a file; ``errno`` and ``filename`` are set."""


class NotFoundError(StorageError, FileNotFoundError):
    """A shard set, its manifest, or a shard file it lists does not exist."""


class AlreadyExistsError(StorageError, FileExistsError):
    """The target of :func:`tessera.write` exists already (it never overwrites)."""


class ArgumentError(TesseraError, ValueError):
    """An argument cannot be honoured (bad batch size, unknown split, ...)."""


class TransformError(TesseraError, ValueError):
    """Rows cannot be transformed: a column the fields read is missing, a value
    does not convert to the type the build saw, a null meets a field without
    ``fill_null``, or an expression needs DataFusion (the ``tessera``
    command). The message names the column or field and the row."""


class BuildError(TesseraError):
    """``tessera build`` failed; the message holds the compiler's error output.

    Attributes:
        spec: the spec file that was being built.
        returncode: the compiler's exit status (``None`` if it did not run).
        stderr: everything the compiler wrote to standard error.
    """

    def __init__(
        self,
        message: str,
        spec: Optional[str] = None,
        returncode: Optional[int] = None,
        stderr: str = "",
    ) -> None:
        super().__init__(message)
        self.spec = spec
        self.returncode = returncode
        self.stderr = stderr


class CompilerNotFoundError(BuildError, FileNotFoundError):
    """The ``tessera`` compiler binary is neither on ``PATH`` nor at ``TESSERA_BIN``."""

    def __init__(self, message: str) -> None:
        BuildError.__init__(self, message)
