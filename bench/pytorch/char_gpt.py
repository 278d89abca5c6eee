"""char_gpt.py — PyTorch's side of examples/char_gpt.c: the same nanoGPT-style character-level GPT (the
structure and names of Karpathy's nanoGPT model.py, F.scaled_dot_product_attention with is_causal), started
from gpudl's initial weights (char_gpt --save-init INIT) and trained on the very batches gpudl trained on
(char_gpt --dump-batches BATCHES: the training and validation token ids, and as metadata every setting of
the model and the training), with the same AdamW, parameter groups, clipping and learning-rate schedule.
Prints what char_gpt prints, in its format: "step N: loss X" lines, "eval N: ..." lines, the median step time.

    build/char_gpt --steps 200 --log-interval 1 --save-init build/init.safetensors --dump-batches build/b.safetensors
    python3 bench/pytorch/char_gpt.py build/init.safetensors build/b.safetensors [--threads 2]
        [--device cpu|cuda] [--amp bf16|f16]

bench/compare_char_gpt.sh runs both on the CPU and compares the losses. On a GPU (tools/gpu_session.sh) both
run with --device cuda --amp bf16 and their tokens/s are compared: --amp puts the forward and the loss under
torch.autocast, f16 with a GradScaler, as char_gpt's --amp. A step's time ends with loss.item(), which waits
for the GPU, so the times are the GPU's.
"""
import contextlib
import json
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import flops  # the utilisation line (this folder is on the path when run as a script)
from seqtrain import StepLog, adamw_two_groups, lr_at, twin_args


def autocast(device, amp):
    """torch.autocast for --amp, or a context that does nothing."""
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}.get(amp)
    return torch.autocast(device_type=device.type, dtype=dtype) if dtype else contextlib.nullcontext()


def read_safetensors(path):
    """The tensors (F32 and I32) and the metadata of a safetensors file."""
    dtypes = {"F32": np.float32, "I32": np.int32}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    tensors = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        tensors[name] = torch.from_numpy(np.frombuffer(data[a:b], dtype=dtypes[e["dtype"]]).reshape(e["shape"]).copy())
    return tensors, meta


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"])
        self.resid_dropout = nn.Dropout(c["dropout"])
        self.n_head, self.dropout = c["n_head"], c["dropout"]

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"])
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"])
        self.dropout = nn.Dropout(c["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["n_embd"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            drop=nn.Dropout(c["dropout"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=nn.LayerNorm(c["n_embd"])))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT

    def forward(self, idx, targets):
        t = self.transformer
        pos = torch.arange(idx.size(1), dtype=torch.long, device=idx.device)
        x = t.drop(t.wte(idx) + t.wpe(pos))
        for block in t.h:
            x = block(x)
        logits = self.lm_head(t.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def evaluate(model, val_x, val_y, amp):
    model.eval()
    dev = next(model.parameters()).device
    with torch.no_grad(), autocast(dev, amp):
        losses = [model(val_x[k].to(dev).long(), val_y[k].to(dev).long()).item() for k in range(val_x.shape[0])]
    model.train()
    return sum(losses) / len(losses)


def main():
    ap = twin_args("char_gpt", __doc__)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--amp", choices=["bf16", "f16"], help="mixed precision: autocast to bf16 or f16 (default off)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    torch.set_num_threads(args.threads)
    weights, _ = read_safetensors(args.init)
    b, meta = read_safetensors(args.batches)
    c = {k: float(v) for k, v in meta.items()}
    for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "steps", "log_interval", "eval_interval"):
        c[k] = int(c[k])
    model = GPT(c)
    weights["lm_head.weight"] = weights["transformer.wte.weight"]
    model.load_state_dict(weights, strict=True)
    model.to(dev)
    scaler = torch.amp.GradScaler(dev.type) if args.amp == "f16" else None
    opt = adamw_two_groups(model, c)
    steps = min(args.steps or c["steps"], c["steps"])
    print(f"char_gpt.py (torch {torch.__version__}, {args.threads} threads): {c['n_layer']} layers, {c['n_head']} heads, "
          f"width {c['n_embd']}, context {c['block_size']}, batch {int(c['batch_size'])}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, dropout {c['dropout']:g}, "
          f"{dev}{', autocast to ' + args.amp if args.amp else ''}")
    print(f"eval 0: val {evaluate(model, b['val.x'], b['val.y'], args.amp):.6f}")
    log = StepLog(steps, c["log_interval"], c["eval_interval"])
    for step in range(1, steps + 1):
        # on the device before the step's clock starts, as char_gpt's loader hands its batch over
        x, y = b["train.x"][step - 1].to(dev).long(), b["train.y"][step - 1].to(dev).long()
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(step - 1, c)
        opt.zero_grad(set_to_none=True)
        with flops.counter(step == 1) as fc:  # step 1's FLOPs (its time is not in the median)
            with autocast(dev, args.amp):
                loss = model(x, y)
            if scaler:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
            else:
                loss.backward()
        if step == 1:
            step_flops = fc.get_total_flops()
        if c["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        value = loss.item()
        if log.add(step, value, time.perf_counter() - t0):
            val = evaluate(model, b["val.x"], b["val.y"], args.amp)
            print(f"eval {step}: train {log.total / log.rows:.6f} val {val:.6f} lr {lr_at(step, c):.2e}, "
                  f"{log.secs:.1f} s, {log.rows * x.numel() / log.secs:.0f} tokens/s")
            log.reset()
    med = log.median()
    print("utilisation: " + flops.line(step_flops, med))


if __name__ == "__main__":
    main()
