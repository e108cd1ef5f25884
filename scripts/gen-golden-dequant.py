#!/usr/bin/env python3
"""Generate tests/golden/dequant/: raw blocks and the float32 values gguf-py dequantizes them to.

gguf-py is an implementation independent of ferry's (numpy, written by the llama.cpp authors),
so ferry's scalar dequantizers are tested against it rather than against themselves.

Requirements (pinned so the golden files are reproducible):
    pip install gguf==0.19.0 numpy

Usage:
    scripts/gen-golden-dequant.py [--model PATH] [--out tests/golden/dequant]

Output: for every case NAME, NAME.bin (raw bytes as stored in a GGUF file) and NAME.f32
(little-endian float32 values), listed in index.json. Cases from the real model store only the
expected values; the test reads the raw rows from the model itself.
"""

import argparse
import importlib.metadata
import json
import os
import sys

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import dequantize
except ImportError:
    sys.exit("gen-golden-dequant.py: needs `pip install gguf==0.19.0 numpy`")

SEED = 20240601

# type -> (block elements, block bytes, byte offsets of the fp16 scale fields in a block)
BLOCK_FORMATS = {
    Q.Q4_0: (32, 18, [0]),
    Q.Q4_1: (32, 20, [0, 2]),
    Q.Q8_0: (32, 34, [0]),
    Q.Q4_K: (256, 144, [0, 2]),
    Q.Q6_K: (256, 210, [208]),
    # Appended, so the cases above draw the same random numbers as before.
    Q.Q5_0: (32, 22, [0]),
    Q.Q5_1: (32, 24, [0, 2]),
    Q.Q5_K: (256, 176, [0, 2]),
}

F16_SPECIALS = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
                0x7E00, 0xFE00, 0x7C01, 0x7FFF, 0x3C00, 0xBC00, 0x3555, 0x0200]
BF16_SPECIALS = [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80,
                 0x7FC0, 0xFFC0, 0x7F81, 0x7FFF, 0x3F80, 0xBF80, 0x3EAB, 0x0040]

# fp16 bit patterns for the edge-case blocks: zero, max finite, -max, smallest subnormal, inf.
EDGE_SCALES = [0x0000, 0x7BFF, 0xFBFF, 0x0001, 0x7C00]


def fp16_bits(values):
    return np.asarray(values, dtype=np.float32).astype(np.float16).view(np.uint16)


def quant_blocks(rng, qtype):
    """Random blocks with sane scales, then one block per edge-case scale."""
    _, nbytes, scale_offsets = BLOCK_FORMATS[qtype]
    n_random = 8
    blocks = rng.integers(0, 256, size=(n_random + len(EDGE_SCALES), nbytes), dtype=np.uint8)
    for off in scale_offsets:
        sane = fp16_bits(rng.normal(0.0, 0.02, size=n_random))
        blocks[:n_random, off:off + 2] = sane.view(np.uint8).reshape(-1, 2)
        for k, bits in enumerate(EDGE_SCALES):
            blocks[n_random + k, off:off + 2] = np.array([bits], dtype=np.uint16).view(np.uint8)
    return blocks.reshape(-1)


def half_words(rng, specials):
    words = np.concatenate([np.array(specials, dtype=np.uint16),
                            rng.integers(0, 1 << 16, size=238, dtype=np.uint16)])
    return words.view(np.uint8)


def write_case(out_dir, index, name, qtype, raw, values, extra=None):
    values = np.ascontiguousarray(values, dtype="<f4").reshape(-1)
    entry = {"name": name, "type": qtype.name.lower(), "type_id": int(qtype),
             "n": int(values.size), "values": name + ".f32"}
    if raw is not None:
        raw.astype(np.uint8).tofile(os.path.join(out_dir, name + ".bin"))
        entry["raw"] = name + ".bin"
    values.tofile(os.path.join(out_dir, name + ".f32"))
    entry.update(extra or {})
    index.append(entry)


def model_cases(out_dir, index, model_path):
    reader = gguf.GGUFReader(model_path)
    for tname in ("blk.0.attn_q.weight", "token_embd.weight"):
        t = next(t for t in reader.tensors if t.name == tname)
        rows = np.asarray(t.data)[:2]  # quantized tensors come as (rows, row bytes) of uint8
        values = dequantize(rows, t.tensor_type)
        write_case(out_dir, index, "model_" + tname.replace(".", "_"), t.tensor_type, None,
                   values, {"tensor": tname, "rows": 2})


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_model = os.path.join(os.environ.get("HOME", "/root"), ".cache/ferry/models",
                                 "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.environ.get("FERRY_MODEL", default_model))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "golden", "dequant"))
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    index = []
    for qtype, specials in ((Q.F16, F16_SPECIALS), (Q.BF16, BF16_SPECIALS)):
        raw = half_words(rng, specials)
        write_case(args.out, index, qtype.name.lower(), qtype, raw, dequantize(raw, qtype))
    for qtype in BLOCK_FORMATS:
        raw = quant_blocks(rng, qtype)
        with np.errstate(all="ignore"):  # inf scales give inf/NaN on purpose
            values = dequantize(raw, qtype)
        write_case(args.out, index, qtype.name.lower(), qtype, raw, values)
    if os.path.exists(args.model):
        model_cases(args.out, index, args.model)
    else:
        print(f"note: {args.model} not found; skipping the real-model cases", file=sys.stderr)

    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump({"generator": "scripts/gen-golden-dequant.py", "gguf": importlib.metadata.version("gguf"), "seed": SEED,
                   "cases": index}, f, indent=1)
        f.write("\n")
    print(f"wrote {len(index)} cases to {os.path.normpath(args.out)}")


if __name__ == "__main__":
    main()
