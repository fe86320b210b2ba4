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
    (c) Pillow without draft (full decode), for reference.
  Reported per input size (480p = 640x480, and 1280x720), with the ratio
  (a)/(b). The bar: (a) >= 2x (b) per core; libjpeg-turbo's single-core
  full decode of 480p is about 635 images/s as a reference point.

  shuffled reading of the built 224x224x3 records (150,536-byte records):
    reader/examples/epochs.rs on the built set: the Rust loader with 0, 1
    and 2 prefetch threads (`loader_Nt`, and `loader_Nt_read`, whose
    consumer reads every byte) against the plain 2-thread loop gathering
    random records into a batch buffer (`gather_2t`) over the same bytes.
    The bar: >= 0.9.

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


def epochs_figures(exe: str, path: str, epochs: int, batch: int) -> Dict[str, float]:
    out = subprocess.run([exe, path, "--epochs", str(epochs), "--batch", str(batch), "--rounds", "3", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return {r["name"]: r["samples_per_sec"] for r in json.loads(out) if "samples_per_sec" in r}


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
            t1, _, secs = tessera_rate(args.binary, work, data, 1)
            p_full = pillow_rate(data, False)
            p_draft2 = pillow_rate(data, True)
            p_draft = max(p_draft, p_draft2)
            print(f"{w}x{h} ({len(data)} JPEGs, {mean_kb:.0f} KiB mean), one core:")
            print(f"  (a) tessera build --threads 1 : {t1:8.0f} images/s (whole build; stages {json.dumps({k: round(v, 2) for k, v in secs.items()})})")
            print(f"  (b) Pillow, draft mode        : {p_draft:8.0f} images/s (best of two passes)")
            print(f"  (c) Pillow, full decode       : {p_full:8.0f} images/s")
            print(f"  (a)/(b) = {t1 / p_draft:.2f}   (a)/(c) = {t1 / p_full:.2f}")
        # Shuffled reading of 224x224x3 records.
        data = jpegs((640, 480), args.read_images)
        _, path, _ = tessera_rate(args.binary, work, data, 2)
        if not os.path.exists(args.epochs_bin):
            print(f"{args.epochs_bin} is missing: cargo build --release -p tessera-shards-reader --example epochs",
                  file=sys.stderr)
            return 2
        r = epochs_figures(args.epochs_bin, path, args.read_epochs, 64)
        g = r["gather_2t"]
        print(f"shuffled reading, {args.read_images} records of 224x224x3 + id, batch 64, {args.read_epochs} epochs, "
              "median of 3 rounds:")
        for k in ("gather_1t", "gather_2t", "loader_0t", "loader_0t_read", "loader_1t", "loader_1t_read",
                  "loader_2t", "loader_2t_read"):
            print(f"  {k:15s} {r[k]:10.0f} records/s  ({r[k] * 150536 / 2**30:.2f} GiB/s)  ratio to gather_2t {r[k] / g:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
