"""seq_ops_oracle.py — PyTorch's side of the sequence ops' check (bench/seq_ops_oracle.c is gpudl's). Reads
DIR/seq_ops_oracle.safetensors (gpudl in f32) and, when there, DIR/seq_ops_oracle_f64.safetensors (gpudl
built with -DGPUDL_DOUBLE); for each case runs the same op through torch on gpudl's inputs (torch.max /
torch.min with a dim, F.cross_entropy, F.nll_loss, F.embedding), backpropagates sum(out * w) and compares
the output, the indices (exactly), the gradients and, for max_norm, the weight after the forward. The f32
file is compared with torch in float64 (largest absolute difference at most 1e-5), the f64 file in
float64 (1e-10). Prints the largest difference per case; exits 1 when one is over its bound.

    cc -O2 bench/seq_ops_oracle.c -lm -lz -pthread -o build/seq_ops_oracle
    cc -O2 -DGPUDL_DOUBLE bench/seq_ops_oracle.c -lm -lz -pthread -o build/seq_ops_oracle_f64
    build/seq_ops_oracle build && build/seq_ops_oracle_f64 build && python3 bench/pytorch/seq_ops_oracle.py build
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

from st_io import read_safetensors

REDUCTIONS = ("mean", "sum", "none")  # gdl_reduction's order


def run_case(pre, t):
    """torch's results for one case: {name: tensor} to compare with gpudl's"""
    cfg = t[pre + "cfg"].tolist()
    f = torch.float64
    if pre + "idx" in t and pre + "x" in t:  # max / min
        is_min, dim, keepdim = int(cfg[0]), int(cfg[1]), bool(cfg[2])
        x = t[pre + "x"].to(f).requires_grad_()
        v, i = (torch.min if is_min else torch.max)(x, dim, keepdim)
        (v * t[pre + "w"].to(f)).sum().backward()
        return {"out": v, "idx": i, "grad.x": x.grad}
    if pre + "target" in t:  # cross entropy, nll
        nll, soft, weighted, ls, red = int(cfg[0]), int(cfg[1]), int(cfg[2]), float(cfg[3]), int(cfg[4])
        x = t[pre + "x"].to(f).requires_grad_()
        tgt = t[pre + "target"]
        tgt = tgt.to(f) if soft else tgt.long()
        w = t[pre + "weight"].to(f) if weighted else None
        if nll:
            out = F.nll_loss(x, tgt, reduction=REDUCTIONS[red])
        else:
            out = F.cross_entropy(x, tgt, weight=w, reduction=REDUCTIONS[red], label_smoothing=ls)
        (out * t[pre + "w"].to(f)).sum().backward()
        return {"out": out, "grad.x": x.grad}
    pad, max_norm, norm_type = cfg[0], float(cfg[1]), float(cfg[2])  # embedding
    weight = t[pre + "weight"].to(f).requires_grad_()
    out = F.embedding(t[pre + "idx"].long(), weight, padding_idx=None if math.isnan(pad) else int(pad),
                      max_norm=max_norm if max_norm > 0 else None, norm_type=norm_type)
    (out * t[pre + "w"].to(f)).sum().backward()
    return {"out": out, "grad.weight": weight.grad, "weight_after": weight.detach()}


def check(path, bound):
    t, _ = read_safetensors(path)
    bad = False
    for pre in sorted({k[:-len("cfg")] for k in t if k.endswith(".cfg")}):
        worst, rows = 0.0, []
        for name, v in run_case(pre, t).items():
            g = t[pre + name]
            if tuple(v.shape) != tuple(g.shape):
                raise SystemExit(f"{pre}{name}: torch's shape {tuple(v.shape)}, gpudl's {tuple(g.shape)}")
            if name == "idx":
                d = float((v != g.long()).sum())  # indices must agree exactly
            else:
                a, b = v.detach().double(), g.double()
                same_nan = torch.isnan(a) == torch.isnan(b)
                d = float("inf") if not bool(same_nan.all()) else float(
                    (a - b).nan_to_num(0.0).abs().max()) if a.numel() else 0.0
            rows.append(f"{name} {d:.3g}")
            worst = max(worst, d)
        print(f"{pre[:-1]:34s} largest |difference| {worst:.3g}   ({', '.join(rows)})")
        bad |= worst > bound
    return bad


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    print(f"gpudl f32 vs torch {torch.__version__} in float64 (bound 1e-5):")
    bad = check(sys.argv[1] + "/seq_ops_oracle.safetensors", 1e-5)
    f64 = sys.argv[1] + "/seq_ops_oracle_f64.safetensors"
    if os.path.exists(f64):
        print("gpudl float64 vs torch in float64 (bound 1e-10):")
        bad |= check(f64, 1e-10)
    else:
        print(f"no {f64}: the float64 comparison did not run")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
