"""rnn_train.py - the twin of bench/rnn_train.c: the recurrent core of examples/text_classify.c
(nn.LSTM or nn.GRU (64 -> 128, batch_first) over random [128, 64, 64] inputs, the mean over time,
Linear(128, 6), cross entropy, Adam 2e-3), timed the same way: 2 warm-up steps, then the median of 5
repeats of ~0.5 s of steps, synchronised by loss.item(). FlopCounterMode counts no nn.LSTM / nn.GRU, so
the utilisation line uses the C side's count (BENCH_FLOPS_PER_STEP, bench/compare_rnn.sh).

Run: OMP_NUM_THREADS=1 python3 bench/pytorch/rnn_train.py [lstm|gru ...]   (default: lstm gru)
"""
import statistics
import sys
import time

import torch
import torch.nn as nn

import flops as flops_line

B, T, IN, H, C = 128, 64, 64, 128, 6


def make(name):
    torch.manual_seed(0)
    rnn = {"lstm": nn.LSTM, "gru": nn.GRU}[name](IN, H, 1, batch_first=True)
    head = nn.Linear(H, C)
    opt = torch.optim.Adam(list(rnn.parameters()) + list(head.parameters()), 2e-3)
    x, y = torch.randn(B, T, IN), torch.randint(0, C, (B,))

    def step():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(head(rnn(x)[0].mean(1)), y)
        loss.backward()
        opt.step()
        return loss

    return step


def main():
    torch.set_num_threads(torch.get_num_threads())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'net':6} {'batch':>6} {'ms/step':>12}")
    for name in sys.argv[1:] or ["lstm", "gru"]:
        step = make(name)
        flops = flops_line.count(step)
        t0 = time.perf_counter()
        step(), step()
        steps = max(2, int(0.5 / ((time.perf_counter() - t0) / 2)))
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(steps):
                loss = step()
            loss.item()
            times.append((time.perf_counter() - t0) / steps)
        med = statistics.median(times)
        print(f"{name:6} {B:6d} {1e3 * med:12.3f}")
        print(f"{'':6} {flops_line.line(flops, med)}", flush=True)


if __name__ == "__main__":
    main()
