#!/usr/bin/env python3
"""Generate tests/golden/quant/: float inputs and the bytes reference quantizers make of them.

Two independent references, so ferry's quantizers (src/quant/quantize.cpp) are not tested
against themselves:
  * gguf-py 0.19.0 (numpy, by the llama.cpp authors): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, F16, BF16;
  * ggml itself, when --ggml-lib names a libggml-base.so (e.g. the one llama-cpp-python
    ships): quantize_row_{q8_0,q4_0,q4_1,q5_0,q5_1,q4_K,q5_K,q6_K}_ref through ctypes. gguf-py
    cannot quantize the k-quants, so Q4_K, Q5_K and Q6_K golden files exist only when this is
    given.

Requirements (pinned so the golden files are reproducible):
    pip install gguf==0.19.0 numpy        # optionally llama-cpp-python for --ggml-lib

Usage:
    scripts/gen-golden-quant.py [--ggml-lib PATH/libggml-base.so] [--out tests/golden/quant]

Output: CASE.f32 (little-endian float32 input) and CASE.TYPE.SOURCE.bin (the quantized
bytes), all listed in index.json.
"""

import argparse
import ctypes
import importlib.metadata
import json
import os
import sys

import numpy as np

try:
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import quantize
except ImportError:
    sys.exit("gen-golden-quant.py: needs `pip install gguf==0.19.0 numpy`")

SEED = 20241106
N = 1024  # four k-quant super-blocks, 32 legacy blocks


def cases(rng):
    gauss = rng.standard_normal(N).astype(np.float32) * 0.02
    heavy = (rng.standard_t(2.0, N) * 0.01).astype(np.float32)
    # All-zero groups next to a lone outlier and small values: the edge cases of scale picking.
    edge = (rng.standard_normal(N) * 0.001).astype(np.float32)
    edge[0:64] = 0.0
    edge[256:512] = 0.0
    edge[300] = 3.5
    edge[700] = -12.0
    edge[800:832] = 1.0  # a constant block
    return {"gauss": gauss, "heavy": heavy, "edge": edge}


GGUF_TYPES = {"q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "q4_1": Q.Q4_1, "q5_0": Q.Q5_0, "q5_1": Q.Q5_1,
              "f16": Q.F16, "bf16": Q.BF16}
GGML_FUNCS = {"q8_0": ("quantize_row_q8_0_ref", 32, 34), "q4_0": ("quantize_row_q4_0_ref", 32, 18),
              "q4_1": ("quantize_row_q4_1_ref", 32, 20), "q4_k": ("quantize_row_q4_K_ref", 256, 144),
              "q6_k": ("quantize_row_q6_K_ref", 256, 210),
              "q5_0": ("quantize_row_q5_0_ref", 32, 22), "q5_1": ("quantize_row_q5_1_ref", 32, 24),
              "q5_k": ("quantize_row_q5_K_ref", 256, 176)}


def ggml_quantize(lib, name, x):
    fn, block, nbytes = GGML_FUNCS[name]
    f = getattr(lib, fn)
    f.restype = None
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    out = np.zeros(len(x) // block * nbytes, dtype=np.uint8)
    x = np.ascontiguousarray(x, dtype=np.float32)
    f(x.ctypes.data, out.ctypes.data, len(x))
    return out.tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "golden", "quant"))
    ap.add_argument("--ggml-lib", help="path to libggml-base.so for the ggml reference")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lib = ctypes.CDLL(args.ggml_lib) if args.ggml_lib else None

    index = {"gguf_py_version": importlib.metadata.version("gguf"), "seed": SEED, "n": N,
             "ggml_lib": os.path.basename(args.ggml_lib) if args.ggml_lib else None, "cases": []}
    for cname, x in cases(np.random.default_rng(SEED)).items():
        x.astype("<f4").tofile(os.path.join(args.out, f"{cname}.f32"))
        for tname, qt in GGUF_TYPES.items():
            fname = f"{cname}.{tname}.gguf-py.bin"
            with open(os.path.join(args.out, fname), "wb") as f:
                f.write(quantize(x.reshape(-1, N), qt).tobytes())
            index["cases"].append({"input": f"{cname}.f32", "type": tname, "source": "gguf-py", "file": fname})
        if lib:
            for tname in GGML_FUNCS:
                fname = f"{cname}.{tname}.ggml.bin"
                with open(os.path.join(args.out, fname), "wb") as f:
                    f.write(ggml_quantize(lib, tname, x))
                index["cases"].append({"input": f"{cname}.f32", "type": tname, "source": "ggml", "file": fname})
    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    print(f"wrote {len(index['cases'])} cases to {args.out}")


if __name__ == "__main__":
    main()
