"""seq_fixtures.py — writes the fixtures of tests/test_torch_parity.c (the recurrent modules' and the sequence
ops' check against PyTorch, run without torch by make test). Reads the files gpudl's float64 oracles wrote
(DIR/rnn_oracle_f64.safetensors from bench/rnn_oracle.c, DIR/seq_ops_oracle_f64.safetensors from
bench/seq_ops_oracle.c, DIR/transformer_oracle_f64.safetensors and the module files from
bench/transformer_oracle.c: their case lists are the only ones), computes every case's outputs and gradients
with PyTorch in float64 (the functions of rnn_oracle.py, seq_ops_oracle.py and transformer_oracle.py), and
writes OUT/rnn.safetensors, OUT/seq_ops.safetensors and OUT/transformer.safetensors: each case's
configuration, parameters (state_dict names), inputs, masks, targets, lengths and loss weights as gpudl's
oracle made them, and in place of gpudl's results PyTorch's (float64; indices as I32). Prints the largest |gpudl - torch| per file. Run by make seq-fixtures (TORCH_VENV names PyTorch's venv).

    python3 bench/pytorch/seq_fixtures.py DIR OUT
"""
import sys

import torch

import rnn_oracle
import seq_ops_oracle
import transformer_oracle
from st_io import read_safetensors, write_safetensors


RESULTS = ("out", "grad.", "h_n", "c_n", "weight_after")  # results in the oracles' files (idx: an input too)


def fixture(path, cases, results):
    """gpudl's file at path with each case's results replaced by torch's; the largest |gpudl - torch|"""
    t, _ = read_safetensors(path)
    out, worst = dict(t), 0.0
    for pre in cases(t):
        res = results(pre, t)
        left = [k for k in t if k.startswith(pre) and k[len(pre):].startswith(RESULTS) and k[len(pre):] not in res]
        if left:  # a result of gpudl's that torch does not make would stay gpudl's own in the fixture
            raise SystemExit(f"{path}: torch makes none of {left}")
        for name, v in res.items():
            g = t[pre + name]
            if tuple(v.shape) != tuple(g.shape):
                raise SystemExit(f"{path}: {pre}{name}: torch's shape {tuple(v.shape)}, gpudl's {tuple(g.shape)}")
            v = v.detach()
            if v.is_floating_point():
                a, b = v.double(), g.double()
                if bool((torch.isnan(a) != torch.isnan(b)).any()):
                    raise SystemExit(f"{path}: {pre}{name}: NaN in one and not the other")
                worst = max(worst, float((a - b).nan_to_num(0.0).abs().max()) if a.numel() else 0.0)
                out[pre + name] = a
            else:
                out[pre + name] = v.to(torch.int32)
    for k, v in out.items():
        if v.dtype == torch.float32:
            out[k] = v.double()
    return out, worst


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    src, dst = sys.argv[1], sys.argv[2]
    tf_cases = transformer_oracle.CASES
    tf_file = transformer_oracle.module_file(src, "_f64")
    jobs = (("rnn", rnn_oracle.cases, lambda pre, t: rnn_oracle.torch_results(pre, t, torch.float64)),
            ("seq_ops", rnn_oracle.cases, seq_ops_oracle.run_case),
            ("transformer", lambda t: [c + "." for c in tf_cases], lambda pre, t: tf_cases[pre[:-1]](t, tf_file)))
    for base, cases, results in jobs:
        t, worst = fixture(f"{src}/{base}_oracle_f64.safetensors", cases, results)
        if base == "transformer":  # the parameters, from each module's gdl_save_model file
            for c in tf_cases:
                if c != "gqa":
                    t.update({f"{c}.{k}": v.double() for k, v in read_safetensors(tf_file(c))[0].items()})
        write_safetensors(f"{dst}/{base}.safetensors", t)
        print(f"wrote {dst}/{base}.safetensors ({len(t)} tensors; torch {torch.__version__}; "
              f"largest |gpudl f64 - torch f64| {worst:.3g})")


if __name__ == "__main__":
    main()
