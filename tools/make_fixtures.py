#!/usr/bin/env python3
"""Regenerates every PyTorch fixture under tests/fixtures (dev-time only).

Needs PyTorch (Debian `python3-torch` or `pip install torch`) and numpy:
    python3 tools/make_fixtures.py            # all groups
    python3 tools/make_fixtures.py conv pool  # some groups
Each tools/fixtures/<group>.py has make(outdir). Tests never run Python.
"""
import importlib
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

GROUPS = ["conv", "pool", "head", "optim", "models", "resnet"]


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    groups = sys.argv[1:] or GROUPS
    out = os.path.join(ROOT, "tests", "fixtures")
    for name in groups:
        path = os.path.join(HERE, "fixtures", name + ".py")
        if not os.path.exists(path):
            print(f"skip {name}: {path} not written yet")
            continue
        mod = importlib.import_module("fixtures." + name)
        mod.make(out)
        print(f"wrote fixtures for {name}")


if __name__ == "__main__":
    main()
