"""text_classify.py — the PyTorch twin of examples/text_classify.c: the same model (under the same state_dict
names), loaded with gpudl's initial weights (load_state_dict, strict), trained with the same Adam on the same
batches (the C program's dump: the encoded train / validation texts, their lengths and labels, every epoch's
order and the options, the learning-rate schedule's among them), evaluated the same way. Prints the same
per-epoch table; with --csv (the C program's CSV) it compares every epoch's numbers and exits 1 when they differ
by more than --tol (dropout draws differ between the two, so compare runs made with --dropout 0).

    build/text_classify --model transformer --subset 2000 --epochs 2 --dropout 0 --csv c.csv \\
        --save-init init.safetensors --dump data.safetensors
    python3 bench/pytorch/text_classify.py init.safetensors data.safetensors --csv c.csv
"""
import argparse
import csv
import math
import sys
import time

import torch
from torch import nn

import flops  # the utilisation line
from st_io import read_safetensors

D_MODEL, LSTM_H, EVAL_BATCH = 64, 128, 256


class PositionalEncoding(nn.Module):
    """the PyTorch tutorial's, batch-first: dropout(x + pe[:T]), pe a buffer"""

    def __init__(self, d, max_len, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
        pe = torch.zeros(max_len, d)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.shape[1]])


class LearnedPositions(nn.Module):
    def __init__(self, d, max_len):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d))

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class TextClassifier(nn.Module):
    def __init__(self, model, pos, V, C, max_len, dropout):
        super().__init__()
        self.embedding = nn.Embedding(V, D_MODEL)
        self.kind = model
        if model == "lstm":
            self.lstm = nn.LSTM(D_MODEL, LSTM_H, batch_first=True)
        else:
            self.pos = LearnedPositions(D_MODEL, max_len) if pos == "learned" else PositionalEncoding(D_MODEL, max_len, dropout)
            layer = nn.TransformerEncoderLayer(D_MODEL, 4, 2 * D_MODEL, dropout, activation="gelu", batch_first=True,
                                               norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(D_MODEL), enable_nested_tensor=False)
        self.head = nn.Linear(LSTM_H if model == "lstm" else D_MODEL, C)

    def forward(self, x, lengths):
        T = x.shape[1]
        pad = torch.arange(T).unsqueeze(0) >= lengths.unsqueeze(1)
        h = self.embedding(x)
        if self.kind == "lstm":
            h, _ = self.lstm(h)
        else:
            h = self.encoder(self.pos(h), src_key_padding_mask=pad)
        w = (~pad).float() / lengths.unsqueeze(1).float()
        return self.head((h * w.unsqueeze(2)).sum(1))


def warmup_cosine(warmup, total):
    """gdl_warmup_cosine_lr_new(opt, warmup, 0.01, total - warmup, 0)'s factor of the peak lr after t steps: PyTorch's
    SequentialLR([LinearLR(0.01, 1, warmup), CosineAnnealingLR(total - warmup, 0)], [warmup]) in closed form"""
    def factor(t):
        if t < warmup:
            return 0.01 + 0.99 * t / warmup
        return (1 + math.cos(math.pi * (t - warmup) / (total - warmup))) / 2
    return factor


def epoch(model, opt, sched, x, lens, y, order, B):
    model.train(opt is not None)
    total, correct = 0.0, 0
    with torch.set_grad_enabled(opt is not None):
        for at in range(0, len(order), B):
            idx = order[at:at + B]
            logits = model(x[idx], lens[idx])
            loss = nn.functional.cross_entropy(logits, y[idx])
            if opt is not None:
                opt.zero_grad()
                loss.backward()
                opt.step()
                if sched is not None:
                    sched.step()
            total += loss.item() * len(idx)
            correct += (logits.argmax(1) == y[idx]).sum().item()
    return total / len(order), correct / len(order)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("init", help="the C program's --save-init file")
    ap.add_argument("data", help="the C program's --dump file")
    ap.add_argument("--csv", help="the C program's --csv file, to compare with")
    ap.add_argument("--tol", type=float, default=0.02, help="largest difference of a loss or an accuracy (default 0.02)")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    init, _ = read_safetensors(a.init)
    t, meta = read_safetensors(a.data)
    model = TextClassifier(meta["model"], meta["pos"], int(meta["vocab_size"]), int(meta["num_classes"]),
                           int(meta["max_len"]), float(meta["dropout"]))
    model.load_state_dict(init, strict=True)
    opt = torch.optim.Adam(model.parameters(), lr=float(meta["lr"]))
    schedule = meta.get("schedule", "const")
    sched = None
    if schedule == "cosine":
        factor = warmup_cosine(int(meta["warmup_steps"]), int(meta["total_steps"]))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    B = int(meta["batch_size"])
    tx, tl, ty = t["train_x"].long(), t["train_len"].long(), t["train_y"].long()
    vx, vl, vy = t["val_x"].long(), t["val_len"].long(), t["val_y"].long()
    print("model: %s, %d train, %d validation texts, batch %d, lr %g, %s" % (meta["model"], len(ty), len(vy), B,
                                                                            float(meta["lr"]), schedule))
    print("%5s %10s %9s %10s %9s %8s" % ("epoch", "train_loss", "train_acc", "val_loss", "val_acc", "seconds"))
    rows = []
    train_s, trained = 0.0, 0  # the training passes' time and samples, for the utilisation line
    for e, order in enumerate(t["order"].long()):
        t0 = time.time()
        trl, tra = epoch(model, opt, sched, tx, tl, ty, order, B)
        train_s += time.time() - t0
        trained += len(order)
        val, vaa = epoch(model, None, None, vx, vl, vy, torch.arange(len(vy)), EVAL_BATCH)
        rows.append((trl, tra, val, vaa))
        print("%5d %10.4f %8.2f%% %10.4f %8.2f%% %8.1f" % (e + 1, trl, 100 * tra, val, 100 * vaa, time.time() - t0))
    print("utilisation: " + flops.run_line(flops.model_step(model, tx[:B], tl[:B]), train_s, trained, B))
    if not a.csv:
        return 0
    with open(a.csv) as f:
        theirs = [(float(r["loss"]), float(r["accuracy"]), float(r["val_loss"]), float(r["val_accuracy"]))
                  for r in csv.DictReader(f)]
    if len(theirs) != len(rows):
        print("the CSV has %d epochs, the dump %d" % (len(theirs), len(rows)))
        return 1
    worst = max(abs(p - q) for r, s in zip(rows, theirs) for p, q in zip(r, s))
    print("largest difference from gpudl's per-epoch numbers: %.5f (tolerance %g): %s" %
          (worst, a.tol, "agree" if worst <= a.tol else "DIFFER"))
    return 0 if worst <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
