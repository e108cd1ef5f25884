#!/usr/bin/env python3
"""Issue 18's GPU check, the half that runs on the GPU machine: `scripts/gpu-check.sh run` calls it
from the repository root, where `scripts/gpu-check.sh stage` left .gpu-check/ (the binaries, built
on a machine with nvcc, and the default model cut to its first two layers).

One run, bounded by GPU_CHECK_BUDGET_S seconds (default 460, within the 8 minutes the issue gives
it): a section that would not fit in what is left is skipped and says so. It prints one JSON
object last (also written to $OUT/gpu-check.json, with every command's log under $OUT/logs):

  - tests: every GPU test (the backend's ops, the model on the GPU against the CPU's float path,
    graphs on against off, 32 concurrent requests against one at a time), from gtest's JSON;
  - real_model: the cut default model on the GPU and on the CPU's float path: the largest logit
    difference, greedy texts, each KV cache type, seeded draws on the device and on the host,
    graphs on and off;
  - perf: a synthetic model with Llama-3.1-8B's shapes (`ferry synth` here: Q4_0, BF16, then Q8_0
    and FP8 as time allows): decode tok/s at batch 1, 8, 32 and 128, prefill tok/s at 512 and 2048
    tokens, the bytes a decode step reads against the probed and the nominal HBM bandwidth, CUDA
    graphs on against off;
  - baseline: the same shapes through PyTorch / transformers (BF16 `generate`, static cache), the
    runtime a user would otherwise have there.

Plain python3 and the machine's own torch / transformers; nothing to install. To rehearse the
script where there is no GPU, GPU_CHECK_DEVICE=cpu GPU_CHECK_SHAPE=smollm2-135m run the perf
section's commands on the CPU and a small shape (the GPU-only parts then fail or are skipped).
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time

DIR = ".gpu-check"
# Unpacked outside the carried folder, which must stay within the 64 MiB a check carries.
BIN = "/tmp/gpu-check-bin"
BUDGET = float(os.environ.get("GPU_CHECK_BUDGET_S", "460"))
T0 = time.monotonic()
OUT = os.environ.get("OUT") or "/tmp/gpu-check"
LOGS = os.path.join(OUT, "logs")
# Nominal HBM read bandwidth by card name (datasheets), for the roofline fraction beside the
# probed one.
NOMINAL_TBS = [("H200", 4.8), ("H100 NVL", 3.9), ("H100 PCIe", 2.0), ("H100", 3.35),
               ("A100", 2.0), ("L40S", 0.864), ("L4", 0.3)]
# The baseline's shapes by GPU_CHECK_SHAPE (the small one for rehearsals).
TORCH_SHAPES = {
    "llama-3.1-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                     "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
                     "max_position_embeddings": 8192},
    "smollm2-135m": {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                     "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
                     "rope_theta": 100000.0, "rms_norm_eps": 1e-5,
                     "max_position_embeddings": 8192},
}

DEVICE = os.environ.get("GPU_CHECK_DEVICE", "cuda")
SHAPE = os.environ.get("GPU_CHECK_SHAPE", "llama-3.1-8b")

report = {"budget_s": BUDGET, "sections": {}}


def left():
    return BUDGET - (time.monotonic() - T0)


def env(ours):
    """The environment of a command; ours (ferry's binaries): with the libraries staged beside
    them, which must not reach the machine's own torch or compute-sanitizer's host process."""
    e = dict(os.environ)
    if ours:
        e["LD_LIBRARY_PATH"] = os.path.join(BIN, "lib") + (
            ":" + e["LD_LIBRARY_PATH"] if e.get("LD_LIBRARY_PATH") else "")
    e["FERRY_SOURCE_DIR"] = os.getcwd()
    e["FERRY_REQUIRE_CUDA"] = "1"
    e["FERRY_CUDA_TEST_MODEL"] = os.path.join(os.getcwd(), DIR, "real.gguf")
    return e


def sh(name, args, timeout, extra_env=None):
    """Runs a command (bounded by timeout and what is left of the budget); its log under LOGS.
    Returns (rc, stdout); rc 124 on a timeout."""
    timeout = max(1.0, min(timeout, left()))
    args = [str(a) for a in args]
    e = env(any(a.startswith(BIN) for a in args))
    e.update(extra_env or {})
    t = time.monotonic()
    # Its own process group, so a timeout also ends what it started (compute-sanitizer's
    # ferry_tests), which would otherwise keep the GPU busy under the next section's numbers.
    try:
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e,
                             start_new_session=True)
    except OSError as x:  # no such program (nvidia-smi on a machine without the driver)
        with open(os.path.join(LOGS, name + ".log"), "w") as f:
            f.write(f"$ {' '.join(args)}\n{x}\n")
        return 127, ""
    try:
        out_b, err_b = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        out_b, err_b = p.communicate()
        rc = 124
    out = out_b.decode(errors="replace")
    err = err_b.decode(errors="replace")
    with open(os.path.join(LOGS, name + ".log"), "w") as f:
        f.write(f"$ {' '.join(map(str, args))}\nrc {rc}, {time.monotonic() - t:.1f} s\n")
        f.write("--- stdout\n" + out + "\n--- stderr\n" + err)
    return rc, out


def ferry(name, *args, timeout=120, extra_env=None):
    return sh(name, [os.path.join(BIN, "ferry"), *args], timeout, extra_env)


def json_of(rc, out):
    if rc != 0:
        return None
    try:
        return json.loads(out)
    except ValueError:
        return None


def section(name, cost_s):
    """Runs fn as a section if cost_s fits in what is left; records its result or why not."""
    def wrap(fn):
        t = time.monotonic()
        if left() < cost_s:
            report["sections"][name] = {"skipped": f"{left():.0f} s left, needs ~{cost_s} s"}
            return
        try:
            result = fn() or {}
        except Exception as x:  # a section's failure is reported, the others still run
            result = {"error": f"{type(x).__name__}: {x}"}
        result["seconds"] = round(time.monotonic() - t, 1)
        report["sections"][name] = result
    return wrap


def setup():
    shutil.rmtree(BIN, ignore_errors=True)
    with tarfile.open(os.path.join(DIR, "bin.tar.xz")) as tf:
        try:
            tf.extractall(BIN, filter="data")
        except TypeError:  # a Python without extraction filters
            tf.extractall(BIN)
    rc, out = sh("nvidia-smi", ["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                "--format=csv,noheader"], 30)
    name = out.strip().splitlines()[0] if rc == 0 and out.strip() else ""
    report["gpu"] = name
    report["nominal_hbm_tbs"] = next((tbs for key, tbs in NOMINAL_TBS if key in name), None)
    return {"gpu": name}


def tests():
    gtest_json = os.path.join(OUT, "gtest.json")
    rc, out = sh("gtest", [os.path.join(BIN, "ferry_tests"),
                           "--gtest_filter=Levels/BackendOps.*/cuda:CudaModel.*:LaunchQueue*:"
                           "GraphCache*", f"--gtest_output=json:{gtest_json}"], 200)
    res = {"rc": rc, "passed": 0, "failed": [], "skipped": []}
    try:
        with open(gtest_json) as f:
            g = json.load(f)
        for suite in g.get("testsuites", []):
            for t in suite.get("testsuite", []):
                full = f"{suite['name']}.{t['name']}"
                if t.get("failures"):
                    res["n_failed"] = res.get("n_failed", 0) + 1
                    if len(res["failed"]) < 12:  # the first ones say enough; the log has all
                        res["failed"].append(
                            {full: [x.get("failure", "")[:400] for x in t["failures"]]})
                elif t.get("result") == "SKIPPED":
                    res["skipped"].append(full)
                else:
                    res["passed"] += 1
    except (OSError, ValueError) as x:
        res["error"] = f"no gtest JSON: {x}"
    # What the model tests print: the logit difference against the CPU, the graph counts, the
    # engine's parted texts.
    res["printed"] = [l for l in out.splitlines() if l.startswith("[ cuda")]
    return res


def memcheck():
    tool = shutil.which("compute-sanitizer") or next(
        iter(sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer") +
                    glob.glob("/usr/local/cuda*/compute-sanitizer/compute-sanitizer"))), None)
    if not tool:
        return {"skipped": "compute-sanitizer not found"}
    rc, out = sh("memcheck", [tool, "--tool", "memcheck", "--error-exitcode", "3",
                              os.path.join(BIN, "ferry_tests"),
                              "--gtest_filter=Levels/BackendOps.*/cuda"], 70)
    errors = [l for l in out.splitlines() if "=========" in l][:20]
    # A run cut by its bound found nothing in what it ran, which is not "clean".
    return {"rc": rc, "errors": errors, "clean": None if rc == 124 and not errors else rc == 0}


def same(a, b):
    """Two texts equal, neither a failure (two failed runs must not compare equal)."""
    return a == b and bool(a) and not a.startswith("<rc")


def real_model():
    real = os.path.join(DIR, "real.gguf")
    prompts = ["The capital of France is", "def fibonacci(n):", "Once upon a time,"]
    res = {"greedy_equal": [], "kv": {}, "texts": {}}
    hung = []

    def run(tag, *args):
        # A GPU path that hangs once would take every later run's time too: after one timeout
        # the GPU runs are not started again.
        if "cuda" in args and hung:
            return "<rc skipped: an earlier GPU run timed out>"
        rc, out = ferry(f"run-{tag}", "run", "-m", real, *args, "--no-stats", timeout=20)
        if rc == 124 and "cuda" in args:
            hung.append(tag)
        return out if rc == 0 else f"<rc {rc}>"

    for i, p in enumerate(prompts):
        g = run(f"greedy{i}-cuda", "--device", "cuda", "-p", p, "-n", "32", "--temperature", "0")
        c = run(f"greedy{i}-cpu", "--device", "cpu", "--activations", "f32", "-p", p, "-n", "32",
                "--temperature", "0")
        res["greedy_equal"].append(same(g, c))
        res["texts"][p] = {"cuda": g, "cpu_f32": c}
    for kv in ("int8", "fp8"):
        g = run(f"kv-{kv}-cuda", "--device", "cuda", "--kv-dtype", kv, "-p", prompts[0], "-n",
                "32", "--temperature", "0")
        c = run(f"kv-{kv}-cpu", "--device", "cpu", "--activations", "f32", "--kv-dtype", kv, "-p",
                prompts[0], "-n", "32", "--temperature", "0")
        res["kv"][kv] = {"equal": same(g, c), "cuda": g, "cpu_f32": c}
    draw = ["-p", prompts[2], "-n", "48", "--temperature", "0.9", "--top-k", "40", "--top-p",
            "0.9", "--min-p", "0.02", "--repeat-penalty", "1.2", "--seed", "7"]
    d = run("draw-device", "--device", "cuda", "--sample-on", "device", *draw)
    h = run("draw-host", "--device", "cuda", "--sample-on", "host", *draw)
    res["seeded_draw_device_equals_host"] = same(d, h)
    on = run("graphs-on", "--device", "cuda", "--cuda-graphs", "on", "-p", prompts[1], "-n", "200",
             "--temperature", "0")
    off = run("graphs-off", "--device", "cuda", "--cuda-graphs", "off", "-p", prompts[1], "-n",
              "200", "--temperature", "0")
    res["graphs_on_equals_off"] = same(on, off)
    rc, out = ferry("plan", "plan", "-m", real, "--device", "cuda", timeout=60)
    res["plan_rc"] = rc
    return res


def decode_row(j, nominal_tbs):
    """bench decode's JSON cut to what the table needs, with the nominal roofline fraction."""
    if not j or not j.get("decode_tokens_per_s") or not j.get("weight_bytes_per_token"):
        return j and {"incomplete": sorted(j)[:20]}
    kv_read = j.get("kv_bytes_read_per_token", 0.0)
    bytes_per_token = j["weight_bytes_per_token"] + kv_read
    row = {k: j.get(k) for k in ("prefill_tokens_per_s", "decode_tokens_per_s", "ttft_ms",
                                  "tpot_ms", "read_bandwidth_gbs", "roofline_fraction",
                                  "roofline_with_kv_fraction", "weight_bytes_per_token",
                                  "cuda_graphs")}
    row["achieved_gbs"] = bytes_per_token * j["decode_tokens_per_s"] / 1e9
    if nominal_tbs:
        row["nominal_hbm_fraction"] = row["achieved_gbs"] / (nominal_tbs * 1000)
    return row


def perf_type(typ, nominal):
    """One weight type of the 8B shape: synthesized, measured, deleted (whatever happens)."""
    model = os.path.join("/tmp", f"llama8b.{typ}.gguf")
    r = {}
    try:
        t = time.monotonic()
        rc, _ = ferry(f"synth-{typ}", "synth", model, "--like", SHAPE, "--type", typ,
                      "--tokenizer-from", os.path.join(DIR, "real.gguf"), "-q", timeout=150)
        r["synth_s"] = round(time.monotonic() - t, 1)
        if rc != 0:
            r["error"] = f"synth rc {rc}"
            return r
        bench = ["bench", "decode", "-m", model, "--device", DEVICE, "-r", "1", "--json"]
        r["batch1_p512_n128"] = decode_row(json_of(*ferry(
            f"decode-{typ}", *bench, "-p", "512", "-n", "128", timeout=120)), nominal)
        if typ not in ("q4_0", "bf16"):
            return r
        if DEVICE == "cuda":
            r["graphs_off_batch1_p512_n128"] = decode_row(json_of(*ferry(
                f"decode-{typ}-nographs", *bench, "-p", "512", "-n", "128", "--cuda-graphs", "off",
                timeout=120)), nominal)
        r["prefill_2048"] = decode_row(json_of(*ferry(
            f"prefill2048-{typ}", *bench, "-p", "2048", "-n", "2", timeout=90)), nominal)
        r["batches"] = {}
        for b in (8, 32, 128):
            if left() < 40:
                r["batches"][b] = {"skipped": f"{left():.0f} s left"}
                continue
            j = json_of(*ferry(f"batch{b}-{typ}", "bench", "throughput", "-m", model, "--device",
                               DEVICE, "--num-prompts", str(b), "--max-num-seqs", str(b),
                               "--input-len", "128", "--output-len", "64", "--json", timeout=90))
            r["batches"][b] = j and {k: j.get(k) for k in (
                "output_tokens_per_s", "total_tokens_per_s", "mean_batch_size", "tpot_ms",
                "ttft_ms")}
        return r
    finally:
        try:
            os.remove(model)
        except OSError:
            pass


def perf(types):
    def run():
        res = {"shape": SHAPE, "device": DEVICE, "types": {}}
        nominal = report.get("nominal_hbm_tbs")
        for typ, cost in types:
            if left() < cost:
                res["types"][typ] = {"skipped": f"{left():.0f} s left"}
                continue
            try:
                res["types"][typ] = perf_type(typ, nominal)
            except Exception as x:  # one type's failure leaves the others' figures
                res["types"][typ] = {"error": f"{type(x).__name__}: {x}"}
        q = res["types"].get("q4_0") or {}
        on = q.get("batch1_p512_n128") or {}
        off = q.get("graphs_off_batch1_p512_n128") or {}
        if on.get("decode_tokens_per_s") and off.get("decode_tokens_per_s"):
            res["graphs_speedup_q4_0_batch1"] = (on["decode_tokens_per_s"] /
                                                 off["decode_tokens_per_s"])
        b128 = (q.get("batches") or {}).get(128) or {}
        if on.get("decode_tokens_per_s") and b128.get("output_tokens_per_s"):
            res["batch128_over_batch1"] = b128["output_tokens_per_s"] / on["decode_tokens_per_s"]
        return res
    return run


def torch_baseline():
    rc, out = sh("torch-baseline", [sys.executable, __file__, "torch-baseline"], 150)
    j = json_of(rc, out.strip().splitlines()[-1] if out.strip() else "")
    return j or {"rc": rc, "error": "see logs/torch-baseline.log"}


def torch_baseline_main():
    """The same 8B shapes in BF16 through transformers' generate with a static cache: batch 1 and
    8, a 512-token prompt, 128 new tokens; decode tok/s from 129 new tokens less 1."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    dev = "cuda" if DEVICE == "cuda" else "cpu"
    cfg = LlamaConfig(**TORCH_SHAPES[SHAPE])
    torch.set_default_dtype(torch.bfloat16)  # built in BF16 directly: 16 GB, not 32 first
    with torch.device(dev):
        model = LlamaForCausalLM(cfg).eval()
    res = {"torch": torch.__version__, "shape": SHAPE, "device": dev}

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    try:
        import transformers
        res["transformers"] = transformers.__version__
    except Exception:
        pass
    for batch in (1, 8):
        ids = torch.randint(0, cfg.vocab_size, (batch, 512), device=dev)
        mask = torch.ones_like(ids)

        def timed(n):
            sync()
            t = time.perf_counter()
            # Eager (no torch.compile: it needs Python.h and minutes here): the runtime a user
            # gets from a plain generate() call.
            model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, cache_implementation="static", disable_compile=True,
                           pad_token_id=0)
            sync()
            return time.perf_counter() - t

        timed(129)  # warm-up at the measured length: kernels, a static cache of that size
        t1, t129 = timed(1), timed(129)
        res[f"batch{batch}"] = {"prefill_512_s": t1,
                                "decode_tokens_per_s": batch * 128 / (t129 - t1)}
    print(json.dumps(res))


def compact(r):
    """The report within the device tool's 12,000-character output tail: the texts and the
    failure details go (the file in $OUT keeps them)."""
    text = json.dumps(r, separators=(",", ":"))
    if len(text) <= 11000:
        return text
    r = json.loads(text)
    rm = r["sections"].get("real_model", {})
    rm.pop("texts", None)
    for kv in rm.get("kv", {}).values():
        kv.pop("cuda", None), kv.pop("cpu_f32", None)
    t = r["sections"].get("tests", {})
    t["failed"] = [next(iter(f)) for f in t.get("failed", [])]
    return json.dumps(r, separators=(",", ":"))


def main():
    os.makedirs(LOGS, exist_ok=True)
    # Correct first: the tests, the real model and memcheck (kernels that never ran before: out of
    # bounds, misaligned, races on shared memory); then the speed, the main types before the
    # baseline and the baseline before the other types.
    for name, cost, fn in (("setup", 10, setup), ("tests", 60, tests),
                           ("real_model", 30, real_model), ("memcheck", 40, memcheck),
                           ("perf", 150, perf((("q4_0", 150), ("bf16", 120)))),
                           ("torch_baseline", 60, torch_baseline),
                           ("perf_more", 70, perf((("q8_0", 70), ("fp8", 70))))):
        section(name, cost)(fn)
    s = report["sections"]
    t = s.get("tests", {})
    rm = s.get("real_model", {})
    report["checks"] = {
        "gpu_tests_pass": t.get("rc") == 0 and not t.get("failed") and t.get("passed", 0) > 0,
        "greedy_gpu_equals_cpu_f32": bool(rm.get("greedy_equal")) and all(rm["greedy_equal"]),
        "seeded_draw_device_equals_host": rm.get("seeded_draw_device_equals_host"),
        "graphs_on_equals_off": rm.get("graphs_on_equals_off"),
        "memcheck_clean": s.get("memcheck", {}).get("clean"),
    }
    report["elapsed_s"] = round(time.monotonic() - T0, 1)
    with open(os.path.join(OUT, "gpu-check.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(compact(report))
    return 0 if report["checks"]["gpu_tests_pass"] else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["torch-baseline"]:
        torch_baseline_main()
    else:
        sys.exit(main())
