"""recipes.py - PyTorch's side of bench/recipes.c: the training recipes on
Fashion-MNIST, timed end to end (reading the gzipped IDX files included), with
the same nets and recipes as examples/recipe.h (keep the two in step):

Every recipe: inputs normalised by 0.2860/0.3530, random horizontal flips,
RandomErasing for the mlp (value 0 on the normalised image, torchvision's
scale and ratio), cross entropy with label smoothing 0.1, no weight decay on 0-D/1-D
parameters, LinearLR from 0.1 over the first 5 % of the steps then
CosineAnnealingLR to 0 (SequentialLR, per batch), AveragedModel EMA of the
weights and buffers (decay 0.999, capped at 1 - 10 / steps) used for every
test pass, and test outputs averaged with those of the flipped image.
  mlp     flatten, 784-512 BN ReLU dropout 0.2, 512-256 BN ReLU dropout 0.2,
          256-10; AdamW lr 2e-3 weight decay 0.05; erasing p 0.25
  cnn     conv32-BN-ReLU-pool, conv64-BN-ReLU-pool, conv128-BN-ReLU, linear
          6272-10; SGD nesterov 0.9 lr 0.05 weight decay 5e-4; random crop
          padding 2 (zeros after normalisation, as gpudl's loader pads),
          no erasing
  resnet  conv3x3 1-32 (no bias) BN ReLU, BasicBlock 32-64 stride 2,
          BasicBlock 64-128 stride 2 (torchvision's, projection shortcuts),
          global average pool, linear 128-10; recipe as cnn but lr 0.1
  resnet10  resnet with two BasicBlocks a stage (32-64 stride 2, 64-64;
          64-128 stride 2, 128-128); recipe as resnet
30 epochs of batch 128. PyTorch's default initialisation everywhere (gpudl
uses the same scheme). The test accuracy is printed after each epoch with the
time since the start; the time the --target is first reached and the final
accuracy are reported; the run goes on to the planned epochs.

Run: python3 bench/pytorch/recipes.py --net mlp|cnn|resnet|resnet10 [--device cpu|cuda]
         [--epochs N] [--batch-size N] [--seed N] [--target PERCENT]
         [--ema-decay D] [--train-subset N] [--test-subset N] [--data DIR]
As fmnist92.py: the whole dataset on the device as one tensor, batches by
indexing, the augmentation done on each batch with tensor ops (no DataLoader).
The last line, "result: net N final F target T reached_s S|nan total_s S", is
read by bench/compare_recipes.sh. Exit status 0 when the target was reached.
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

import flops  # the utilisation line
from fmnist92 import default_data, find, idx  # the IDX reader (this folder is on the path when run as a script)

T0 = time.perf_counter()
MEAN, STD = 0.2860, 0.3530
# net: (epochs, sgd, lr, weight decay, crop padding, erase p, label smoothing, ema decay, target)
RECIPES = {
    "mlp": (30, False, 2e-3, 0.05, 0, 0.25, 0.1, 0.999, 89.5),
    "cnn": (30, True, 0.05, 5e-4, 2, 0.0, 0.1, 0.999, 93.5),
    "resnet": (30, True, 0.1, 5e-4, 2, 0.0, 0.1, 0.999, 94.5),
    "resnet10": (30, True, 0.1, 5e-4, 2, 0.0, 0.1, 0.999, 94.5),
}


class BasicBlock(nn.Module):
    """torchvision's BasicBlock (the names of gpudl's gdl_nn_basic_block)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


def make_net(net):
    if net == "mlp":
        return nn.Sequential(
            nn.Flatten(), nn.Linear(784, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.2),
            nn.Linear(512, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.2), nn.Linear(256, 10))
    if net == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(), nn.Flatten(),
            nn.Linear(128 * 7 * 7, 10))
    deep = net == "resnet10"
    stage1 = [BasicBlock(32, 64, 2)] + ([BasicBlock(64, 64, 1)] if deep else [])
    stage2 = [BasicBlock(64, 128, 2)] + ([BasicBlock(128, 128, 1)] if deep else [])
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), *stage1, *stage2,
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))


def random_crop(x, pad):
    """RandomCrop(28, padding=pad) per sample, the padding zeros of the normalised image."""
    B, _, H, W = x.shape
    xp = F.pad(x, (pad, pad, pad, pad))
    top = torch.randint(0, 2 * pad + 1, (B, 1, 1), device=x.device)
    left = torch.randint(0, 2 * pad + 1, (B, 1, 1), device=x.device)
    rows = top + torch.arange(H, device=x.device).view(1, H, 1)
    cols = left + torch.arange(W, device=x.device).view(1, 1, W)
    return xp[torch.arange(B, device=x.device).view(B, 1, 1), 0, rows, cols].unsqueeze(1)


def random_erase(x, p, scale=(0.02, 0.33), ratio=(0.3, 3.3)):
    """torchvision's RandomErasing(p, scale, ratio, value=0) per sample, its 10 tries done at once."""
    if p <= 0:  # off (the cnn's recipe): no work, as gpudl's loader skips it
        return x
    B, _, H, W = x.shape
    dev = x.device
    u = torch.rand(B, 10, 2, device=dev)
    area = H * W * (scale[0] + u[..., 0] * (scale[1] - scale[0]))
    ar = torch.exp(math.log(ratio[0]) + u[..., 1] * (math.log(ratio[1]) - math.log(ratio[0])))
    h = torch.round(torch.sqrt(area * ar))
    w = torch.round(torch.sqrt(area / ar))
    ok = (h < H) & (w < W)
    first = ok.float().argmax(1, keepdim=True)  # the first try that fits
    h = h.gather(1, first).view(B, 1, 1)
    w = w.gather(1, first).view(B, 1, 1)
    erase = (torch.rand(B, device=dev) < p) & ok.any(1)
    top = torch.floor(torch.rand(B, 1, 1, device=dev) * (H - h + 1))
    left = torch.floor(torch.rand(B, 1, 1, device=dev) * (W - w + 1))
    r = torch.arange(H, device=dev).view(1, H, 1)
    c = torch.arange(W, device=dev).view(1, 1, W)
    box = (r >= top) & (r < top + h) & (c >= left) & (c < left + w) & erase.view(B, 1, 1)
    return x.masked_fill(box.unsqueeze(1), 0.0)


def evaluate(model, xte, yte):
    """Accuracy with the outputs averaged over the image and its horizontal flip."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for s in range(0, xte.shape[0], 1000):
            x = xte[s:s + 1000]
            out = (model(x) + model(x.flip(3))) / 2
            correct += (out.argmax(1) == yte[s:s + 1000]).sum().item()
    return 100.0 * correct / xte.shape[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--net", required=True, choices=sorted(RECIPES))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float)
    ap.add_argument("--ema-decay", type=float)
    ap.add_argument("--train-subset", type=int, default=0)
    ap.add_argument("--test-subset", type=int, default=0)
    ap.add_argument("--data", default=default_data())
    a = ap.parse_args()
    epochs, sgd, lr, wd, pad, erase_p, smoothing, ema_decay, target = RECIPES[a.net]
    epochs = a.epochs or epochs
    target = a.target if a.target is not None else target
    ema_decay = a.ema_decay if a.ema_decay is not None else ema_decay
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)

    def load(prefix, n):
        x = torch.from_numpy(idx(find(a.data, prefix + "-images-idx3-ubyte")).copy())
        y = torch.from_numpy(idx(find(a.data, prefix + "-labels-idx1-ubyte")).astype(np.int64))
        if n:
            x, y = x[:n], y[:n]
        return ((x.to(dev).float() / 255 - MEAN) / STD).unsqueeze(1), y.to(dev)

    xtr, ytr = load("train", a.train_subset)
    xte, yte = load("t10k", a.test_subset)
    m = make_net(a.net).to(dev)
    decay = [p for p in m.parameters() if p.dim() >= 2]
    no_decay = [p for p in m.parameters() if p.dim() < 2]
    groups = [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]
    if sgd:
        opt = torch.optim.SGD(groups, lr=lr, momentum=0.9, nesterov=True, weight_decay=wd)
    else:
        opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
    n, B = xtr.shape[0], a.batch_size
    steps = (n + B - 1) // B
    total = steps * epochs
    warmup = min(max(total // 20, 1), total - 1)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=0)
    if warmup > 0:
        sched = torch.optim.lr_scheduler.SequentialLR(
            opt, [torch.optim.lr_scheduler.LinearLR(opt, 0.1, 1.0, total_iters=warmup), cosine], milestones=[warmup])
    else:
        sched = cosine
    if ema_decay > 1 - 10.0 / total:
        ema_decay = 1 - 10.0 / total if total > 10 else 0.0
    ema = AveragedModel(m, multi_avg_fn=get_ema_multi_avg_fn(ema_decay), use_buffers=True) if ema_decay > 0 else None
    t_setup = time.perf_counter() - T0  # the data read, the net made
    print("net %s (%d parameters), device %s, batch %d, %d epochs, seed %d, target %.1f %%, EMA %s" %
          (a.net, sum(p.numel() for p in m.parameters()), dev, B, epochs, a.seed, target,
           "on" if ema is not None else "off"), flush=True)
    reached, reached_epoch, acc = None, 0, 0.0
    train_s = 0.0  # the training loops' time, for the utilisation line
    for ep in range(1, epochs + 1):
        t_ep = time.perf_counter()
        m.train()
        perm = torch.randperm(n, device=dev)
        loss_sum = 0.0
        for s in range(steps):
            i = perm[s * B:(s + 1) * B]
            x, y = xtr[i], ytr[i]
            if pad:
                x = random_crop(x, pad)
            flip = torch.rand(x.shape[0], 1, 1, 1, device=dev) < 0.5
            x = torch.where(flip, x.flip(3), x)
            x = random_erase(x, erase_p)
            loss = F.cross_entropy(m(x), y, label_smoothing=smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if ema is not None:
                ema.update_parameters(m)
            loss_sum += loss.item() * x.shape[0]
        train_s += time.perf_counter() - t_ep
        acc = evaluate(ema if ema is not None else m, xte, yte)
        t = time.perf_counter() - T0
        print("epoch %d: train loss %.4f, test accuracy %.2f %% at %.2f s" % (ep, loss_sum / n, acc, t), flush=True)
        if acc >= target and reached is None:
            reached, reached_epoch = t, ep
    total_s = time.perf_counter() - T0
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
    print("pytorch recipes %s %s: final test accuracy %.2f %% after %d epochs, %.2f s end to end (set-up %.2f s); %s" %
          (a.net, name, acc, epochs, total_s, t_setup,
           "target %.1f %% not reached" % target if reached is None else
           "target %.1f %% reached in %.2f s (epoch %d)" % (target, reached, reached_epoch)))
    print("result: net %s final %.2f target %.1f reached_s %s total_s %.2f" %
          (a.net, acc, target, "nan" if reached is None else "%.2f" % reached, total_s))
    print("utilisation: " + flops.run_line(flops.model_step(m, xtr[:B]), train_s, n * epochs, B), flush=True)
    sys.exit(0 if reached is not None else 1)


if __name__ == "__main__":
    main()
