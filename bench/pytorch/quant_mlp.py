"""quant_mlp.py — PyTorch's side of bench/compare_quant.sh: the inference of
the 784-256-128-10 MLP (examples/quantize.c's net) in f32 and after
torch.ao.quantization.quantize_dynamic (int8 weights per tensor as its default
qconfig, activations quantized per batch: PyTorch's usual flow for Linear),
timed as bench/quant.c times ours: after 3 warm-up calls, the fastest of 7
stretches of at least 0.05 s, in microseconds per forward.

    python bench/pytorch/quant_mlp.py BATCH...      prints "mlp BATCH f32_us int8_us"

Threads: torch.set_num_threads from GPUDL_NUM_THREADS (bench/compare_quant.sh
sets both), else torch's default.
"""
import os
import sys
import time
import warnings

import torch

warnings.filterwarnings("ignore")


def timeit(fn):
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(7):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            if time.perf_counter() - t0 >= 0.05:
                break
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def main():
    if "GPUDL_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["GPUDL_NUM_THREADS"]))
    torch.backends.quantized.engine = "x86" if "x86" in torch.backends.quantized.supported_engines else "fbgemm"
    mlp = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                              torch.nn.ReLU(), torch.nn.Linear(128, 10)).eval()
    q = torch.ao.quantization.quantize_dynamic(mlp, {torch.nn.Linear}, dtype=torch.qint8)
    with torch.inference_mode():
        for b in sys.argv[1:]:
            x = torch.randn(int(b), 784)
            tf = timeit(lambda: mlp(x))
            tq = timeit(lambda: q(x))
            print("mlp %d %.1f %.1f" % (int(b), 1e6 * tf, 1e6 * tq))


if __name__ == "__main__":
    main()
