"""Type stubs of the native module ``tessera._tessera`` (checked by tests/test_stubs.py)."""

import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union, final

import numpy as np
import numpy.typing as npt

__version__: str
FORMAT_VERSION: int

_Path = Union[str, "os.PathLike[str]"]
_Record = Dict[str, npt.NDArray[Any]]

def open(
    path: _Path,
    verify: bool = False,
    *,
    cache_dir: Optional[_Path] = None,
    cache_bytes: Optional[int] = None,
    storage_options: Optional[Dict[str, str]] = None,
    fetch_threads: Optional[int] = None,
) -> Dataset:
    """Opens the shard set in directory ``path``, or at an object-store URL."""

def push(
    path: _Path,
    url: str,
    *,
    concurrency: int = 4,
    storage_options: Optional[Dict[str, str]] = None,
) -> Dict[str, Any]:
    """Uploads the shard set in directory ``path`` to an object-store URL."""

def write_shard_set(
    path: _Path,
    fields: Sequence[Tuple[str, str, Sequence[int]]],
    columns: Sequence[npt.NDArray[np.uint8]],
    splits: Sequence[Tuple[str, int]],
    target_bytes: int,
    name: Optional[str] = None,
    stats_json: Optional[str] = None,
) -> str:
    """Writes a shard set from byte columns; low level, see ``tessera.write``."""

def mixture(
    components: Sequence[Tuple[str, Dataset]],
    schedule: Sequence[Tuple[int, Sequence[float]]],
    seed: int,
    epoch_samples: Optional[int] = None,
    shuffle: bool = True,
) -> Mixture:
    """Builds a mixture; see ``tessera.mix``."""

@final
class Mixture:
    """A weighted mixture of datasets with the same record layout."""

    def __len__(self) -> int: ...
    @property
    def names(self) -> List[str]: ...
    @property
    def fields(self) -> List[Field]: ...
    @property
    def stride(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def shuffle(self) -> bool: ...
    def counts_at(self, g: int) -> List[int]: ...
    def pick(self, g: int) -> Tuple[int, int]: ...
    def loader(
        self,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = True,
        threads: int = 2,
        prefetch: int = 2,
        *,
        last_batch: Optional[str] = None,
        worker: int = 0,
        num_workers: int = 1,
    ) -> Loader: ...

@final
class Field:
    """One field of the record layout."""

    @property
    def name(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def offset(self) -> int: ...
    @property
    def numpy_dtype(self) -> np.dtype[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    __hash__: None  # type: ignore[assignment]

@final
class Dataset:
    """An open shard set, or one split of it."""

    def __len__(self) -> int: ...
    def __getitem__(self, key: Union[int, slice, Sequence[int], npt.NDArray[np.integer[Any]]], /) -> _Record: ...
    @property
    def fields(self) -> List[Field]: ...
    @property
    def splits(self) -> Dict[str, int]: ...
    @property
    def stats(self) -> Any: ...
    @property
    def manifest(self) -> Dict[str, Any]: ...
    def split(self, name: str) -> Dataset: ...
    @property
    def split_name(self) -> Optional[str]: ...
    @property
    def row_range(self) -> Tuple[int, int]: ...
    @property
    def path(self) -> str: ...
    @property
    def stride(self) -> int: ...
    @property
    def is_cached(self) -> bool: ...
    def cache_stats(self) -> Optional[Dict[str, Any]]: ...
    def verify(self) -> None: ...
    def loader(
        self,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = True,
        threads: int = 2,
        prefetch: int = 2,
        *,
        last_batch: Optional[str] = None,
        worker: int = 0,
        num_workers: int = 1,
        shuffle_window: int = 0,
    ) -> Loader: ...

@final
class Loader:
    """An iterable over the batches of a dataset for one rank."""

    def __iter__(self) -> BatchIterator: ...
    def __len__(self) -> int: ...
    def set_epoch(self, epoch: int) -> None: ...
    @property
    def epoch(self) -> int: ...
    def state_dict(self) -> Dict[str, Any]: ...
    def load_state_dict(self, state: Dict[str, Any]) -> None: ...
    def counts_at(self, epoch: int, position: int) -> Optional[Dict[str, int]]: ...
    @property
    def dataset(self) -> Optional[Dataset]: ...
    @property
    def mixture(self) -> Optional[Mixture]: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def shuffle(self) -> bool: ...
    @property
    def seed(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def last_batch(self) -> str: ...
    @property
    def threads(self) -> int: ...
    @property
    def prefetch(self) -> int: ...
    @property
    def worker(self) -> int: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def shuffle_window(self) -> int: ...
    def access_plan(self, epoch: int, and_next: bool = False) -> List[List[int]]: ...

@final
class BatchIterator:
    """The batches of one epoch, in order."""

    def __iter__(self) -> BatchIterator: ...
    def __next__(self) -> _Record: ...
    @property
    def wait_seconds(self) -> float: ...
    def __length_hint__(self) -> int: ...

@final
class Batch:
    """The buffer of one batch: the ``base`` of its field arrays."""

    @property
    def rows(self) -> int: ...
    @property
    def stride(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def address(self) -> int: ...
    def buffer(self) -> npt.NDArray[np.uint8]: ...
    @property
    def index(self) -> int: ...
    def __len__(self) -> int: ...
