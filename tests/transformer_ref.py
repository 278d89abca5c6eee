# Reference numbers for tests/test_nn.c's Transformer tests, from PyTorch (float64, dropout 0, training mode so
# the slow path runs). Every parameter j (state_dict order) holds 0.5*sin((0.37+0.11j) i + 0.1j), src holds
# sin(1.1 i + 0.5), the loss is sum(out * cos(0.3 i)). Prints C arrays: python3 tests/transformer_ref.py
import math, torch
torch.set_default_dtype(torch.float64)

def fill(t, a, b, mul):
    n = t.numel()
    with torch.no_grad():
        t.copy_(torch.tensor([mul * math.sin(a * i + b) for i in range(n)]).reshape(t.shape))

def setw(m):
    for j, (n, p) in enumerate(m.state_dict().items()):
        fill(p, 0.37 + 0.11 * j, 0.1 * j, 0.5)

def carr(name, v):
    v = [float(x) for x in v]
    lit = lambda x: ("%.9g" % x) + ("" if any(c in "%.9g" % x for c in ".en") else ".") + "f"
    body = ", ".join(lit(x) for x in v)
    print("    static const float %s[%d] = {%s};" % (name, len(v), body))

def run(tag, m, batch_first, kpm=None, mask=None, causal=False, grads=()):
    setw(m)
    N, T, d = 2, 3, 4
    x = torch.zeros(N, T, d); fill(x, 1.1, 0.5, 1.0)
    if not batch_first: x = x.transpose(0, 1).contiguous()
    if causal and mask is None:
        mask = torch.nn.Transformer.generate_square_subsequent_mask(T)
    if isinstance(m, torch.nn.TransformerEncoder):
        out = m(x, mask=mask, src_key_padding_mask=kpm, is_causal=causal)
    else:
        out = m(x, src_mask=mask, src_key_padding_mask=kpm, is_causal=causal)
    w = torch.tensor([math.cos(0.3 * i) for i in range(out.numel())]).reshape(out.shape)
    (out * w).sum().backward()
    print("    /* %s */" % tag)
    carr("%s_out" % tag, out.flatten())
    sd = dict(m.named_parameters())
    for g in grads:
        carr("%s_g_%s" % (tag, g.replace(".", "_")), sd[g].grad.flatten())

kpm = torch.tensor([[False, False, True], [False, False, False]])
L = lambda **k: torch.nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, **k)
print("    /* names: %s */" % ", ".join(L(batch_first=True).state_dict().keys()))
run("post_relu", L(batch_first=True), True, kpm=kpm, causal=True,
    grads=("self_attn.in_proj_weight", "linear1.weight", "norm1.weight"))
run("pre_gelu", L(batch_first=True, norm_first=True, activation="gelu", layer_norm_eps=1e-3), True, kpm=kpm,
    grads=("self_attn.out_proj.weight", "linear2.bias", "norm2.bias"))
run("nobias_seq", L(norm_first=True, bias=False), False, causal=True, grads=("linear1.weight",))
enc = torch.nn.TransformerEncoder(L(batch_first=True, activation="gelu"), 2, norm=torch.nn.LayerNorm(4),
                                  enable_nested_tensor=False)
print("    /* stack names: %s */" % ", ".join(enc.state_dict().keys()))
run("stack", enc, True, kpm=kpm, causal=True, grads=("layers.1.linear1.weight", "layers.0.self_attn.in_proj_bias"))
# the sinusoidal encoding of the PyTorch tutorial (batch-first), max_len 5, d 6
pe = torch.zeros(5, 6, dtype=torch.float32)
pos = torch.arange(5, dtype=torch.float32).unsqueeze(1)
div = torch.exp(torch.arange(0, 6, 2, dtype=torch.float32) * (-math.log(10000.0) / 6))
pe[:, 0::2] = torch.sin(pos * div); pe[:, 1::2] = torch.cos(pos * div)
carr("pe_ref", pe.flatten())
# weight tying (nanoGPT's lm_head.weight = wte.weight): V 5, d 3, wte.weight[i] = 0.5 sin(0.37 i + 0.1), tokens x
# [[1,4,2],[0,3,3]], targets [[4,2,0],[3,3,1]]; SGD(lr 0.5) one step on cross entropy: the loss and the weight after
wte = torch.nn.Embedding(5, 3)
head = torch.nn.Linear(3, 5, bias=False)
head.weight = wte.weight
fill(wte.weight, 0.37, 0.1, 0.5)
x = torch.tensor([[1, 4, 2], [0, 3, 3]]); y = torch.tensor([[4, 2, 0], [3, 3, 1]])
both = torch.nn.ModuleDict({"wte": wte, "lm_head": head})
opt = torch.optim.SGD(both.parameters(), lr=0.5)
print("    /* tying: %d parameter(s) seen by the optimizer; state_dict: %s */" % (len(opt.param_groups[0]["params"]),
      ", ".join(both.state_dict().keys())))
loss = torch.nn.functional.cross_entropy(head(wte(x)).reshape(-1, 5), y.reshape(-1))
loss.backward(); opt.step()
carr("tie_loss", [loss.item()])
carr("tie_w", wte.weight.detach().flatten())
