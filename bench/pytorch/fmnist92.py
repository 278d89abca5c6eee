"""fmnist92.py - PyTorch's side of bench/fmnist92.c: Fashion-MNIST to >= 92 %
test accuracy, timed end to end (reading the gzipped IDX files included),
with the same net and recipe: conv32-BN-ReLU-pool, conv64-BN-ReLU-pool,
conv128-BN-ReLU, flatten, linear 6272->10; SGD nesterov 0.9, weight decay
5e-4, OneCycle to lr 0.1 (pct_start 0.25) over the planned epochs, batch 256,
random horizontal flips, inputs normalised by 0.2860/0.3530. Accuracy is
checked after each epoch; the clock stops at the first epoch >= the target.

Run: python3 bench/pytorch/fmnist92.py [--device cuda|cpu] [--amp] [--compile]
         [--epochs N] [--target 0.92] [--data DIR]
PyTorch's fast path is used: the whole dataset on the device as one tensor,
batches by indexing (no DataLoader), channels_last and bf16 autocast with
--amp, torch.compile with --compile (its compile time is counted).
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import flops  # the utilisation line (this folder is on the path when run as a script)

T0 = time.perf_counter()


def idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(d, base):
    for p in (os.path.join(d, base), os.path.join(d, base + ".gz")):
        if os.path.exists(p):
            return p
    raise SystemExit("%s: %s(.gz) not found in %s" % (os.path.basename(sys.argv[0]), base, d))


def default_data():
    """--data's default: $GPUDL_DATA, else ./data when it exists, else Debian's dataset-fashion-mnist."""
    return os.environ.get("GPUDL_DATA") or ("data" if os.path.isdir("data") else "/usr/share/datasets/fashion-mnist")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--target", type=float, default=0.92)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=default_data())
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    mean, std = 0.2860, 0.3530

    def load(prefix):
        x = torch.from_numpy(idx(find(a.data, prefix + "-images-idx3-ubyte")).copy()).to(dev)
        y = torch.from_numpy(idx(find(a.data, prefix + "-labels-idx1-ubyte")).astype(np.int64)).to(dev)
        return ((x.float() / 255 - mean) / std).unsqueeze(1), y

    xtr, ytr = load("train")
    xte, yte = load("t10k")
    t_data = time.perf_counter() - T0
    m = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(), nn.Flatten(),
        nn.Linear(128 * 7 * 7, 10)).to(dev)
    if a.amp and dev.type == "cuda":
        m = m.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    n, B = xtr.shape[0], a.batch_size
    steps = (n + B - 1) // B
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=a.epochs * steps, pct_start=0.25)
    fwd = torch.compile(m) if a.compile else m
    amp = torch.autocast(dev.type, torch.bfloat16, enabled=a.amp)
    reached = None
    train_s, trained = 0.0, 0  # the training loops' time and samples, for the utilisation line
    for ep in range(1, a.epochs + 1):
        t_ep = time.perf_counter()
        m.train()
        perm = torch.randperm(n, device=dev)
        for s in range(steps):
            i = perm[s * B:(s + 1) * B]
            x, y = xtr[i], ytr[i]
            flip = torch.rand(x.shape[0], 1, 1, 1, device=dev) < 0.5
            x = torch.where(flip, x.flip(3), x)
            with amp:
                loss = F.cross_entropy(fwd(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        train_s += time.perf_counter() - t_ep
        trained += n
        m.eval()
        correct = 0
        with torch.no_grad(), amp:
            for s in range(0, xte.shape[0], 1000):
                correct += (fwd(xte[s:s + 1000]).argmax(1) == yte[s:s + 1000]).sum().item()
        acc = correct / xte.shape[0]
        t = time.perf_counter() - T0
        print("epoch %d: test accuracy %.2f %% at %.2f s" % (ep, 100 * acc, t), flush=True)
        if acc >= a.target and reached is None:
            reached = t
            break
    with amp:
        step_flops = flops.model_step(m, xtr[:B])
    print("utilisation: " + flops.run_line(step_flops, train_s, trained, B), flush=True)
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
    if reached is None:
        print("pytorch fmnist92 %s%s: target %.1f %% not reached in %d epochs (data %.2f s)" %
              (name, " amp" if a.amp else "", 100 * a.target, a.epochs, t_data))
        sys.exit(1)
    print("pytorch fmnist92 %s%s: %.1f %% reached in %.2f s end to end (data %.2f s)" %
          (name, " amp" if a.amp else "", 100 * a.target, reached, t_data))


if __name__ == "__main__":
    main()
