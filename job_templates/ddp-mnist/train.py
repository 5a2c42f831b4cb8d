"""Distributed data-parallel training of a small CNN on MNIST-like digits generated on the fly.

Started by torchrun (one process per GPU, on every node) or by mpirun: it reads its rank and the rendezvous
from the environment. NCCL on GPUs, gloo on CPUs, so the same file runs on an 8×A100 node and in
CI. No downloads: each class is a fixed random 28×28 stroke pattern plus noise, which a CNN learns quickly.
Rank 0 prints the loss per epoch and writes metrics.json to $KAKEHASHI_OUTPUT_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from kakehashi_dist import join_process_group, leave_together  # staged next to this file


def synthetic_digits(n: int, seed: int = 0) -> TensorDataset:
    """n images of 10 classes; identical on every rank because the generator is seeded."""
    gen = torch.Generator().manual_seed(seed)
    prototypes = (torch.rand(10, 1, 28, 28, generator=gen) > 0.8).float()
    labels = torch.randint(0, 10, (n,), generator=gen)
    images = prototypes[labels] + 0.5 * torch.randn(n, 1, 28, 28, generator=gen)
    return TensorDataset(images, labels)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=int(os.environ.get("EPOCHS", 3)))
    parser.add_argument("--samples", type=int, default=int(os.environ.get("SAMPLES", 4096)))
    parser.add_argument("--batch-size", type=int, default=int(os.environ.get("BATCH_SIZE", 64)))
    parser.add_argument("--lr", type=float, default=float(os.environ.get("LR", 0.01)))
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    rank, world, local_rank = join_process_group("nccl" if use_cuda else "gloo")
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(1234)  # same initial weights everywhere (DDP also broadcasts them)

    data = synthetic_digits(args.samples)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = DistributedDataParallel(SmallCNN().to(device), device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    if rank == 0:
        print(f"world size {world} ({'cuda' if use_cuda else 'cpu'}, {dist.get_backend()}), {args.samples} samples",
              flush=True)
    losses = []
    started = time.time()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(2, device=device)  # loss sum, sample count
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            total += torch.stack([loss.detach() * len(labels), torch.tensor(float(len(labels)), device=device)])
        dist.all_reduce(total)  # the mean over every rank's samples, not just rank 0's
        mean = (total[0] / total[1]).item()
        losses.append(mean)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} loss {mean:.4f}", flush=True)

    if rank == 0:
        out = Path(os.environ.get("KAKEHASHI_OUTPUT_DIR", "."))
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps({
            "world_size": world, "backend": dist.get_backend(), "losses": losses,
            "seconds": round(time.time() - started, 3),
        }))
        print(f"final loss {losses[-1]:.4f} (first {losses[0]:.4f})", flush=True)
    del model, optimizer, loader  # DDP's reducer holds the process group; let it go first
    leave_together()


if __name__ == "__main__":
    main()
