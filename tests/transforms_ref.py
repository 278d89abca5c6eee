"""transforms_ref.py: the reference numbers of tests/test_data.c's random erasing, MixUp and CutMix cases,
made by torchvision itself (0.29) with its random draws replaced by fixed uniforms:
    build/torch-venv/bin/python tests/transforms_ref.py   (a venv with torch and torchvision)
torch.rand / Tensor.uniform_ / torch.randint are patched to hand out the uniforms in order (randint(lo, hi)
as lo + int(u (hi - lo)), as gpudl draws it) and Beta's sample to return a fixed lambda."""
import torch
import torchvision.transforms as T
import torchvision.transforms.v2 as v2

feed = []


def take():
    return feed.pop(0)


real_empty = torch.empty


class FakeEmpty:
    def __init__(self, *a, **k):
        self.t = real_empty(*a, **k)

    def uniform_(self, a, b):
        return self.t.fill_(a + take() * (b - a))

    def normal_(self):
        return self.t.fill_(0.0)


def rand(*a, **k):
    return torch.tensor([take()])


def randint(lo, hi=None, size=None, **k):
    if hi is None:
        lo, hi = 0, lo
    return torch.tensor([lo + int(take() * (hi - lo))])


def erase_case(H, W, p, scale, ratio, us):
    global feed
    feed = list(us)
    img = torch.zeros(1, H, W)
    saved = (torch.empty, torch.rand, torch.randint)
    torch.empty, torch.rand, torch.randint = FakeEmpty, rand, randint
    try:
        out = T.RandomErasing(p=p, scale=scale, ratio=ratio, value=1.0)(img)
    finally:
        torch.empty, torch.rand, torch.randint = saved
    nz = out[0].nonzero()
    if len(nz) == 0:
        return (0, 0, 0, 0)
    i, j = nz.min(0).values.tolist()
    i2, j2 = nz.max(0).values.tolist()
    return (i, j, i2 - i + 1, j2 - j + 1)


def u23(head):
    return head + [0.5] * (23 - len(head))


cases = [
    (28, 28, 0.5, (0.02, 0.33), (0.3, 3.3), u23([0.25, 0.6, 0.3, 0.7, 0.1])),
    (28, 28, 0.5, (0.02, 0.33), (0.3, 3.3), u23([0.75])),  # p not drawn
    (10, 12, 1.0, (0.5, 0.9), (0.3, 3.3), u23([0.0, 0.9, 0.99, 0.2, 0.5, 0.99, 0.999])),  # tries 1 fails
    (8, 8, 1.0, (0.95, 1.0), (2.0, 3.0), u23([0.1] + [0.5] * 22)),  # every try fails
    (32, 20, 0.9, (0.1, 0.2), (0.5, 2.0), u23([0.3, 0.125, 0.625, 0.999, 0.0])),
]
print("/* erase: H, W, p, scale lo, hi, ratio lo, hi, u[0..6] (the rest 0.5), -> top, left, h, w (0 0 0 0: none) */")
for H, W, p, sc, ra, us in cases:
    box = erase_case(H, W, p, sc, ra, us)
    print("{%d, %d, %r, %r, %r, %r, %r, {%s}, {%d, %d, %d, %d}}," % (H, W, p, sc[0], sc[1], ra[0], ra[1],
          ", ".join(repr(u) for u in us[:7]), *box))

# CutMix: box and adjusted lambda for a given lambda and centre
print("/* cutmix: H, W, lam, rx, ry -> x1, y1, x2, y2, lam_adjusted */")
for H, W, lam, rx, ry in [(28, 28, 0.3, 5, 20), (28, 28, 0.9, 27, 0), (10, 16, 0.5, 8, 5), (5, 7, 0.01, 3, 2)]:
    cm = v2.CutMix(alpha=1.0, num_classes=3)
    cm._dist.sample = lambda *a, lam=lam: torch.tensor([lam])
    feed = [(rx + 0.5) / W, (ry + 0.5) / H]
    saved = torch.randint
    torch.randint = randint
    try:
        prm = cm.make_params([torch.zeros(2, 1, H, W)])
    finally:
        torch.randint = saved
    print("{%d, %d, %r, %d, %d, {%d, %d, %d, %d}, %.17g}," % (H, W, lam, rx, ry, *prm["box"], prm["lam_adjusted"]))

# MixUp and CutMix outputs on a fixed batch of 3 samples [1, 4, 4], labels (2, 0, 2), 3 classes
x = torch.arange(48, dtype=torch.float32).reshape(3, 1, 4, 4) / 7.0
y = torch.tensor([2, 0, 2])
mu = v2.MixUp(alpha=1.0, num_classes=3)
mu._dist.sample = lambda *a: torch.tensor([0.3])
xo, yo = mu(x, y)
print("/* mixup lam 0.3 on x = arange(48)/7 as [3,1,4,4], y = (2,0,2): x then y */")
print("{" + ", ".join("%.9g" % v for v in xo.flatten().tolist()) + "}")
print("{" + ", ".join("%.9g" % v for v in yo.flatten().tolist()) + "}")
cm = v2.CutMix(alpha=1.0, num_classes=3)
cm._dist.sample = lambda *a: torch.tensor([0.5])
feed = [(2 + 0.5) / 4, (1 + 0.5) / 4]
saved = torch.randint
torch.randint = randint
try:
    xo, yo = cm(x, y)
finally:
    torch.randint = saved
print("/* cutmix lam 0.5, centre (2, 1), same batch: x then y */")
print("{" + ", ".join("%.9g" % v for v in xo.flatten().tolist()) + "}")
print("{" + ", ".join("%.9g" % v for v in yo.flatten().tolist()) + "}")
