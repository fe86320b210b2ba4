"""The per-process side of :mod:`tessera.torch`: the batch stream one
process yields in one pass, and the conversion of a reader batch into
tensors. The layout of the shared block the dataset and its workers read
lives here too, beside the stream that reads it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

import torch

from tessera.errors import ArgumentError

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from tessera.torch import IterableDataset

# Layout of the shared block: what the next pass reads. A mixture's restored
# state (counts and schedule history, as JSON) is in a second shared block
# of bytes; ANCHORED holds its length (0: none).
GEN, EPOCH, START, ANCHORED = range(4)
ANCHOR_BYTES = 1 << 20

TORCH_DTYPES = {
    "u8": torch.uint8,
    "i8": torch.int8,
    # Unsigned 16/32/64-bit tensors exist from PyTorch 2.3 on.
    "u16": getattr(torch, "uint16", None),
    "i16": torch.int16,
    "u32": getattr(torch, "uint32", None),
    "i32": torch.int32,
    "u64": getattr(torch, "uint64", None),
    "i64": torch.int64,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "f64": torch.float64,
}


def convert(batch: Dict[str, Any], fields: List[Tuple[str, Any, int, int, Tuple[int, ...], Tuple[int, ...]]]) -> Dict[str, Any]:
    """Tensors for every field over one tensor of the whole batch buffer:
    no copy in this process, and one shared-memory block (not one per
    field) when a worker sends the batch."""
    owner = next(iter(batch.values())).base
    whole = torch.from_numpy(owner.buffer())
    rows, stride = owner.rows, owner.stride
    typed: Dict[Any, Any] = {}
    out: Dict[str, Any] = {}
    for name, dtype, size, offset, shape, inner in fields:
        view = typed.get(dtype)
        if view is None:
            view = typed[dtype] = whole.view(dtype)
        out[name] = view.as_strided((rows, *shape), (stride // size, *inner), offset // size)
    return out


class Stream:
    """The batches one process yields in one pass: the rank's batches
    ``worker, worker + num_workers, ...`` from ``start`` of ``epoch``.

    Its ``state_dict``/``load_state_dict`` are this sub-stream's position,
    which ``torchdata``'s ``StatefulDataLoader`` saves and restores per worker.
    """

    def __init__(self, owner: "IterableDataset", epoch: int, start: int, worker: int, num_workers: int,
                 token: Optional[int]) -> None:
        self.owner = owner
        self.epoch = epoch
        self.start = start
        self.worker = worker
        self.num_workers = num_workers
        self.yielded = 0  # batches of this sub-stream handed out
        self.token = token  # set when this stream counts deliveries itself
        self._it: Optional[Iterator[Dict[str, Any]]] = None
        self._fields: List[Tuple[str, Any, int, int, Tuple[int, ...], Tuple[int, ...]]] = []

    def __iter__(self) -> "Stream":
        return self

    def _start(self) -> Iterator[Dict[str, Any]]:
        owner = self.owner
        loader = owner._loader(self.worker, self.num_workers)
        block = owner._shared.tolist()
        if owner.mixture is not None and block[ANCHORED]:
            n = int(block[ANCHORED])
            anchor = json.loads(owner._anchor_bytes[:n].numpy().tobytes())
            loader.load_state_dict({"seed": owner.seed, "shuffle": owner.shuffle, **anchor})
        # Skip the rounds this sub-stream already yielded: round j of all
        # workers starts j * num_workers batches after `start`.
        rank, world_size = owner.ranks()
        g = owner.batch_size * world_size
        at = min(self.start + self.yielded * self.num_workers * g, owner._rows)
        loader.load_state_dict({"seed": owner.seed, "shuffle": owner.shuffle,
                                "shuffle_window": owner.shuffle_window, "epoch": self.epoch, "position": at})
        self._fields = []
        for f in owner._open().fields:
            dtype = TORCH_DTYPES[f.dtype]
            if dtype is None:
                raise ArgumentError(f"field {f.name!r} has dtype {f.dtype}, which needs PyTorch 2.3 or later")
            shape = tuple(f.shape)
            # Row-major element strides inside one record.
            inner: List[int] = []
            acc = 1
            for d in reversed(shape):
                inner.insert(0, acc)
                acc *= d
            self._fields.append((f.name, dtype, f.numpy_dtype.itemsize, f.offset, shape, tuple(inner)))
        return iter(loader)

    def __next__(self) -> Dict[str, Any]:
        if self._it is None:
            self._it = self._start()
        try:
            batch = next(self._it)
        except StopIteration:
            if self.token is not None:
                self.owner._exhausted(self.token)
            raise
        self.yielded += 1
        if self.token is not None:
            self.owner._delivered(self.token)
        return convert(batch, self._fields) if self.owner.tensors else batch

    def state_dict(self) -> Dict[str, Any]:
        return {"epoch": self.epoch, "start": self.start, "yielded": self.yielded,
                "worker": self.worker, "num_workers": self.num_workers}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if int(state["num_workers"]) != self.num_workers or int(state["worker"]) != self.worker:
            raise ArgumentError(
                f"stream state of worker {state['worker']} of {state['num_workers']} "
                f"cannot continue as worker {self.worker} of {self.num_workers}"
            )
        self.epoch, self.start, self.yielded = int(state["epoch"]), int(state["start"]), int(state["yielded"])
        self._it = None
