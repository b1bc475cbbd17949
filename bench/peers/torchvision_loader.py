#!/usr/bin/env python3
"""The torchvision equivalent of `spry bench data`, on the same files.

Two pipelines, DataLoader with the same workers and batch:
  decode     PIL decode of the JPEG, face crop (same square box as spry),
             RandomResizedCrop-style zoom to SIZE, flip, RandAugment(2, 7),
             ToTensor, Normalize
  preloaded  the face crops decoded once and kept in RAM as uint8 tensors;
             per sample: RandomResizedCrop-style zoom, flip, RandAugment(2, 7)
             on the uint8 tensor, then float conversion and Normalize
Prints one JSON line per pipeline with "peer":"torchvision" (median of runs).
"""
import argparse
import glob
import json
import os
import statistics
import time

import torch
import torchvision
from PIL import Image
from torchvision import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def face_box(dat_path, margin=0.25):
    """Square crop around the points' bounding box, as spry's cache does."""
    pts = [tuple(map(float, l.split()[1:3])) for l in open(dat_path) if l.strip()]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    cx, cy = (min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2
    side = max(max(xs) - min(xs), max(ys) - min(ys)) * (1 + 2 * margin)
    return (int(cx - side / 2), int(cy - side / 2), int(cx + side / 2), int(cy + side / 2))


class JpegFaces(torch.utils.data.Dataset):
    def __init__(self, items, size):
        self.items = items
        self.tf = T.Compose([
            T.RandomResizedCrop(size, scale=(0.5625, 1.0), ratio=(1.0, 1.0)),
            T.RandomHorizontalFlip(),
            T.RandAugment(2, 7),
            T.ToTensor(),
            T.Normalize(MEAN, STD),
        ])

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, box = self.items[i]
        img = Image.open(path).convert("RGB").crop(box)
        return self.tf(img)


class PreloadedFaces(torch.utils.data.Dataset):
    def __init__(self, tensors, size):
        self.x = tensors
        self.tf = T.Compose([
            T.RandomResizedCrop(size, scale=(0.5625, 1.0), ratio=(1.0, 1.0)),
            T.RandomHorizontalFlip(),
            T.RandAugment(2, 7),
            T.ConvertImageDtype(torch.float32),
            T.Normalize(MEAN, STD),
        ])

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.tf(self.x[i])


def rate(ds, workers, batch, images):
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                     persistent_workers=workers > 0, drop_last=False)
    done, t0 = 0, time.perf_counter()
    while done < images:
        for b in dl:
            done += b.shape[0]
            if done >= images:
                break
    return done / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", required=True, help="IMM-style folder: *.jpg + *.dat")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--images", type=int, default=1024)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dats = sorted(glob.glob(os.path.join(a.dataset, "*.dat")))
    items = [(d[:-4] + ".jpg", face_box(d)) for d in dats]
    tag = {"peer": "torchvision", "torch": torch.__version__, "torchvision": torchvision.__version__}

    jp = JpegFaces(items, a.size)
    rate(jp, a.workers, a.batch, a.batch)  # warm-up: worker start, file cache
    r = statistics.median(rate(jp, a.workers, a.batch, a.images) for _ in range(a.runs))
    print(json.dumps({"bench": "data", "stage": "decode", "workers": a.workers, "batch": a.batch,
                      "size": a.size, "images_per_s": round(r, 1), **tag}), flush=True)

    # Preload: decode + crop + resize once (like spry's cache), uint8 CHW tensors.
    pre = [T.functional.pil_to_tensor(Image.open(p).convert("RGB").crop(b).resize((a.size, a.size)))
           for p, b in items]
    pd = PreloadedFaces(pre, a.size)
    rate(pd, a.workers, a.batch, a.batch)
    r = statistics.median(rate(pd, a.workers, a.batch, a.images) for _ in range(a.runs))
    print(json.dumps({"bench": "data", "stage": "preloaded", "workers": a.workers, "batch": a.batch,
                      "size": a.size, "images_per_s": round(r, 1), **tag}), flush=True)


if __name__ == "__main__":
    main()
