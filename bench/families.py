#!/usr/bin/env python3
"""Each family at a realistic size, ferry against llama.cpp on the same file and threads.

    bench/families.py --llama-bench PATH/llama-bench [--ferry build/ferry] [-t 2] [-p 128]
                      [-n 64] [-r 3] [--type q4_0] [--only NAME ...] [--json]

`ferry synth` writes each model once (random weights, the real shapes; cached under
$FERRY_HOME/synth), then `ferry bench decode --json` and llama.cpp's `llama-bench -o json` run it
alternately, two rounds (A B A B), so drifting load hits both alike. Printed: prefill and decode
tokens/s of each, the median of the rounds, and ferry / llama.cpp. Both decode from the prompt's
depth (llama-bench `-d`). llama-bench is not built here:
pass a binary built from llama.cpp's sources.

The models: Qwen2.5-0.5B and Llama-3.2-1B whole; Qwen3-30B-A3B (128 experts, 8 per token),
Mixtral-8x7B (8 experts, 2 per token) and Qwen1.5-MoE-A2.7B (60 experts, 4 per token, and a
shared expert behind its gate) cut to a few layers at their real expert shapes, so a
mixture's decode step reads what the real one's does per layer. A mixture's prefill depends on
how its tokens spread over the experts: both tools prefill seeded random token ids.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from llamacpp_common import llama_bench, synth_model

MODELS = [  # name, preset, layers (0: all)
    ("qwen2.5-0.5b", "qwen2.5-0.5b", 0),
    ("llama-3.2-1b", "llama-3.2-1b", 0),
    ("qwen3-30b-a3b-8l", "qwen3-30b-a3b", 8),
    ("mixtral-8x7b-2l", "mixtral-8x7b", 2),
    ("qwen1.5-moe-a2.7b-4l", "qwen1.5-moe-a2.7b", 4),
]


def run_ferry(ferry, path, a):
    out = subprocess.run([ferry, "bench", "decode", "-m", path, "-p", str(a.prompt), "-n",
                          str(a.gen), "-r", str(a.repeats), "-t", str(a.threads), "--json"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    return j["prefill_tokens_per_s"], j["decode_tokens_per_s"], j.get("experts")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--ferry", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                    "ferry"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", "--prompt", type=int, default=128)
    ap.add_argument("-n", "--gen", type=int, default=64)
    ap.add_argument("-r", "--repeats", type=int, default=3)
    ap.add_argument("--type", default="q4_0")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    home = os.environ.get("FERRY_HOME", os.path.expanduser("~/.cache/ferry"))
    cache = os.path.join(home, "synth")

    results = []
    for name, preset, layers in MODELS:
        if a.only and name not in a.only:
            continue
        path = synth_model(a.ferry, cache, preset, layers, a.type)
        f_pp, f_tg, l_pp, l_tg, experts = [], [], [], [], None
        for _ in range(2):
            pp, tg, experts = run_ferry(a.ferry, path, a)
            f_pp.append(pp)
            f_tg.append(tg)
            pp, tg, _ = llama_bench(a.llama_bench, path, a.prompt, a.gen, a.threads, a.repeats)
            l_pp.append(pp)
            l_tg.append(tg)
            print(f"{name}: ferry {f_pp[-1]:.1f} / {f_tg[-1]:.1f}, llama.cpp {l_pp[-1]:.1f} / "
                  f"{l_tg[-1]:.1f} tok/s (prefill / decode)", file=sys.stderr)
        r = {"model": name, "preset": preset, "layers": layers or "all", "type": a.type,
             "threads": a.threads, "prompt_tokens": a.prompt, "gen_tokens": a.gen,
             "ferry_prefill": statistics.median(f_pp), "ferry_decode": statistics.median(f_tg),
             "llama_cpp_prefill": statistics.median(l_pp),
             "llama_cpp_decode": statistics.median(l_tg)}
        r["prefill_ratio"] = r["ferry_prefill"] / r["llama_cpp_prefill"]
        r["decode_ratio"] = r["ferry_decode"] / r["llama_cpp_decode"]
        if experts:
            r["expert_imbalance"] = experts["imbalance"]
        results.append(r)

    if a.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'model':<20} {'prefill ferry':>14} {'llama.cpp':>10} {'ratio':>6}   "
          f"{'decode ferry':>13} {'llama.cpp':>10} {'ratio':>6}")
    for r in results:
        print(f"{r['model']:<20} {r['ferry_prefill']:>14.1f} {r['llama_cpp_prefill']:>10.1f} "
              f"{r['prefill_ratio']:>5.2f}x   {r['ferry_decode']:>13.1f} "
              f"{r['llama_cpp_decode']:>10.1f} {r['decode_ratio']:>5.2f}x")


if __name__ == "__main__":
    main()
