"""--tp N / --pp N: the model split over N MPI ranks, within its layers or by layers (Debian's Open MPI; ferry starts mpirun itself when
it is not already in an MPI job). Greedy text equals one process's, a server under --tp answers
concurrent requests as one process does and frees its KV blocks, a bad --tp is refused with the
reason, and a rank that hangs fails the request in flight within the timeout, after which new
requests get 503. A pipeline (--pp) computes what one process does bit for bit, so its greedy
text and served answers are one process's with the default integer activations too."""
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import time

import httpx
import pytest

from conftest import ROOT, ferry_bin, run_ferry, train_small_heads
from server_util import Server
from test_cli_run import expect_clean_error

pytestmark = pytest.mark.skipif(not shutil.which("mpirun"), reason="needs Open MPI's mpirun")

PROMPT = "The three largest cities of Europe are"
# Float activations: the split sums the same products in another order, nothing else, so the
# greedy text is the same (with integer activations each rank rounds its own shorter rows).
EXACT = ("--activations", "f32", "--temperature", "0")


def test_run_split_two_and_three_ways_gives_one_process_text(model_path):
    one = run_ferry("run", "-m", model_path, "-p", PROMPT, "-n", "40", "-t", "1", *EXACT)
    assert one.returncode == 0, one.stderr
    for tp in (2, 3):
        r = run_ferry("run", "-m", model_path, "-p", PROMPT, "-n", "40", "--tp", tp, *EXACT)
        assert r.returncode == 0, r.stderr
        assert r.stdout == one.stdout, (tp, r.stdout, one.stdout)
        assert "MPI_ABORT" not in r.stderr


def test_pipeline_gives_one_process_text_bit_for_bit(model_path):
    one = run_ferry("run", "-m", model_path, "-p", PROMPT, "-n", "40", "-t", "1",
                    "--temperature", "0")
    assert one.returncode == 0, one.stderr
    for pp in (2, 3):
        r = run_ferry("run", "-m", model_path, "-p", PROMPT, "-n", "40", "--pp", pp,
                      "--temperature", "0")
        assert r.returncode == 0, r.stderr
        assert r.stdout == one.stdout, (pp, r.stdout, one.stdout)


def test_speculation_trees_split_give_one_process_text(model_path):
    # Prompt lookup's trees (--spec-tree): every rank masks each draft token to its branch and
    # moves an accepted branch's share of the keys and values down, as one process does.
    copy = ("Repeat the following text exactly: the cat sat on the mat, the cat sat on the hat, "
            "the cat sat on the bat, the cat ran to the mat, the cat ran to the hat, the dog sat "
            "on the mat.")
    spec = ("--spec", "ngram", "--spec-tree", "--spec-k", "6", "--spec-ngram-min", "1",
            "--spec-policy", "fixed")
    one = run_ferry("run", "--chat", "-m", model_path, "-p", copy, "-n", "48", "-t", "1", *EXACT)
    assert one.returncode == 0, one.stderr
    for split in (("--tp", "2"), ("--pp", "2")):
        r = run_ferry("run", "--chat", "-m", model_path, "-p", copy, "-n", "48", *split, *EXACT,
                      *spec)
        assert r.returncode == 0, r.stderr
        assert r.stdout == one.stdout, (split, r.stdout, one.stdout)
        assert "steps accepted a branch off the leading chain" in r.stderr, r.stderr


def test_medusa_split_gives_one_process_text(model_path, tmp_path):
    # Under --tp rank 0 has the whole hidden state but a slice of the output head, under --pp
    # the last stage sends the hidden state with the logits and rank 0 has none of the head: the
    # proposer keeps a whole copy. Text and drafts are one process's.
    heads = tmp_path / "h.medusa.gguf"
    r = train_small_heads(model_path, heads, "-q")
    assert r.returncode == 0, r.stderr
    spec = ("--spec", "medusa", "--medusa-heads", str(heads), "--medusa-tree", "6",
            "--spec-policy", "fixed")
    one = run_ferry("run", "-m", model_path, "-p", PROMPT, "-n", "40", "-t", "1", *EXACT, *spec)
    assert one.returncode == 0, one.stderr
    plain = run_ferry("run", "-m", model_path, "-p", PROMPT, "-n", "40", "-t", "1", *EXACT)
    assert one.stdout == plain.stdout
    drafts = [ln for ln in one.stderr.splitlines() if ln.startswith("speculation (medusa")]
    assert drafts
    for split in (("--tp", "2"), ("--pp", "2")):
        r = run_ferry("run", "-m", model_path, "-p", PROMPT, "-n", "40", *split, *EXACT, *spec)
        assert r.returncode == 0, r.stderr
        assert r.stdout == one.stdout, split
        assert drafts[0] in r.stderr, (split, r.stderr)  # the same drafts, accepted the same


def test_bad_tp_is_refused_with_the_reason(model_path):
    r = run_ferry("run", "-m", model_path, "-p", "x", "-n", "2", "--tp", "4")
    assert r.returncode != 0
    assert "3 KV heads, fewer than the ranks" in r.stderr, r.stderr
    # Inside an MPI job of another size.
    cmd = ["mpirun", "-np", "2", "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    r = subprocess.run(cmd + [ferry_bin(), "run", "-m", model_path, "-p", "x", "-n", "2",
                              "--tp", "3"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "--tp 3 but this MPI job has 2 ranks" in r.stderr, r.stderr


def test_a_split_the_model_cannot_take_is_refused_once_before_mpirun(model_path):
    # The default model has 30 layers and 3 KV heads: said once, from its metadata, instead of
    # by each of the ranks mpirun would have started.
    for split, says in ((("--pp", "64"), "--pp 64: the model has only 30 layers"),
                        (("--tp", "4", "--pp", "2"), "3 KV heads, fewer than the ranks")):
        r = run_ferry("run", "-m", model_path, "-t", "1", "-p", "hi", "-n", "4", *split,
                      timeout=60)
        expect_clean_error(r, says)
        assert r.stderr.count(says) == 1, r.stderr


def test_tensor_parallel_stages_give_one_process_text(model_path):
    # --tp 2 --pp 2: four ranks, two stages of two; each stage's layers split within, the last
    # stage's logits gathered and sent to rank 0. Float activations: only the sums' order
    # differs from one process. bench reports the sums and the stages both.
    one = run_ferry("run", "-m", model_path, "-p", PROMPT, "-n", "24", "-t", "1", *EXACT)
    assert one.returncode == 0, one.stderr
    r = run_ferry("run", "-m", model_path, "-p", PROMPT, "-n", "24", "--tp", 2, "--pp", 2,
                  "-t", 1, *EXACT)
    assert r.returncode == 0, r.stderr
    assert r.stdout == one.stdout, (r.stdout, one.stdout)
    b = run_ferry("bench", "decode", "-m", model_path, "--tp", 2, "--pp", 2, "-t", 1, "-p", 8,
                  "-n", 4, "-r", 1, "--json")
    assert b.returncode == 0, b.stderr
    par = json.loads(b.stdout)["parallel"]
    assert par["kind"] == "tp+pp" and par["ranks"] == 4, par
    d = par["decode_per_token"]
    # Rank 0 is in the first stage: its half of those 15 layers' 30 sums, and its stage output
    # sent on (the logits come back from the last stage).
    assert d["sums"]["calls"] == 30 and d["stages"]["calls"] >= 2, d


def test_int8_keys_split_give_one_process_text(model_path):
    # Every rank measures its own heads' and layers' key scales on rank 0's calibration run, so
    # a split int8 cache holds what one process's does: a pipeline bit for bit, TP with float
    # activations.
    for split, extra in ((("--pp", "2"), ()), (("--tp", "2"), ("--activations", "f32"))):
        args = ("run", "-m", model_path, "-p", PROMPT, "-n", "40", "--temperature", "0",
                "--kv-dtype", "int8", *extra)
        one = run_ferry(*args, "-t", "1")
        r = run_ferry(*args, *split)
        assert one.returncode == 0 and r.returncode == 0, (one.stderr, r.stderr)
        assert r.stdout == one.stdout, (split, r.stdout, one.stdout)


def complete(server, prompt, timeout=120):
    return httpx.post(server.url + "/v1/completions", timeout=timeout,
                      json={"prompt": prompt, "max_tokens": 24, "temperature": 0})


def complete_at_once(server, prompts):
    """Every prompt's text, all of them sent at once."""
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        return [r.json()["choices"][0]["text"] for r in pool.map(lambda p: complete(server, p),
                                                                 prompts)]


PROMPTS = ["The capital of France is", "Water boils at", "def fibonacci(n):",
           "Once upon a time, in a small village,", "The three primary colours are"]


def _has_avx512():
    try:
        with open("/proc/cpuinfo") as f:
            return "avx512f" in f.read()
    except OSError:
        return True


# Known bug, found 2026-12-08 on an AVX2-only Zen 3 (with the binary from before that day's
# kernel change too): there the int8-key split run's fourth text leaves the one-process one after
# a few tokens. The f16-cache split agrees, so the suspect is the int8 keys' per-channel scales,
# which each rank calibrates over its own rows: a last-bit difference in a key there moves a
# scale and then the rounding of every key. Still checked wherever the AVX-512 level runs.
_INT8_SPLIT = pytest.param(("--tp", "2", "--activations", "f32", "--kv-dtype", "int8"),
                           marks=pytest.mark.xfail(not _has_avx512(), strict=False,
                                                   reason="known: int8-key split differs on AVX2"))


@pytest.mark.parametrize("split", [("--tp", "2", "--activations", "f32"), ("--pp", "2"),
                                   _INT8_SPLIT])
def test_serve_split_answers_concurrent_requests_as_one_process(model_path, split):
    one = Server("-t", "1", *split[2:])
    try:
        want = [complete(one, p).json()["choices"][0]["text"] for p in PROMPTS]
    finally:
        one.stop()
    two = Server(*split)
    try:
        assert complete_at_once(two, PROMPTS) == want
        m = two.metrics()
        assert m["ferry:kv_cache_used_blocks"] == 0
    finally:
        two.stop()
    # Rank 0 shut down as one process does and ended the group (mpirun itself exits 1 after
    # passing on a signal, whatever its ranks did, so its status says nothing here).
    out = two.output()
    assert "ferry serve: stopped" in out, out
    assert "MPI_ABORT" not in out and "exited on signal" not in out, out


GEMMA3 = str(ROOT / "tests" / "golden" / "hf_models" / "gemma3")
LONG = [" ".join(["The lighthouse keeper climbed 127 stairs at dawn."] * k) for k in (2, 3, 4, 6)]


@pytest.mark.parametrize("split", [("--tp", "2"), ("--pp", "2")])
def test_split_hybrid_window_pool_answers_as_one_process(split):
    # gemma3's 3 sliding layers (window 8) keep their own pool, on every rank; the prompts run
    # past the window, so blocks leave it and go back while the global layer keeps them all.
    args = ("--activations", "f32", "--block-size", "4", "--max-num-batched-tokens", "16")
    one = Server("-t", "1", *args, model=GEMMA3)
    try:
        want = [complete(one, p).json()["choices"][0]["text"] for p in LONG]
    finally:
        one.stop()
    two = Server(*split, *args, model=GEMMA3)
    try:
        assert complete_at_once(two, LONG) == want
        m = two.metrics()
        assert m["ferry:kv_cache_window_total_blocks"] > 0
        assert m["ferry:kv_cache_window_used_blocks"] == 0
        assert m["ferry:kv_cache_used_blocks"] == 0
        assert m["ferry:kv_blocks_dropped_total"] > 0
    finally:
        two.stop()


def rank_pids(port):
    """The ferry processes of the job serving on `port`, by MPI rank."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        rank = env.get(b"OMPI_COMM_WORLD_RANK")
        if rank is not None and b"serve" in cmd and str(port).encode() in cmd:
            out[int(rank)] = int(pid)
    return out


def test_a_rank_that_hangs_fails_the_request_in_bounded_time_then_503(model_path):
    s = Server("--tp", "2", "--tp-timeout", "3")
    worker = None
    try:
        assert complete(s, "Hello").status_code == 200
        worker = rank_pids(s.port)[1]
        os.kill(worker, signal.SIGSTOP)
        t0 = time.time()
        r = complete(s, "The capital of France is", timeout=60)
        took = time.time() - t0
        assert r.status_code == 500, r.text
        assert "rank 0 waited" in r.json()["error"]["message"], r.text
        assert took < 3 + 10, took
        r = complete(s, "Again")
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "service_unavailable"
        health = httpx.get(s.url + "/health", timeout=10)
        assert health.status_code == 503 and "rank 0 waited" in health.text, health.text
    finally:
        if worker:
            os.kill(worker, signal.SIGCONT)
        s.stop()


def test_a_rank_that_dies_fails_the_request_in_bounded_time_then_503(model_path):
    # mpirun runs the job in recovery mode, so the server (rank 0) outlives a rank that dies.
    # (5 s: a step of the first request can take seconds on a loaded 2-core machine.)
    s = Server("--tp", "2", "--tp-timeout", "5")
    try:
        assert complete(s, "Hello").status_code == 200
        os.kill(rank_pids(s.port)[1], signal.SIGKILL)
        t0 = time.time()
        r = complete(s, "The capital of France is", timeout=60)
        assert r.status_code == 500, r.text
        assert "a rank died or hangs" in r.json()["error"]["message"], r.text
        assert time.time() - t0 < 3 + 10
        r = complete(s, "Again")
        assert r.status_code == 503, r.text
    finally:
        s.stop()


def test_when_rank_0_dies_the_others_stop_in_bounded_time(model_path):
    # An idle rank 0 says it is alive once a second; a rank that hears nothing for the timeout
    # stops, and the job ends instead of waiting forever.
    # (5 s: a step of the first request can take seconds on a loaded 2-core machine.)
    s = Server("--tp", "2", "--tp-timeout", "5")
    try:
        assert complete(s, "Hello").status_code == 200
        pids = rank_pids(s.port)
        time.sleep(2)  # idle: keepalives flow, nobody stops
        assert all(os.path.exists(f"/proc/{p}") for p in pids.values())
        os.kill(pids[0], signal.SIGKILL)
        t0 = time.time()
        while time.time() - t0 < 30 and s.proc.poll() is None:
            time.sleep(0.2)
        assert s.proc.poll() is not None, "mpirun still runs 30 s after rank 0 died"
        assert time.time() - t0 < 5 + 15
        assert "waited" in s.output() and "from rank 0" in s.output(), s.output()
    finally:
        s.stop()


def test_eval_split_scores_the_text_as_one_process(model_path):
    # The model under test split, the reference whole on rank 0: a pipeline's perplexity is one
    # process's bit for bit, tensor parallelism's within float reordering, KL against the
    # whole model ~0.
    text = str(ROOT / "data" / "eval" / "lighthouse.txt")
    args = ("eval", "-m", model_path, "--text", text, "--max-tokens", "400", "--json",
            "--activations", "f32")
    one = run_ferry(*args, "-t", "1")
    assert one.returncode == 0, one.stderr
    want = json.loads(one.stdout)["perplexity"]
    for split in (("--pp", "2"), ("--tp", "2")):
        r = run_ferry(*args, *split, "--ref", model_path)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        if split[0] == "--pp":
            assert got["perplexity"] == want
        assert abs(got["perplexity"] / want - 1) < 1e-4, (split, got["perplexity"], want)
        assert got["ref_perplexity"] == want
        assert got["kl_mean"] < 1e-6 and got["top1_agreement"] == 1.0, got


def test_plan_tp_advice_matches_a_measured_split_run(model_path):
    # `ferry plan --tp 2` against `ferry bench decode --tp 2` on the same file: the sums over
    # the ranks per token (count and bytes) are what rank 0 exchanged, its KV bytes per token its
    # share of the heads (2 of the default model's 3), and its weight bytes per token within 3 %
    # (the plan splits attention by KV heads and the rest evenly, by average bits).
    plan = run_ferry("plan", "-m", model_path, "--tp", 2, "--device", "cpu", "--json")
    assert plan.returncode == 0, plan.stderr
    p = json.loads(plan.stdout)
    bench = run_ferry("bench", "decode", "-m", model_path, "--tp", 2, "-p", 16, "-n", 8, "-r", 1,
                      "--json")
    assert bench.returncode == 0, bench.stderr
    b = json.loads(bench.stdout)
    assert b["parallel"]["kind"] == "tp" and b["parallel"]["ranks"] == 2
    d = b["parallel"]["decode_per_token"]
    tp = p["tensor_parallel"]
    assert d["sums"]["calls"] == tp["sums_per_token"] == 2 * p["model"]["n_layers"]
    assert d["sums"]["bytes"] == tp["sum_bytes_per_token"]
    assert d["gathers"]["calls"] == 1
    assert 0 < d["comm_fraction"] < 1 and d["comm_ms"] >= d["sums"]["ms"] > 0
    kv_heads = p["model"]["n_kv_heads"]
    assert b["kv_bytes_per_token"] == p["memory"]["kv_bytes_per_token"] * 2 // kv_heads
    want = p["performance"]["decode_weight_bytes_per_step"]
    assert abs(b["weight_bytes_per_token"] / want - 1) < 0.03, (b["weight_bytes_per_token"], want)
