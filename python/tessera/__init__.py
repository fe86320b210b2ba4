"""tessera: read compiled, fixed-stride shard sets straight into NumPy and PyTorch.

A shard set (built by the ``tessera`` compiler, or by :func:`write`) holds
records of a fixed layout. Reading it costs one copy per batch, into one
contiguous buffer that every field of the batch views::

    import tessera

    ds = tessera.open("artifacts/ctr")            # maps the shards, checks headers
    ds.fields                                     # [Field(name='dense', dtype='f32', shape=(13,), ...), ...]
    train = ds.split("train")
    loader = train.loader(4096, shuffle=True, seed=7)
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader:                      # {"dense": ndarray (4096, 13), ...}
            ...

A shard set pushed to an object store (``tessera push``, or :func:`push`) is
opened by URL the same way, ``tessera.open("s3://bucket/sets/ctr")``: shards
are fetched into a local cache as batches need them (see :func:`open`).
Like the ``tessera`` command line, :func:`open` also takes a spec file (its
cached artifact), a hash prefix or a dataset name.

Orders depend only on ``(seed, epoch)``, never on thread timing.
``ds.transform(rows)`` applies the artifact's transforms (frozen statistics,
vocabularies, hash) to new rows and returns the dict a loader yields for
them, byte for byte what the build would have stored.
:func:`mix` reads several sets as one weighted stream (exactly resumable,
also with new weights). :mod:`tessera.torch` adapts a shard set or a mixture
to ``torch.utils.data``. docs/ORDER.md states what is promised.

Element types map to NumPy as their names say; ``bf16`` fields, which NumPy
lacks, are ``uint16`` arrays of the raw bits (``tessera.torch`` gives
``torch.bfloat16`` tensors).
"""

from __future__ import annotations

from tessera import errors
from tessera._build import build, find_compiler
from tessera._tessera import (
    FORMAT_VERSION,
    Batch,
    BatchIterator,
    Dataset,
    Field,
    Loader,
    __version__,
    push,
)
from tessera._mix import Mixture, mix
from tessera._open import open
from tessera._write import write
from tessera.errors import (
    AlreadyExistsError,
    ArgumentError,
    BuildError,
    ChecksumError,
    CompilerNotFoundError,
    FormatError,
    NotFoundError,
    StorageError,
    TesseraError,
    TransformError,
    UnsupportedVersionError,
)

__all__ = [
    "FORMAT_VERSION",
    "AlreadyExistsError",
    "ArgumentError",
    "Batch",
    "BatchIterator",
    "BuildError",
    "ChecksumError",
    "CompilerNotFoundError",
    "Dataset",
    "Field",
    "FormatError",
    "Loader",
    "Mixture",
    "NotFoundError",
    "StorageError",
    "TesseraError",
    "TransformError",
    "UnsupportedVersionError",
    "__version__",
    "build",
    "errors",
    "find_compiler",
    "mix",
    "open",
    "push",
    "write",
]
