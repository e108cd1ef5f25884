#!/usr/bin/env python3
"""How far 8-bit activations move the golden prompts' logits from the exact forward pass, and
how much that distance varies between implementations that are all correct.

ferry's scalar, AVX2 and AVX-512 levels compute the same Int8 product but round their float
steps (norms, attention, RoPE) in different orders; on a grid of amax / 127 those last-bit
differences flip a few roundings per layer and the flips compound, so each level is one draw
from a spread. This script draws that spread from the NumPy reference (scripts/ref_forward.py,
mode int8 with a relative dither standing in for the rounding-order differences) and prints,
per prompt, the RMS and max distance to the exact logits over the draws: the numbers the
golden test's Int8 bounds (tests/unit/test_golden_model.cpp) are set from.

Usage: activation_noise.py MODEL.gguf [--draws 8] [--dither 1e-6] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_forward  # noqa: E402

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden", "logits")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--dither", type=float, default=1e-6)
    ap.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    a = ap.parse_args()
    index = json.load(open(os.path.join(GOLDEN, "index.json")))
    m = ref_forward.Model(a.model)
    out = []
    for p in index["prompts"]:
        exact = np.fromfile(os.path.join(GOLDEN, p["numpy_file"]), dtype=np.float32)
        rms, mx = [], []
        for seed in range(a.draws):
            got = ref_forward.forward(m, p["ids"], "int8", dither=a.dither, seed=seed)
            d = np.abs(got.astype(np.float64) - exact)
            rms.append(float(np.sqrt(np.mean(d * d))))
            mx.append(float(d.max()))
        out.append({"name": p["name"], "rms": rms, "max_abs": mx})
        if not a.json:
            print(f"{p['name']:16s} rms {min(rms):.3f}-{max(rms):.3f} (mean {np.mean(rms):.3f})"
                  f"  max {min(mx):.3f}-{max(mx):.3f}", flush=True)
    if a.json:
        print(json.dumps({"draws": a.draws, "dither": a.dither, "prompts": out}))
    else:
        means = [np.mean(o["rms"]) for o in out]
        print(f"mean rms over prompts, per draw: "
              f"{min(np.mean([o['rms'][k] for o in out]) for k in range(a.draws)):.3f}-"
              f"{max(np.mean([o['rms'][k] for o in out]) for k in range(a.draws)):.3f}"
              f" (mean {np.mean(means):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
