#!/usr/bin/env python3
"""Images decoded once (issue 23's bar), side by side in one run on the same
JPEG files and the same core:

  decode + resize to 224x224 (shorter side, centre crop, bilinear), one core:
    (a) `tessera build --threads 1` of a spec with one `image` field over a
        Parquet column of the JPEGs, fresh cache: the whole build (Parquet
        read, decode, resize, shards written), images per second;
    (b) Pillow with JPEG draft mode, the fast path a careful user takes:
        `img.draft("RGB", (224, 224))` (libjpeg-turbo's DCT scaling, decoding
        at 1/2, 1/4 or 1/8 size), then `ImageOps.fit(img, (224, 224),
        BILINEAR)` and `np.asarray`, one process, one image after another;
    (c) Pillow without draft (full decode), for reference;
    (d) the same decode without the build around it: `ds.transform` of the
        same Parquet rows (the serving path, the build's decoding code) on
        one thread (RAYON_NUM_THREADS=1), best of two passes: what (b)
        measures, as (b) writes nothing.
  Reported per input size (480p = 640x480, and 1280x720), with the ratio
  (a)/(b). The bar: (a) >= 2x (b) per core; libjpeg-turbo's single-core
  full decode of 480p is about 635 images/s as a reference point.

  shuffled reading of the built 224x224x3 records (150,536-byte records):
    reader/examples/epochs.rs on the built set: the Rust loader with 0, 1
    and 2 prefetch threads (`loader_Nt`) against the plain 2-thread loop
    gathering the records of a random permutation into a batch buffer
    (`gather_2t`: like an epoch, every record once), and `loader_Nt_read`,
    whose consumer reads every byte, against the same loop with each
    thread reading the batch it gathered (`gather_2t_read`). The bar:
    >= 0.9. The loop over independent random draws (`gather_2t_iid`, where
    a third of the draws repeat a record that may still be cached; the 300
    MB set is near this machine's cache size) is printed with the loaders'
    ratios to it.

    python benches/images.py                 # 480p and 720p, 600 images each
    python benches/images.py --images 1200 --sizes 640x480

The photos are the sample images scikit-image and scikit-learn ship,
re-encoded by Pillow (quality 90) at each size; nothing is downloaded.
`uptime` is printed beside the figures: the machine may be shared.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def target_dir() -> str:
    return os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))


def photos() -> List[object]:
    from PIL import Image

    out = []
    sk = list(importlib.util.find_spec("skimage").submodule_search_locations)[0]  # type: ignore[union-attr]
    sl = list(importlib.util.find_spec("sklearn").submodule_search_locations)[0]  # type: ignore[union-attr]
    for path in [
        os.path.join(sl, "datasets", "images", "china.jpg"),
        os.path.join(sl, "datasets", "images", "flower.jpg"),
        *[os.path.join(sk, "data", n) for n in ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "retina.jpg"]],
    ]:
        out.append(Image.open(path).convert("RGB"))
    return out


def jpegs(size: Tuple[int, int], n: int) -> List[bytes]:
    from PIL import Image

    base = []
    for img in photos():
        r = img.resize(size, Image.Resampling.LANCZOS)  # type: ignore[attr-defined]
        for q in (85, 90, 95):
            b = io.BytesIO()
            r.save(b, "JPEG", quality=q)
            base.append(b.getvalue())
    return [base[i % len(base)] for i in range(n)]


def tessera_rate(binary: str, work: str, data: List[bytes], threads: int) -> Tuple[float, str, Dict[str, float]]:
    d = tempfile.mkdtemp(dir=work)
    pq.write_table(pa.table({"id": pa.array(range(len(data)), pa.int64()), "jpeg": pa.array(data, pa.binary())}),
                   os.path.join(d, "photos.parquet"), row_group_size=256)
    with open(os.path.join(d, "spec.yaml"), "w") as f:
        f.write("version: 1\nname: bench\nsources:\n  p: { path: photos.parquet }\nfields:\n"
                "  id: { dtype: i64, column: id }\n"
                "  pixels: { dtype: u8, column: jpeg, transform: { image: { size: [224, 224], channels: 3,"
                " fit: shorter_side_then_center_crop, filter: bilinear } } }\n")
    t = time.perf_counter()
    out = subprocess.run([binary, "build", os.path.join(d, "spec.yaml"), "--json", "--threads", str(threads),
                          "--cache-dir", os.path.join(d, "cache"), "-q"], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t
    report = json.loads(out.stdout)
    return len(data) / wall, report["path"], report["seconds"]


def parquet_of(path: str) -> str:
    """The Parquet file the build at `path` (a cache entry under
    WORK/tmpXXX/cache/) was made from."""
    return os.path.join(os.path.dirname(os.path.dirname(path)), "photos.parquet")


def serving_rate(path: str, parquet: str) -> float:
    """Images per second of `ds.transform` (the serving path: decode, orient,
    fit; the build's code without the build around it) on one thread, in a
    child process started with RAYON_NUM_THREADS=1."""
    code = (
        "import sys, time, pyarrow.parquet as pq, tessera\n"
        "ds = tessera.open(sys.argv[1]); rows = pq.read_table(sys.argv[2])\n"
        "ds.transform(rows.slice(0, 20))\n"
        "best = 0.0\n"
        "for _ in range(2):\n"
        "    t = time.perf_counter(); ds.transform(rows); best = max(best, rows.num_rows / (time.perf_counter() - t))\n"
        "print(best)\n"
    )
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code, path, parquet], check=True, capture_output=True, text=True,
                         env=env)
    return float(out.stdout.strip())


def pillow_rate(data: List[bytes], draft: bool) -> float:
    from PIL import Image, ImageOps

    t = time.perf_counter()
    for b in data:
        img = Image.open(io.BytesIO(b))
        if draft:
            img.draft("RGB", (224, 224))
        img = img.convert("RGB")
        out = ImageOps.fit(img, (224, 224), Image.Resampling.BILINEAR)
        np.asarray(out)
    return len(data) / (time.perf_counter() - t)


def epochs_figures(exe: str, path: str, epochs: int, batch: int) -> Dict[str, Dict[str, object]]:
    out = subprocess.run([exe, path, "--epochs", str(epochs), "--batch", str(batch), "--rounds", "3", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return {r["name"]: r for r in json.loads(out) if "samples_per_sec" in r}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=600)
    ap.add_argument("--sizes", default="640x480,1280x720")
    ap.add_argument("--binary", default=os.path.join(target_dir(), "release", "tessera"))
    ap.add_argument("--epochs-bin", default=os.path.join(target_dir(), "release", "examples", "epochs"))
    ap.add_argument("--read-images", type=int, default=2000, help="records of the set the shuffled read uses")
    ap.add_argument("--read-epochs", type=int, default=20)
    ap.add_argument("--only-read", action="store_true", help="only the shuffled reading")
    args = ap.parse_args()
    for name in ("PIL", "skimage", "sklearn"):
        if importlib.util.find_spec(name) is None:
            print(f"{name} is missing: scripts/setup.sh --test installs it", file=sys.stderr)
            return 2
    import PIL

    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(f"Pillow {PIL.__version__}; tessera {args.binary}")
    work = tempfile.mkdtemp(prefix="tessera-images-")
    try:
        for size in [] if args.only_read else args.sizes.split(","):
            w, h = (int(x) for x in size.split("x"))
            data = jpegs((w, h), args.images)
            mean_kb = sum(map(len, data)) / len(data) / 1024
            pillow_rate(data[:20], True)  # warm
            p_draft = pillow_rate(data, True)
            t1, built, secs = tessera_rate(args.binary, work, data, 1)
            serve = serving_rate(built, parquet_of(built))
            p_full = pillow_rate(data, False)
            p_draft2 = pillow_rate(data, True)
            p_draft = max(p_draft, p_draft2)
            print(f"{w}x{h} ({len(data)} JPEGs, {mean_kb:.0f} KiB mean), one core:")
            print(f"  (a) tessera build --threads 1 : {t1:8.0f} images/s (whole build; stages {json.dumps({k: round(v, 2) for k, v in secs.items()})})")
            print(f"  (b) Pillow, draft mode        : {p_draft:8.0f} images/s (best of two passes)")
            print(f"  (c) Pillow, full decode       : {p_full:8.0f} images/s")
            print(f"  (d) tessera ds.transform      : {serve:8.0f} images/s (decode + fit only, one thread, "
                  "best of two passes)")
            print(f"  (a)/(b) = {t1 / p_draft:.2f}   (a)/(c) = {t1 / p_full:.2f}   (d)/(b) = {serve / p_draft:.2f}")
        # Shuffled reading of 224x224x3 records.
        data = jpegs((640, 480), args.read_images)
        _, path, _ = tessera_rate(args.binary, work, data, 2)
        if not os.path.exists(args.epochs_bin):
            print(f"{args.epochs_bin} is missing: cargo build --release -p tessera-shards-reader --example epochs",
                  file=sys.stderr)
            return 2
        r = epochs_figures(args.epochs_bin, path, args.read_epochs, 64)
        print(f"shuffled reading, {args.read_images} records of 224x224x3 + id, batch 64, {args.read_epochs} epochs, "
              "medians of 3 rounds (each ratio taken within its round):")
        iid = r["gather_2t_iid"]["samples_per_sec"]
        for k in ("gather_1t", "gather_2t", "gather_2t_read", "gather_2t_iid", "loader_0t", "loader_0t_read",
                  "loader_1t", "loader_1t_read", "loader_2t", "loader_2t_read"):
            rate = float(r[k]["samples_per_sec"])  # type: ignore[arg-type]
            extra = f", {rate / iid:.2f} x gather_2t_iid" if k.startswith("loader") and not k.endswith("_read") else ""
            print(f"  {k:15s} {rate:10.0f} records/s  ({rate * 150536 / 2**30:5.2f} GiB/s)  "
                  f"{r[k]['ratio']:.2f} x {r[k]['baseline']}{extra}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
