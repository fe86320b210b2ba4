#!/usr/bin/env python3
"""The speed users get: whole shuffled epochs through every product path, in one run.

Writes (once, under --dir) an 800k-record set of 160-byte Criteo-like records
and three component sets of the same total size, then measures, each over
--epochs whole epochs (epoch starts included), batch 4096:

  gather_2t         a plain two-thread loop gathering the records of a random
                    permutation into a 4096-record buffer (Rust, the baseline
                    every ratio uses: like an epoch, every record once)
  gather_1t         the same on one thread
  gather_2t_iid     the loop over independent random draws instead (a third
                    repeat a record that may still be cached: faster than an
                    epoch can be on a set near the cache's size)
  rust_loader       the Rust loader, 2 prefetch threads
  tessera_bench     `tessera bench --shuffle --threads 2` (if the compiler binary is found)
  python_loader     the Python loader, threads=2
  torch_0w          tessera.torch.IterableDataset, DataLoader(num_workers=0), threads=2
  torch_2w          the same with num_workers=2 (one reader thread per worker)
  *_mix             a 3-component mixture of the same total size (Rust and Python)

each product path without a consumer and, as `..._read`, with a consumer that
reads every byte of each batch. Ratios are against gather_2t of the same
round; every path runs --repeat rounds and the medians are printed (on a
shared machine one round can be off by a factor of two).

    python benches/epochs.py                 # 800k records, 5 epochs
    python benches/epochs.py --epochs 3 --json

Needs the reader example (`cargo build --release -p tessera-shards-reader --example
epochs`, built here if missing) and the tessera package installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

import tessera

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 4096


def make(path: str, n: int, seed: int) -> None:
    if os.path.exists(os.path.join(path, "manifest.json")):
        return
    rng = np.random.default_rng(seed)
    cols = {
        "dense": rng.standard_normal((n, 13), dtype=np.float32),
        "cat": rng.integers(0, 1 << 20, size=(n, 26), dtype=np.int32),
        "label": (rng.random(n) < 0.25).astype(np.float32),
    }
    tessera.write(path, cols)


def target_dir() -> str:
    return os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tessera/target"))


def rust_example() -> str:
    exe = os.path.join(target_dir(), "release", "examples", "epochs")
    if not os.path.exists(exe):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "tessera-shards-reader", "--example", "epochs"],
                       cwd=ROOT, check=True)
    return exe


def compiler() -> Optional[str]:
    for c in [os.environ.get("TESSERA_BIN"), shutil.which("tessera"), os.path.join(target_dir(), "release", "tessera")]:
        if c and os.path.exists(c):
            return c
    return None


def read_every_byte(batch: Dict[str, Any]) -> int:
    """Sums the whole batch buffer as uint64 words (every byte of every record)."""
    import ctypes

    owner = next(iter(batch.values())).base
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * owner.nbytes).from_address(owner.address))
    return int(raw.view(np.uint64).sum())


def timed(epochs: int, run_epoch: Callable[[int], int]) -> float:
    rows = 0
    t = time.perf_counter()
    for e in range(epochs):
        rows += run_epoch(e)
    return rows / (time.perf_counter() - t)


def python_loader(src: Any, epochs: int, read: bool) -> float:
    loader = src.loader(BATCH, threads=2, drop_last=False)

    def epoch(e: int) -> int:
        loader.set_epoch(e)
        n = 0
        for b in loader:
            n += len(b["label"])
            if read:
                read_every_byte(b)
        return n

    return timed(epochs, epoch)


def torch_loader(path: str, epochs: int, workers: int, read: bool) -> float:
    import torch
    from torch.utils.data import DataLoader

    import tessera.torch

    data = tessera.torch.IterableDataset(path, BATCH, seed=7, last_batch="partial", threads=2 if workers == 0 else 1)
    dl = DataLoader(data, batch_size=None, num_workers=workers, persistent_workers=workers > 0)

    def epoch(e: int) -> int:
        data.set_epoch(e)
        n = 0
        for b in dl:
            n += len(b["label"])
            if read:
                # Every field views one storage: sum all of it as 8-byte words.
                storage = b["label"].untyped_storage()
                torch.empty(0, dtype=torch.uint8).set_(storage).view(torch.int64).sum()
        return n

    return timed(epochs, epoch)


def measure(a: Any, single: str, comps: List[str], parts: List[int]) -> Tuple[Dict[str, float], Dict[str, float]]:
    """One round of every path; returns samples/s per path and ns per position per order version."""
    res: Dict[str, float] = {}
    out = subprocess.run([rust_example(), single, "--epochs", str(a.epochs), "--mix", ",".join(comps), "--json"],
                         check=True, capture_output=True, text=True).stdout
    rows = json.loads(out)
    rust = {r["name"]: r["samples_per_sec"] for r in rows if "samples_per_sec" in r}
    order_ns = {r["name"]: r["ns_per_position"] for r in rows if "ns_per_position" in r}
    res["gather_1t"] = rust["gather_1t"]
    res["gather_2t"] = rust["gather_2t"]
    res["gather_2t_iid"] = rust["gather_2t_iid"]
    res["rust_loader"] = rust["loader_2t"]
    res["rust_loader_read"] = rust["loader_2t_read"]
    res["rust_single(mix ref)"] = rust["single_2t"]
    res["rust_mix"] = rust["mixture_2t"]
    exe = compiler()
    if exe:
        for suffix, extra in [("", []), ("_read", ["--read"])]:
            r = subprocess.run([exe, "bench", single, "--shuffle", "--threads", "2", "--epochs", str(a.epochs),
                                "--json", *extra], check=True, capture_output=True, text=True).stdout
            res["tessera_bench" + suffix] = json.loads(r)["samples_per_sec"]
    else:
        print("no tessera compiler binary (TESSERA_BIN, PATH, target dir): skipping tessera bench", file=sys.stderr)
    ds = tessera.open(single)
    mix = tessera.mix({f"p{i}": (p, float(n)) for i, (p, n) in enumerate(zip(comps, parts))}, seed=7)
    res["python_loader"] = python_loader(ds, a.epochs, False)
    res["python_loader_read"] = python_loader(ds, a.epochs, True)
    res["python_single(mix ref)"] = python_loader(ds, a.epochs, False)
    res["python_mix"] = python_loader(mix, a.epochs, False)
    try:
        import torch

        # One intra-op thread: the reader's threads already use both cores,
        # and a reduction split over busy cores measures the contention,
        # not the loader.
        torch.set_num_threads(1)
        res["torch_0w"] = torch_loader(single, a.epochs, 0, False)
        res["torch_0w_read"] = torch_loader(single, a.epochs, 0, True)
        res["torch_2w"] = torch_loader(single, a.epochs, 2, False)
        res["torch_2w_read"] = torch_loader(single, a.epochs, 2, True)
    except ImportError:
        print("torch is not installed: skipping the torch rows", file=sys.stderr)
    return res, order_ns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(target_dir(), "tmp", "tessera-epochs"))
    ap.add_argument("--rows", type=int, default=800_000)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="rounds of every path; medians are reported")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    single = os.path.join(a.dir, f"single-{a.rows}")
    parts = [a.rows * 3 // 8, a.rows * 3 // 8]
    parts.append(a.rows - sum(parts))
    comps = [os.path.join(a.dir, f"part{i}-{n}") for i, n in enumerate(parts)]
    make(single, a.rows, 0)
    for i, (p, n) in enumerate(zip(comps, parts)):
        make(p, n, i + 1)

    rounds = [measure(a, single, comps, parts) for _ in range(a.repeat)]
    # Medians over rounds, of each path's rate and of each ratio.
    res = {k: statistics.median(r[0][k] for r in rounds) for k in rounds[0][0]}
    order_ns = {k: statistics.median(r[1][k] for r in rounds) for k in rounds[0][1]}
    ratio = {k: statistics.median(r[0][k] / r[0]["gather_2t"] for r in rounds) for k in rounds[0][0]}
    mix_rust = statistics.median(r[0]["rust_mix"] / r[0]["rust_single(mix ref)"] for r in rounds)
    mix_py = statistics.median(r[0]["python_mix"] / r[0]["python_single(mix ref)"] for r in rounds)
    load = os.getloadavg()[0]
    if a.json:
        print(json.dumps({"rows": a.rows, "epochs": a.epochs, "rounds": a.repeat, "load": load,
                          "samples_per_sec": res, "x_gather_2t": ratio, "order_ns_per_position": order_ns,
                          "mix_over_single": {"rust": mix_rust, "python": mix_py}}, indent=1))
        return
    print(f"{a.rows} records of 160 B, batch {BATCH}, {a.epochs} whole shuffled epochs, "
          f"medians of {a.repeat} rounds, load average {load:.2f}")
    print(f"{'path':>24} {'M samples/s':>12} {'x gather_2t':>12}")
    for name, rate in res.items():
        print(f"{name:>24} {rate / 1e6:12.1f} {ratio[name]:12.2f}")
    for name, ns in order_ns.items():
        print(f"{name:>24} {ns:12.2f} ns per position (the permutation alone)")
    print(f"{'rust mix / single':>24} {'':>12} {mix_rust:12.2f}")
    print(f"{'python mix / single':>24} {'':>12} {mix_py:12.2f}")


if __name__ == "__main__":
    main()
