#!/usr/bin/env python3
"""PyTorch peer of `spry bench train`: the same model, shapes, loss and
optimizer (AdamW), timed the same way (median step over --steps after
--warmup), printed as the same JSON fields.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000 \
      python3 bench/peers/torch_train.py --model vgg-face --batch 64 --threads 2 --dtype f32

Best settings, as the issue asks: torch.set_num_threads(T); three variants
are timed (--variants): eager NCHW, eager channels_last and torch.compile
(inductor) on channels_last, and the fastest is reported (field "layout";
"variants" gives each one's images/s; a variant that fails is reported with
its error and skipped). bf16 is autocast (fp32 master weights). The tuned
malloc environment must be set by the caller (bench/run_train.sh does).

Models: vgg-face (the seed's VGG, 1x224x224, 58 keypoints x 2, L1 loss),
resnet50 (torchvision, 3x224x224, 1000 classes, cross-entropy),
resunet18 / resunet50 (torchvision ResNet encoder + 5-stage U-Net decoder +
68 heatmaps + soft-argmax, L1 loss; the plain torchvision encoder: spry's
resunet50 adds the seed's C/D/stem-conv/BlurPool switches, see README_train),
tsm-r50 / tsn-r50 (torchvision ResNet-50 on every frame, TSM's residual shift
of 1/8 + 1/8 channels before each block's first conv, average consensus over
--segments frames, 400 classes; --batch counts clips, images/s counts frames).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def vgg_face(keypoints, h, w):
    layers, cin = [], 1
    for out, blocks in zip([8, 16, 32, 64, 128], [1, 1, 2, 2, 2]):
        for b in range(blocks):
            layers += [nn.Conv2d(cin, out, 3, 2 if b == 0 else 1, 1, bias=False), nn.BatchNorm2d(out), nn.ReLU()]
            cin = out
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(128 * (h // 32) * (w // 32), 1024), nn.BatchNorm1d(1024), nn.ReLU(),
                         nn.Linear(1024, keypoints * 2))


class Bottleneck(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        mid = cout // 4
        self.body = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                                  nn.Conv2d(mid, mid, 3, 1, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                                  nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))
                      if cin != cout else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.short(x))


class ResUNet(nn.Module):
    def __init__(self, depth, keypoints):
        super().__init__()
        import torchvision
        r = getattr(torchvision.models, "resnet%d" % depth)()
        self.stem = nn.Sequential(r.conv1, r.bn1, r.relu)
        self.pool, self.layers = r.maxpool, nn.ModuleList([r.layer1, r.layer2, r.layer3, r.layer4])
        enc = [64, 256, 512, 1024, 2048] if depth == 50 else [64, 64, 128, 256, 512]
        dec = [512, 256, 128, 64, 32] if depth == 50 else [256, 128, 64, 32, 32]
        skips = [enc[3], enc[2], enc[1], enc[0], 0]
        self.up, self.block, cin = nn.ModuleList(), nn.ModuleList(), enc[4]
        for out, skip in zip(dec, skips):
            self.up.append(nn.Sequential(nn.ConvTranspose2d(cin, out, 2, 2, bias=False), nn.BatchNorm2d(out), nn.ReLU()))
            self.block.append(Bottleneck(out + skip, out))
            cin = out
        self.head = nn.Conv2d(cin, keypoints, 1)

    def forward(self, x):
        feats = [self.stem(x)]
        y = self.pool(feats[0])
        for layer in self.layers:
            y = layer(y)
            feats.append(y)
        skips = [feats[3], feats[2], feats[1], feats[0], None]
        for up, block, skip in zip(self.up, self.block, skips):
            y = up(y)
            y = block(torch.cat([y, skip], 1) if skip is not None else y)
        h = self.head(y).float()
        n, k, hh, ww = h.shape
        p = F.softmax(h.reshape(n, k, -1), -1).reshape(n, k, hh, ww)
        xs = torch.arange(ww, dtype=p.dtype)
        ys = torch.arange(hh, dtype=p.dtype)
        return torch.stack([(p.sum(2) * xs).sum(-1), (p.sum(3) * ys).sum(-1)], -1)


class TemporalShift(nn.Module):
    """TSM's shift on [N*T, C, H, W]: channels [0, C/8) take frame t+1, the
    next C/8 take frame t-1 (zeros at the clip ends), the rest stay."""

    def __init__(self, segments):
        super().__init__()
        self.t = segments

    def forward(self, x):
        nt, c, h, w = x.shape
        x = x.view(nt // self.t, self.t, c, h, w)
        f = c // 8
        out = torch.zeros_like(x)
        out[:, :-1, :f] = x[:, 1:, :f]
        out[:, 1:, f:2 * f] = x[:, :-1, f:2 * f]
        out[:, :, 2 * f:] = x[:, :, 2 * f:]
        return out.view(nt, c, h, w)


class TSN(nn.Module):
    def __init__(self, depth, segments, shift):
        super().__init__()
        import torchvision
        self.net, self.t = getattr(torchvision.models, "resnet%d" % depth)(num_classes=400), segments
        if shift:
            for layer in [self.net.layer1, self.net.layer2, self.net.layer3, self.net.layer4]:
                for b in layer:
                    b.conv1 = nn.Sequential(TemporalShift(segments), b.conv1)

    def forward(self, x):
        y = self.net(x)
        return y.view(-1, self.t, y.shape[-1]).mean(1)


def build(name, keypoints, h, w, segments=8):
    import torchvision
    if name in ("tsm-r50", "tsn-r50", "tsm-r18", "tsn-r18"):
        return TSN(int(name[5:]), segments, name.startswith("tsm")), 3, "clips"
    if name == "vgg-face":
        return vgg_face(58 if keypoints is None else keypoints, h, w), 1, "points"
    if name.startswith("resunet"):
        return ResUNet(int(name[7:]), 68 if keypoints is None else keypoints), 3, "points"
    if name.startswith("resnet"):
        return getattr(torchvision.models, name)(), 3, "classes"
    sys.exit("unknown model " + name)


def flops_per_step(model, x, unit=1):
    """3 x forward multiply-adds x 2 of conv, transposed conv and linear layers (as spry's plan); the
    model runs once on `unit` rows of x (a clip's frames for video models)."""
    total = [0]

    def hook(m, inp, out):
        if isinstance(m, nn.Conv2d):
            total[0] += 2 * out.numel() * m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
        elif isinstance(m, nn.ConvTranspose2d):
            total[0] += 2 * inp[0].numel() * m.out_channels * m.kernel_size[0] * m.kernel_size[1]
        elif isinstance(m, nn.Linear):
            total[0] += 2 * out.numel() * m.in_features

    hs = [m.register_forward_hook(hook) for m in model.modules()]
    with torch.no_grad():
        model.eval()
        model(x[:unit])
        model.train()
    for h in hs:
        h.remove()
    return 3 * total[0] * x.shape[0] // unit


def time_steps(step, steps, warmup):
    times = []
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        step()
        if s >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(args, variant):
    torch.manual_seed(0)
    h, w = args.size
    model, channels, kind = build(args.model, args.keypoints, h, w, args.segments)
    batch = args.batch
    frames = batch * args.segments if kind == "clips" else batch
    x = torch.rand(frames, channels, h, w) * 2 - 1
    fl = flops_per_step(model, x, args.segments if kind == "clips" else 1) / (3 if args.infer else 1)
    if variant in ("channels_last", "compile"):
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    target = (torch.randint(0, 1000, (batch,)) if kind == "classes"
              else torch.randint(0, 400, (batch,)) if kind == "clips"
              else torch.rand(batch, 58 if args.model == "vgg-face" else 68, 2) * 2 - 1)
    kind = "classes" if kind == "clips" else kind
    fwd = torch.compile(model) if variant == "compile" else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    bf16 = args.dtype == "bf16"

    def loss_of():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = fwd(x)
            if args.model == "vgg-face":
                out = out.reshape(batch, -1, 2)
            out = out.float()
        return F.cross_entropy(out, target) if kind == "classes" else F.l1_loss(out, target)

    def train_step():
        opt.zero_grad(set_to_none=True)
        loss_of().backward()
        opt.step()

    def infer_step():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            fwd(x)

    if args.infer:
        model.eval()
    t = time_steps(infer_step if args.infer else train_step, args.steps, args.warmup)
    return {"bench": "infer" if args.infer else "train", "model": args.model,
            "backend": "torch-%s" % torch.__version__, "dtype": args.dtype, "batch": batch, "threads": args.threads,
            "size": "%dx%d" % (h, w), "steps": args.steps, "layout": variant, "images_per_s": frames / t,
            "ms_per_step": 1e3 * t, "gflops_per_s": fl / t * 1e-9}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vgg-face")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--size", default="224x224")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--keypoints", type=int, default=None)
    ap.add_argument("--segments", type=int, default=8, help="frames per clip (tsm-/tsn- models)")
    ap.add_argument("--infer", action="store_true", help="forward only (no_grad, eval mode) at --batch")
    ap.add_argument("--variants", default="nchw,channels_last,compile",
                    help="comma-separated: nchw, channels_last (eager), compile (torch.compile, channels_last)")
    args = ap.parse_args()
    s = args.size.split("x")
    args.size = (int(s[0]), int(s[-1]))
    torch.set_num_threads(args.threads)
    results, each = [], {}
    for v in args.variants.split(","):
        try:
            r = run(args, v)
            results.append(r)
            each[v] = round(r["images_per_s"], 3)
        except Exception as e:  # e.g. inductor without a C++ compiler: report it, keep the others
            each[v] = "failed: %s" % str(e).splitlines()[0][:200] if str(e) else "failed"
            print("# variant %s failed: %s" % (v, e), file=sys.stderr)
    if not results:
        sys.exit("no variant ran")
    best = max(results, key=lambda r: r["images_per_s"])
    best["variants"] = each
    print(json.dumps(best))


if __name__ == "__main__":
    main()
