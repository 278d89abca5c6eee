"""seq2seq.py — PyTorch's side of examples/seq2seq.c: the same encoder-decoder Transformer (nn.Transformer,
batch_first, norm_first, with src_embed/tgt_embed, learned positions src_pos/tgt_pos and a generator Linear),
started from gpudl's initial weights (seq2seq --save-init INIT, loaded with load_state_dict(strict=True)) and
trained on the very batches gpudl trained on (seq2seq --dump-batches BATCHES: the training batches, the held-out
pairs and as metadata every setting of the model and the training), with the same AdamW, parameter groups,
clipping and learning-rate schedule; then the same greedy and beam-search decoding of the held-out pairs.
Prints what seq2seq prints, in its format: "step N: loss X", "eval N: ...", the median step time, the
exact-match and character-accuracy lines.

    build/seq2seq --steps 100 --log-interval 1 --save-init build/init.safetensors --dump-batches build/b.safetensors
    python3 bench/pytorch/seq2seq.py build/init.safetensors build/b.safetensors [--threads 2]

bench/compare_seq2seq.sh runs both on the CPU and compares them; with FLOAT64=1 both train in float64 (seq2seq built
with -DGPUDL_DOUBLE, this with --float64), where every printed loss must be the same.
"""
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import flops  # the utilisation line (this folder is on the path when run as a script)
from st_io import read_safetensors
from seqtrain import StepLog, adamw_two_groups, lr_at, twin_args

PAD, UNK = 0, 1  # gdl's <pad> and <unk>


class LearnedPositions(nn.Module):
    """gdl_nn_learned_positional_embedding: x + weight[:T] for x [N, T, d]."""

    def __init__(self, max_len, d):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(max_len, d))

    def forward(self, x):
        return x + self.weight[:x.size(1)]


class Seq2Seq(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, V = c["d_model"], c["V"]
        self.src_embed = nn.Embedding(V, d)
        self.tgt_embed = nn.Embedding(V, d)
        self.src_pos = LearnedPositions(c["S"], d)
        self.tgt_pos = LearnedPositions(c["T"], d)
        self.transformer = nn.Transformer(d, c["nhead"], c["enc_layers"], c["dec_layers"], c["ff"], c["dropout"],
                                          batch_first=True, norm_first=True)
        self.generator = nn.Linear(d, V)

    def encode(self, src):
        """The memory [N, S, d] and the source's padding mask (True: left out)."""
        pad = src == PAD
        return self.transformer.encoder(self.src_pos(self.src_embed(src)), src_key_padding_mask=pad), pad

    def decode(self, tgt, memory, src_pad):
        """The logits [N, L, V] for decoder inputs tgt [N, L], causal."""
        L = tgt.size(1)
        causal = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
        y = self.transformer.decoder(self.tgt_pos(self.tgt_embed(tgt)), memory, tgt_mask=causal, tgt_is_causal=True,
                                     tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src_pad)
        return self.generator(y)

    def loss(self, src, tgt_in, tgt_out):
        memory, pad = self.encode(src)
        logits = self.decode(tgt_in, memory, pad)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=PAD)


def heldout_loss(model, b, c):
    """The token-weighted mean loss over the held-out pairs, in batches of batch_size (as seq2seq's)."""
    model.eval()
    src, tin, tout = b["val.src"].long(), b["val.tgt_in"].long(), b["val.tgt_out"].long()
    total, tokens, B = 0.0, 0, c["batch_size"]
    with torch.no_grad():
        for i in range(0, src.size(0), B):
            n = int((tout[i:i + B] != PAD).sum())
            total += model.loss(src[i:i + B], tin[i:i + B], tout[i:i + B]).item() * n
            tokens += n
    model.train()
    return total / tokens


def next_logprobs(model, ids, memory, pad):
    """log_softmax of the last position's logits, [N, V], as float64 numpy."""
    return F.log_softmax(model.decode(ids, memory, pad)[:, -1], dim=1).double().numpy()


def greedy(model, src, c):
    """Each source's German ids (no <eos>), as seq2seq's greedy(): <pad>, <unk> and <bos> never chosen."""
    N, T, bos, eos = src.size(0), c["T"], c["bos"], c["eos"]
    memory, pad = model.encode(src)
    ids = torch.full((N, 1), bos, dtype=torch.long)
    hyp, done = [[] for _ in range(N)], [False] * N
    for L in range(1, T):
        if all(done):
            break
        lp = next_logprobs(model, ids, memory, pad)
        lp[:, PAD] = lp[:, UNK] = lp[:, bos] = -np.inf
        best = lp.argmax(1)
        col = torch.zeros(N, dtype=torch.long)
        for i in range(N):
            if done[i]:
                continue
            if best[i] == eos:
                done[i] = True
            else:
                hyp[i].append(int(best[i]))
                col[i] = int(best[i])
        ids = torch.cat([ids, col[:, None]], 1)
    return hyp


def beam(model, src, K, c):
    """seq2seq's beam(): sum of log-probabilities, the K best unended kept, the best ended recorded, a source
    done when that scores at least its best live one; ties broken by row, then token."""
    N, T, bos, eos, V = src.size(0), c["T"], c["bos"], c["eos"], c["V"]
    memory, pad = model.encode(src.repeat_interleave(K, 0))
    ids = np.zeros((N * K, T), dtype=np.int64)
    ids[:, 0] = bos
    score = np.full(N * K, -np.inf)
    score[::K] = 0
    fin, hyp, done = [-np.inf] * N, [[] for _ in range(N)], [False] * N
    for L in range(1, T):
        lp = next_logprobs(model, torch.from_numpy(ids[:, :L]), memory, pad)
        nxt = ids.copy()
        for i in range(N):
            if done[i]:
                continue
            rows = [i * K + k for k in range(K) if score[i * K + k] > -np.inf]
            cand = score[rows][:, None] + lp[rows]
            cand[:, PAD] = cand[:, UNK] = cand[:, bos] = -np.inf
            flat = cand.reshape(-1)
            order = np.argsort(-flat, kind="stable")
            live = 0
            for o in order:
                if live == K or flat[o] == -np.inf:
                    break
                r, tok = rows[o // V], o % V
                if tok == eos:
                    if flat[o] > fin[i]:
                        fin[i], hyp[i] = flat[o], [int(t) for t in ids[r, 1:L]]
                    continue
                nxt[i * K + live] = ids[r]
                nxt[i * K + live, L] = tok
                score[i * K + live] = flat[o]
                live += 1
            score[i * K + live:(i + 1) * K] = -np.inf
            if live == 0 or fin[i] >= score[i * K]:
                done[i] = True
            elif L == T - 1 and fin[i] == -np.inf:
                hyp[i] = [int(t) for t in nxt[i * K, 1:]]
        ids = nxt
        if all(done):
            break
    return hyp


def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        diag, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            up = row[j]
            row[j] = diag if a[i - 1] == b[j - 1] else 1 + min(diag, up, row[j - 1])
            diag = up
    return row[-1]


def figures(model, b, c, width):
    """exact matches, edits, reference characters, pairs, seconds: seq2seq's translate()."""
    model.eval()
    src, tout = b["val.src"].long(), b["val.tgt_out"].numpy()
    chunk, exact, edits, chars, t0 = (32 if width > 1 else 256), 0, 0, 0, time.perf_counter()
    with torch.no_grad():
        for i in range(0, src.size(0), chunk):
            hyps = beam(model, src[i:i + chunk], width, c) if width > 1 else greedy(model, src[i:i + chunk], c)
            for k, h in enumerate(hyps):
                ref = [int(t) for t in tout[i + k] if t != PAD and t != c["eos"]]
                exact += h == ref
                edits += edit_distance(h, ref)
                chars += len(ref)
    model.train()
    return exact, edits, chars, src.size(0), time.perf_counter() - t0


def main():
    ap = twin_args("seq2seq", __doc__)
    ap.add_argument("--float64", action="store_true",
                    help="train in float64: float32's rounding noise (compare the losses with float32's); "
                         "from a -DGPUDL_DOUBLE seq2seq's files, the same training as that one's")
    args = ap.parse_args()
    # nn.Transformer notes that norm_first rules out its nested-tensor fast path: known, and not wanted here
    warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
    torch.set_num_threads(args.threads)
    weights, _ = read_safetensors(args.init)
    b, meta = read_safetensors(args.batches)
    c = {k: float(v) for k, v in meta.items()}
    for k in ("d_model", "nhead", "enc_layers", "dec_layers", "ff", "S", "T", "V", "bos", "eos", "batch_size", "steps",
              "log_interval", "eval_interval", "eval_pairs", "beam"):
        c[k] = int(c[k])
    model = Seq2Seq(c)
    if args.float64:  # before loading: a float32 model would round a float64 --save-init file's weights
        model.double()
    model.load_state_dict(weights, strict=True)
    opt = adamw_two_groups(model, c)
    steps = min(args.steps or c["steps"], c["steps"])
    print(f"seq2seq.py (torch {torch.__version__}, {args.threads} threads): nn.Transformer width {c['d_model']}, "
          f"{c['nhead']} heads, {c['enc_layers']}+{c['dec_layers']} layers, ff {c['ff']}, batch {c['batch_size']}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, dropout {c['dropout']:g}")
    print(f"eval 0: held-out {heldout_loss(model, b, c):.6f}")
    log = StepLog(steps, c["log_interval"], c["eval_interval"])
    for step in range(1, steps + 1):
        src, tin, tout = (b[k][step - 1].long() for k in ("train.src", "train.tgt_in", "train.tgt_out"))
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(step - 1, c)
        opt.zero_grad(set_to_none=True)
        with flops.counter(step == 1) as fc:  # step 1's FLOPs (its time is not in the median)
            loss = model.loss(src, tin, tout)
            loss.backward()
        if step == 1:
            step_flops = fc.get_total_flops()
        if c["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
        opt.step()
        if log.add(step, loss.item(), time.perf_counter() - t0):
            print(f"eval {step}: train {log.total / log.rows:.6f} held-out {heldout_loss(model, b, c):.6f} "
                  f"lr {lr_at(step, c):.2e}, {log.secs:.1f} s, {log.rows * c['batch_size'] / log.secs:.0f} pairs/s")
            log.reset()
    print("utilisation: " + flops.line(step_flops, log.median()))
    for width in [1] + ([c["beam"]] if c["beam"] > 1 else []):
        e, ed, ch, n, s = figures(model, b, c, width)
        print(f"{'greedy' if width == 1 else f'beam {width}'}: exact match {100 * e / n:.2f}% ({e} of {n}), "
              f"char accuracy {100 * (1 - ed / ch):.2f}%, {s:.1f} s")


if __name__ == "__main__":
    main()
