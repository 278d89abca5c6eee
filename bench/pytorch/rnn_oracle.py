"""rnn_oracle.py — PyTorch's side of the recurrent modules' check (bench/rnn_oracle.c is gpudl's). Reads
DIR/rnn_oracle.safetensors (gpudl in f32) and, when there, DIR/rnn_oracle_f64.safetensors (gpudl built with
-DGPUDL_DOUBLE); for each case (a prefix "<name>." with its configuration "cfg") makes torch.nn.LSTM / GRU /
RNN with that configuration, loads gpudl's parameters with load_state_dict (strict: the names and shapes
must be PyTorch's), runs it on the same input and initial states (where the case has lengths, through
pack_padded_sequence(enforce_sorted=False) and pad_packed_sequence), backpropagates the same loss and
compares the outputs, final states and every gradient with gpudl's. The f32 file is compared with PyTorch
in float64 and float32 (largest absolute difference at most 1e-5), the f64 file in float64 (1e-10).
Prints the largest absolute difference per tensor; exits 1 when one is over its bound.

    cc -O2 bench/rnn_oracle.c -lm -lz -pthread -o build/rnn_oracle
    cc -O2 -DGPUDL_DOUBLE bench/rnn_oracle.c -lm -lz -pthread -o build/rnn_oracle_f64
    build/rnn_oracle build && build/rnn_oracle_f64 build && python3 bench/pytorch/rnn_oracle.py build
"""
import os
import sys

import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from st_io import read_safetensors


def make(cfg, dtype):
    kind, inp, hid, layers, bias, bf, bidir, proj, relu = (int(v) for v in cfg.tolist())
    kw = dict(num_layers=layers, bias=bool(bias), batch_first=bool(bf), bidirectional=bool(bidir))
    if kind == 0:
        m = torch.nn.LSTM(inp, hid, proj_size=proj, **kw)
    elif kind == 1:
        m = torch.nn.GRU(inp, hid, **kw)
    else:
        m = torch.nn.RNN(inp, hid, nonlinearity="relu" if relu else "tanh", **kw)
    return m.to(dtype), kind == 0, bool(bf)


def torch_results(pre, t, dtype):
    """torch's outputs and gradients for the case pre in gpudl's file t: {name in the file: tensor}"""
    m, lstm, bf = make(t[pre + "cfg"], dtype)
    params = {k[len(pre):]: v for k, v in t.items() if k.startswith(pre) and "." not in k[len(pre):]
              and k[len(pre):].startswith(("weight", "bias"))}
    m.load_state_dict({k: v.to(dtype) for k, v in params.items()}, strict=True)
    x = t[pre + "x"].to(dtype).requires_grad_()
    h0 = t[pre + "h0"].to(dtype).requires_grad_()
    hx = h0
    if lstm:
        c0 = t[pre + "c0"].to(dtype).requires_grad_()
        hx = (h0, c0)
    if pre + "lengths" in t:
        lengths = t[pre + "lengths"].long()
        packed = pack_padded_sequence(x, lengths, batch_first=bf, enforce_sorted=False)
        out, state = m(packed, hx)
        out, _ = pad_packed_sequence(out, batch_first=bf)
    else:
        out, state = m(x, hx)
    hn, cn = state if lstm else (state, None)
    loss = (out * t[pre + "w0"].to(dtype)).sum() + (hn * t[pre + "w1"].to(dtype)).sum()
    if lstm:
        loss = loss + (cn * t[pre + "w2"].to(dtype)).sum()
    loss.backward()
    ours = {"out": out, "h_n": hn, "grad.x": x.grad, "grad.h0": h0.grad}
    if lstm:
        ours.update({"c_n": cn, "grad.c0": c0.grad})
    for name, p in m.named_parameters():
        ours["grad." + name] = p.grad
    return ours


def check(pre, t, dtype):
    ours = torch_results(pre, t, dtype)
    worst = 0.0
    rows = []
    for name, v in ours.items():
        g = t[pre + name]
        if tuple(v.shape) != tuple(g.shape):
            raise SystemExit(f"{pre}{name}: torch's shape {tuple(v.shape)}, gpudl's {tuple(g.shape)}")
        d = (v.detach().double() - g.double()).abs().max().item()
        rows.append((name, d))
        worst = max(worst, d)
    print(f"{pre[:-1]} vs torch {torch.__version__} in {str(dtype).replace('torch.', '')}: "
          f"{len(rows)} tensors, largest |difference| {worst:.3g}")
    for name, d in rows:
        print(f"    {name:32s} {d:.3g}")
    return worst


def cases(t):
    return sorted({k[:-len("cfg")] for k in t if k.endswith(".cfg")})


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    bad = False
    t, _ = read_safetensors(sys.argv[1] + "/rnn_oracle.safetensors")
    for pre in cases(t):
        for dtype in (torch.float64, torch.float32):
            bad |= check(pre, t, dtype) > 1e-5
    f64 = sys.argv[1] + "/rnn_oracle_f64.safetensors"
    if os.path.exists(f64):
        t, _ = read_safetensors(f64)
        for pre in cases(t):
            bad |= check(pre, t, torch.float64) > 1e-10
    else:
        print(f"no {f64}: the float64 comparison did not run")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
