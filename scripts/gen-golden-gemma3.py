#!/usr/bin/env python3
"""Writes tests/golden/gemma3/golden.json: the real Gemma 3 270M (Q4_K_M GGUF,
scripts/get-model.sh gemma3-270m) as two implementations ferry did not write compute it.

    python3 scripts/gen-golden-gemma3.py [--model PATH] [--libllama PATH/libllama.so]

  llama_cpp     llama.cpp through its C API (scripts/llama_cpp_capi.py): its tokenization of
                every text, the last position's logits and a 32-token greedy continuation
                (each step a fresh context over the whole sequence).
  transformers  transformers' Gemma3ForCausalLM loaded from the same GGUF (gguf-py dequantizes
                every tensor to float32; its Gemma processor undoes GGUF's 1 + w norms), run in
                float32: the exact float reference of the quantized model. Its last logits and
                generate(do_sample=False) for 32 tokens on llama.cpp's ids.

The last text is longer than the model's 512-token sliding window, so the interleaved local and
global layers (and their two rope bases) are both exercised. Logits are kept for the 64 tokens
llama.cpp ranks highest (the vocabulary is 262144), indices and both references' values.

Needs torch, transformers, gguf, numpy (a venv: pip install torch transformers gguf).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers

from llama_cpp_capi import LlamaCpp, find_libllama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "golden", "gemma3")
N_GREEDY = 32
TOP = 64


def long_text():
    with open(os.path.join(ROOT, "data", "calib", "default.txt"), encoding="utf-8") as f:
        words = f.read().split()
    return " ".join(words[:520])


TEXTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "<start_of_turn>user\nName three colours of the rainbow.<end_of_turn>\n<start_of_turn>model\n",
]


def main():
    here = os.path.join(os.environ.get("HOME", "/root"), ".cache/ferry/models",
                        "gemma-3-270m-q4_k_m.gguf")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=here)
    ap.add_argument("--libllama", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    lc = LlamaCpp(find_libllama(args.libllama), args.model)
    d, f = os.path.split(args.model)
    tf = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    tf.eval()
    cases = []
    for text in TEXTS + [long_text()]:
        ids = lc.tokenize(text.encode(), True, True)
        lg = lc.last_logits(ids)
        top = [int(i) for i in np.argsort(-lg, kind="stable")[:TOP]]
        greedy_lc = []
        seq = list(ids)
        for _ in range(N_GREEDY):
            nxt = int(np.argmax(lc.last_logits(seq)))
            greedy_lc.append(nxt)
            seq.append(nxt)
        with torch.no_grad():
            x = torch.tensor([ids])
            tl = tf(x).logits[0, -1].double().numpy()
            out = tf.generate(x, max_new_tokens=N_GREEDY, do_sample=False, min_new_tokens=N_GREEDY)
        greedy_tf = [int(t) for t in out[0, len(ids):]]
        same = next((i for i, (a, b) in enumerate(zip(greedy_lc, greedy_tf)) if a != b), N_GREEDY)
        print(f"{len(ids):4d} tokens: llama.cpp vs transformers max |diff| over top {TOP} "
              f"{np.max(np.abs(lg[top] - tl[top])):.4f}, greedy agree for {same} tokens",
              file=sys.stderr)
        cases.append({
            "text": text, "ids": ids, "top": top,
            "llama_cpp_logits": [round(float(lg[i]), 5) for i in top],
            "transformers_logits": [round(float(tl[i]), 5) for i in top],
            "llama_cpp_greedy": greedy_lc, "transformers_greedy": greedy_tf,
        })
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "golden.json"), "w") as fh:
        json.dump({"generator": "scripts/gen-golden-gemma3.py", "model": os.path.basename(args.model),
                   "transformers": transformers.__version__, "torch": torch.__version__,
                   "cases": cases}, fh, indent=1)
        fh.write("\n")
    lc.close()


if __name__ == "__main__":
    main()
