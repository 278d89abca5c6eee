"""quant_oracle.py — PyTorch's side of the INT8 oracle (bench/quant_oracle.c is
gpudl's). Reads DIR/oracle_inputs.safetensors (the float weights, inputs,
calibration batches and gpudl's outputs) and gpudl's quantized models
(DIR/oracle_{dynamic,linear,conv}.safetensors), runs torch.ao.quantization on
the same weights and data with the x86 engine, and compares:

  dynamic   quantize_dynamic with per_channel_dynamic_qconfig: the weight
            scales (exact), the int8 weights (equal, or 1 apart where the
            rounding of w / scale meets a tie), the outputs (within one
            activation step times the largest weight);
  static    eager mode: QuantStub -> Linear / Conv2d -> DeQuantStub, the
            activation observer MinMaxObserver(reduce_range=True) (gpudl's
            GDL_QOBS_MINMAX with 7-bit activations), the weights
            default_per_channel_weight_observer; calibration on the same
            batches; the input and output scales and zero points (exact, or
            the zero point one apart), the weights, and the outputs (within
            one output step).

    python3 bench/pytorch/quant_oracle.py build/oracle      (after build/quant_oracle build/oracle)

Exits 1 when a comparison fails. Needs torch and numpy (bench/compare_cpu.sh
puts them into build/torch-venv). The safetensors files are read here with
json and numpy alone.
"""
import json
import struct
import sys

import numpy as np
import torch
import torch.ao.quantization as tq

DT = {"F32": np.float32, "I32": np.int32, "I8": np.int8}


def read_st(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8:8 + n])
    data = buf[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype=DT[e["dtype"]]).reshape(e["shape"])
    return out


failures = []


def check(what, ok, detail):
    print(("  ok   " if ok else "  FAIL ") + what + ": " + detail)
    if not ok:
        failures.append(what)


def compare_weights(what, ours, qw):
    wi = qw.int_repr().numpy().reshape(ours["weight_int8"].shape).astype(np.int32)
    d = np.abs(wi - ours["weight_int8"].astype(np.int32)).max()
    check(what + " int8 weights", d <= 1, "max difference %d" % d)
    sc = qw.q_per_channel_scales().numpy().astype(np.float32)
    d = np.abs(sc - ours["weight_scale"]).max() / sc.max()
    check(what + " weight scales", d <= 1e-6, "max relative difference %.3g" % d)
    check(what + " weight zero points", (qw.q_per_channel_zero_points().numpy() == 0).all() and
          (ours["weight_zero_point"] == 0).all(), "all 0")


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "build/oracle"
    torch.backends.quantized.engine = "x86"
    inp = read_st(d + "/oracle_inputs.safetensors")
    t = lambda k: torch.from_numpy(inp[k].copy())
    ncal = len([k for k in inp if k.startswith("cal.")])

    # dynamic
    lin = torch.nn.Sequential(torch.nn.Linear(64, 32))
    lin[0].weight.data = t("lin.weight")
    lin[0].bias.data = t("lin.bias")
    dq = tq.quantize_dynamic(lin, {torch.nn.Linear: tq.per_channel_dynamic_qconfig}, dtype=torch.qint8)
    ours = read_st(d + "/oracle_dynamic.safetensors")
    ours = {k[2:]: v for k, v in ours.items()}  # "0.weight_int8" -> "weight_int8"
    compare_weights("dynamic", ours, dq[0].weight())
    y = dq(t("x")).numpy()
    x = inp["x"]
    sa = (max(x.max(), 0) - min(x.min(), 0)) / 127.0
    tol = sa * ours["weight_scale"].max() * 128
    dd = np.abs(y - inp["dyn.y"]).max()
    check("dynamic outputs", dd <= tol, "max difference %.3g (one activation step x largest weight: %.3g)" % (dd, tol))

    # static
    qconfig = tq.QConfig(activation=tq.MinMaxObserver.with_args(reduce_range=True),
                         weight=tq.default_per_channel_weight_observer)
    for kind in ("linear", "conv"):
        if kind == "linear":
            core = torch.nn.Linear(64, 32)
            core.weight.data, core.bias.data = t("lin.weight"), t("lin.bias")
            cal = [t("cal.%d" % i) for i in range(ncal)]
            x, ref = t("x"), inp["lin.y"]
        else:
            core = torch.nn.Conv2d(3, 8, 3, padding=1)
            core.weight.data, core.bias.data = t("conv.weight"), t("conv.bias")
            cal = [t("ical.%d" % i) for i in range(ncal)]
            x, ref = t("img"), inp["conv.y"]
        m = torch.nn.Sequential(tq.QuantStub(), core, tq.DeQuantStub()).eval()
        m.qconfig = qconfig
        p = tq.prepare(m)
        for c in cal:
            p(c)
        q = tq.convert(p)
        ours = read_st(d + "/oracle_%s.safetensors" % kind)
        ours = {k[2:]: v for k, v in ours.items()}
        compare_weights(kind, ours, q[1].weight())
        for what, ts, tz in (("input", q[0].scale, q[0].zero_point), ("output", q[1].scale, q[1].zero_point)):
            s, z = float(np.asarray(ts).reshape(-1)[0]), int(np.asarray(tz).reshape(-1)[0])
            gs, gz = float(ours[what + "_scale"][0]), int(ours[what + "_zero_point"][0])
            check("%s %s scale" % (kind, what), abs(s - gs) <= 1e-6 * s, "torch %.9g, gpudl %.9g" % (s, gs))
            check("%s %s zero point" % (kind, what), abs(z - gz) <= 1, "torch %d, gpudl %d" % (z, gz))
        y = q(x).numpy()
        step = float(ours["output_scale"][0])
        dd = np.abs(y - ref).max()
        check("%s outputs" % kind, dd <= step * 1.0001, "max difference %.3g (one output step %.3g)" % (dd, step))

    print("%d comparisons failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
