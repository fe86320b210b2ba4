#!/usr/bin/env python3
"""Side-by-side benchmark: tessera against the usual ways of feeding a training loop.

One command times every method on the same generated Criteo-like data:

    python benches/compare/compare.py --rows 2000000

Methods (each measured in its own subprocesses, one for preparation and one
for the epochs, so that peak memory is per method):

  a  pyarrow, naive: every epoch reads all Parquet files with
     pyarrow.parquet.read_table (all columns), filters in memory, applies
     the transforms and converts to NumPy.
  b  pyarrow.dataset: the same transforms, with the filter and the column
     projection pushed down into the scan (row groups whose statistics
     cannot match are skipped).
  c  .npy + mmap: a one-off preprocessing (b's pipeline) writes one .npy per
     field; every epoch opens them with np.load(mmap_mode='r') and slices
     (sequential) or fancy-indexes (shuffled) batches.
  d  tessera: `tessera.build` (the compiler) once, then tessera's Python
     loader (`tessera.open(path).split("train").loader(...)`).
  e  tessera's Rust reader alone: `tessera bench PATH --json`.

(d) and (e) run only when available: `import tessera` works, and a
`tessera` binary with a `bench` command is found in $TESSERA_BIN, on PATH,
or in the project's shared target directory. Missing ones are reported as
"not available", not as failures.

What every method produces per batch: a dict of in-memory NumPy arrays
`label` (batch,) float32, `dense` (batch, 13) float32 and `cats`
(batch, 26) int32, tessera's 160-byte record; the consumer only counts rows
and sums labels. A batch that is a view of a memory map is copied out first
(np.array), as a training step would have to touch it anyway.

The baselines' transforms (constants below) follow specs/criteo.yaml:
filter `day >= 14`; split by a hash of `id` into train 0.9 / val 0.1, only
train is iterated and feeds the statistics; dense = I1..I13 as f32, nulls
-> 0, clip at min 0, log1p, standardize (train mean and population std);
cats = C1..C26 each hashed into HASH_BUCKETS (2^20) buckets as i32; label
as f32. The baselines hash strings with FNV-1a 64 over their UTF-8 bytes
(a null hashes as the empty string; tessera gives it a value of its own)
and pick the split with splitmix64 of `id`. Both are stable and cost the
same kind of work as tessera's functions but are not them, so bucket ids
and the exact train membership differ from (d)/(e) while the proportions
match: fine for timing, not for comparing values.

Figures per method: preparation time; epoch 1 and epoch 2 times (shuffled
passes over the train split, including everything an epoch needs: for
(a)/(b) the read, filter and transforms); samples/s sequential (the median
of 3 to 7 extra passes in order, as many as fit in 3 s, over arrays opened
once for (c) and one loader made once for (d), as a training loop keeps
them across epochs) and shuffled (rows / epoch-2 time); peak RSS of the
training process and of the preparation; and each figure's ratio to (d).
For (e) each pass is one `tessera bench --read` process (epoch k uses
--seed k; the consumer reads every byte of each batch) and the times are the
ones it reports, without process start-up.
The Markdown table goes to benches/compare/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "scripts"))

from compare_report import fmt_s, fmt_sps, fmt_mb, render  # noqa: E402 (beside this file)
from compare_baseline import (  # noqa: E402 (beside this file)
    FILTER_DAY_MIN,
    HASH_BUCKETS,
    SPLIT_TRAIN_FRACTION,
    compute_stats,
    consume,
    filtered_tables_dataset,
    filtered_tables_naive,
    parquet_files,
    rebatch,
    sequential_copies,
    shuffled_batches,
    stats_arrays,
    transform,
)

METHODS = {
    "a": "pyarrow read_table + in-memory filter",
    "b": "pyarrow.dataset with pushdown",
    "c0": ".npy per field, straightforward preprocessing (strings hashed row by row)",
    "c": ".npy per field + np.load(mmap)",
    "d": "tessera (Python loader)",
    "e": "tessera (Rust reader, `tessera bench --read`)",
}


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM), in MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def children_peak_rss_mb() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


# --- tessera discovery --------------------------------------------------------------

def find_tessera_bin() -> str | None:
    env = os.environ.get("TESSERA_BIN")
    if env:
        return env if Path(env).is_file() else None
    on_path = shutil.which("tessera")
    if on_path:
        return on_path
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache" / "tessera" / "target"))
    candidate = target / "release" / "tessera"
    return str(candidate) if candidate.is_file() else None


def bench_help(binary: str) -> str | None:
    """The help text of `tessera bench`, or None if the binary has no bench command."""
    try:
        r = subprocess.run([binary, "bench", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout + r.stderr if r.returncode == 0 else None


def bench_spec(spec: Path, data: Path, work: Path) -> Path:
    """A copy of the spec whose Parquet source points at the generated data."""
    import yaml

    doc = yaml.safe_load(spec.read_text())
    sources = doc.get("sources") or {}
    if not sources:
        raise SystemExit(f"compare: {spec} has no sources")
    for src in sources.values():
        if isinstance(src, dict) and "path" in src:
            src["path"] = str(data.resolve() / "*.parquet")
    out = work / "criteo-bench.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def check_spec_agrees(spec: Path) -> list[str]:
    """Differences between the spec and this file's constants, as warnings."""
    try:
        import yaml
        doc = yaml.safe_load(spec.read_text())
    except Exception as e:  # a broken spec is for (d) to report; the baselines still run
        return [f"cannot read {spec}: {e}"]
    warnings = []
    filt = " ".join(str(doc.get("filter", "")).split())
    if filt != f"day >= {FILTER_DAY_MIN}":
        warnings.append(f"spec filter is {filt!r}, the baselines use 'day >= {FILTER_DAY_MIN}'")
    text = spec.read_text()
    if f"hash_bucket: {HASH_BUCKETS}" not in text and f"buckets: {HASH_BUCKETS}" not in text:
        warnings.append(f"spec does not mention {HASH_BUCKETS} hash buckets (the baselines' value)")
    return warnings


# --- Workers: one subprocess per (phase, method) -----------------------------------

def worker_prep(method: str, cfg: dict) -> dict:
    data, work = Path(cfg["data"]), Path(cfg["work"])
    t0 = time.perf_counter()
    if method == "a":
        stats = compute_stats(filtered_tables_naive(data))
        result = {"stats": stats}
    elif method == "b":
        stats = compute_stats(filtered_tables_dataset(data))
        result = {"stats": stats}
    elif method in ("c", "c0"):
        dictionary = method == "c"
        stats = compute_stats(filtered_tables_dataset(data, dictionary))
        st = stats_arrays(stats)
        parts = [transform(t, st) for t in filtered_tables_dataset(data, dictionary)]
        npy = work / ("npy" if dictionary else "npy-plain")
        npy.mkdir(parents=True, exist_ok=True)
        for name in ("label", "dense", "cats"):
            np.save(npy / f"{name}.npy", np.concatenate([p[name] for p in parts]))
        del parts
        result = {"stats": stats, "npy_dir": str(npy)}
    elif method == "d":
        try:
            import tessera
        except ImportError as e:
            return {"unavailable": f"import tessera failed: {e}"}
        if cfg.get("prebuilt"):
            return {"artifact": cfg["prebuilt"], "prebuilt": True, "prep_s": None}
        binary = find_tessera_bin()
        if binary is None:
            return {"unavailable": "`import tessera` works but the compiler is missing "
                                   "(set TESSERA_BIN or put `tessera` on PATH)"}
        os.environ["TESSERA_BIN"] = binary  # tessera.build looks here first
        spec = Path(cfg["spec"])
        if not spec.is_file():
            return {"unavailable": f"{spec} does not exist"}
        cache = work / "tessera-cache"
        shutil.rmtree(cache, ignore_errors=True)  # a real build, not a cache hit
        spec_copy = bench_spec(spec, data, work)
        artifact = tessera.build(str(spec_copy), cache_dir=str(cache))
        result = {"artifact": str(artifact)}
    elif method == "e":
        binary = find_tessera_bin()
        if binary is None or bench_help(binary) is None:
            return {"unavailable": "no `tessera` binary with a `bench` command "
                                   "(set TESSERA_BIN or put it on PATH)"}
        if cfg.get("artifact") or cfg.get("prebuilt"):
            return {"artifact": cfg.get("artifact") or cfg["prebuilt"], "binary": binary,
                    "prep_shared_with": "d", "prep_s": cfg.get("artifact_prep_s"),
                    "prebuilt": bool(cfg.get("prebuilt"))}
        spec = Path(cfg["spec"])
        if not spec.is_file():
            return {"unavailable": f"{spec} does not exist"}
        cache = work / "tessera-cache"
        shutil.rmtree(cache, ignore_errors=True)
        spec_copy = bench_spec(spec, data, work)
        artifact = build_with_cli(binary, spec_copy, cache)
        result = {"artifact": artifact, "binary": binary}
    else:
        raise ValueError(method)
    result["prep_s"] = time.perf_counter() - t0
    result["prep_rss_mb"] = max(peak_rss_mb(), children_peak_rss_mb())
    return result


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no message)"


def build_with_cli(binary: str, spec: Path, cache: Path) -> str:
    r = subprocess.run([binary, "build", str(spec), "--cache-dir", str(cache)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"compare: `tessera build` failed (exit {r.returncode}): {last_line(r.stderr)}\n"
                         f"{r.stderr[-2000:]}")
    for line in reversed(r.stdout.splitlines()):
        for word in reversed(line.split()):
            if Path(word).is_dir():
                return word
    raise SystemExit(f"compare: no artifact path in the output of `tessera build`:\n{r.stdout[-2000:]}")


def sequential_median(run_pass, budget_s: float = 3.0, most: int = 7) -> dict:
    """The in-order pass of median time, of 3 passes at least and then as
    many more (up to `most`) as fit in `budget_s`: a pass over a
    page-cached set can take a few milliseconds, too short for one figure."""
    passes = []
    t0 = time.perf_counter()
    while len(passes) < 3 or (len(passes) < most and time.perf_counter() - t0 < budget_s):
        passes.append(run_pass())
    passes.sort(key=lambda p: p["seconds"])
    return passes[len(passes) // 2]


def worker_run(method: str, cfg: dict) -> dict:
    data = Path(cfg["data"])
    prep = cfg["prep"]
    bs, epochs = cfg["batch_size"], cfg["epochs"]
    passes: list[dict] = []
    if method in ("a", "b"):
        tables = filtered_tables_naive if method == "a" else filtered_tables_dataset
        st = stats_arrays(prep["stats"])
        for e in range(epochs):
            def shuffled(e=e):
                parts = [transform(t, st) for t in tables(data)]
                arrays = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
                del parts
                yield from shuffled_batches(arrays, bs, seed=e)
            passes.append(consume(shuffled()))
        seq = sequential_median(lambda: consume(rebatch((transform(t, st) for t in tables(data)), bs)))
    elif method in ("c", "c0"):
        npy = Path(prep["npy_dir"])

        def open_all():
            return {n: np.load(npy / f"{n}.npy", mmap_mode="r") for n in ("label", "dense", "cats")}

        for e in range(epochs):
            passes.append(consume(shuffled_batches(open_all(), bs, seed=e)))
        arrays = open_all()  # opened once, as a training loop would, for every in-order pass
        seq = sequential_median(lambda: consume(sequential_copies(arrays, bs)))
    elif method == "d":
        import tessera

        train = tessera.open(prep["artifact"]).split("train")

        def make_loader(shuffle: bool, seed: int):
            try:
                return train.loader(batch_size=bs, shuffle=shuffle, seed=seed,
                                    threads=cfg["threads"], drop_last=False)
            except TypeError:
                return train.loader(batch_size=bs, shuffle=shuffle, seed=seed, threads=cfg["threads"])

        loader = make_loader(True, 0)
        for e in range(epochs):
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(e)
            else:
                loader = make_loader(True, e)
            passes.append(consume(iter(loader)))
        in_order = make_loader(False, 0)  # made once, as a training loop would, for every in-order pass
        seq = sequential_median(lambda: consume(iter(in_order)))
    elif method == "e":
        binary, artifact = prep["binary"], prep["artifact"]
        helptext = bench_help(binary) or ""
        for e in range(epochs):
            passes.append(run_cli_bench(binary, artifact, bs, cfg["threads"], True, e, helptext))
        seq = sequential_median(lambda: run_cli_bench(binary, artifact, bs, cfg["threads"], False, 0, helptext))
    else:
        raise ValueError(method)
    rss = children_peak_rss_mb() if method == "e" else peak_rss_mb()
    return {"epochs": passes, "sequential": seq, "rss_mb": rss}


def run_cli_bench(binary: str, artifact: str, bs: int, threads: int, shuffle: bool, epoch: int,
                  helptext: str) -> dict:
    cmd = [binary, "bench", artifact, "--batch-size", str(bs), "--threads", str(threads), "--json"]
    if shuffle:
        cmd.append("--shuffle")
    # The consumer reads every byte of each batch, as the other methods'
    # arrays are read (a sequential batch is otherwise a view of the map
    # that nothing reads).
    if "--read" in helptext:
        cmd.append("--read")
    if "--split" in helptext:
        cmd += ["--split", "train"]
    if re.search(r"--seed\b", helptext):
        cmd += ["--seed", str(epoch)]  # one process per epoch: a different shuffle each time
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"compare: {' '.join(cmd)} failed (exit {r.returncode}): {last_line(r.stderr)}\n"
                         f"{r.stderr[-2000:]}")
    report = None
    for line in reversed(r.stdout.strip().splitlines()):
        try:
            report = json.loads(line)
            break
        except json.JSONDecodeError:
            continue
    if report is None:
        try:
            report = json.loads(r.stdout)
        except json.JSONDecodeError:
            raise SystemExit(f"compare: no JSON in the output of {' '.join(cmd)}:\n{r.stdout[-2000:]}")
    if "samples_per_sec" not in report:
        raise SystemExit(f"compare: `tessera bench` JSON has no samples_per_sec: {report}")
    sps = float(report["samples_per_sec"])
    rows = next((int(report[k]) for k in ("samples", "rows", "records") if k in report), None)
    seconds = next((float(report[k]) for k in ("seconds", "elapsed_s", "elapsed") if k in report), None)
    if seconds is None:
        seconds = rows / sps if rows else wall
    return {"rows": rows or round(sps * seconds), "label_sum": None, "seconds": seconds,
            "wall_with_process_s": wall, "report": report}


def worker_main(spec: str, cfg_json: str) -> int:
    phase, method = spec.split(":")
    cfg = json.loads(cfg_json)
    if method in "abc":
        # Imported before any timer starts, so that epoch 1 does not pay for it.
        import pyarrow.compute  # noqa: F401
        import pyarrow.dataset  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    try:
        result = worker_prep(method, cfg) if phase == "prep" else worker_run(method, cfg)
    except SystemExit as e:
        msg = str(e.code)
        print(msg, file=sys.stderr)
        result = {"error": f"{phase}: " + msg.removeprefix("compare: ").splitlines()[0]}
    except Exception as e:
        import traceback
        traceback.print_exc()
        result = {"error": f"{phase}: {type(e).__name__}: {e}"}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# --- The driver -----------------------------------------------------------------------

def run_worker(phase: str, method: str, cfg: dict, timeout: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", f"{phase}:{method}",
           "--worker-config", json.dumps(cfg)]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"{phase} timed out after {timeout:.0f}s"}
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": f"{phase} failed (exit {r.returncode}); see the messages above"}


def ensure_data(data: Path, rows: int, seed: int) -> None:
    meta_path = data / "_generator.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("rows") == rows and meta.get("seed") == seed and meta.get("sort_by") == "day":
            return
    import gen_criteo

    print(f"compare: generating {rows} rows into {data}", file=sys.stderr)
    code = gen_criteo.main(["--rows", str(rows), "--seed", str(seed), "--out", str(data), "--quiet"])
    if code:
        raise SystemExit(f"compare: data generation failed (exit {code})")


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def summarize(method: str, prep: dict, run: dict) -> dict:
    row = {"method": method, "name": METHODS[method]}
    if "unavailable" in prep:
        row["status"] = "not available: " + prep["unavailable"]
        return row
    if "error" in prep or "error" in run:
        row["status"] = "FAILED: " + (prep.get("error") or run.get("error"))
        return row
    epochs = run["epochs"]
    samples = epochs[-1]["rows"]
    row.update({
        "status": "ok",
        "prep_s": prep.get("prep_s"),
        "prep_shared_with": prep.get("prep_shared_with"),
        "prebuilt": prep.get("prebuilt", False),
        "prep_rss_mb": prep.get("prep_rss_mb"),
        "epoch_s": [p["seconds"] for p in epochs],
        "rows_per_epoch": samples,
        "label_mean": (epochs[-1]["label_sum"] / samples) if epochs[-1].get("label_sum") is not None and samples else None,
        "seq_sps": run["sequential"]["rows"] / run["sequential"]["seconds"],
        "shuf_sps": samples / epochs[-1]["seconds"],
        "rss_mb": run["rss_mb"],
    })
    return row


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Methods: " + "; ".join(f"{k}: {v}" for k, v in METHODS.items()))
    ap.add_argument("--rows", type=int, default=2_000_000, help="rows to generate (default 2000000)")
    ap.add_argument("--epochs", type=int, default=2, help="shuffled epochs per method (default 2, minimum 1)")
    ap.add_argument("--skip", default="", help="methods to skip, comma-separated letters, e.g. d,e")
    ap.add_argument("--batch-size", type=int, default=4096, help="batch size (default 4096)")
    ap.add_argument("--threads", type=int, default=2, help="tessera loader threads (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="data generator seed (default 0)")
    ap.add_argument("--data", type=Path, help="data directory (default data/bench/criteo-<rows>)")
    ap.add_argument("--work", type=Path, help="scratch directory for .npy files and the tessera cache "
                    "(default data/bench/work-<rows>)")
    ap.add_argument("--spec", type=Path, default=REPO_ROOT / "specs" / "criteo.yaml",
                    help="tessera spec for (d)/(e) (default specs/criteo.yaml); its source path is "
                    "rewritten to point at the generated data")
    ap.add_argument("--artifact", type=Path,
                    help="use this already built shard set for (d)/(e) instead of running `tessera build` "
                    "(preparation is then not timed)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md",
                    help="Markdown output (default benches/compare/RESULTS.md)")
    ap.add_argument("--json", type=Path, help="also write the raw figures as JSON here")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed per phase (default 1800)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-config", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return args
    if args.rows < 1000:
        ap.error(f"--rows must be at least 1000, got {args.rows}")
    if args.epochs < 1:
        ap.error(f"--epochs must be at least 1, got {args.epochs}")
    if args.batch_size < 1:
        ap.error(f"--batch-size must be at least 1, got {args.batch_size}")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - set(METHODS)
    if unknown:
        ap.error(f"--skip: unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    args.skip = skip
    args.data = args.data or REPO_ROOT / "data" / "bench" / f"criteo-{args.rows}"
    args.work = args.work or REPO_ROOT / "data" / "bench" / f"work-{args.rows}"
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker_main(args.worker, args.worker_config)

    import pyarrow

    load_start = loadavg()
    ensure_data(args.data, args.rows, args.seed)
    args.work.mkdir(parents=True, exist_ok=True)
    warnings = check_spec_agrees(args.spec) if args.spec.is_file() else [
        f"{args.spec} not found: tessera (d)/(e) cannot run"]
    for w in warnings:
        print(f"compare: warning: {w}", file=sys.stderr)

    cfg = {"data": str(args.data), "work": str(args.work), "spec": str(args.spec),
           "batch_size": args.batch_size, "epochs": args.epochs, "threads": args.threads,
           "prebuilt": str(args.artifact.resolve()) if args.artifact else None}
    results = []
    for method in METHODS:
        if method in args.skip:
            continue
        print(f"compare: ({method}) {METHODS[method]}: preparing", file=sys.stderr)
        prep = run_worker("prep", method, cfg, args.timeout)
        if method == "d" and "artifact" in prep:
            cfg["artifact"], cfg["artifact_prep_s"] = prep["artifact"], prep["prep_s"]
        run = {}
        if "unavailable" not in prep and "error" not in prep:
            print(f"compare: ({method}) running {args.epochs} epochs + a sequential pass", file=sys.stderr)
            run = run_worker("run", method, {**cfg, "prep": prep}, args.timeout)
        row = summarize(method, prep, run)
        results.append(row)
        if row["status"] == "ok":
            print(f"compare: ({method}) prep {fmt_s(row['prep_s'])}, epochs "
                  f"{', '.join(fmt_s(x) for x in row['epoch_s'])}, seq {fmt_sps(row['seq_sps'])}, "
                  f"shuffled {fmt_sps(row['shuf_sps'])}, peak RSS {fmt_mb(row['rss_mb'])}", file=sys.stderr)
        else:
            print(f"compare: ({method}) {row['status']}", file=sys.stderr)

    meta = json.loads((args.data / "_generator.json").read_text())
    info = {
        "command": "python benches/compare/compare.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(), "cpu": cpu_model(),
        "mem_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
        "python": platform.python_version(), "numpy": np.__version__, "pyarrow": pyarrow.__version__,
        "load_start": load_start, "load_end": loadavg(),
        "rows": args.rows, "files": meta["files"],
        "data_mib": sum(p.stat().st_size for p in parquet_files(args.data)) / 2**20,
        "batch_size": args.batch_size, "threads": args.threads, "warnings": warnings,
    }
    text = render(results, info)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"info": info, "results": results}, indent=2) + "\n")
    print(text)
    print(f"compare: wrote {args.out}", file=sys.stderr)
    failed = [r for r in results if r["status"].startswith("FAILED")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
