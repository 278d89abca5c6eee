"""train.py - the nets of bench/train.c in PyTorch eager mode, timed the same
way: random inputs, warm-up, then the median of 5 repeats of `steps` steps,
synchronised by loss.item() at the end of each repeat. Prints the same table
(and peak GPU memory).

Run: python3 bench/pytorch/train.py [net ...]   (mlp cnn fc10 fc50 wide)
"""
import statistics
import sys
import time

import torch
import torch.nn as nn


def fc_stack(layers, width, inp, out):
    mods = []
    for i in range(layers):
        mods += [nn.Linear(inp if i == 0 else width, width), nn.ReLU()]
    mods.append(nn.Linear(width, out))
    return nn.Sequential(*mods)


def make(name, dev):
    torch.manual_seed(0)
    if name == "mlp":
        m, batch, shape = fc_stack(1, 128, 784, 10), 64, (784,)
        flops = 3 * 2 * 64 * (784 * 128 + 128 * 10)
        opt = lambda p: torch.optim.Adam(p, 1e-3)
    elif name == "cnn":
        m = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
        batch, shape = 64, (1, 28, 28)
        flops = 3 * 2 * 64 * (32 * 9 * 784 + 64 * 32 * 9 * 196 + 3136 * 128 + 1280)
        opt = lambda p: torch.optim.Adam(p, 1e-3)
    elif name in ("fc10", "fc50"):
        L = 10 if name == "fc10" else 50
        m, batch, shape = fc_stack(L, 512, 512, 10), 100, (512,)
        flops = 3 * 2 * 100 * (512 * 512 * L + 5120)
        opt = lambda p: torch.optim.SGD(p, 0.01, momentum=0.9)
    elif name == "wide":
        m, batch, shape = fc_stack(2, 4096, 4096, 10), 512, (4096,)
        flops = 3 * 2 * 512 * (2 * 4096 * 4096 + 40960)
        opt = lambda p: torch.optim.SGD(p, 0.01, momentum=0.9)
    else:
        raise SystemExit(f"unknown net {name}")
    m = m.to(dev)
    x = torch.randn(batch, *shape, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    return m, opt(m.parameters()), x, y, batch, flops


def run(m, opt, x, y, steps):
    loss = None
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
    return loss.item()


def main():
    torch.backends.cuda.matmul.allow_tf32 = False  # as gpudl's default
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    nets = sys.argv[1:] or ["mlp", "cnn", "fc10", "fc50"]
    name = torch.cuda.get_device_name(0) if dev == "cuda" else "CPU"
    print(f"device {dev} ({name}), torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print(f"{'net':6} {'batch':>6} {'ms/step':>12} {'samples/s':>12} {'GFLOP/step':>10} {'GFLOP/s':>10} {'peak MiB':>9}")
    for n in nets:
        m, opt, x, y, batch, flops = make(n, dev)
        t0 = time.perf_counter()
        run(m, opt, x, y, 3)
        ms = (time.perf_counter() - t0) / 3
        steps = max(3, min(2000, int(0.5 / ms) if ms > 0 else 100))
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            run(m, opt, x, y, steps)
            ts.append((time.perf_counter() - t0) / steps)
        med = statistics.median(ts)
        peak = torch.cuda.max_memory_allocated() / 2**20 if dev == "cuda" else float("nan")
        print(f"{n:6} {batch:6d} {1e3 * med:12.3f} {batch / med:12.0f} {flops * 1e-9:10.3f} "
              f"{flops * 1e-9 / med:10.1f} {peak:9.1f}", flush=True)


if __name__ == "__main__":
    main()
