"""PyTorch adapter: a shard set as a ``torch.utils.data.IterableDataset``.

The reader does the batching, so use it with ``batch_size=None``::

    from torch.utils.data import DataLoader
    import tessera.torch

    data = tessera.torch.IterableDataset("artifacts/ctr", batch_size=4096, split="train", seed=7)
    loader = DataLoader(data, batch_size=None, num_workers=0, pin_memory=True)
    for epoch in range(epochs):
        data.set_epoch(epoch)
        for batch in loader:               # {"dense": Tensor (4096, 13), ...}
            ...

Work is split across distributed ranks (``torch.distributed``, when
initialized, or ``rank`` / ``world_size`` given explicitly) and across
DataLoader worker processes (``get_worker_info()``): batch ``k`` of a rank is
built by worker ``k mod num_workers``, and the DataLoader collects workers
round-robin, so a rank sees the same batch sequence whatever ``num_workers``
is, and the ranks together see every record of an epoch once (with
``last_batch="partial"``; ``"drop"`` skips the short tail).

With ``num_workers=0`` tensors are made with ``torch.from_numpy`` over the
reader's batch buffer: no copy after the batch is assembled, no read-only
warning (the buffer is the batch's own). Worker processes have to send
batches through shared memory, which copies them once.

The object pickles from its configuration; shard maps are opened and
prefetch threads started lazily, inside each worker's ``__iter__``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, Optional, Tuple, Union

try:
    import torch
    import torch.utils.data
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("tessera.torch needs PyTorch: pip install torch") from e

import tessera
from tessera.errors import ArgumentError

__all__ = ["IterableDataset"]

PathArg = Union[str, "os.PathLike[str]"]


class IterableDataset(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Batches of a tessera shard set for ``DataLoader(..., batch_size=None)``.

    Args:
        path: the shard-set directory.
        batch_size: records per batch on each rank.
        split: read only this split (``None``: the whole set).
        shuffle, seed: seeded per-epoch shuffle, or storage order.
        last_batch: ``"drop"``, ``"partial"`` (every record once) or ``"pad"``.
        rank, world_size: override the distributed rank; by default taken
            from ``torch.distributed`` when it is initialized, else 0 of 1.
        threads, prefetch: reader prefetch threads per process, and batches
            each builds ahead.
        verify: check every shard's checksum when a process opens the set.
        tensors: yield ``torch.Tensor`` values (default) or NumPy arrays.
    """

    def __init__(
        self,
        path: PathArg,
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
    ) -> None:
        super().__init__()
        if (rank is None) != (world_size is None):
            raise ArgumentError("give both rank and world_size, or neither")
        self.path = os.fspath(path)
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
        self.epoch = 0
        # Where the next iteration starts: (epoch, position) from load_state_dict.
        self._resume: Optional[Tuple[int, int]] = None
        self._start = 0
        self._yielded = 0
        self._ds: Optional[tessera.Dataset] = None
        self._ds_pid = -1
        # Open once in the constructing process: bad paths and arguments fail
        # here, not later inside a worker.
        self._loader(0, 1)

    # -- configuration -------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next iteration runs (call it before each epoch).

        Setting the epoch a ``load_state_dict`` restored keeps the restored
        position. With ``persistent_workers=True`` workers keep their copy,
        so create a new DataLoader iterator after changing the epoch.
        """
        if self._resume is not None and self._resume[0] == epoch:
            return
        self.epoch = int(epoch)
        self._resume = None

    def ranks(self) -> Tuple[int, int]:
        """``(rank, world_size)`` this process reads as."""
        if self.rank is not None and self.world_size is not None:
            return self.rank, self.world_size
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    # -- iteration -----------------------------------------------------------

    def _dataset(self) -> tessera.Dataset:
        # Maps survive fork, but reopen in a new process anyway: it is cheap
        # and keeps spawn and fork alike.
        if self._ds is None or self._ds_pid != os.getpid():
            ds = tessera.open(self.path, verify=self.verify)
            self._ds = ds.split(self.split) if self.split is not None else ds
            self._ds_pid = os.getpid()
        return self._ds

    def _loader(self, worker: int, num_workers: int) -> tessera.Loader:
        rank, world_size = self.ranks()
        return self._dataset().loader(
            self.batch_size,
            shuffle=self.shuffle,
            seed=self.seed,
            rank=rank,
            world_size=world_size,
            threads=self.threads,
            prefetch=self.prefetch,
            last_batch=self.last_batch,
            worker=worker,
            num_workers=num_workers,
        )

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        loader = self._loader(worker, num_workers)
        if self._resume is not None and self._resume[0] == self.epoch:
            start = self._resume[1]
            loader.load_state_dict({"seed": self.seed, "epoch": self.epoch, "position": start})
        else:
            start = 0
            loader.set_epoch(self.epoch)
        # In-process iteration (num_workers=0) consumes the resume point.
        if info is None:
            self._resume = None
            self._start = start
            self._yielded = 0
        bf16 = [f.name for f in self._dataset().fields if f.dtype == "bf16"]
        for batch in loader:
            if info is None:
                self._yielded += 1
            yield self._convert(batch, bf16) if self.tensors else batch

    @staticmethod
    def _convert(batch: Dict[str, Any], bf16: Any) -> Dict[str, Any]:
        out = {name: torch.from_numpy(array) for name, array in batch.items()}
        for name in bf16:
            out[name] = out[name].view(torch.bfloat16)
        return out

    def __len__(self) -> int:
        """Batches per epoch on this rank (over all workers together)."""
        return len(self._loader(0, 1))

    # -- checkpoints ---------------------------------------------------------

    def state_dict(self, batches: Optional[int] = None) -> Dict[str, Any]:
        """The position after ``batches`` batches of the current epoch.

        ``batches`` counts the batches the training loop took since the epoch
        started (or since the restored position). With ``num_workers=0`` it
        may be left out: the dataset counts what it yielded itself. With
        worker processes, the copies in the workers do the counting, so pass
        the loop's own step count.
        """
        start = self._start
        if self._resume is not None and self._resume[0] == self.epoch:
            start = self._resume[1]
            taken = 0 if batches is None else batches
        else:
            taken = self._yielded if batches is None else batches
        ds = self._dataset()
        rank, world_size = self.ranks()
        position = min(start + int(taken) * self.batch_size * world_size, len(ds))
        return {
            "format": "tessera-loader/1",
            "seed": self.seed,
            "epoch": self.epoch,
            "position": position,
            "shuffle": self.shuffle,
            "rows": len(ds),
            "batch_size": self.batch_size,
            "world_size": world_size,
            "last_batch": self.last_batch,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from a ``state_dict``: the next iteration resumes that
        epoch at the saved position (checked against this configuration)."""
        probe = self._loader(0, 1)
        probe.load_state_dict(state)  # validates seed, shuffle, size, position
        self.epoch = int(state["epoch"])
        self._resume = (self.epoch, int(state["position"]))
        self._start = self._resume[1]
        self._yielded = 0

    # -- pickling ------------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_ds"] = None
        state["_ds_pid"] = -1
        # Spawned workers have no process group: pin the rank seen here.
        if self.rank is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                state["rank"], state["world_size"] = dist.get_rank(), dist.get_world_size()
        return state

    def __repr__(self) -> str:
        return (
            f"tessera.torch.IterableDataset({self.path!r}, batch_size={self.batch_size}, "
            f"split={self.split!r}, shuffle={self.shuffle}, seed={self.seed}, "
            f"last_batch={self.last_batch!r}, epoch={self.epoch})"
        )
