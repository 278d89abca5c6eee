"""tests/onnx_torch.py -- writes tests/onnx_fixtures/: PyTorch's own ONNX exports for gdl_load_onnx.

    make onnx-fixtures                         (TORCH_VENV: a venv with torch, onnxscript, onnx, onnxruntime)
    $VENV/bin/python tests/onnx_torch.py [DIR] (DIR defaults to tests/onnx_fixtures beside this script)

Run by hand when a net or an exporter changes, and commit what it writes: make test-onnx reads the
committed files with tests/onnx_import.c, so the test (and CI) needs no torch. Builds small seeded PyTorch
nets shaped like bench/pytorch's twins (the MLP, a CNN with batch norm, the LSTM text classifier, an
attention block, plus the activations and LSTM / GRU layers), exports each with both of torch.onnx.export's
exporters (the TorchScript one, dynamo=False, at opset 17, and the dynamo one, dynamo=True, at its default
opset), checks each export in ONNX Runtime against PyTorch, and writes:

  DIR/<net>.<ts|dynamo>.onnx   the exports (the dynamo exporter's weights in <net>.dynamo.onnx.data)
  DIR/<net>.in<k>.bin          the fixed inputs (little-endian float32, or int64 for ids)
  DIR/<net>.out<k>.bin         PyTorch's outputs (float32)
  DIR/manifest.txt             one line per file: "model NAME FILE NIN NOUT", then "in FILE f32|i64 NDIM DIMS..."
                               and "out FILE NDIM DIMS..." lines; for the fine-tuning check "train FILE TARGET LR
                               LOSS" (one SGD step on mean((out - target)^2) on the batch in0) and its "param NAME
                               FILE NDIM DIMS..." lines: the parameters after PyTorch's step, under the names the
                               export gave them
  DIR/README.md                what made the files: this script and the versions of torch, onnxscript, onnx,
                               onnxruntime and numpy

The LSTM and GRU nets are also written as ONNX LSTM / GRU nodes by both exporters, so ONNX Runtime's
outputs are checked against PyTorch's here too (tests/onnx_import.c then checks gpudl's).
"""
import os
import sys
import time
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn
import torch.nn.functional as F

TS_OPSET = 17  # the TorchScript exporter at the lowest opset gpudl exports (LayerNormalization's)
TOL = 1e-5


class Mlp(nn.Module):  # Gemm (transB), layer norm, both GELUs: also the fine-tuning net
    def __init__(self):
        super().__init__()
        self.fc1, self.ln, self.fc2 = nn.Linear(12, 16), nn.LayerNorm(16), nn.Linear(16, 4)

    def forward(self, x):
        h = F.gelu(self.ln(self.fc1(x)))
        return self.fc2(F.gelu(h, approximate="tanh") + h)


class Cnn(nn.Module):  # strided / dilated / grouped conv, batch norm, pooling, a view made of Shape chains
    def __init__(self):
        super().__init__()
        self.c1, self.bn = nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=4)
        self.c3 = nn.Conv2d(8, 6, 1)
        self.fc = nn.Linear(6 * 2 * 2 + 6, 5)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        x = F.leaky_relu(self.c2(x), 0.2)
        x = self.c3(F.avg_pool2d(x, 2))
        g = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.log_softmax(self.fc(torch.cat([x.view(x.size(0), -1), g], 1)), dim=1)


class Acts(nn.Module):  # the activations and softmax over a 3-D input (MatMul, not Gemm)
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        a, b = torch.split(y, [3, 5], dim=2)
        z = torch.cat([torch.sigmoid(a), torch.tanh(b)], dim=-1)
        return torch.softmax(z * 2, dim=-1) + F.leaky_relu(y) - x.transpose(1, 2).transpose(1, 2)


class Attn(nn.Module):  # embedding, attention of MatMul / Softmax, a mask with where, gather, residuals
    def __init__(self):
        super().__init__()
        self.emb, self.qkv, self.proj = nn.Embedding(20, 16), nn.Linear(16, 48), nn.Linear(16, 16)
        self.ln, self.head = nn.LayerNorm(16), nn.Linear(16, 3)

    def forward(self, ids):
        x = self.emb(ids)
        b, t, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, 2, 8).transpose(1, 2) for z in (q, k, v))
        s = q @ k.transpose(-2, -1) / 8 ** 0.5
        s = torch.where((ids == 0)[:, None, None, :], torch.full_like(s, -1e4), s)
        o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, 16)
        x = self.ln(x + self.proj(o))
        return self.head(x[:, 0]), x


class Rnn(nn.Module):  # a bidirectional LSTM and a 2-layer bidirectional GRU: ONNX LSTM / GRU nodes
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 8, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(16, 5, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        z, hg = self.gru(torch.tanh(y))
        return z, h, c, hg


class Text(nn.Module):  # bench/pytorch/text_classify.py's LSTM model: embedding, LSTM, mean over the non-pad ids
    def __init__(self):
        super().__init__()
        self.embedding, self.lstm, self.head = nn.Embedding(30, 16), nn.LSTM(16, 12, batch_first=True), nn.Linear(12, 3)

    def forward(self, ids):
        h, _ = self.lstm(self.embedding(ids))
        keep = (ids != 0).float()
        w = keep / keep.sum(1, keepdim=True)
        return self.head((h * w.unsqueeze(2)).sum(1))


class Conv(nn.Module):  # the second fine-tuning net: conv, ReLU, max pool, flatten, linear
    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(2, 4, 3, padding=1), nn.Linear(4 * 3 * 3, 3)

    def forward(self, x):
        return self.fc(torch.flatten(F.max_pool2d(torch.relu(self.conv(x)), 2), 1))


def nets():
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(1, 20, (3, 6), generator=g)
    ids[1, 4:] = 0
    ids[2, 5:] = 0
    return [  # name, module, inputs, fine-tune it
        ("mlp", Mlp(), (torch.randn(3, 12, generator=g),), True),
        ("cnn", Cnn(), (torch.randn(2, 3, 16, 16, generator=g),), False),
        ("acts", Acts(), (torch.randn(2, 5, 8, generator=g),), False),
        ("attn", Attn(), (ids,), False),
        ("rnn", Rnn(), (torch.randn(2, 7, 6, generator=g),), False),
        ("conv", Conv(), (torch.randn(2, 2, 6, 6, generator=g),), True),
        ("text", Text(), (torch.randint(1, 30, (3, 7), generator=g) * (torch.arange(7) < torch.tensor([[7], [5], [3]])),),
         False),  # not fine-tuned: the exports pack the LSTM's weights into new initializers
    ]


def write(d, name, a, dtype):
    np.ascontiguousarray(a, dtype=dtype).astype(np.dtype(dtype).newbyteorder("<")).tofile(os.path.join(d, name))


def dims(a):
    return "%d %s" % (a.ndim, " ".join(str(s) for s in a.shape))


def export(m, xs, path, dynamo):
    names = ["input%d" % k for k in range(len(xs))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            shapes = tuple({0: torch.export.Dim("batch", min=1, max=64)} for _ in xs)
            torch.onnx.export(m, xs, path, input_names=names, dynamo=True, dynamic_shapes=shapes, verbose=False)
        else:
            torch.onnx.export(m, xs, path, input_names=names, dynamo=False, opset_version=TS_OPSET,
                              dynamic_axes={n: {0: "batch"} for n in names})


def ort_check(path, xs, wants):  # ONNX Runtime against PyTorch: the exports themselves are right
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    gots = s.run(None, {i.name: x.numpy() for i, x in zip(s.get_inputs(), xs)})
    for got, want in zip(gots, wants):
        rel = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
        if got.shape != want.shape or not rel <= TOL:
            raise SystemExit("onnx_torch: %s: ONNX Runtime differs from PyTorch (%s vs %s, %.2e)" % (
                path, got.shape, want.shape, rel))


def sgd_step(m, xs, out_shape, lr, d, name, man, path):
    """one SGD step of mean((m(xs) - target)^2) in PyTorch; the export's initializers named after it"""
    g = torch.Generator().manual_seed(11)
    target = torch.randn(out_shape, generator=g)
    m2 = type(m)()
    m2.load_state_dict(m.state_dict())
    m2.train()
    opt = torch.optim.SGD(m2.parameters(), lr=lr)
    loss = F.mse_loss(m2(*xs), target)
    loss.backward()
    opt.step()
    write(d, "%s.target.bin" % name, target.numpy(), np.float32)
    man.append("train %s %s.target.bin %g %.9g" % (os.path.basename(path), name, lr, loss.item()))
    inits = {i.name for i in onnx.load(path, load_external_data=False).graph.initializer}
    for pname, p in m2.named_parameters():
        if pname not in inits:
            raise SystemExit("onnx_torch: %s: parameter %s is not an initializer of the export" % (path, pname))
        f = "%s.%s.bin" % (os.path.basename(path), pname)
        write(d, f, p.detach().numpy(), np.float32)
        man.append("param %s %s %s" % (pname, f, dims(p.detach().numpy())))


def refusals(d, man):
    """files gdl must refuse: an op it does not run (at load), attributes it does not run (at the run)"""
    from onnx import TensorProto, helper, numpy_helper

    def save(name, nodes, shape, inits, opset=17):
        g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), os.path.join(d, name + ".onnx"))

    save("refuse_hardmax", [helper.make_node("Hardmax", ["x"], ["y"], name="my_hardmax")], [2, 3], {})
    save("refuse_conv", [helper.make_node("Conv", ["x", "w"], ["y"], name="my_conv", auto_pad="SAME_UPPER")],
         [1, 1, 4, 4], {"w": np.ones((1, 1, 3, 3))})
    save("refuse_gru", [helper.make_node("GRU", ["x", "w", "r"], ["y"], name="my_gru", hidden_size=2)], [3, 1, 2],
         {"w": np.ones((1, 6, 2)), "r": np.ones((1, 6, 2))})
    man.append("refuse refuse_hardmax.onnx load my_hardmax Hardmax 2 2 3")
    man.append("refuse refuse_conv.onnx run my_conv Conv 4 1 1 4 4")
    man.append("refuse refuse_gru.onnx run my_gru GRU 3 3 1 2")


MAX_FILE, MAX_TOTAL = 100_000, 1_000_000  # bytes: the fixtures stay small enough to commit


def clear(d):  # what an earlier run wrote (a net renamed or dropped leaves no stale file behind)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f == "manifest.txt" or f == "README.md" or f.endswith((".onnx", ".onnx.data", ".bin")):
            os.remove(os.path.join(d, f))


def readme(d):
    import onnxscript
    total = 0
    for f in os.listdir(d):
        size = os.path.getsize(os.path.join(d, f))
        total += size
        if size > MAX_FILE:
            raise SystemExit("onnx_torch: %s has %d bytes, more than %d: make the net smaller" % (f, size, MAX_FILE))
    if total > MAX_TOTAL:
        raise SystemExit("onnx_torch: %s holds %d bytes, more than %d" % (d, total, MAX_TOTAL))
    with open(os.path.join(d, "README.md"), "w") as f:
        f.write("# tests/onnx_fixtures: PyTorch's ONNX exports that make test-onnx imports\n\n"
                "Written by tests/onnx_torch.py (`make onnx-fixtures`, run by hand; its docstring describes the\n"
                "files and manifest.txt) with torch %s, onnxscript %s, onnx %s, onnxruntime %s, numpy %s\n"
                "and python %d.%d. tests/onnx_import.c reads them: the test itself needs no torch.\n" % (
                    torch.__version__, onnxscript.__version__, onnx.__version__, ort.__version__, np.__version__,
                    sys.version_info[0], sys.version_info[1]))


def main(d):
    torch.manual_seed(0)
    clear(d)
    man = []
    t0 = time.time()
    todo = nets()
    for name, m, xs, tune in todo:
        m.eval()
        with torch.no_grad():
            outs = m(*xs)
        outs = [o.numpy() for o in (outs if isinstance(outs, tuple) else (outs,))]
        for k, x in enumerate(xs):
            write(d, "%s.in%d.bin" % (name, k), x.numpy(), np.int64 if x.dtype == torch.int64 else np.float32)
        for k, o in enumerate(outs):
            write(d, "%s.out%d.bin" % (name, k), o, np.float32)
        for exporter in ("ts", "dynamo"):
            path = os.path.join(d, "%s.%s.onnx" % (name, exporter))
            export(m, xs, path, exporter == "dynamo")
            ort_check(path, xs, outs)
            man.append("model %s %s %d %d" % (name, os.path.basename(path), len(xs), len(outs)))
            for k, x in enumerate(xs):
                man.append("in %s.in%d.bin %s %s" % (name, k, "i64" if x.dtype == torch.int64 else "f32",
                                                     dims(x.numpy())))
            for k, o in enumerate(outs):
                man.append("out %s.out%d.bin %s" % (name, k, dims(o)))
            if tune:
                sgd_step(m, xs, outs[0].shape, 0.1, d, "%s.%s" % (name, exporter), man, path)
    refusals(d, man)
    with open(os.path.join(d, "manifest.txt"), "w") as f:
        f.write("\n".join(man) + "\n")
    readme(d)
    print("onnx_torch: %d nets exported twice (torch %s, onnxscript, opset %d and the dynamo default) in %.1f s" % (
        len(todo), torch.__version__, TS_OPSET, time.time() - t0))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2:
        print("usage: python onnx_torch.py [DIR]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1] if len(sys.argv) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                      "onnx_fixtures")))
