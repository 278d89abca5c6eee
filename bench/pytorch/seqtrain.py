"""seqtrain.py - what the sequence twins (char_gpt.py, seq2seq.py) train with alike: AdamW in
two groups (no decay on biases and norms, as the examples' make_training), their warm-up +
cosine schedule, and the step log in the words of gpudl's examples (ex_steplog_add): each
step's loss and time summed until the next report, "step N: loss" every log_interval steps,
and the median step time without the first three steps (which warm up)."""
import argparse
import math
import statistics

import torch


def twin_args(prog, doc):
    """The arguments both twins take: prog's --save-init and --dump-batches files, --threads, --steps."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("init", help=f"{prog} --save-init's file")
    ap.add_argument("batches", help=f"{prog} --dump-batches's file")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="stop after N steps (default: all the file holds)")
    return ap


def adamw_two_groups(model, c):
    """AdamW with c's lr, betas, eps; weight_decay on the parameters of two or more dims only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"])


def lr_at(t, c):
    """gdl_warmup_cosine_lr_new(opt, warmup, 1/(warmup+1), steps - warmup, min_lr) at step t: nanoGPT's get_lr."""
    lr, warmup, min_lr = c["lr"], int(c["warmup"]), c["min_lr"]
    if t < warmup:
        s = 1 / (warmup + 1)
        return lr * (s + (1 - s) * t / warmup)
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * (t - warmup) / (c["steps"] - warmup))) / 2


class StepLog:
    def __init__(self, steps, log_interval, eval_interval):
        self.steps, self.log_interval, self.eval_interval = steps, log_interval, eval_interval
        self.times = []
        self.reset()

    def reset(self):
        """Zeroes the sums after a report."""
        self.total, self.secs, self.rows = 0.0, 0.0, 0

    def add(self, step, value, seconds):
        """One step's loss and time; True when a report is due (every eval_interval steps and the last)."""
        self.times.append(seconds)
        self.secs += seconds
        self.total += value
        self.rows += 1
        if step % self.log_interval == 0:
            print(f"step {step}: loss {value:.6f}")
        return step % self.eval_interval == 0 or step == self.steps

    def median(self):
        """The median step time, printed as the "median step time" line."""
        first = 3 if self.steps > 3 else 0
        med = statistics.median(self.times[first:])
        print(f"median step time {1e3 * med:.2f} ms (steps {first + 1} to {self.steps})")
        return med
