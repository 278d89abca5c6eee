# gradscaler_ref.py -- the reference numbers of tests/gradscaler_cases.h: PyTorch's
# GradScaler (growth_interval 3) with SGD(lr 0.1, momentum 0.9) on four weights, with
# two forced overflows (a 1e35 and a 1e36 input: skipped steps, backoff) and growth.
#   python tests/gradscaler_ref.py        the steps, as PyTorch prints them
#   python tests/gradscaler_ref.py --c    the rows of gdl__gs_ref in tests/gradscaler_cases.h
import sys
import torch
torch.set_printoptions(precision=10)
w = torch.tensor([0.5, -1.25, 2.0, 0.75], requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
sc = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
xs = [[1, 2, 3, 4], [0.5, -1, 1e35, 2], [1, 1, 1, 1], [-2, 0.25, 0.5, 1], [3, -1, 2, 0.5], [1, 2, -1, -3], [0.1, 0.2, 0.3, 0.4], [1e36, 1, 1, 1], [2, 2, 2, 2]]
c = "--c" in sys.argv
for t, x in enumerate(xs):
    opt.zero_grad()
    loss = (w * torch.tensor(x)).sum() + (w * w).sum()
    sc.scale(loss).backward()
    sc.unscale_(opt)
    g = w.grad.clone()
    sc.step(opt)
    sc.update()
    if c:
        f = lambda v: "INFINITY" if v == float("inf") else float(v).hex()
        print("    {%s, %d, {%s}, {%s}}," % (float(sc.get_scale()).hex(), sc._get_growth_tracker(),
                                         ", ".join(f(v) for v in w.detach()), ", ".join(f(v) for v in g)))
    else:
        print(t, "scale", sc.get_scale(), "tracker", sc._get_growth_tracker(), "w", [float(v) for v in w.detach()], "g", [float(v) for v in g])
