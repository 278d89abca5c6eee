"""quant_rnn_oracle.py — PyTorch's side of the dynamically quantized LSTM / GRU check (bench/rnn_oracle.c is
gpudl's). Reads DIR/rnn_oracle.safetensors (the float parameters, input, states and gpudl's quantized outputs)
and gpudl's quantized models DIR/rnn_quant_{lstm,gru}_pc{0,1}.safetensors, loads the parameters into
torch.nn.LSTM(5, 4, num_layers=2, batch_first=True, bidirectional=True) (and the GRU), quantizes it with
torch.ao.quantization.quantize_dynamic on the x86 engine, per channel (per_channel_dynamic_qconfig: pc1) and
per tensor (default_dynamic_qconfig, quantize_dynamic's default: pc0), runs it on the same input and states,
and compares:

  weights   every projection's int8 weight (equal, or 1 apart where w / scale meets a rounding tie) and scales
            (relative 1e-6);
  outputs   out, h_n (c_n): the largest |gpudl - torch| (must be <= 0.03: two 7-bit steps of a hidden state in
            [-1, 1]; the two can differ where a last-bit difference of the f32 gates moves a value across a
            rounding boundary of the next step's quantization), beside the largest |torch int8 - torch f32|
            (the quantization error itself, for scale).

    build/rnn_oracle build && python3 bench/pytorch/quant_rnn_oracle.py build

Exits 1 when a comparison fails. Needs torch and numpy.
"""
import sys

import torch
import torch.ao.quantization as tq

from st_io import read_safetensors

failures = []


def check(what, ok, detail):
    print(("  ok   " if ok else "  FAIL ") + what + ": " + detail)
    if not ok:
        failures.append(what)


def run(directory, t, kind, pc):
    pre = kind + "."
    lstm = kind == "lstm"
    cls = torch.nn.LSTM if lstm else torch.nn.GRU
    m = cls(5, 4, num_layers=2, batch_first=True, bidirectional=True)
    params = {k[len(pre):]: v for k, v in t.items()
              if k.startswith(pre) and "." not in k[len(pre):] and k[len(pre):].startswith(("weight", "bias"))}
    m.load_state_dict(params, strict=True)
    m.eval()
    qconfig = tq.per_channel_dynamic_qconfig if pc else tq.default_dynamic_qconfig
    q = tq.quantize_dynamic(torch.nn.Sequential(m), {cls: qconfig}, dtype=torch.qint8)[0]
    x, h0 = t[pre + "x"], t[pre + "h0"]
    with torch.no_grad():
        if lstm:
            c0 = t[pre + "c0"]
            out, (hn, cn) = q(x, (h0, c0))
            fout, (fhn, fcn) = m(x, (h0, c0))
            res, fres = {"out": out, "h_n": hn, "c_n": cn}, {"out": fout, "h_n": fhn, "c_n": fcn}
        else:
            out, hn = q(x, h0)
            fout, fhn = m(x, h0)
            res, fres = {"out": out, "h_n": hn}, {"out": fout, "h_n": fhn}
    ours, _ = read_safetensors(f"{directory}/rnn_quant_{kind}_pc{pc}.safetensors")
    tw = q.get_weight()
    name = f"{kind} {'per channel' if pc else 'per tensor'}"
    wdiff, wmax, smax = 0, 0, 0.0
    for key, qw in tw.items():  # weight_ih_l0_reverse -> ih_l0_reverse
        proj = key[len("weight_"):]
        d = (ours[proj + ".weight_int8"].int() - qw.int_repr().int()).abs()
        wdiff += int((d != 0).sum())
        wmax = max(wmax, int(d.max()))
        ts = qw.q_per_channel_scales().double() if pc else torch.tensor([qw.q_scale()], dtype=torch.float64)
        smax = max(smax, float(((ours[proj + ".weight_scale"].double() - ts).abs() / ts).max()))
    check(name + " int8 weights", wmax <= 1, f"{wdiff} differ (largest difference {wmax})")
    check(name + " weight scales", smax <= 1e-6, f"largest relative difference {smax:.3g}")
    for k, v in res.items():
        d = float((t[f"{pre}pc{pc}.{k}"].double() - v.double()).abs().max())
        e = float((v.double() - fres[k].double()).abs().max())
        check(f"{name} {k}", d <= 0.03, f"largest |gpudl - torch| {d:.3g} (torch int8 vs f32: {e:.3g})")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    torch.backends.quantized.engine = "x86"
    t, _ = read_safetensors(sys.argv[1] + "/rnn_oracle.safetensors")
    print(f"dynamic LSTM / GRU against torch {torch.__version__} (engine {torch.backends.quantized.engine})")
    for kind in ("lstm", "gru"):
        for pc in (1, 0):
            run(sys.argv[1], t, kind, pc)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
