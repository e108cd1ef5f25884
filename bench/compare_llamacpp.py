"""ferry vs llama.cpp on one model file, alternating A B A B.

Called by bench/compare-llamacpp.sh. ferry's numbers come from `ferry bench decode --json`;
llama.cpp's from llama-cpp-python's eval calls (in the bench venv) or, with --llama-bench, from
llama.cpp's native `llama-bench`: prefill of the prompt from an empty cache (`pp P`) and decode
at the depth ferry decodes at, after the prompt (`tg N @ dP`), because llama-bench's plain `tg`
starts from an empty cache and is faster than decode after a long prompt. Both run the same
prompt length, generation length and threads. With --like PRESET the models are ferry synth's
(random weights, the preset's shapes), written once per type under CACHE/synth.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

from llamacpp_common import llama_bench, synth_model

llama_cpp = None  # imported only when llama-cpp-python measures llama.cpp

FTYPES = {"q8_0": 7, "f16": 1}  # llama_ftype: MOSTLY_Q8_0, MOSTLY_F16
PROMPT_TEXT = "The quick brown fox jumps over the lazy dog while the engine measures itself. "


def variant(ferry, model, wtype, cache):
    """The model file for weight type wtype, quantized on first use with llama.cpp's own tool
    (llama-cpp-python), or with `ferry quantize` when llama.cpp is measured by llama-bench
    without its Python binding (both engines then read the same file either way)."""
    if wtype == "q4_1":
        return model
    base = os.path.basename(model).rsplit(".", 2)[0]
    out = os.path.join(cache, "models", f"{base}.{wtype.upper()}.gguf")
    if not os.path.exists(out) and llama_cpp is None:
        subprocess.run([ferry, "quantize", model, out, "--type", wtype, "-q"], check=True)
    if not os.path.exists(out):
        # The source is Q4_1, so this is a requantization (allow_requantize): the Q8_0/F16 file
        # holds the Q4_1 values exactly (F16) or nearly (Q8_0) at the larger size, which is
        # what a bandwidth comparison needs.
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = FTYPES[wtype]
        params.allow_requantize = True
        params.nthread = os.cpu_count() or 1
        tmp = out + ".tmp"
        rc = llama_cpp.llama_model_quantize(model.encode(), tmp.encode(), ctypes.byref(params))
        if rc != 0:
            sys.exit(f"llama_model_quantize to {wtype} failed ({rc})")
        os.replace(tmp, out)
    return out


def run_ferry(ferry, model, prompt, gen, threads):
    cmd = [ferry, "bench", "decode", "-m", model, "-p", str(prompt), "-n", str(gen),
           "-t", str(threads), "-r", "1", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    return j["prefill_tokens_per_s"], j["decode_tokens_per_s"], j


class LlamaBenchRunner:
    """llama.cpp's own llama-bench (llamacpp_common.llama_bench), one repetition a run."""

    def __init__(self, bench, model, prompt, gen, threads):
        self.args = (bench, model, prompt, gen, threads, 1)
        self.version = None
        self.run()  # warm-up

    def run(self):
        pp, tg, self.version = llama_bench(*self.args)
        return pp, tg


class LlamaRunner:
    def __init__(self, model, prompt, gen, threads):
        self.llm = llama_cpp.Llama(model_path=model, n_ctx=prompt + gen + 8, n_batch=prompt + gen + 8,
                                   n_ubatch=prompt + gen + 8, n_threads=threads,
                                   n_threads_batch=threads, logits_all=False, verbose=False)
        base = self.llm.tokenize(PROMPT_TEXT.encode(), add_bos=False)
        self.tokens = [base[i % len(base)] for i in range(prompt)]
        self.gen = gen
        self.run()  # warm-up, as ferry's bench does

    def run(self):
        # Wall clock around llama.cpp's own eval calls (its perf counters are off by default in
        # llama-cpp-python); the Python argmax per token is ~20 us, noise at these rates.
        llm = self.llm
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(self.tokens)
        t1 = time.perf_counter()
        tok = int(llm.scores[llm.n_tokens - 1].argmax())
        t2 = time.perf_counter()
        for _ in range(self.gen - 1):
            llm.eval([tok])
            tok = int(llm.scores[llm.n_tokens - 1].argmax())
        t3 = time.perf_counter()
        # Same convention as ferry: decode rate over the tokens after the first.
        return len(self.tokens) / (t1 - t0), (self.gen - 1) / (t3 - t2)


def main():
    global llama_cpp
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--model")
    ap.add_argument("--like", help="a ferry synth preset instead of --model")
    ap.add_argument("--layers", type=int, default=0, help="with --like: cut to this many layers")
    ap.add_argument("--llama-bench", help="llama.cpp's native llama-bench instead of llama-cpp-python")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--types", default="q4_1 q8_0 f16")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/ferry"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not a.model and not a.like:
        sys.exit("compare_llamacpp.py: --model or --like")
    if a.model == "default":  # what ferry's -m default means, for llama.cpp too
        a.model = os.path.join(a.cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not a.llama_bench:
        import llama_cpp as lc
        llama_cpp = lc
    engine = "llama-bench" if a.llama_bench else f"llama-cpp-python {llama_cpp.__version__}"

    results = []
    for wtype in a.types.split():
        model = (synth_model(a.ferry, os.path.join(a.cache, "synth"), a.like, a.layers, wtype)
                 if a.like else variant(a.ferry, a.model, wtype, a.cache))
        llama = (LlamaBenchRunner(a.llama_bench, model, a.prompt, a.gen, a.threads)
                 if a.llama_bench else LlamaRunner(model, a.prompt, a.gen, a.threads))
        run_ferry(a.ferry, model, a.prompt, a.gen, a.threads)  # warm the page cache
        fp, fd, lp, ld, bws = [], [], [], [], []
        extra = {}
        for i in range(a.repeats):
            p, d, extra = run_ferry(a.ferry, model, a.prompt, a.gen, a.threads)
            fp.append(p), fd.append(d), bws.append(extra.get("read_bandwidth_gbs") or 0)
            p, d = llama.run()
            lp.append(p), ld.append(d)
            print(f"  {wtype} run {i + 1}/{a.repeats}: ferry {fp[-1]:.0f}/{fd[-1]:.1f}  "
                  f"llama.cpp {lp[-1]:.0f}/{ld[-1]:.1f} tok/s (prefill/decode)", file=sys.stderr)
        version = getattr(llama, "version", None)
        del llama
        med = statistics.median
        results.append({
            "weight_type": wtype, "model": model, "like": a.like, "threads": a.threads,
            "llama_cpp": engine + (f" {version}" if version else ""),
            # Both engines decode after the prompt: the context depth the decode starts at.
            "decode_depth": a.prompt,
            "prompt_tokens": a.prompt, "gen_tokens": a.gen, "repeats": a.repeats,
            "ferry_prefill_tokens_per_s": med(fp), "ferry_decode_tokens_per_s": med(fd),
            "llamacpp_prefill_tokens_per_s": med(lp), "llamacpp_decode_tokens_per_s": med(ld),
            "prefill_ratio": med(fp) / med(lp) if med(lp) else None,
            "decode_ratio": med(fd) / med(ld) if med(ld) else None,
            # The roofline from the median of every run's bandwidth probes: one probe on a
            # shared machine can read well above or below what the runs around it saw.
            "ferry_roofline_fraction": (med(fd) / (med(bws) * 1e9 / extra["weight_bytes_per_token"])
                                        if med(bws) else None),
            # Decode also reads the KV cache at the mean context: at long prompts that is the
            # fair bound (ferry's own `bench decode` prints both).
            "ferry_roofline_with_kv_fraction": (
                med(fd) / (med(bws) * 1e9 / (extra["weight_bytes_per_token"] +
                                              extra.get("kv_bytes_read_per_token", 0)))
                if med(bws) else None),
            "read_bandwidth_gbs": med(bws),
            "weight_bytes_per_token": extra.get("weight_bytes_per_token"),
            "kv_bytes_read_per_token": extra.get("kv_bytes_read_per_token"),
            "ferry_runs": {"prefill": fp, "decode": fd}, "llamacpp_runs": {"prefill": lp, "decode": ld},
        })

    if a.json:
        print(json.dumps({"llama_cpp": results[0]["llama_cpp"] if results else engine,
                          "results": results}, indent=2))
        return
    print(f"{results[0]['llama_cpp'] if results else engine}; {a.like or a.model}; {a.prompt} "
          f"prompt tokens, {a.gen} generated (decode from depth {a.prompt} in both), "
          f"{a.threads} threads, median of {a.repeats} alternating runs (tok/s)")
    print(f"{'type':6} {'ferry pp':>9} {'llama pp':>9} {'ratio':>6} | {'ferry tg':>9} {'llama tg':>9} "
          f"{'ratio':>6} | {'roofline':>8} {'+KV':>5} {'GB/s':>5}")
    for r in results:
        print(f"{r['weight_type']:6} {r['ferry_prefill_tokens_per_s']:9.1f} "
              f"{r['llamacpp_prefill_tokens_per_s']:9.1f} {r['prefill_ratio']:6.2f} | "
              f"{r['ferry_decode_tokens_per_s']:9.1f} {r['llamacpp_decode_tokens_per_s']:9.1f} "
              f"{r['decode_ratio']:6.2f} | {100 * (r['ferry_roofline_fraction'] or 0):7.0f}% "
              f"{100 * (r['ferry_roofline_with_kv_fraction'] or 0):4.0f}% "
              f"{r['read_bandwidth_gbs']:5.1f}")


if __name__ == "__main__":
    main()
