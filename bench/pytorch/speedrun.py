"""speedrun.py - PyTorch's side of examples/speedrun.c: Fashion-MNIST to 93.5 % test
accuracy in the least wall time, each seed timed end to end (reading the gzipped IDX
files to the last test pass), with the same net and recipe:
  a frozen conv3x3 1->9 initialised by patch whitening (the eigenvectors of the 3x3
  training patches' covariance over sqrt(eigenvalue + 5e-4)), three groups conv3x3 (no
  bias) - maxpool 2 - BatchNorm - GELU, each followed (--convs 2, the default) by a second
  conv3x3 - BatchNorm - GELU at the pooled size (widths 32, 64, 128; 28 -> 14 -> 7 -> 3),
  then the 3x3 map flattened (--head pool: max-pooled to 1x1) into a linear layer (no
  bias) to 10;
  inputs normalised by 0.2860/0.3530, random crops with padding 2 and horizontal flips,
  cross entropy with label smoothing 0.2, SGD nesterov 0.9, weight decay 5e-4 (none on 1-D
  parameters), OneCycleLR (pct_start 0.25) stepped per batch, an EMA of the weights and
  BatchNorm buffers (AveragedModel, decay min(0.99, 1 - 10 / steps)), one test pass at the
  end with the averaged model: the outputs of the image and its mirror (weight 1/2) and of
  both moved one pixel up-left and down-right, edges repeated (1/4 each; --tta 1: the
  mirror only, 0: none).
PyTorch's fast path: the whole dataset as one tensor, batches by indexing (no DataLoader).

Run: python3 bench/pytorch/speedrun.py [--epochs N] [--batch-size N] [--seed N] [--seeds N]
         [--target PERCENT] [--widths A,B,C] [--convs N] [--head flat|pool] [--tta N] [--lr X]
         [--train-subset N] [--test-subset N] [--data DIR] [--bf16] [--fp32-precision ieee|bf16]
--bf16: forward passes under torch.autocast("cpu", bfloat16) (oneDNN's bf16 kernels: AMX tiles where the
CPU has them), to show what lower precision buys on this CPU.
--fp32-precision bf16: f32 tensors throughout, oneDNN's convolutions and matmuls computing in bf16 inside
(torch.backends.mkldnn.conv / matmul .fp32_precision = "bf16": AMX tiles where the CPU has them), the twin
of examples/speedrun.c --fp32-precision bf16.
Exit status 0 when every seed reached the target, 1 when one did not.
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from fmnist92 import default_data, find, idx  # the IDX reader (this folder is on the path when run as a script)

MEAN, STD = 0.2860, 0.3530


def load(data, prefix, subset):
    x = torch.from_numpy(idx(find(data, prefix + "-images-idx3-ubyte")).copy())
    y = torch.from_numpy(idx(find(data, prefix + "-labels-idx1-ubyte")).astype(np.int64))
    if subset:
        x, y = x[:subset], y[:subset]
    return ((x.float() / 255 - MEAN) / STD).unsqueeze(1), y


def whitening(x, n=10000, eps=5e-4):
    """The frozen first conv's weight [9,1,3,3] from the 3x3 patches inside the first n images."""
    p = F.unfold(x[:n].double(), 3).transpose(1, 2).reshape(-1, 9)
    cov = torch.cov(p.T, correction=0)
    val, vec = torch.linalg.eigh(cov)
    return (vec.T / torch.sqrt(val.clamp(min=0) + eps)[:, None]).float().reshape(9, 1, 3, 3)


def net(widths, convs=1, flat_head=False):
    layers, c, side = [nn.Conv2d(1, 9, 3, padding=1, bias=False)], 9, 28
    for w in widths:
        layers += [nn.Conv2d(c, w, 3, padding=1, bias=False), nn.MaxPool2d(2), nn.BatchNorm2d(w), nn.GELU()]
        for _ in range(1, convs):  # airbench's second conv, at the pooled size
            layers += [nn.Conv2d(w, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.GELU()]
        c, side = w, side // 2
    if not flat_head:
        layers += [nn.MaxPool2d(side)]
    layers += [nn.Flatten(), nn.Linear(c * side * side if flat_head else c, 10, bias=False)]
    return nn.Sequential(*layers)


def augment(x, pad):
    """Random crops (zero padding pad) and horizontal flips of the batch x [B,1,H,W]."""
    B, _, H, W = x.shape
    xp = F.pad(x, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (B,))
    dx = torch.randint(0, 2 * pad + 1, (B,))
    rows = (dy[:, None] + torch.arange(H))[:, :, None]
    cols = dx[:, None] + torch.arange(W)
    flip = torch.rand(B) < 0.5
    cols = torch.where(flip[:, None], cols.flip(1), cols)[:, None, :]
    return xp[torch.arange(B)[:, None, None], 0, rows, cols].unsqueeze(1)


def moved(x, d):
    """x [B,C,H,W] moved by d (+-1) pixels down and right, the edge row and column repeated."""
    H, W = x.shape[2], x.shape[3]
    rows = (torch.arange(H) - d).clamp(0, H - 1)
    cols = (torch.arange(W) - d).clamp(0, W - 1)
    return x[:, :, rows][:, :, :, cols]


def evaluate(model, xte, yte, tta):
    """Test accuracy (percent); tta 0 the image alone, 1 averaged with its mirror image, 2 that pair weighted
    1/2 and the pairs moved one pixel up-left and down-right 1/4 each."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for s in range(0, xte.shape[0], 1000):
            x = xte[s:s + 1000]
            out = model(x)
            if tta >= 1:
                out = out + model(x.flip(3))
            if tta >= 2:
                out = 2 * out
                for d in (1, -1):
                    v = moved(x, d)
                    out = out + model(v) + model(v.flip(3))
            correct += (out.argmax(1) == yte[s:s + 1000]).sum().item()
    return 100.0 * correct / xte.shape[0]


def run(a, seed):
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    xtr, ytr = load(a.data, "train", a.train_subset)
    xte, yte = load(a.data, "t10k", a.test_subset)
    m = net(a.widths, a.convs, a.head == "flat")
    with torch.no_grad():
        m[0].weight.copy_(whitening(xtr))
    m[0].weight.requires_grad_(False)
    decay = [p for p in m.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in m.parameters() if p.requires_grad and p.ndim < 2]
    opt = torch.optim.SGD([{"params": decay}, {"params": no_decay, "weight_decay": 0}], lr=a.lr, momentum=0.9,
                          nesterov=True, weight_decay=5e-4)
    n, B = xtr.shape[0], a.batch_size
    steps = (n + B - 1) // B
    total = a.epochs * steps
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, a.lr, total_steps=total, pct_start=0.25)
    ema_decay = min(0.99, 1 - 10 / total) if total > 10 else 0
    ema = AveragedModel(m, multi_avg_fn=get_ema_multi_avg_fn(ema_decay), use_buffers=True)
    for ep in range(a.epochs):
        m.train()
        perm = torch.randperm(n)
        for s in range(steps):
            i = perm[s * B:(s + 1) * B]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                loss = F.cross_entropy(m(augment(xtr[i], 2)), ytr[i], label_smoothing=0.2)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            ema.update_parameters(m)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
        acc = evaluate(ema, xte, yte, a.tta)
    return acc, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--target", type=float, default=93.5)
    ap.add_argument("--widths", default="32,64,128")
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--convs", type=int, default=2, choices=(1, 2))
    ap.add_argument("--head", default="flat", choices=("flat", "pool"))
    ap.add_argument("--tta", type=int, default=2, choices=(0, 1, 2))
    ap.add_argument("--train-subset", type=int, default=0)
    ap.add_argument("--test-subset", type=int, default=0)
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--fp32-precision", default="ieee", choices=("ieee", "bf16"))
    a = ap.parse_args()
    torch.backends.mkldnn.conv.fp32_precision = a.fp32_precision
    torch.backends.mkldnn.matmul.fp32_precision = a.fp32_precision
    a.widths = [int(w) for w in a.widths.split(",")]
    if len(a.widths) != 3:
        raise SystemExit("speedrun.py: --widths wants A,B,C")
    print("speedrun.py: torch %s, %d threads, widths %s, %d conv%s a group, %s head, tta %d, batch %d, %d epochs, "
          "lr %g, target %.2f %%%s, fp32 precision %s" % (torch.__version__, torch.get_num_threads(), a.widths,
                                     a.convs, "s" if a.convs > 1 else "", a.head, a.tta,
                                     a.batch_size, a.epochs, a.lr, a.target,
                                     ", autocast bf16" if a.bf16 else "", a.fp32_precision), flush=True)
    accs, secs = [], []
    for s in range(a.seeds):
        acc, t = run(a, a.seed + s)
        accs.append(acc)
        secs.append(t)
        print("seed %d: test accuracy %.2f %% in %.2f s%s" %
              (a.seed + s, acc, t, " (short of the target)" if acc < a.target else ""), flush=True)
    sd = lambda v: math.sqrt(sum((x - sum(v) / len(v)) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0
    reached = sum(acc >= a.target for acc in accs)
    print("speedrun.py: %d seeds: accuracy %.2f +- %.2f %%, time %.2f +- %.2f s; %d of %d reached %.2f %%" %
          (a.seeds, sum(accs) / len(accs), sd(accs), sum(secs) / len(secs), sd(secs), reached, a.seeds, a.target))
    sys.exit(0 if reached == a.seeds else 1)


if __name__ == "__main__":
    main()
