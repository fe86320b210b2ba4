"""Conversations (SFT) packed at build time, checked from outside.

Real conversations (the `chitchat-dataset` package's 7,168 human chats, MIT)
are written with pyarrow as a list of {role, content} structs, rendered by
`tessera build` with a chat template that the `trl` package ships and
tokenized with DeepSeek-V3's tokenizer file (from `litellm`). The same
conversations are rendered here by jinja2 (set up as Hugging Face
`transformers` sets it up), tokenized by the Python `tokenizers` package
with offsets, and masked by the documented rule (docs/SPEC.md,
"Conversations"): every packed document must equal its reference, tokens
and loss mask, and the rule is compared with the template's own
`{% generation %}` blocks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from typing import Dict, List, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tessera
from tessera._build import find_compiler

SETUP = ("scripts/setup.sh --test installs it (chitchat-dataset==0.9.0, trl==1.16.0, "
         "litellm==1.110.2 --no-deps; tokenizers==0.23.2, jinja2)")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATE = "qwen2_5.jinja"
Conversation = List[Tuple[str, str]]


def package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        pytest.fail(f"the Python package {name!r} is missing: {SETUP}")
    return os.path.dirname(spec.origin)


def chitchat(limit: int) -> List[Conversation]:
    """The first `limit` chats in file order; a chat's turns alternate
    between its two people, the first one's as the user's."""
    with open(os.path.join(package_dir("chitchat_dataset"), "dataset.json"), encoding="utf-8") as f:
        data = json.load(f)
    out = []
    for key in list(data)[:limit]:
        turns = data[key]["messages"]
        out.append([("user" if i % 2 == 0 else "assistant", "\n".join(m["text"] for m in turn))
                    for i, turn in enumerate(turns)])
    return out


def reference_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("chat_reference", os.path.join(REPO, "tests", "chat_reference.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(root: str, convs: List[Conversation], files: int) -> None:
    os.makedirs(os.path.join(root, "data"), exist_ok=True)
    kind = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    per = -(-len(convs) // files)
    for f in range(files):
        part = convs[f * per:(f + 1) * per]
        table = pa.table({
            "id": pa.array(np.arange(f * per, f * per + len(part), dtype=np.int64)),
            "chat": pa.array([[{"role": r, "content": c} for r, c in conv] for conv in part], type=kind),
        })
        pq.write_table(table, os.path.join(root, "data", f"chat-{f:02}.parquet"), row_group_size=53)


def spec_text(tokenizer: str, template: str, extra: str = "", pack: str = "{ field: tokens, length: 2048 }") -> str:
    return (
        "version: 1\nname: chats\nsources:\n  chats: { path: \"data/*.parquet\" }\n"
        "fields:\n"
        f"  tokens: {{ dtype: u32, column: chat, transform: [ {{ tokenize: {{ file: {tokenizer}, "
        f"chat_template: {template}{extra} }} }} ] }}\n"
        "chunks: { target_bytes: 64KiB }\n"
        f"pack: {pack}\n"
    )


@pytest.fixture(scope="module")
def setup_files(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    root = str(tmp_path_factory.mktemp("chat-files"))
    tok = os.path.join(package_dir("litellm"), "litellm_core_utils", "tokenizers", "deepseek_tokenizer.json")
    templates = os.path.join(package_dir("trl"), "chat_templates")
    for name in (TEMPLATE, TEMPLATE.replace(".jinja", "_training.jinja")):
        if not os.path.isfile(os.path.join(templates, name)):
            pytest.fail(f"trl lacks chat_templates/{name}: {SETUP}")
    if not os.path.isfile(tok):
        pytest.fail(f"{tok} is missing: {SETUP}")
    return {"tokenizer": tok, "templates": templates}


def reference(convs: List[Conversation], files: Dict[str, str]) -> List[Tuple[List[int], List[int], List[int]]]:
    """Per conversation: ids, the documented mask, and the mask of the
    training template's generation blocks (transformers' assistant mask)."""
    ref = reference_module()
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(files["tokenizer"])
    with open(os.path.join(files["templates"], TEMPLATE), encoding="utf-8") as f:
        plain = ref.environment().from_string(f.read())
    env = ref.environment()
    ext = next(e for e in env.extensions.values() if isinstance(e, ref.Generation))
    with open(os.path.join(files["templates"], TEMPLATE.replace(".jinja", "_training.jinja")), encoding="utf-8") as f:
        training = env.from_string(f.read())

    def render(msgs: Conversation, prompt: bool) -> str:
        return plain.render(messages=[{"role": r, "content": c} for r, c in msgs],
                            add_generation_prompt=prompt, bos_token="", eos_token="")

    out = []
    for conv in convs:
        text = render(conv, False)
        ranges = []
        for i, (role, _) in enumerate(conv):
            if role == "assistant":
                before, after = render(conv[:i], True), render(conv[:i + 1], False)
                assert text.startswith(before) and text.startswith(after)
                ranges.append((len(before.encode()), len(after.encode())))
        # As chat_reference.py does: a block's start is the length of the
        # text generated before it.
        blocks: List[str] = []
        char_spans: List[Tuple[int, int]] = []
        ext.blocks, ext.spans = blocks, char_spans
        for piece in training.generate(messages=[{"role": r, "content": c} for r, c in conv],
                                       add_generation_prompt=False, bos_token="", eos_token=""):
            blocks.append(piece)
        ext.blocks, ext.spans = None, None
        assert "".join(blocks) == text, "the training template renders other text than the template"
        spans = [(ref.byte_offset(text, a), ref.byte_offset(text, b)) for a, b in char_spans]
        enc = tok.encode(text, add_special_tokens=False)

        def mask(rs: List[Tuple[int, int]]) -> List[int]:
            return [int(any(a < e and s < b for a, b in rs)) for s, e in enc.offsets]

        out.append((list(enc.ids), mask(ranges), mask(spans)))
    return out


def packed_documents(path: str) -> List[Tuple[Tuple[int, ...], Tuple[int, ...]]]:
    ds = tessera.open(path)
    rec = ds[0:len(ds)]
    tokens, seg, mask = (np.asarray(rec[k]) for k in ("tokens", "segment_ids", "loss_mask"))
    docs = []
    for w in range(len(ds)):
        for s in np.unique(seg[w][seg[w] != 0]):
            at = seg[w] == s
            docs.append((tuple(int(t) for t in tokens[w][at]), tuple(int(m) for m in mask[w][at])))
    return docs


def test_conversations_pack_with_the_documented_assistant_mask(tmp_path: "os.PathLike[str]",
                                                               setup_files: Dict[str, str]) -> None:
    convs = chitchat(400)
    root = str(tmp_path)
    write(root, convs, files=3)
    want = reference(convs, setup_files)
    # A window takes the longest conversation whole.
    length = 1 << max(len(ids) for ids, _, _ in want).bit_length()
    with open(os.path.join(root, "spec.yaml"), "w") as f:
        f.write(spec_text(setup_files["tokenizer"], os.path.join(setup_files["templates"], TEMPLATE),
                          ", on_bad_mask: skip", f"{{ field: tokens, length: {length} }}"))
    path = tessera.build(os.path.join(root, "spec.yaml"), cache_dir=os.path.join(root, "cache"))
    # A conversation with no assistant reply (one person only) has an
    # all-zeros mask: skipped and counted.
    bad = [i for i, (_, m, _) in enumerate(want) if not any(m) or all(m)]
    good = [w for i, w in enumerate(want) if i not in set(bad)]
    assert len(good) > 200 and len(bad) > 100
    stats = tessera.open(path).manifest["build"]["pack"]["all"]
    assert stats["skipped_conversations"] == len(bad)
    assert stats["documents"] == len(good)

    got = packed_documents(path)
    assert len(got) == len(good)
    # Each conversation is one whole piece.
    by_tokens: Dict[Tuple[int, ...], List[Tuple[int, ...]]] = {}
    for toks, m in got:
        by_tokens.setdefault(toks, []).append(m)
    blocks_only = 0
    for ids, m, blocks in good:
        masks = by_tokens.get(tuple(ids))
        assert masks, "a conversation's tokens are not in the windows as the reference tokenizes them"
        assert tuple(m) in masks, "a conversation's loss mask differs from the documented rule"
        masks.remove(tuple(m))
        # The generation blocks cover the same replies; they may also take
        # in the header's newline, which is prompt here (docs/SPEC.md).
        assert all(b >= a for a, b in zip(m, blocks))
        blocks_only += sum(b - a for a, b in zip(m, blocks))
    assert all(not v for v in by_tokens.values())
    replies = sum(1 for _, m, _ in good for k in range(len(m)) if m[k] and (k == 0 or not m[k - 1]))
    assert blocks_only <= replies


def test_a_bad_mask_names_the_row_and_nothing_is_published(tmp_path: "os.PathLike[str]",
                                                          setup_files: Dict[str, str]) -> None:
    convs = [c for c in chitchat(300) if len(c) >= 2][:40]
    assert len(convs) == 40
    convs[17] = [("user", "hello?")]
    root = str(tmp_path)
    write(root, convs, files=1)
    with open(os.path.join(root, "spec.yaml"), "w") as f:
        f.write(spec_text(setup_files["tokenizer"], os.path.join(setup_files["templates"], TEMPLATE)))
    run = subprocess.run([find_compiler(), "build", os.path.join(root, "spec.yaml"), "--cache-dir",
                          os.path.join(root, "cache")], capture_output=True, text=True)
    assert run.returncode != 0
    # Rows are counted from 1, as in every tessera error.
    assert "chat-00.parquet, row 18:" in run.stderr and "all zeros" in run.stderr, run.stderr
    assert "fields.tokens" in run.stderr, run.stderr
    published = [d for d, _, names in os.walk(os.path.join(root, "cache")) if "manifest.json" in names]
    assert published == []


def test_the_artifact_is_the_same_for_any_cutting_and_threads(tmp_path: "os.PathLike[str]",
                                                             setup_files: Dict[str, str]) -> None:
    convs = chitchat(300)
    hashes = set()
    for files, threads in ((1, 1), (4, 2)):
        root = os.path.join(str(tmp_path), f"{files}-{threads}")
        write(root, convs, files=files)
        with open(os.path.join(root, "spec.yaml"), "w") as f:
            f.write(spec_text(setup_files["tokenizer"], os.path.join(setup_files["templates"], TEMPLATE),
                              ", on_bad_mask: skip", "{ field: tokens, length: 1024, labels: true }"))
        path = tessera.build(os.path.join(root, "spec.yaml"), cache_dir=os.path.join(root, "cache"), threads=threads)
        shards = sorted(n for n in os.listdir(path) if n.endswith(".bin"))
        assert shards
        # The artifact hash covers the input files, which differ; the shard
        # bytes must not.
        hashes.add(tuple(open(os.path.join(path, n), "rb").read() for n in shards))
    assert len(hashes) == 1
