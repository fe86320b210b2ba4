"""``tessera.mix``: several shard sets (or splits) read as one weighted stream.

The native part (``tessera._tessera.Mixture``) does the work; this wrapper
keeps the configuration, so a mixture pickles (for DataLoader workers) and
the components can be named by path.
"""

from __future__ import annotations

import math
import numbers
import os
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from tessera import _tessera
from tessera._open import open as _open_set
from tessera.errors import ArgumentError

Source = Union[str, "os.PathLike[str]", _tessera.Dataset]
ComponentArg = Union[Tuple[Source, float], Tuple[Source, str, float]]
ScheduleArg = Optional[Union[Sequence[Tuple[int, Mapping[str, float]]], Mapping[int, Mapping[str, float]]]]


def _open(source: Any, split: Optional[str], name: str) -> Tuple[_tessera.Dataset, Tuple[str, Optional[str]]]:
    if isinstance(source, _tessera.Dataset):
        if split is not None:
            source = source.split(split)
        _warn_if_splits_mixed(source, name)
        return source, (source.path, source.split_name)
    if isinstance(source, (str, os.PathLike)):
        ds = _open_set(source)
        if split is not None:
            ds = ds.split(split)
        _warn_if_splits_mixed(ds, name)
        return ds, (ds.path, split)
    raise ArgumentError(f"mixture component {name!r}: expected a path or a tessera.Dataset, got {type(source).__name__}")


def _warn_if_splits_mixed(ds: _tessera.Dataset, name: str) -> None:
    splits = ds.splits
    if ds.split_name is not None or len(splits) < 2 or ds.row_range != (0, sum(splits.values())):
        return
    listed = ", ".join(f"{s} ({n} records)" for s, n in splits.items())
    first = next(iter(splits))
    warnings.warn(
        f"mixture component {name!r} reads all {len(splits)} splits of {ds.path} as one: {listed}; "
        f"to read one, give (path, {first!r}, weight)",
        UserWarning,
        stacklevel=5,
    )


class Mixture:
    """A weighted mixture of datasets with the same fields; see :func:`mix`."""

    def __init__(
        self,
        components: Mapping[str, ComponentArg],
        *,
        seed: int = 0,
        schedule: ScheduleArg = None,
        epoch_samples: Optional[int] = None,
        shuffle: bool = True,
        unit: str = "samples",
        tokens_field: Optional[str] = None,
    ) -> None:
        if unit not in ("samples", "tokens"):
            raise ArgumentError(f"tessera.mix: unit must be 'samples' or 'tokens', got {unit!r}")
        if not isinstance(components, Mapping) or not components:
            raise ArgumentError("tessera.mix needs a non-empty dict {name: (path, weight)}")
        seed = _unsigned("seed", seed, 0)
        if epoch_samples is not None:
            epoch_samples = _unsigned("epoch_samples", epoch_samples, 1)
        names: List[str] = []
        opened: List[Tuple[str, _tessera.Dataset]] = []
        where: List[Tuple[str, Optional[str]]] = []
        weights: List[float] = []
        for name, spec in components.items():
            if not isinstance(name, str):
                raise ArgumentError(f"mixture component names must be strings, got {name!r}")
            if not isinstance(spec, tuple) or len(spec) not in (2, 3):
                raise ArgumentError(
                    f"mixture component {name!r}: expected (path, weight) or (path, split, weight), got {spec!r}"
                )
            split = spec[1] if len(spec) == 3 else None
            if split is not None and not isinstance(split, str):
                raise ArgumentError(f"mixture component {name!r}: the split must be a name, got {split!r}")
            ds, loc = _open(spec[0], split, name)
            names.append(name)
            opened.append((name, ds))
            where.append(loc)
            weights.append(_weight(spec[-1], name, 0))
        steps: List[Tuple[int, List[float]]] = [(0, weights)]
        if isinstance(schedule, Mapping):
            schedule = sorted(schedule.items())
        for item in schedule or ():
            if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[1], Mapping):
                raise ArgumentError(f"a schedule step is (first sample, {{name: weight}}), got {item!r}")
            start, changes = _sample(item[0]), item[1]
            unknown = sorted(set(changes) - set(names))
            if unknown:
                raise ArgumentError(f"schedule step at sample {start} names unknown components {unknown} (known: {names})")
            # Components a step does not name keep their weight.
            new = list(steps[-1][1])
            for i, n in enumerate(names):
                if n in changes:
                    new[i] = _weight(changes[n], n, start)
            if start == 0:
                steps[0] = (0, new)
            elif start <= steps[-1][0]:
                raise ArgumentError(f"schedule steps must be in increasing sample order ({start} after {steps[-1][0]})")
            else:
                steps.append((start, new))
        self._config: Dict[str, Any] = {
            "where": where,
            "names": names,
            "steps": steps,
            "seed": seed,
            "epoch_samples": epoch_samples,
            "shuffle": bool(shuffle),
            "unit": unit,
            "tokens_field": tokens_field,
        }
        # With unit="tokens" a weight is a share of tokens: the interleave,
        # which counts samples, gets each weight divided by the component's
        # mean tokens per sample.
        self._tokens_per_sample: Optional[Dict[str, float]] = None
        native_steps = steps
        if unit == "tokens":
            per = [_tokens_per_sample(ds, n, tokens_field) for n, ds in opened]
            self._tokens_per_sample = dict(zip(names, per))
            native_steps = [(start, [w / t for w, t in zip(ws, per)]) for start, ws in steps]
        self._native = _tessera.mixture(opened, native_steps, seed, epoch_samples, bool(shuffle))

    # -- reading ----------------------------------------------------------------

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
    ) -> _tessera.Loader:
        """An iterable over batches, like ``Dataset.loader`` (the seed and
        shuffle are the mixture's). Its ``state_dict`` also holds every
        component's count, so it can be restored with other weights."""
        return self._native.loader(
            batch_size,
            rank,
            world_size,
            drop_last,
            threads,
            prefetch,
            last_batch=last_batch,
            worker=worker,
            num_workers=num_workers,
        )

    def __len__(self) -> int:
        """Samples per mixture epoch."""
        return len(self._native)

    @property
    def names(self) -> List[str]:
        """Component names, in order."""
        return list(self._native.names)

    @property
    def fields(self) -> List[_tessera.Field]:
        return self._native.fields

    @property
    def stride(self) -> int:
        return self._native.stride

    @property
    def seed(self) -> int:
        return self._native.seed

    @property
    def shuffle(self) -> bool:
        return self._native.shuffle

    @property
    def schedule(self) -> List[Tuple[int, Dict[str, float]]]:
        """``[(first sample, {name: weight}), ...]`` as given (weights not normalized)."""
        return [(s, dict(zip(self._config["names"], w))) for s, w in self._config["steps"]]

    @property
    def unit(self) -> str:
        """What a weight is a share of: ``"samples"`` or ``"tokens"``."""
        return str(self._config["unit"])

    @property
    def tokens_per_sample(self) -> Optional[Dict[str, float]]:
        """With ``unit="tokens"``: each component's mean tokens (not padding)
        per sample, by which its weights were divided."""
        return None if self._tokens_per_sample is None else dict(self._tokens_per_sample)

    def counts_at(self, sample: int) -> Dict[str, int]:
        """Samples each component contributed to global samples ``0..sample``."""
        return dict(zip(self._config["names"], self._native.counts_at(sample)))

    def pick(self, sample: int) -> Tuple[str, int]:
        """Global sample ``sample``: ``(component name, record index in it)``."""
        c, i = self._native.pick(sample)
        return self._config["names"][c], i

    # -- pickling ---------------------------------------------------------------

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return (_rebuild, (self._config,))

    def __repr__(self) -> str:
        parts = ", ".join(f"{n!r}: {w:g}" for n, w in zip(self._config["names"], self._config["steps"][0][1]))
        return f"tessera.Mixture({{{parts}}}, seed={self.seed}, epoch_samples={len(self)})"


def _is_number(value: Any, kind: type) -> bool:
    # bool is an int to Python, but a weight or a count of True is a
    # mistake, not a number (numpy's bool is not a numbers.Real at all).
    return isinstance(value, kind) and not isinstance(value, bool)


def _weight(value: Any, name: str, at: int) -> float:
    """A component's weight: a real number (not a bool or a string), finite, >= 0."""
    where = f"weight of mixture component {name!r} at sample {at}"
    if not _is_number(value, numbers.Real):
        raise TypeError(f"{where} must be a number, got {type(value).__name__} {value!r}")
    w = float(value)
    if not math.isfinite(w) or w < 0:
        raise ArgumentError(f"{where} is {value!r}; weights must be finite and >= 0")
    return w


def _unsigned(arg: str, value: Any, least: int) -> int:
    """An integer argument in ``least .. 2**64 - 1`` (the native side's range)."""
    if not _is_number(value, numbers.Integral):
        raise TypeError(f"tessera.mix: {arg} must be an integer, got {type(value).__name__} {value!r}")
    v = int(value)
    if not least <= v < 2**64:
        raise ArgumentError(f"tessera.mix: {arg} must be an integer in {least}..2**64-1, got {v}")
    return v


def _sample(value: Any) -> int:
    """The first global sample of a schedule step."""
    if not _is_number(value, numbers.Integral):
        raise TypeError(
            f"a schedule step starts at a global sample (an integer), got {type(value).__name__} {value!r}"
        )
    v = int(value)
    if not 0 <= v < 2**64:
        raise ArgumentError(f"schedule step at sample {v}: samples count from 0 (to 2**64-1)")
    return v


def _rebuild(config: Dict[str, Any]) -> Mixture:
    comps: Dict[str, Any] = {}
    for name, (path, split), w in zip(config["names"], config["where"], config["steps"][0][1]):
        comps[name] = (path, split, w) if split is not None else (path, w)
    steps = [(s, dict(zip(config["names"], w))) for s, w in config["steps"][1:]]
    return Mixture(
        comps,
        seed=config["seed"],
        schedule=steps,
        epoch_samples=config["epoch_samples"],
        shuffle=config["shuffle"],
        unit=config.get("unit", "samples"),
        tokens_field=config.get("tokens_field"),
    )


def _tokens_per_sample(ds: _tessera.Dataset, name: str, field: Optional[str]) -> float:
    """Mean tokens per sample of a component: for a packed set, its build's
    token count over its windows; otherwise the non-padding elements of the
    token field (``field``, or the one field with a ``tokenize`` step),
    counted over every record."""
    manifest = ds.manifest
    spec = manifest.get("spec") or {}
    pack = spec.get("pack")
    where = f"mixture component {name!r}"
    if pack and field in (None, pack.get("field")):
        figures = (manifest.get("build") or {}).get("pack") or {}
        chosen = [figures[ds.split_name]] if ds.split_name in figures else list(figures.values())
        tokens = sum(int(f.get("tokens", 0)) for f in chosen)
        windows = sum(int(f.get("windows", 0)) for f in chosen)
        if windows == 0 or tokens == 0:
            raise ArgumentError(f"{where}: its packed windows hold no tokens")
        return tokens / windows
    fields = spec.get("fields") or []
    if field is None:
        tok = [f["name"] for f in fields
               if any(isinstance(t, dict) and "tokenize" in t for t in f.get("transforms") or [])]
        if len(tok) != 1:
            raise ArgumentError(
                f"{where}: unit='tokens' needs the token field; name it with tokens_field= "
                f"(fields: {[f.name for f in ds.fields]})")
        field = tok[0]
    if field not in [f.name for f in ds.fields]:
        raise ArgumentError(f"{where}: no field {field!r} (fields: {[f.name for f in ds.fields]})")
    pad = next((f.get("pad") for f in fields if f.get("name") == field), None)
    pad = 0 if pad is None else pad
    import numpy as np

    n = len(ds)
    if n == 0:
        raise ArgumentError(f"{where}: the set is empty")
    total = 0
    step = 65536
    for a in range(0, n, step):
        values = np.asarray(ds[a:min(n, a + step)][field])
        total += int(np.count_nonzero(values != pad))
    if total == 0:
        raise ArgumentError(f"{where}: field {field!r} holds no tokens (every element is the pad {pad})")
    return total / n


def mix(
    components: Mapping[str, ComponentArg],
    *,
    seed: int = 0,
    schedule: ScheduleArg = None,
    epoch_samples: Optional[int] = None,
    shuffle: bool = True,
    unit: str = "samples",
    tokens_field: Optional[str] = None,
) -> Mixture:
    """A weighted mixture of shard sets (or splits) with the same fields::

        data = tessera.mix({"web": ("sets/web", 0.7), "code": ("sets/code", "train", 0.3)}, seed=1,
                           schedule=[(1_000_000, {"web": 0.5, "code": 0.5})])
        for batch in data.loader(4096):
            ...

    Component ``c``'s ``k``-th sample is position ``k mod n_c`` of its own
    epoch ``k div n_c`` (sampling without replacement; a component that runs
    out starts its next, reshuffled epoch on its own). Which component each
    global sample comes from is a deterministic interleave in proportion to
    the weights in force (``schedule`` changes the named components' weights
    from a global sample on). A mixture epoch is ``epoch_samples`` samples
    (default: the components' total size). Everything is a pure function of
    ``(seed, schedule, sample)``; see docs/ORDER.md.

    ``unit="tokens"`` makes every weight (and schedule weight) a share of
    tokens rather than of samples: each is divided by the component's mean
    tokens per sample (:attr:`Mixture.tokens_per_sample`) before the
    interleave. For a packed set that is its build's tokens over its windows
    (padding left out); otherwise the elements of the token field that are
    not its ``pad`` (``tokens_field``, default the field with a ``tokenize``
    step), counted once when the mixture is made.
    """
    return Mixture(components, seed=seed, schedule=schedule, epoch_samples=epoch_samples, shuffle=shuffle,
                   unit=unit, tokens_field=tokens_field)
