"""PyTorch adapter: a shard set (or a mixture) as a ``torch.utils.data.IterableDataset``.

The reader does the batching, so use it with ``batch_size=None``::

    from torch.utils.data import DataLoader
    import tessera.torch

    data = tessera.torch.IterableDataset("artifacts/ctr", batch_size=4096, split="train", seed=7)
    loader = DataLoader(data, batch_size=None, num_workers=2, persistent_workers=True)
    for epoch in range(start_epoch, epochs):
        data.set_epoch(epoch)
        for batch in loader:               # {"dense": Tensor (4096, 13), ...}
            ...
            if time_to_checkpoint:
                save(data.state_dict())    # exact: no step count needed

Work is split across distributed ranks (``torch.distributed``, when
initialized, or ``rank`` / ``world_size`` given explicitly) and across
DataLoader worker processes (``get_worker_info()``): batch ``k`` of a rank is
built by worker ``k mod num_workers``, and the DataLoader collects workers
round-robin, so a rank sees the same batch sequence whatever ``num_workers``
is.

**The promise.** The batches of a rank are a pure function of ``(seed,
epoch, position)`` and the configuration. ``state_dict()`` returns that
position for the batches the training loop has received, at any moment
(before the first batch, mid-epoch, after the last, after a resume), with
any number of workers, persistent or not; ``load_state_dict`` continues
exactly there, also on another number of ranks or workers. How it knows:

* ``set_epoch`` and ``load_state_dict`` write the epoch and the start
  position into a small shared-memory block that every worker reads when it
  starts a pass, so persistent workers follow them.
* Importing this module wraps ``DataLoader.__iter__`` and the DataLoader
  iterator's ``__next__`` (for every dataset, at the cost of one
  ``isinstance`` check; other datasets are untouched) so that the dataset in
  the training process learns when a pass starts and how many batches the
  loop has received. Workers prefetch ahead; only batches handed to the loop
  count.
* ``torchdata``'s ``StatefulDataLoader`` is supported too: the iterator
  each worker runs has ``state_dict``/``load_state_dict`` (its own
  sub-stream position), which is the protocol that loader saves and
  restores per worker.

With ``num_workers=0`` tensors are made with ``torch.from_numpy`` over the
reader's batch buffer: no copy after the batch is assembled. Worker
processes send batches through shared memory, which copies them once.

The object pickles from its configuration; shard maps are opened and
prefetch threads started lazily, inside each process.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

try:
    import torch
    import torch.utils.data
    from torch.utils.data import dataloader as _dl
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("tessera.torch needs PyTorch: pip install torch") from e

import tessera
from tessera._mix import Mixture
from tessera._torch_stream import ANCHOR_BYTES, ANCHORED, EPOCH, GEN, START, Stream
from tessera.errors import ArgumentError

__all__ = ["IterableDataset"]

PathArg = Union[str, "os.PathLike[str]"]

STATE_FORMAT = "tessera-loader/1"

_passes = itertools.count(1)


class _Pass:
    """One pass over the DataLoader (or direct iteration) in the training process."""

    __slots__ = ("token", "epoch", "start", "delivered", "exhausted")

    def __init__(self, epoch: int, start: int) -> None:
        self.token = next(_passes)
        self.epoch = epoch
        self.start = start
        self.delivered = 0
        self.exhausted = False


class IterableDataset(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Batches of a tessera shard set or mixture for ``DataLoader(..., batch_size=None)``.

    Args:
        source: the shard-set directory, or a ``tessera.Mixture`` (``tessera.mix``).
        batch_size: records per batch on each rank.
        split: read only this split (``None``: the whole set; not for mixtures).
        shuffle, seed: seeded per-epoch shuffle, or storage order (a mixture
            has its own).
        last_batch: ``"drop"`` (default; every rank gets the same number of
            full batches), ``"pad"`` (same count, the last batch wraps
            around) or ``"partial"`` (every record once, but with
            ``world_size > 1`` ranks can get different batch counts, which
            hangs collective training).
        rank, world_size: override the distributed rank; by default taken
            from ``torch.distributed`` when it is initialized, else 0 of 1.
        threads, prefetch: reader prefetch threads per process, and batches
            each builds ahead.
        verify: check every shard's checksum when a process opens the set.
        tensors: yield ``torch.Tensor`` values (default) or NumPy arrays.
        shuffle_window: with ``shuffle``, shuffle the order of the shards and
            then the records inside each window of this many shards (0: the
            whole set), so that a set in an object store is read one window
            of shards at a time.
        cache_dir, cache_bytes, storage_options: for a set at a URL (or a
            compressed one): the local shard cache directory, its budget in
            bytes, and object-store settings, as for :func:`tessera.open`.
            Every worker process uses them.
    """

    def __init__(
        self,
        source: Union[PathArg, Mixture],
        batch_size: int,
        *,
        split: Optional[str] = None,
        shuffle: bool = True,
        seed: int = 0,
        last_batch: str = "drop",
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        threads: int = 1,
        prefetch: int = 2,
        verify: bool = False,
        tensors: bool = True,
        shuffle_window: int = 0,
        cache_dir: Optional[PathArg] = None,
        cache_bytes: Optional[int] = None,
        storage_options: Optional[Dict[str, str]] = None,
    ) -> None:
        super().__init__()
        if (rank is None) != (world_size is None):
            raise ArgumentError("give both rank and world_size, or neither")
        self.mixture: Optional[Mixture] = source if isinstance(source, Mixture) else None
        if self.mixture is not None:
            if split is not None:
                raise ArgumentError("a mixture has no splits: give each component's split to tessera.mix")
            self.path = None
            shuffle, seed = self.mixture.shuffle, self.mixture.seed
        else:
            self.path = os.fspath(source)  # type: ignore[arg-type]
        self.batch_size = int(batch_size)
        self.split = split
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.last_batch = last_batch
        self.rank = rank
        self.world_size = world_size
        self.threads = int(threads)
        self.prefetch = int(prefetch)
        self.verify = bool(verify)
        self.tensors = bool(tensors)
        if self.mixture is not None and shuffle_window:
            raise ArgumentError("a mixture shuffles inside its components; shuffle_window is for one set")
        self.shuffle_window = int(shuffle_window)
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.cache_bytes = cache_bytes
        self.storage_options = dict(storage_options) if storage_options else None
        # The training process's view of the stream (see the module docs).
        self.epoch = 0
        self._position = 0  # where a pass not started yet begins
        self._pending = False  # True after load_state_dict: the next pass resumes
        self._pass: Optional[_Pass] = None
        self._claim: Optional[_Pass] = None  # a pass a DataLoader began for in-process iteration
        self._anchor: Optional[Dict[str, Any]] = None  # mixture state restored by load_state_dict
        self._lock = threading.Lock()
        # In a worker: an epoch/position restored by StatefulDataLoader.
        self._local: Optional[Tuple[int, int]] = None
        self._source: Any = None
        self._source_pid = -1
        self._shared = torch.zeros(ANCHORED + 1, dtype=torch.int64).share_memory_()
        anchor_bytes = ANCHOR_BYTES if self.mixture is not None else 1
        self._anchor_bytes = torch.zeros(anchor_bytes, dtype=torch.uint8).share_memory_()
        # Open once in the constructing process: bad paths and arguments fail
        # here, not later inside a worker.
        self._quiet = False  # warn (mixed splits) once, at construction
        probe = self._loader(0, 1)
        self._quiet = True
        self._rows = int(probe.state_dict()["rows"])
        self._publish()

    # -- configuration -------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next pass runs (call it before each epoch).

        Setting the epoch a ``load_state_dict`` restored keeps the restored
        position, so ``for e in range(saved_epoch, n): data.set_epoch(e)``
        resumes correctly. Workers, persistent or not, follow it.
        """
        epoch = int(epoch)
        with self._lock:
            if self._pending and self.epoch == epoch:
                return
            self.epoch = epoch
            self._position = 0
            self._pending = False
            self._pass = None
            self._claim = None
        self._publish()

    def ranks(self) -> Tuple[int, int]:
        """``(rank, world_size)`` this process reads as."""
        if self.rank is not None and self.world_size is not None:
            return self.rank, self.world_size
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    # -- the shared block ----------------------------------------------------

    def _publish(self) -> None:
        """Writes what the next pass reads: epoch, start, mixture anchor."""
        start = self._position if self._pending else 0
        block = self._shared
        block[EPOCH] = self.epoch
        block[START] = start
        if self._anchor is not None:
            data = json.dumps(self._anchor).encode()
            if len(data) > len(self._anchor_bytes):
                raise ArgumentError(
                    f"the mixture state to restore is {len(data)} bytes of JSON, more than the "
                    f"{len(self._anchor_bytes)} that DataLoader workers can be sent (a schedule "
                    "history of very many weight changes)"
                )
            self._anchor_bytes[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            block[ANCHORED] = len(data)
        block[GEN] += 1

    def _begin_pass(self) -> _Pass:
        """A pass starts in the training process: fix its epoch and start."""
        with self._lock:
            start = self._position if self._pending else 0
            self._pending = False
            self._position = start
            p = _Pass(self.epoch, start)
            self._pass = p
        self._shared[EPOCH] = p.epoch
        self._shared[START] = p.start
        self._shared[GEN] += 1
        return p

    def _delivered(self, token: int) -> None:
        with self._lock:
            if self._pass is not None and self._pass.token == token:
                self._pass.delivered += 1

    def _exhausted(self, token: int) -> None:
        with self._lock:
            if self._pass is not None and self._pass.token == token:
                self._pass.exhausted = True

    # -- iteration -----------------------------------------------------------

    def _open(self) -> Any:
        # Maps survive fork, but reopen in a new process anyway: it is cheap
        # and keeps spawn and fork alike.
        if self._source is None or self._source_pid != os.getpid():
            if self.mixture is not None:
                self._source = self.mixture
            else:
                ds = tessera.open(
                    self.path,  # type: ignore[arg-type]
                    verify=self.verify,
                    cache_dir=self.cache_dir,
                    cache_bytes=self.cache_bytes,
                    storage_options=self.storage_options,
                )
                self._source = ds.split(self.split) if self.split is not None else ds
            self._source_pid = os.getpid()
        return self._source

    def _loader(self, worker: int, num_workers: int) -> tessera.Loader:
        rank, world_size = self.ranks()
        src = self._open()
        kwargs: Dict[str, Any] = dict(
            rank=rank,
            world_size=world_size,
            threads=self.threads,
            prefetch=self.prefetch,
            last_batch=self.last_batch,
            worker=worker,
            num_workers=num_workers,
        )
        if self.mixture is not None:
            loader: tessera.Loader = src.loader(self.batch_size, **kwargs)
            return loader
        with warnings.catch_warnings():
            if self._quiet:
                # Said once at construction, not again in every worker and pass.
                warnings.filterwarnings("ignore", message="this loader reads all", category=UserWarning)
            loader = src.loader(
                self.batch_size, shuffle=self.shuffle, seed=self.seed, shuffle_window=self.shuffle_window, **kwargs
            )
        return loader

    def __iter__(self) -> "Stream":
        info = torch.utils.data.get_worker_info()
        if info is None:
            with self._lock:
                claimed, self._claim = self._claim, None
            if claimed is not None:
                # A DataLoader (num_workers=0) began this pass and counts
                # what it hands out.
                return Stream(self, claimed.epoch, claimed.start, 0, 1, None)
            p = self._begin_pass()
            return Stream(self, p.epoch, p.start, 0, 1, p.token)
        if self._local is not None:
            # Restored by StatefulDataLoader for this pass only.
            (epoch, start), self._local = self._local, None
        else:
            block = self._shared.tolist()
            epoch, start = int(block[EPOCH]), int(block[START])
        return Stream(self, epoch, start, info.id, info.num_workers, None)

    def __len__(self) -> int:
        """Batches per epoch on this rank (over all workers together)."""
        return len(self._loader(0, 1))

    # -- checkpoints ---------------------------------------------------------

    def state_dict(self, batches: Optional[int] = None) -> Dict[str, Any]:
        """The position of the training loop in the current epoch.

        Exact at any moment, with or without worker processes: it counts
        the batches the DataLoader (or direct iteration) has handed to the
        loop in the current pass. ``batches`` overrides that count (the
        batches taken since the current pass started, or since the
        restored position before it starts). Once a pass has run to its
        end the position is the end of the epoch on every rank.
        """
        rank, world_size = self.ranks()
        g = self.batch_size * world_size
        if torch.utils.data.get_worker_info() is not None:
            # Inside a worker (StatefulDataLoader asks each worker): the
            # pass's epoch and start; the worker's stream holds the rest.
            block = self._shared.tolist()
            return self._state(int(block[EPOCH]), int(block[START]), world_size)
        with self._lock:
            p = self._pass
            if p is not None and p.epoch == self.epoch:
                start = p.start
                taken = p.delivered if batches is None else int(batches)
                done = p.exhausted and batches is None
            else:
                start = self._position if self._pending else 0
                taken = 0 if batches is None else int(batches)
                done = False
            epoch = self.epoch
        position = self._rows if done else min(start + taken * g, self._rows)
        return self._state(epoch, position, world_size)

    def _state(self, epoch: int, position: int, world_size: int) -> Dict[str, Any]:
        state: Dict[str, Any] = {
            "format": STATE_FORMAT,
            "seed": self.seed,
            "epoch": epoch,
            "position": position,
            "shuffle": self.shuffle,
            "shuffle_window": self.shuffle_window,
            "rows": self._rows,
            "batch_size": self.batch_size,
            "world_size": world_size,
            "last_batch": self.last_batch,
        }
        if self.mixture is not None:
            probe = self._probe()
            state["counts"] = probe.counts_at(epoch, position)
            state["schedule_history"] = probe.schedule_history()
        return state

    def _probe(self) -> tessera.Loader:
        """A loader in this process carrying the restored mixture anchor."""
        probe = self._loader(0, 1)
        if self._anchor is not None:
            probe.load_state_dict(self._anchor_state())
        return probe

    def _anchor_state(self) -> Dict[str, Any]:
        assert self._anchor is not None
        return {"seed": self.seed, "shuffle": self.shuffle, "shuffle_window": self.shuffle_window, **self._anchor}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from a ``state_dict``: the next pass resumes that epoch at
        the saved position (checked against this configuration), in this
        process and in every worker. For a mixture, the saved component
        counts carry over, so the weights may differ from the saved run's."""
        probe = self._loader(0, 1)
        probe.load_state_dict(state)  # validates seed, shuffle, size, position, counts
        info = torch.utils.data.get_worker_info()
        epoch, position = int(state["epoch"]), int(state["position"])
        if info is not None:
            # Inside a worker (StatefulDataLoader restoring this copy): only
            # this process's next pass, never the shared block.
            self._local = (epoch, position)
            self.epoch = epoch
            return
        with self._lock:
            self.epoch = epoch
            self._position = position
            self._pending = True
            self._pass = None
            self._claim = None
            if self.mixture is not None and "counts" in state:
                self._anchor = {"epoch": epoch, "position": position, "counts": _plain(dict(state["counts"]))}
                if state.get("schedule_history") is not None:
                    self._anchor["schedule_history"] = _plain(state["schedule_history"])
        self._publish()

    # -- pickling ------------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_source"] = None
        state["_source_pid"] = -1
        state["_lock"] = None
        state["_pass"] = None
        state["_claim"] = None
        # Spawned workers have no process group: pin the rank seen here.
        if self.rank is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                state["rank"], state["world_size"] = dist.get_rank(), dist.get_world_size()
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        what = repr(self.mixture) if self.mixture is not None else repr(self.path)
        return (
            f"tessera.torch.IterableDataset({what}, batch_size={self.batch_size}, "
            f"split={self.split!r}, shuffle={self.shuffle}, seed={self.seed}, "
            f"last_batch={self.last_batch!r}, epoch={self.epoch})"
        )


def _plain(value: Any) -> Any:
    """A state dict value as JSON-able lists, dicts, ints and floats (a
    checkpoint may hold tuples, or tensors for numbers)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.item()
    return value


# -- DataLoader hooks ------------------------------------------------------------
#
# The training process's dataset object has to know when a DataLoader pass
# starts (to fix the pass's epoch and start before workers read them) and
# how many batches the loop has received (workers prefetch ahead, so what
# they produced is not what the loop took). The DataLoader offers no public
# hook for either, so these two wrappers provide them, for tessera datasets
# only.

_original_iter = getattr(_dl.DataLoader, "__iter__", None)
_original_next = getattr(getattr(_dl, "_BaseDataLoaderIter", None), "__next__", None)


def _hooked_iter(self: Any) -> Any:
    ds = self.__dict__.get("dataset")
    if not isinstance(ds, IterableDataset):
        return _original_iter(self)  # type: ignore[misc]
    p = ds._begin_pass()
    if self.num_workers == 0:
        with ds._lock:
            ds._claim = p
    it = _original_iter(self)  # type: ignore[misc]
    it._tessera_pass = (ds, p.token)
    return it


def _hooked_next(self: Any) -> Any:
    tag = self.__dict__.get("_tessera_pass")
    if tag is None:
        return _original_next(self)  # type: ignore[misc]
    ds, token = tag
    try:
        data = _original_next(self)  # type: ignore[misc]
    except StopIteration:
        ds._exhausted(token)
        raise
    ds._delivered(token)
    return data


#: True when the DataLoader hooks are installed (a PyTorch whose DataLoader
#: internals differ leaves them out: then pass the step count to state_dict).
HOOKED = _original_iter is not None and _original_next is not None
if HOOKED and not getattr(_original_iter, "_tessera_hook", False):
    _hooked_iter._tessera_hook = True  # type: ignore[attr-defined]
    _dl.DataLoader.__iter__ = _hooked_iter  # type: ignore[method-assign]
    _dl._BaseDataLoaderIter.__next__ = _hooked_next  # type: ignore[method-assign]
