#!/usr/bin/env python3
"""The seed's part 2 (configs/imm-face58.yaml) in PyTorch, as the accuracy peer.

Same data and split (IMM persons 1-32 train / 33-40 validation), same input
(--box image, the default and the shipped recipe: the whole 640x480 photo
resized to 224x224 gray, targets relative to the image size, as the seed
does; --box points: the old optimistic square around the true landmarks'
box, margin 0.15 per side), same
model (the seed's modified VGG), loss (L1 on (p - 112) / 112), optimizer
(AdamW lr 1e-3, wd 1e-5 on conv/linear weights only), schedule (linear
warm-up over 1/100 of training, cosine per iteration), batch 64, 300 epochs,
and geometric augmentation (scale 3/4..4/3, rotation +-10 deg, shift 5 %, flip
0.5 with the IMM-58 re-indexing). RandAugment(2, 7) is applied with its
photometric ops only (torchvision's geometric ops cannot move keypoints);
spry moves points with every op. Prints one JSON line per evaluation and a
final line with mean_px (pixels of the 640x480 image), nme_io, mean_shape_px.

    python3 bench/peers/torch_keypoints.py --data ../shared/data/imm_face_db [--epochs 300]
"""
import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image, ImageEnhance, ImageOps

FLIP_58 = [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 21, 22, 23, 24, 25, 26, 27, 28, 13, 14, 15, 16, 17, 18, 19,
           20, 34, 35, 36, 37, 38, 29, 30, 31, 32, 33, 43, 42, 41, 40, 39, 46, 45, 44, 57, 56, 55, 54, 53, 52, 51,
           50, 49, 48, 47]
LEFT_EYE, RIGHT_EYE = list(range(13, 21)), list(range(21, 29))
S = 224


def load(data):
    items = []
    for dat in sorted(glob.glob(os.path.join(data, "*.dat"))):
        pts = np.loadtxt(dat)[:, 1:3].astype(np.float64)
        person = int(os.path.basename(dat).split("-")[0])
        items.append((dat[:-4] + ".jpg", pts, person))
    return items


BOX = "image"


def crop_rect(pts, size, margin=0.15):
    """The source rectangle (x0, y0, w, h) the network sees: the whole photo,
    or (--box points) the square around the true landmarks plus margin."""
    if BOX == "image":
        return 0.0, 0.0, float(size[0]), float(size[1])
    x0, y0 = pts.min(0)
    x1, y1 = pts.max(0)
    side = max(x1 - x0, y1 - y0) * (1 + 2 * margin)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    return cx - side / 2, cy - side / 2, side, side


def affine_crop(img, sq, mat_out):
    """Resample img (PIL L) so that output pixel u maps to source A^-1 u."""
    inv = np.linalg.inv(np.vstack([mat_out, [0, 0, 1]]))[:2]
    return img.transform((S, S), Image.AFFINE, tuple(inv.flatten()), resample=Image.BILINEAR)


def base_matrix(sq):
    x0, y0, w, h = sq
    rx, ry = S / w, S / h  # source -> crop, pixel centres: u' = (u - x0 + 0.5) r - 0.5
    return np.array([[rx, 0, (0.5 - x0) * rx - 0.5], [0, ry, (0.5 - y0) * ry - 0.5]])


def then(a, b):
    A = np.vstack([a, [0, 0, 1]])
    B = np.vstack([b, [0, 0, 1]])
    return (B @ A)[:2]


def photometric(img, rng, n=2, m=7):
    ops = ["identity", "autocontrast", "equalize", "solarize", "color", "posterize", "contrast", "brightness",
           "sharpness"]
    for _ in range(n):
        op = ops[rng.integers(len(ops))]
        v = m / 30.0
        sign = 1 if rng.random() < 0.5 else -1
        if op == "autocontrast":
            img = ImageOps.autocontrast(img)
        elif op == "equalize":
            img = ImageOps.equalize(img)
        elif op == "solarize":
            img = ImageOps.solarize(img, int(255 - 255 * v))
        elif op == "posterize":
            img = ImageOps.posterize(img, int(8 - 4 * v))
        elif op in ("color", "contrast", "brightness", "sharpness"):
            enh = {"color": ImageEnhance.Color, "contrast": ImageEnhance.Contrast,
                   "brightness": ImageEnhance.Brightness, "sharpness": ImageEnhance.Sharpness}[op]
            img = enh(img).enhance(1 + sign * 0.9 * v)
    return img


class Data(torch.utils.data.Dataset):
    def __init__(self, items, train, seed):
        self.items, self.train, self.seed, self.epoch = items, train, seed, 0
        self.images = [Image.open(p).convert("L") for p, _, _ in items]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        _, pts, _ = self.items[i]
        img = self.images[i]
        sq = crop_rect(pts, img.size)
        m = base_matrix(sq)
        flip = False
        if self.train:
            rng = np.random.default_rng([self.seed, self.epoch, i])
            s = rng.uniform(0.75, 4 / 3)
            a = math.radians(rng.uniform(-10, 10))
            tx, ty = rng.uniform(-0.05, 0.05, 2) * S
            c = (S - 1) / 2
            rot = np.array([[s * math.cos(a), -s * math.sin(a), 0], [s * math.sin(a), s * math.cos(a), 0]])
            m = then(m, np.array([[1, 0, -c], [0, 1, -c]]))
            m = then(m, rot)
            m = then(m, np.array([[1, 0, c + tx], [0, 1, c + ty]]))
            flip = rng.random() < 0.5
            if flip:
                m = then(m, np.array([[-1, 0, S - 1], [0, 1, 0]]))
        out = affine_crop(img, sq, m)
        p = (np.hstack([pts, np.ones((len(pts), 1))]) @ m.T)
        if flip:
            p = p[FLIP_58]
        if self.train:
            out = photometric(out, np.random.default_rng([self.seed, self.epoch, i, 7]))
        x = torch.from_numpy(np.asarray(out, dtype=np.uint8).copy())[None]
        return x, torch.from_numpy(((p - S / 2) / (S / 2)).astype(np.float32)), i


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class VGG(nn.Module):
    def __init__(self, k):
        super().__init__()
        chans, blocks, cin, layers = [8, 16, 32, 64, 128], [1, 1, 2, 2, 2], 1, []
        for c, b in zip(chans, blocks):
            layers += [Block(cin, c, 2)] + [Block(c, c, 1) for _ in range(b - 1)]
            cin = c
        self.features = nn.Sequential(*layers)
        self.fc1, self.bn1, self.fc2, self.k = nn.Linear(6272, 1024), nn.BatchNorm1d(1024), nn.Linear(1024, 2 * k), k

    def forward(self, x):
        x = self.features(x).flatten(1)
        return self.fc2(F.relu(self.bn1(self.fc1(x)))).view(-1, self.k, 2)


def metrics(pred_px, gt_px):
    err = np.linalg.norm(pred_px - gt_px, axis=2).mean(1)
    out = []
    for g, e in zip(gt_px, err):
        lc, rc = g[LEFT_EYE].mean(0), g[RIGHT_EYE].mean(0)
        lo = g[LEFT_EYE][np.argmax(np.linalg.norm(g[LEFT_EYE] - rc, axis=1))]
        ro = g[RIGHT_EYE][np.argmax(np.linalg.norm(g[RIGHT_EYE] - lc, axis=1))]
        out.append(e / np.linalg.norm(lo - ro))
    return float(err.mean()), float(np.mean(out))


def evaluate(model, loader, items, norm):
    model.eval()
    preds, gts = [], []
    with torch.no_grad():
        for x, _, idx in loader:
            u = model((x.float() / 255 - norm[0]) / norm[1]).numpy()
            for j, i in enumerate(idx.tolist()):
                sq = crop_rect(items[i][1], loader.dataset.images[i].size)
                r = np.array(sq[2:]) / S
                p = u[j] * (S / 2) + S / 2
                preds.append((p + 0.5) * r - 0.5 + np.array(sq[:2]))
                gts.append(items[i][1])
    model.train()
    return metrics(np.array(preds), np.array(gts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--box", choices=["image", "points"], default="image")
    a = ap.parse_args()
    global BOX
    BOX = a.box
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    items = load(a.data)
    train = [t for t in items if t[2] <= 32]
    val = [t for t in items if t[2] > 32]
    norm = (0.5, 0.25)  # spry's default normalisation of x/255
    tr = Data(train, True, a.seed)
    loader = torch.utils.data.DataLoader(tr, batch_size=a.batch, shuffle=True, drop_last=True,
                                         num_workers=a.workers, persistent_workers=a.workers > 0)
    vl = torch.utils.data.DataLoader(Data(val, False, a.seed), batch_size=a.batch)
    model = VGG(58)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    other = [p for n, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 1e-5}, {"params": other, "weight_decay": 0}], lr=1e-3)
    steps_per_epoch = len(loader)
    total = a.epochs * steps_per_epoch
    warm = max(1, round(0.01 * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm))))
    # The floor: the training mean shape (in crop coordinates) placed in every validation crop.
    mean_u = np.mean([((np.hstack([p, np.ones((58, 1))]) @ base_matrix(crop_rect(p, im.size)).T) - S / 2) / (S / 2)
                      for (_, p, _), im in zip(train, tr.images)], axis=0)
    base = []
    for (_, p, _), im in zip(val, vl.dataset.images):
        sq = crop_rect(p, im.size)
        q = (mean_u * (S / 2) + S / 2 + 0.5) * (np.array(sq[2:]) / S) - 0.5 + np.array(sq[:2])
        base.append(np.linalg.norm(q - p, axis=1).mean())
    t0 = time.time()
    for epoch in range(a.epochs):
        tr.epoch = epoch
        for x, t, _ in loader:
            loss = F.l1_loss(model((x.float() / 255 - norm[0]) / norm[1]), t)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        if (epoch + 1) % a.eval_every == 0 or epoch + 1 == a.epochs:
            px, nme = evaluate(model, vl, val, norm)
            print(json.dumps({"peer": "pytorch", "epoch": epoch + 1, "train_loss": loss.item(), "val_mean_px": px,
                              "val_nme_io": nme, "elapsed_s": time.time() - t0}), flush=True)
    px, nme = evaluate(model, vl, val, norm)
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "box": BOX, "epochs": a.epochs, "mean_px": px, "nme_io": nme,
                      "mean_shape_px": float(np.mean(base)), "train_s": time.time() - t0}))


if __name__ == "__main__":
    sys.exit(main())
