#!/usr/bin/env python3
"""Python loader throughput: tessera against .npy files read with np.load(mmap_mode="r").

Builds a Criteo-like set (13 f32 dense features, 26 i32 categorical ids and an
f32 label: 160-byte records; 2M rows by default), stores it both as a tessera
shard set and as one .npy file per field, reads each once so both sit in the
page cache, then measures in one run:

  sequential  tessera loader, shuffle=False      vs  np.load(mmap) slicing, copied into batch arrays
  shuffled    tessera loader, seeded permutation vs  np.load(mmap) fancy indexing m[perm[i:i+B]]

Both sides produce the same thing: per batch, one in-memory array per field
(tessera's are views into one batch buffer). A plain slice of a memory map
would be a lazy view that has not read anything yet, so the baseline copies
it (`np.array(m[a:b])`), which is what reaching the training step costs.
tessera runs with `--threads` prefetch threads (default 2) and with
`threads=0` (each batch built inside `next()`, GIL released); the ratio
checked against the bar is the former's. Readers are interleaved epoch by
epoch and the median epoch is reported.

It also measures how much of the time an iterating loop holds the GIL:
  * directly: the loop's wall time minus the time `next()` spent waiting with
    the GIL released (`BatchIterator.wait_seconds`), over the wall time;
  * by a second Python thread that counts in a loop: its rate beside the
    iterating loop, against its rate beside the same loader running in a child
    process (same CPU load from the prefetch threads, no shared GIL).

    python benches/python_loader.py                # 2M rows, batch 4096
    python benches/python_loader.py --rows 500000  # quicker

Results vary with machine load; the script prints the load average it saw.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import multiprocessing.synchronize
import os
import statistics
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

import tessera

FIELDS = {"dense": (np.float32, (13,)), "cat": (np.int32, (26,)), "label": (np.float32, ())}


def generate(rows: int, seed: int = 0) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((rows, 13), dtype=np.float32)
    cat = rng.integers(0, 1 << 20, size=(rows, 26), dtype=np.int32)
    label = (rng.random(rows) < 0.25).astype(np.float32)
    return {"dense": dense, "cat": cat, "label": label}


def prepare(root: str, rows: int) -> Tuple[str, Dict[str, str]]:
    """Writes both stores under `root` (reused when already there)."""
    tset = os.path.join(root, f"tessera-{rows}")
    npy = {name: os.path.join(root, f"npy-{rows}", f"{name}.npy") for name in FIELDS}
    stamp = os.path.join(root, f"done-{rows}.json")
    if os.path.exists(stamp):
        return tset, npy
    import shutil

    shutil.rmtree(tset, ignore_errors=True)
    os.makedirs(os.path.dirname(npy["dense"]), exist_ok=True)
    t = time.perf_counter()
    cols = generate(rows)
    tessera.write(tset, cols)
    for name, path in npy.items():
        np.save(path, cols[name])
    with open(stamp, "w") as f:
        json.dump({"rows": rows}, f)
    print(f"wrote {rows} rows in both formats in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return tset, npy


def warm(paths: List[str]) -> None:
    """Reads every byte once so the measurement starts from the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(8 << 20):
                pass


# -- one epoch of each reader; each returns the number of samples produced --


def npy_sequential(maps: Dict[str, np.ndarray], batch: int) -> int:
    n = len(maps["label"])
    seen = 0
    for a in range(0, n - batch + 1, batch):
        out = {k: np.array(m[a:a + batch]) for k, m in maps.items()}
        seen += len(out["label"])
    return seen


def npy_shuffled(maps: Dict[str, np.ndarray], batch: int, epoch: int) -> int:
    n = len(maps["label"])
    perm = np.random.default_rng(epoch).permutation(n)
    seen = 0
    for a in range(0, n - batch + 1, batch):
        idx = perm[a:a + batch]
        out = {k: m[idx] for k, m in maps.items()}
        seen += len(out["label"])
    return seen


def tessera_epoch(loader: tessera.Loader, epoch: int) -> int:
    loader.set_epoch(epoch)
    seen = 0
    for b in loader:
        seen += len(b["label"])
    return seen


def epochs_of(loader: tessera.Loader) -> Callable[[int], int]:
    return lambda e: tessera_epoch(loader, e)


# -- GIL --


class Spinner:
    """A Python thread that counts as fast as the GIL lets it."""

    def __init__(self) -> None:
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)

    def _spin(self) -> None:
        n = 0
        stop = self._stop
        while not stop.is_set():
            for _ in range(1000):
                n += 1
            self.count = n

    def __enter__(self) -> "Spinner":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_for(loader: tessera.Loader, seconds: float) -> Tuple[int, float, float, float]:
    """Iterates whole epochs for about `seconds`; returns samples, wall time,
    time spent waiting with the GIL released, and this thread's CPU time."""
    samples, waited, epoch = 0, 0.0, 0
    t0, cpu0 = time.perf_counter(), time.thread_time()
    while time.perf_counter() - t0 < seconds:
        loader.set_epoch(epoch)
        it = iter(loader)
        for b in it:
            samples += len(b["label"])
        waited += it.wait_seconds
        epoch += 1
    return samples, time.perf_counter() - t0, waited, time.thread_time() - cpu0


def _child(path: str, batch: int, threads: int, seconds: float, started: "mp.synchronize.Event") -> None:
    loader = tessera.open(path).loader(batch, shuffle=True, seed=2, threads=threads)
    started.set()
    run_for(loader, seconds)


def spin_rate(seconds: float, work: Callable[[], Any]) -> Tuple[float, Any]:
    """The counting thread's rate while `work()` runs on this thread."""
    with Spinner() as s:
        time.sleep(0.05)
        c0, t0 = s.count, time.perf_counter()
        out = work()
        return (s.count - c0) / (time.perf_counter() - t0), out


def gil_hold(path: str, batch: int, threads: int, seconds: float, rounds: int = 3) -> Dict[str, float]:
    """How much of a shuffled epoch the iterating thread holds the GIL.

    * wait: 1 - (time inside next() with the GIL released) / wall time,
      the iterating loop alone;
    * spinner: a counting Python thread's rate while this thread iterates,
      against its rate while the same loader runs in a child process (same CPU
      load from the prefetch threads, but no GIL shared): the shortfall is
      GIL time the loop took from it. Its rate with nothing running is shown
      too.
    """
    loader = tessera.open(path).loader(batch, shuffle=True, seed=2, threads=threads)
    samples, wall, waited, cpu = run_for(loader, seconds)
    ctx = mp.get_context("fork")

    def in_child() -> None:
        started = ctx.Event()
        p = ctx.Process(target=_child, args=(path, batch, threads, seconds, started))
        p.start()
        started.wait()
        p.join()

    # Alternate the three conditions a few times; medians damp background load.
    idles, controls, busys, beside = [], [], [], []
    for _ in range(rounds):
        idles.append(spin_rate(seconds, lambda: time.sleep(seconds))[0])
        controls.append(spin_rate(seconds, in_child)[0])
        rate, res = spin_rate(seconds, lambda: run_for(loader, seconds))
        busys.append(rate)
        beside.append(res)
    idle, control, busy = (statistics.median(x) for x in (idles, controls, busys))
    b_samples = sum(r[0] for r in beside)
    b_wall = sum(r[1] for r in beside)
    b_waited = sum(r[2] for r in beside)
    return {
        "gil_share_by_wait": 1.0 - waited / wall,
        "gil_share_by_cpu": cpu / wall,
        "loader_rate": samples / wall,
        "spinner_idle": idle,
        "spinner_control": control,
        "spinner_busy": busy,
        "gil_share_by_spinner": max(0.0, 1.0 - busy / control),
        "loader_rate_beside_spinner": b_samples / b_wall,
        "gil_share_by_wait_beside_spinner": 1.0 - b_waited / b_wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=5, help="timed epochs per reader (median reported)")
    ap.add_argument("--threads", type=int, default=2, help="tessera prefetch threads")
    ap.add_argument("--dir", default=os.path.join(os.path.expanduser("~"), ".cache", "tessera", "bench-python"))
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()

    os.makedirs(args.dir, exist_ok=True)
    tset, npy = prepare(args.dir, args.rows)
    ds = tessera.open(tset)
    assert ds.stride == 160, ds.stride
    warm([os.path.join(tset, s["file"]) for s in ds.manifest["shards"]] + list(npy.values()))
    maps = {k: np.load(p, mmap_mode="r") for k, p in npy.items()}
    B = args.batch

    loaders = {
        (shuffle, t): ds.loader(B, shuffle=shuffle, seed=1, threads=t)
        for shuffle in (False, True)
        for t in sorted({args.threads, 0})
    }
    # Interleave the readers so background load drifts affect both alike.
    runs: List[Tuple[str, Callable[[int], int]]] = [
        ("npy_sequential", lambda e: npy_sequential(maps, B)),
        ("npy_shuffled", lambda e: npy_shuffled(maps, B, e)),
    ]
    for (shuffle, t), loader in loaders.items():
        mode = "shuffled" if shuffle else "sequential"
        runs.append((f"tessera_{mode}_t{t}", epochs_of(loader)))
    samples: Dict[str, List[float]] = {name: [] for name, _ in runs}
    for name, run in runs:
        run(1000)  # untimed warm-up epoch
    for rep in range(args.reps):
        for name, run in runs:
            t0 = time.perf_counter()
            n = run(rep)
            samples[name].append(n / (time.perf_counter() - t0))
    results = {name: statistics.median(v) for name, v in samples.items()}

    gil = {t: gil_hold(tset, B, t, seconds=1.0) for t in sorted({1, args.threads})}

    load = os.getloadavg()
    print(f"\n{args.rows} rows x 160 B, batch {B}, tessera threads={args.threads}, "
          f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    t = args.threads
    print(f"{'mode':<12} {'np.load(mmap)':>15} {f'tessera t={t}':>15} {'ratio':>7} {'bar':>8}"
          f" {'tessera t=0':>15} {'ratio':>7}")
    for mode, bar in [("sequential", 1.0), ("shuffled", 2.5)]:
        base, ours, inline = (results[f"npy_{mode}"], results[f"tessera_{mode}_t{t}"],
                              results[f"tessera_{mode}_t0"])
        ok = "ok" if ours / base >= bar else "MISS"
        print(f"{mode:<12} {base / 1e6:>11.2f} M/s {ours / 1e6:>11.2f} M/s {ours / base:>6.2f}x "
              f">={bar:.1f}x {ok:<4} {inline / 1e6:>11.2f} M/s {inline / base:>6.2f}x")
    print("(median of the timed epochs; t = prefetch threads, t=0 builds batches inside next())")
    print("\nGIL held by the iterating thread over shuffled epochs (bar: < 10%)")
    for t, g in gil.items():
        print(f"  threads={t}: {100 * g['gil_share_by_wait']:.1f}% of wall time outside the GIL-free wait "
              f"(CPU time {100 * g['gil_share_by_cpu']:.1f}%), loader {g['loader_rate'] / 1e6:.2f} M/s")
        print(f"             counting thread: {g['spinner_busy'] / 1e6:.1f}M/s beside the loop, "
              f"{g['spinner_control'] / 1e6:.1f}M/s beside the same loader in another process, "
              f"{g['spinner_idle'] / 1e6:.1f}M/s alone -> {100 * g['gil_share_by_spinner']:.1f}% GIL; "
              f"loader {g['loader_rate_beside_spinner'] / 1e6:.2f} M/s meanwhile")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rates": results, "gil": gil, "loadavg": load}, f, indent=2)


if __name__ == "__main__":
    main()
