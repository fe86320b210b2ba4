#!/usr/bin/env python3
"""A PyTorch training loop fed by tessera, with a checkpoint and a resume.

Writes a small synthetic click log with `tessera.write` (or reads a shard set
you pass, e.g. one built by `tessera build specs/criteo.yaml`, if it has the
fields `dense` (f32 [13]), `cat` (i32 [26]) and `label` (f32)), trains a
logistic regression for two epochs, stops half-way through the second,
and resumes from the saved state on a fresh dataset object.

    pip install ./python torch
    python examples/python_training_loop.py [SHARD_SET]
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
import torch
from torch.utils.data import DataLoader

import tessera
import tessera.torch


def synthetic(path: str, rows: int = 200_000) -> str:
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((rows, 13), dtype=np.float32)
    cat = rng.integers(0, 1000, size=(rows, 26), dtype=np.int32)
    logit = dense[:, 0] - 0.5 * dense[:, 1] + 0.01 * (cat[:, 0] % 7)
    label = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    split = rows * 9 // 10
    return tessera.write(path, {"dense": dense, "cat": cat, "label": label},
                         {"train": split, "val": rows - split})


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(1000, 8, mode="sum")
        self.out = torch.nn.Linear(13 + 8, 1)

    def forward(self, dense: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        # Categorical ids are hashed into the table: the synthetic ids are < 1000.
        e = self.emb(cat.long() % 1000)
        return self.out(torch.cat([dense, e], dim=1)).squeeze(1)


def run_epoch(model: Model, opt: torch.optim.Optimizer, data: tessera.torch.IterableDataset,
              stop_after: int = -1) -> int:
    steps = 0
    for batch in DataLoader(data, batch_size=None, num_workers=0):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model(batch["dense"], batch["cat"]), batch["label"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        if steps == stop_after:
            break
    print(f"  epoch {data.epoch}: {steps} steps, last loss {loss.item():.4f}")
    return steps


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else synthetic(os.path.join(tempfile.mkdtemp(), "clicks"))
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = tessera.torch.IterableDataset(path, batch_size=4096, split="train", seed=7)
    print(f"{path}: {len(data)} batches per epoch")

    data.set_epoch(0)
    run_epoch(model, opt, data)
    data.set_epoch(1)
    half = len(data) // 2
    run_epoch(model, opt, data, stop_after=half)
    checkpoint = {"model": model.state_dict(), "opt": opt.state_dict(), "data": data.state_dict()}
    print(f"  checkpoint at {checkpoint['data']}")

    # A new process would build everything afresh from the checkpoint:
    resumed = tessera.torch.IterableDataset(path, batch_size=4096, split="train", seed=7)
    resumed.load_state_dict(checkpoint["data"])
    resumed.set_epoch(1)  # keeps the restored position
    rest = run_epoch(model, opt, resumed)
    assert half + rest == len(data), (half, rest, len(data))

    val = tessera.open(path).split("val")[:]
    with torch.no_grad():
        p = torch.sigmoid(model(torch.from_numpy(val["dense"]), torch.from_numpy(val["cat"])))
        acc = ((p > 0.5).float() == torch.from_numpy(val["label"])).float().mean()
    print(f"validation accuracy {acc.item():.3f}")


if __name__ == "__main__":
    main()
