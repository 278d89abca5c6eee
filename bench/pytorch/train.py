"""train.py - the nets of bench/train.c in PyTorch eager mode, timed the same
way: random inputs, warm-up, then the median of 5 repeats of `steps` steps,
synchronised by loss.item() at the end of each repeat. Prints the same table
(and peak GPU memory), a step's FLOPs counted by FlopCounterMode and the
utilisation line (bench/pytorch/flops.py).

Run: python3 bench/pytorch/train.py [net ...]   (mlp cnn fc10 fc50 wide air rcnn resnet10)

A net name may carry a mode suffix (the mixed-precision baselines):
  NET-amp    bf16 autocast (torch.autocast), and channels_last for the conv nets
  NET-graph  the whole step (forward, backward, optimizer) captured once with
             torch.cuda.graph and replayed (CUDA only; Adam with capturable=True)
  NET-amp-graph  both
"""
import statistics
import sys
import time

import torch
import torch.nn as nn

import flops as flops_line


def fc_stack(layers, width, inp, out):
    mods = []
    for i in range(layers):
        mods += [nn.Linear(inp if i == 0 else width, width), nn.ReLU()]
    mods.append(nn.Linear(width, out))
    return nn.Sequential(*mods)


def make(name, dev, capturable=False):
    torch.manual_seed(0)
    if name == "mlp":
        m, batch, shape = fc_stack(1, 128, 784, 10), 64, (784,)
        opt = lambda p: torch.optim.Adam(p, 1e-3, capturable=capturable)
    elif name == "cnn":
        m = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
        batch, shape = 64, (1, 28, 28)
        opt = lambda p: torch.optim.Adam(p, 1e-3, capturable=capturable)
    elif name in ("fc10", "fc50"):
        L = 10 if name == "fc10" else 50
        m, batch, shape = fc_stack(L, 512, 512, 10), 100, (512,)
        opt = lambda p: torch.optim.SGD(p, 0.01, momentum=0.9)
    elif name == "wide":
        m, batch, shape = fc_stack(2, 4096, 4096, 10), 512, (4096,)
        opt = lambda p: torch.optim.SGD(p, 0.01, momentum=0.9)
    elif name == "air":
        # airbench-shaped CIFAR-10 net: stem, three conv-pool-BN-GELU-conv-BN-GELU groups, head
        def group(cin, cout):
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.MaxPool2d(2), nn.BatchNorm2d(cout), nn.GELU(),
                    nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU()]
        m = nn.Sequential(nn.Conv2d(3, 24, 2), nn.GELU(), *group(24, 64), *group(64, 256), *group(256, 256),
                          nn.MaxPool2d(3), nn.Flatten(), nn.Linear(256, 10, bias=False))
        batch, shape = 1024, (3, 32, 32)
        opt = lambda p: torch.optim.SGD(p, 0.01, momentum=0.9, weight_decay=5e-4, nesterov=True)
    elif name in ("rcnn", "resnet10"):  # the CNN recipe's net and resnet10, as bench/train.c
        from recipes import make_net
        m, batch, shape = make_net("cnn" if name == "rcnn" else name), 128, (1, 28, 28)
        opt = lambda p: torch.optim.SGD(p, 0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
    else:
        raise SystemExit(f"unknown net {name}")
    m = m.to(dev)
    x = torch.randn(batch, *shape, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    return m, opt(m.parameters()), x, y, batch


def step_fn(m, opt, x, y, amp, dev):
    def step():
        opt.zero_grad(set_to_none=False)  # a captured step keeps its gradient buffers
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=amp):
            loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def make_runner(name, dev):
    """(run(steps) -> last loss, batch, flops) for NET, NET-amp or NET-graph."""
    base, _, mode = name.partition("-")
    if mode not in ("", "amp", "graph", "amp-graph"):
        raise SystemExit(f"unknown mode {mode} in {name} (amp, graph, amp-graph)")
    amp, graph = mode.startswith("amp"), mode.endswith("graph")
    m, opt, x, y, batch = make(base, dev, capturable=graph)
    if amp and x.dim() == 4:
        m = m.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    step = step_fn(m, opt, x, y, amp, dev)
    flops = flops_line.count(step)  # one eager step, as bench/train.c counts it
    if not graph:
        def run(steps):
            loss = None
            for _ in range(steps):
                loss = step()
            return loss.item()
        return run, batch, flops
    if dev != "cuda":
        return None, batch, flops
    side = torch.cuda.Stream()  # warm-up on a side stream, as torch.cuda.graphs' documentation does
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_loss = step()

    def run(steps):
        for _ in range(steps):
            g.replay()
        return static_loss.item()
    return run, batch, flops


def main():
    torch.backends.cuda.matmul.allow_tf32 = False  # as gpudl's default
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    nets = sys.argv[1:] or ["mlp", "cnn", "fc10", "fc50"]
    name = torch.cuda.get_device_name(0) if dev == "cuda" else "CPU"
    print(f"device {dev} ({name}), torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print(f"{'net':14} {'batch':>6} {'ms/step':>12} {'samples/s':>12} {'GFLOP/step':>10} {'GFLOP/s':>10} {'peak MiB':>9}")
    for n in nets:
        run, batch, flops = make_runner(n, dev)
        if run is None:
            print(f"{n:14} skipped: CUDA graphs need a GPU", flush=True)
            continue
        t0 = time.perf_counter()
        run(3)
        ms = (time.perf_counter() - t0) / 3
        steps = max(3, min(2000, int(0.5 / ms) if ms > 0 else 100))
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            run(steps)
            ts.append((time.perf_counter() - t0) / steps)
        med = statistics.median(ts)
        peak = torch.cuda.max_memory_allocated() / 2**20 if dev == "cuda" else float("nan")
        print(f"{n:14} {batch:6d} {1e3 * med:12.3f} {batch / med:12.0f} {flops * 1e-9:10.3f} "
              f"{flops * 1e-9 / med:10.1f} {peak:9.1f}")
        print(f"{'':14} {flops_line.line(flops, med, 'bf16' if '-amp' in n else 'f32')}", flush=True)


if __name__ == "__main__":
    main()
