"""flops.py - the twins' utilisation line, in gpudl_flops_line's words:
"FLOPs/step X, Y GFLOP/s, Z % of peak (P GFLOP/s, ...)". A step's FLOPs are
counted by PyTorch's own FlopCounterMode (2 per multiply-add; a backward
counts the gradient GEMMs that run), which is how gdl_flops_count counts
them, so the two sides' figures can be checked against each other. The peak
is the C side's (its line's "(P GFLOP/s"), handed over in BENCH_PEAK_GFLOPS
by bench/compare_*.sh: one measurement of the machine for both sides.
FlopCounterMode counts no nn.LSTM / nn.GRU (0) and an attention's backward
as 2.5x its forward (the scores recomputed); gdl counts the LSTM's gate GEMMs
and llm.c's 2x. Where the nets have those (char_gpt, text_classify) the
compare scripts hand the C side's count over in BENCH_FLOPS_PER_STEP, which
the line then uses (FlopCounterMode's figure beside it), so both sides' rates
are of the same work.
"""
import contextlib
import os

from torch.utils.flop_counter import FlopCounterMode


def count(step):
    """The FLOPs of one call of step() (forward and backward), as FlopCounterMode counts them."""
    with FlopCounterMode(display=False) as fc:
        step()
    return fc.get_total_flops()


def counter(on=True):
    """A FlopCounterMode to count a step inside (its get_total_flops()), or, off, a context that does nothing."""
    return FlopCounterMode(display=False) if on else contextlib.nullcontext()


def line(flops, seconds, dtype="f32"):
    """The utilisation line for flops per step done in seconds per step, in dtype (f32, or bf16 under
    autocast: a GPU's peak differs, BENCH_PEAK_GFLOPS_BF16)."""
    given = float(os.environ.get("BENCH_FLOPS_PER_STEP") or 0)
    note = f"; FlopCounterMode {flops:.3g}, gdl {given:.3g}" if given and abs(flops - given) > 0.005 * given else ""
    flops = given or flops
    rate = flops / seconds * 1e-9 if seconds > 0 else float("nan")
    peak = float((dtype == "bf16" and os.environ.get("BENCH_PEAK_GFLOPS_BF16")) or os.environ.get("BENCH_PEAK_GFLOPS") or 0)
    s = f"FLOPs/step {flops:.3g}, {rate:.1f} GFLOP/s, "
    if peak > 0:
        return s + f"{100 * rate / peak:.1f} % of peak ({peak:.1f} GFLOP/s, the C side's{note})"
    return s + f"peak unknown (BENCH_PEAK_GFLOPS: the C side's figure, bench/compare_*.sh{note})"


def model_step(model, *inputs):
    """The FLOPs of one training step of model on a batch (its inputs): the forward and the backward of the
    outputs' sum (a loss adds no GEMM), as the C side's ex_step_flops counts one after a gdl_fit run."""
    model.train()
    n = count(lambda: model(*inputs).sum().backward())
    model.zero_grad(set_to_none=True)
    return n


def run_line(step_flops, seconds, samples, batch):
    """The line of a training run: samples trained in seconds, in batches of batch, step_flops each."""
    return line(step_flops, seconds * batch / samples if samples else 0.0)
