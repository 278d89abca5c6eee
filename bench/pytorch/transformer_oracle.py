"""transformer_oracle.py — PyTorch's side of the Transformer check (bench/transformer_oracle.c is gpudl's). Reads
DIR/transformer_oracle.safetensors and each module's file DIR/transformer_<case>.safetensors (gdl_save_model), loads
the file into the same torch.nn module with load_state_dict(strict=True) (the names and shapes must be PyTorch's),
runs it in float64 on the same inputs and masks, backpropagates the same loss, and compares every output and
gradient with gpudl's (f32): prints the largest absolute difference per case and exits 1 when one exceeds
TOL * (1 + the largest |value| of that tensor).

    make build/transformer_oracle && build/transformer_oracle build
    TORCH_VENV=/work/torch-venv; $TORCH_VENV/bin/python bench/pytorch/transformer_oracle.py build
"""
import sys

import torch
import torch.nn.functional as F
from torch import nn

from st_io import read_safetensors

TOL = 2e-5
D = torch.float64


def additive(mask):
    """a gpudl u8 mask (non-zero: left out) as PyTorch's additive float mask"""
    return torch.zeros(mask.shape, dtype=D).masked_fill(mask != 0, float("-inf"))


def causal(rows, cols):
    return torch.zeros(rows, cols, dtype=D).masked_fill(torch.ones(rows, cols).triu(1) != 0, float("-inf"))


def load(m, path):
    sd, _ = read_safetensors(path)
    m = m.to(D)  # first: load_state_dict copies into the parameters' dtype (a float32 module would round)
    m.load_state_dict(sd, strict=True)
    return m.train()


def torch_results(case, t, outs, xs, m):
    """the loss sum(out_k * w_k), backpropagated: {name in gpudl's file: torch's tensor}"""
    pre = case + "."
    loss = sum((o * t[f"{pre}w{k}"].to(D)).sum() for k, o in enumerate(outs))
    loss.backward()
    ours = {f"out{k}": o.detach() for k, o in enumerate(outs)}
    ours.update({f"grad.x{k}": x.grad for k, x in enumerate(xs) if x.grad is not None})
    if m is not None:
        ours.update({"grad." + n: p.grad for n, p in m.named_parameters()})
    return ours


def compare(case, t, ours):
    """every output and gradient against gpudl's"""
    pre = case + "."
    worst, bad = 0.0, []
    for name, v in ours.items():
        ref = v.detach()
        got = t[pre + name].to(D)
        if got.shape != ref.shape:
            bad.append(f"{name}: shape {tuple(got.shape)} vs {tuple(ref.shape)}")
            continue
        d = (got - ref).abs().nan_to_num(0.0).max().item()
        if d > TOL * (1 + ref.abs().max().item()):
            bad.append(f"{name}: |difference| {d:.3g}")
        worst = max(worst, d)
    missing = [k for k in t if k.startswith(pre + "grad.") and k[len(pre):] not in ours]
    bad += [f"{k}: gpudl has it, torch has none" for k in missing]
    print(f"{case:4s} vs torch {torch.__version__} (float64): {len(ours)} tensors, largest |difference| {worst:.3g}")
    for b in bad:
        print("    MISMATCH " + b)
    return not bad


def xs_of(t, case, n):
    return [t[f"{case}.x{k}"].to(D).requires_grad_() for k in range(n)]


def case_dec(t, d):
    """d: a function of the case giving its module file"""
    layer = nn.TransformerDecoderLayer(8, 2, 16, 0.0, batch_first=True)
    m = load(nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(8)), d("dec"))
    x = xs_of(t, "dec", 2)
    out = m(x[0], x[1], tgt_mask=causal(5, 5), memory_mask=t["dec.memory_mask"].to(D),
            tgt_key_padding_mask=additive(t["dec.tgt_key_padding_mask"]),
            memory_key_padding_mask=additive(t["dec.memory_key_padding_mask"]), tgt_is_causal=True)
    return torch_results("dec", t, [out], x, m)


def case_tf(t, d):
    m = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=16,
                       dropout=0.0, activation=lambda v: F.gelu(v, approximate="tanh"), norm_first=True)
    m = load(m, d("tf"))
    x = xs_of(t, "tf", 2)
    kpm = additive(t["tf.src_key_padding_mask"])
    out = m(x[0], x[1], tgt_mask=causal(5, 5), src_key_padding_mask=kpm, memory_key_padding_mask=kpm,
            tgt_is_causal=True)
    return torch_results("tf", t, [out], x, m)


def case_dl(t, d):
    m = nn.TransformerDecoderLayer(8, 2, 12, 0.0, activation=torch.tanh, norm_first=True, bias=False)
    m = load(m, d("dl"))
    x = xs_of(t, "dl", 2)
    out = m(x[0], x[1], tgt_mask=causal(4, 4), memory_mask=causal(4, 3), tgt_is_causal=True)
    return torch_results("dl", t, [out], x, m)


def case_mha(t, d):
    m = load(nn.MultiheadAttention(6, 2, kdim=4, vdim=5), d("mha"))
    x = xs_of(t, "mha", 6)
    am, kpm = additive(t["mha.attn_mask"]), additive(t["mha.key_padding_mask"])
    o0, o1 = m(x[0], x[1], x[2], key_padding_mask=kpm, attn_mask=am, need_weights=True, average_attn_weights=True)
    _, o2 = m(x[0], x[1], x[2], key_padding_mask=kpm, attn_mask=am, need_weights=True, average_attn_weights=False)
    o3, o4 = m(x[3], x[4], x[5], attn_mask=causal(3, 4), is_causal=True, need_weights=True,
               average_attn_weights=False)
    return torch_results("mha", t, [o0, o1, o2, o3, o4], x, m)


def case_gqa(t, d):
    x = xs_of(t, "gqa", 3)
    keep = t["gqa.mask"] != 0
    o0 = F.scaled_dot_product_attention(x[0], x[1], x[2], is_causal=True, enable_gqa=True)
    o1 = F.scaled_dot_product_attention(x[0], x[1], x[2], attn_mask=keep, scale=0.3, enable_gqa=True)
    return torch_results("gqa", t, [o0, o1], x, None)


CASES = {"dec": case_dec, "tf": case_tf, "dl": case_dl, "mha": case_mha, "gqa": case_gqa}


def module_file(directory, suffix):
    """the function giving case c's module file, transformer_<c><suffix>.safetensors in directory"""
    return lambda c: f"{directory}/transformer_{c}{suffix}.safetensors"


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    t, _ = read_safetensors(sys.argv[1] + "/transformer_oracle.safetensors")
    ok = True
    for name, case in CASES.items():
        ok &= compare(name, t, case(t, module_file(sys.argv[1], "")))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
