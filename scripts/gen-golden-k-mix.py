#!/usr/bin/env python3
"""Generate tests/golden/quant/k_mix/expected.json: what llama.cpp's own llama-quantize writes
for small synthetic models (one dense untied, one tied whose 320-wide rows need fallbacks, one
mixture of 8 experts), so `ferry quantize --type q4_k_m / q5_k_m` and the plain types are checked
tensor for tensor and byte for byte against llama.cpp (tests/integration/test_k_mix.py).

Each model is `ferry synth --like CONFIG --type f16` (deterministic: a row depends only on the
seed, the tensor and the row). For each, llama-quantize writes Q4_K_M and Q5_K_M (its mixing
rules) and, with --pure, Q5_0, Q5_1, Q4_K_S and Q5_K_S (one type everywhere, its fallbacks
for rows that do not split into the blocks). The file records every tensor's type and the
first 16 hex digits of its bytes' sha256, and the f16 input's hashes so a changed synth is told apart from a
changed quantizer.

Requirements: gguf==0.19.0 (the tools venv), a built ferry, and llama-quantize built from
llama.cpp's sources (not part of this repository).

Usage:
    scripts/gen-golden-k-mix.py --llama-quantize PATH/llama-quantize [--ferry build/ferry]
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

try:
    from gguf import GGUFReader
except ImportError:
    sys.exit("gen-golden-k-mix.py: needs `pip install gguf==0.19.0`")

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "tests", "golden", "quant", "k_mix")
# llama-quantize's type name -> (ferry's --type, --pure)
FILE_TYPES = {"Q4_K_M": ("q4_k_m", False), "Q5_K_M": ("q5_k_m", False),
              "Q5_0": ("q5_0", True), "Q5_1": ("q5_1", True),
              "Q4_K_S": ("q4_k", True), "Q5_K_S": ("q5_k", True)}


def describe(path):
    r = GGUFReader(path)
    f = r.fields["general.file_type"]
    # "TYPE HASH": the type's name and the first 16 hex digits of the bytes' sha256.
    tensors = {t.name: f"{t.tensor_type.name} {hashlib.sha256(t.data.tobytes()).hexdigest()[:16]}"
               for t in r.tensors}
    return int(f.parts[f.data[0]][0]), tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-quantize", required=True)
    ap.add_argument("--ferry", default=os.path.join(HERE, "..", "build", "ferry"))
    args = ap.parse_args()
    out = {"seed": 0, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for cfg in sorted(f for f in os.listdir(GOLDEN) if f.endswith(".json") and f != "expected.json"):
            name = cfg[:-5]
            src = os.path.join(tmp, name + "-f16.gguf")
            subprocess.run([args.ferry, "synth", src, "--like", os.path.join(GOLDEN, cfg),
                            "--type", "f16", "--seed", "0", "-q"], check=True)
            _, inputs = describe(src)
            model = {"input": inputs, "files": {}}
            for lq_type, (ferry_type, pure) in FILE_TYPES.items():
                dst = os.path.join(tmp, f"{name}-{lq_type}.gguf")
                subprocess.run([args.llama_quantize] + (["--pure"] if pure else []) +
                               [src, dst, lq_type, "2"], check=True, capture_output=True)
                file_type, tensors = describe(dst)
                model["files"][ferry_type] = {"llama_quantize": lq_type + (" --pure" if pure else ""),
                                              "file_type": file_type, "tensors": tensors}
                print(f"{name} {lq_type}: {len(tensors)} tensors")
            out["models"][name] = model
    with open(os.path.join(GOLDEN, "expected.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
