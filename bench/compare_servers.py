#!/usr/bin/env python3
"""One load, several OpenAI-compatible servers (bench/compare-servers.sh sets up llama.cpp's).

Each server runs alone on the machine: started, warmed with a few requests, loaded by
`ferry bench serve` at every rate in turn, stopped. Rounds alternate the order (A B C, C B A)
so a drift in the machine's speed falls on every server alike; each figure is the median over
the rounds. Same model file, threads and concurrency (slots) everywhere.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=600):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not ready after {timeout} s")


def server_cmd(kind, a, model, port):
    if kind == "ferry":
        return [a.ferry, "serve", "-m", model, "--host", "127.0.0.1", "--port", str(port),
                "-t", str(a.threads), "--max-num-seqs", str(a.slots), "--ctx", str(a.ctx)]
    if kind == "llama-server":
        # Continuous batching over --parallel slots, each with its share of the context.
        return [a.llama_server, "-m", model, "--host", "127.0.0.1", "--port", str(port),
                "-t", str(a.threads), "-tb", str(a.threads), "-np", str(a.slots),
                "-c", str(a.ctx * a.slots), "--cont-batching", "--jinja"]
    if kind == "llama-cpp-python":
        # One request at a time: the Python server serialises generation behind a lock, and by
        # default a new request interrupts the running one (its stream ends at once), so it is
        # told to queue them instead.
        return [a.llama_python, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
                "--port", str(port), "--n_threads", str(a.threads), "--n_threads_batch",
                str(a.threads), "--n_ctx", str(a.ctx), "--interrupt_requests", "False"]
    raise ValueError(kind)


def bench(a, url, rates, label, extra_seed=0):
    cmd = [a.ferry, "bench", "serve", "--base-url", url, "--num-prompts", str(a.num_prompts),
           "--request-rate", ",".join(rates), "--max-concurrency", str(a.max_concurrency),
           "--seed", str(a.seed + extra_seed), "--label", label, "--timeout", str(a.timeout),
           "--json"]
    if a.endpoint:
        cmd += ["--endpoint", a.endpoint]
    if label == "llama-cpp-python":  # no ignore_eos there: it fixes lengths with min_tokens
        cmd += ["--min-tokens"]
    if a.dataset:
        cmd += ["--dataset", a.dataset]
    else:
        cmd += ["--input-len", *a.input_len.split("-"), "--output-len", *a.output_len.split("-")]
    if a.shared_prefix_len:
        cmd += ["--shared-prefix-len", str(a.shared_prefix_len)]
    if a.slo_ttft_ms:
        cmd += ["--slo-ttft-ms", str(a.slo_ttft_ms)]
    if a.slo_tpot_ms:
        cmd += ["--slo-tpot-ms", str(a.slo_tpot_ms)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.stderr.strip():
        log("  " + r.stderr.strip().replace("\n", "\n  "))
    if not r.stdout.strip():
        raise RuntimeError(f"bench serve gave no JSON (exit {r.returncode})")
    j = json.loads(r.stdout)
    return j["runs"] if "runs" in j else [j]


def run_server(kind, a, model, rates, round_no):
    port = free_port()
    cmd = server_cmd(kind, a, model, port)
    log(f"[round {round_no}] {kind}: {' '.join(cmd)}")
    out = open(os.path.join(a.workdir, f"{kind}-{round_no}.log"), "w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc)
        # Warm-up: first requests pay one-off costs (page faults, JIT of templates).
        warm = argparse.Namespace(**{**vars(a), "num_prompts": min(4, a.num_prompts),
                                     "shared_prefix_len": 0, "slo_ttft_ms": 0, "slo_tpot_ms": 0})
        bench(warm, url, ["inf"], kind, extra_seed=1000)
        runs = bench(a, url, rates, kind)
        for r in runs:
            r.pop("requests", None)
            log(f"  {kind} @ {r['request_rate']}: {r['output_throughput']:.1f} out tok/s, "
                f"TTFT p50 {r['ttft_ms']['p50']:.0f} p99 {r['ttft_ms']['p99']:.0f} ms, "
                f"TPOT p99 {r['tpot_ms']['p99']:.1f} ms, {r['failed']} failed")
        return runs
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.close()


def median_runs(rounds):
    """Per rate, the median over rounds of each figure the table shows."""
    out = []
    for per_rate in zip(*rounds):
        m = dict(per_rate[0])
        for key in ("output_throughput", "request_throughput", "goodput"):
            m[key] = statistics.median(r[key] for r in per_rate)
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            m[key] = {p: statistics.median(r[key][p] for r in per_rate) for p in per_rate[0][key]}
        m["failed"] = sum(r["failed"] for r in per_rate)
        m["rounds"] = [{k: r[k] for k in ("output_throughput", "ttft_ms", "tpot_ms", "goodput")}
                       for r in per_rate]
        out.append(m)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--llama-python", default="")
    ap.add_argument("-m", "--model", action="append", default=[],
                    help="GGUF file(s); default: the default model")
    ap.add_argument("-t", "--threads", type=int, default=0, help="default: physical cores")
    ap.add_argument("--slots", type=int, default=16, help="sequences each server runs at once")
    ap.add_argument("--ctx", type=int, default=2048, help="context per sequence")
    ap.add_argument("--rates", default="1 2 4 inf")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--max-concurrency", type=int, default=64)
    ap.add_argument("--dataset", default="")
    ap.add_argument("--endpoint", default="", help="completions or chat (bench serve's default)")
    ap.add_argument("--input-len", default="50-400")
    ap.add_argument("--output-len", default="32-160")
    ap.add_argument("--shared-prefix-len", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--servers", default="ferry llama-server llama-cpp-python")
    ap.add_argument("--slo-ttft-ms", type=float, default=0)
    ap.add_argument("--slo-tpot-ms", type=float, default=0)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ferry", default="")
    ap.add_argument("--llama-server", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--plot", default="")
    a = ap.parse_args()

    a.ferry = a.ferry or os.path.join(a.root, "build", "ferry")
    if not os.access(a.ferry, os.X_OK):
        sys.exit(f"ferry binary not found at {a.ferry} (build it or pass --ferry)")
    if not a.threads:
        cores = subprocess.run(["lscpu", "-p=CORE"], capture_output=True, text=True).stdout
        a.threads = len({line for line in cores.splitlines() if not line.startswith("#")}) or 1
    servers = a.servers.split()
    a.llama_server = a.llama_server or shutil.which("llama-server") or ""
    if "llama-server" in servers and not a.llama_server:
        log("no llama-server on PATH (or --llama-server): leaving it out")
        servers.remove("llama-server")
    if "llama-cpp-python" in servers and not a.llama_python:
        sys.exit("llama-cpp-python: no venv python (run through bench/compare-servers.sh)")
    models = a.model or [os.path.join(a.cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")]
    rates = a.rates.replace(",", " ").split()
    a.workdir = os.path.join(a.root, "build", "compare-servers")
    os.makedirs(a.workdir, exist_ok=True)

    results = {"bench": "compare-servers", "threads": a.threads, "slots": a.slots, "ctx": a.ctx,
               "rates": rates, "num_prompts": a.num_prompts, "dataset": a.dataset,
               "endpoint": a.endpoint,
               "input_len": a.input_len if not a.dataset else None,
               "output_len": a.output_len if not a.dataset else None,
               "shared_prefix_len": a.shared_prefix_len, "rounds": a.rounds,
               "slo_ttft_ms": a.slo_ttft_ms, "slo_tpot_ms": a.slo_tpot_ms, "models": {}}
    for model in models:
        per_server = {s: [] for s in servers}
        for rnd in range(a.rounds):
            order = servers if rnd % 2 == 0 else list(reversed(servers))
            for s in order:
                per_server[s].append(run_server(s, a, model, rates, rnd + 1))
        results["models"][model] = {s: median_runs(r) for s, r in per_server.items()}

    for model, by_server in results["models"].items():
        print(f"\n{os.path.basename(model)}: {a.threads} threads, {a.slots} slots, "
              f"{a.num_prompts} requests per rate, median of {a.rounds} alternating rounds")
        print(f"{'server':<18} {'rate':>6} {'out tok/s':>10} {'goodput':>8} {'TTFT p50':>9} "
              f"{'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9} {'failed':>6}")
        for s, runs in by_server.items():
            for r in runs:
                print(f"{s:<18} {r['request_rate']:>6} {r['output_throughput']:>10.1f} "
                      f"{r['goodput']:>8.2f} {r['ttft_ms']['p50']:>9.0f} {r['ttft_ms']['p99']:>9.0f} "
                      f"{r['tpot_ms']['p50']:>9.1f} {r['tpot_ms']['p99']:>9.1f} {r['failed']:>6}")
        if "ferry" in by_server:
            for s, runs in by_server.items():
                if s == "ferry":
                    continue
                ratios = []
                for f, o in zip(by_server["ferry"], runs):
                    t = f["output_throughput"] / o["output_throughput"] if o["output_throughput"] else float("inf")
                    ratios.append(f"{f['request_rate']}: {t:.2f}x")
                print(f"ferry / {s} output tok/s: " + ", ".join(ratios))
    out = a.out or os.path.join(a.workdir, "results.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    log(f"results: {out}")
    if a.plot:
        for i, (model, by_server) in enumerate(results["models"].items()):
            j = {"bench": "compare-servers", "title": os.path.basename(model), "servers": by_server}
            stem, ext = os.path.splitext(a.plot)
            path = a.plot if len(models) == 1 else f"{stem}-{i}{ext}"
            tmp = os.path.join(a.workdir, f"plot-{i}.json")
            with open(tmp, "w") as f:
                json.dump(j, f)
            py = os.path.join(a.root, ".venv", "bin", "python")
            subprocess.run([py if os.access(py, os.X_OK) else sys.executable,
                            os.path.join(a.root, "scripts", "plot_bench.py"), tmp, "-o", path],
                           check=True)
            log(f"plot: {path}")


if __name__ == "__main__":
    main()
