"""rnn_oracle.py — PyTorch's side of the LSTM / GRU check (bench/rnn_oracle.c is gpudl's). Reads
DIR/rnn_oracle.safetensors, loads gpudl's parameters into torch.nn.LSTM(5, 4, 2, batch_first=True,
bidirectional=True) and the same GRU with load_state_dict (strict: the names and shapes must be
PyTorch's), runs them on the same input and initial states, backpropagates the same loss in float64
and float32, and compares the outputs, final states and every gradient with gpudl's: prints the
largest absolute difference per tensor and exits 1 when one exceeds 1e-5.

    cc -O2 bench/rnn_oracle.c -lm -lz -pthread -o build/rnn_oracle
    build/rnn_oracle build && python3 bench/pytorch/rnn_oracle.py build
"""
import sys

import torch

from st_io import read_safetensors


def check(kind, t, dtype):
    pre = kind + "."
    lstm = kind == "lstm"
    cls = torch.nn.LSTM if lstm else torch.nn.GRU
    m = cls(5, 4, num_layers=2, batch_first=True, bidirectional=True).to(dtype)
    params = {k[len(pre):]: v for k, v in t.items() if k.startswith(pre) and "." not in k[len(pre):]
              and k[len(pre):].startswith(("weight", "bias"))}
    m.load_state_dict({k: v.to(dtype) for k, v in params.items()}, strict=True)
    x = t[pre + "x"].to(dtype).requires_grad_()
    h0 = t[pre + "h0"].to(dtype).requires_grad_()
    if lstm:
        c0 = t[pre + "c0"].to(dtype).requires_grad_()
        out, (hn, cn) = m(x, (h0, c0))
    else:
        out, hn = m(x, h0)
    loss = (out * t[pre + "w0"].to(dtype)).sum() + (hn * t[pre + "w1"].to(dtype)).sum()
    if lstm:
        loss = loss + (cn * t[pre + "w2"].to(dtype)).sum()
    loss.backward()
    ours = {"out": out, "h_n": hn, "grad.x": x.grad, "grad.h0": h0.grad}
    if lstm:
        ours.update({"c_n": cn, "grad.c0": c0.grad})
    for name, p in m.named_parameters():
        ours["grad." + name] = p.grad
    worst = 0.0
    rows = []
    for name, v in ours.items():
        d = (v.detach().double() - t[pre + name].double()).abs().max().item()
        rows.append((name, d))
        worst = max(worst, d)
    print(f"{kind} vs torch {torch.__version__} in {str(dtype).replace('torch.', '')}: "
          f"{len(rows)} tensors, largest |difference| {worst:.3g}")
    for name, d in rows:
        print(f"    {name:28s} {d:.3g}")
    return worst


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    t, _ = read_safetensors(sys.argv[1] + "/rnn_oracle.safetensors")
    bad = False
    for kind in ("lstm", "gru"):
        for dtype in (torch.float64, torch.float32):
            bad |= check(kind, t, dtype) > 1e-5
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
