"""`ferry bench decode` and `ferry bench throughput` as a user scripts them: the JSON keys the
issues promise, sane values, and clear errors for a bad workload file. Tiny workloads: these
check behaviour, not speed."""
import json

from conftest import run_ferry
from test_cli_run import expect_clean_error


def test_bench_decode_json_keys(model_path):
    r = run_ferry("bench", "decode", "-p", "16", "-n", "8", "-r", "2", "-t", "1", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    for k in ("prefill_tokens_per_s", "decode_tokens_per_s", "ttft_ms", "tpot_ms",
              "weight_bytes_per_token", "read_bandwidth_gbs", "roofline_decode_tokens_per_s",
              "roofline_fraction", "threads", "model", "weight_type"):
        assert k in j, k
    assert j["threads"] == 1 and j["weight_type"] == "q4_1"
    assert j["decode_tokens_per_s"] > 0 and j["prefill_tokens_per_s"] > 0
    # The roofline is bandwidth over the bytes a token reads, and the fraction is measured
    # over it: one decode step cannot beat reading the weights once.
    roof = j["read_bandwidth_gbs"] * 1e9 / j["weight_bytes_per_token"]
    assert abs(j["roofline_decode_tokens_per_s"] - roof) < 1e-6 * roof
    assert abs(j["roofline_fraction"] - j["decode_tokens_per_s"] / roof) < 1e-6
    rng = j["range"]["decode_tokens_per_s"]
    assert rng["min"] <= rng["median"] <= rng["max"]


def test_bench_decode_keeps_an_explicit_context(model_path):
    # 8 + 20 tokens do not fit a 16-token context: said, not silently enlarged.
    expect_clean_error(run_ferry("bench", "decode", "-p", "8", "-n", "20", "-c", "16", "-t", "1"),
                       "exceed the context of 16")


def test_bench_throughput_json_keys(model_path):
    r = run_ferry("bench", "throughput", "--num-prompts", "6", "--input-len", "8-40",
                  "--output-len", "2-6", "--max-num-seqs", "4", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    for k in ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s",
              "kv_waste_fraction", "peak_kv_blocks", "preemptions", "prefix_hit_fraction"):
        assert k in j, k
    for k in ("ttft_ms", "tpot_ms"):
        assert set(j[k]) >= {"mean", "p50", "p90", "p99"}, j[k]
        assert j[k]["p50"] <= j[k]["p90"] <= j[k]["p99"]
    assert j["requests"] == 6
    assert j["output_tokens_per_s"] < j["total_tokens_per_s"]
    assert 0 <= j["kv_waste_fraction"] < 1 and j["peak_kv_blocks"] >= 1
    assert 8 <= j["prompt_len"]["min"] <= j["prompt_len"]["mean"] <= j["prompt_len"]["max"] <= 40


def test_bench_throughput_input_len_counts_after_the_shared_prefix(model_path):
    r = run_ferry("bench", "throughput", "--num-prompts", "3", "--input-len", "12",
                  "--shared-prefix-len", "20", "--output-len", "2", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["shared_prefix_len"] == 20
    assert j["prompt_len"] == {"min": 32, "mean": 32.0, "max": 32}


def test_bench_throughput_dataset(tmp_path, model_path):
    p = tmp_path / "prompts.jsonl"
    p.write_text(
        json.dumps({"prompt": "The capital of France is", "output_len": 3}) + "\n\n" +
        json.dumps({"messages": [{"role": "user", "content": "Hi"}], "output_len": 5}) + "\n")
    r = run_ferry("bench", "throughput", "--dataset", p, "--num-prompts", "5", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    # Two prompts in the file: those run, and the shortfall is said, not hidden.
    assert j["requests"] == 2
    assert "has 2 prompts" in r.stderr
    assert j["output_tokens_per_s"] > 0


def test_bench_throughput_dataset_lengths(tmp_path, model_path):
    # Each line's own length under any of the names other benchmarks use; a line without one
    # draws from --output-len. Generation ignores EOS here, so the lengths add up exactly.
    p = tmp_path / "lengths.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in (
        {"prompt": "The capital of France is", "output_tokens": 3},
        {"prompt": "Hello there", "max_tokens": 4},
        {"prompt": "One two"})) + "\n")
    r = run_ferry("bench", "throughput", "--dataset", p, "--output-len", "6", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["requests"] == 3
    assert round(j["output_tokens_per_s"] * j["duration_s"]) == 3 + 4 + 6


def test_bench_throughput_bad_dataset_lines(tmp_path, model_path):
    cases = {
        "not json\n": "line 1",
        json.dumps({"prompt": "ok"}) + "\n" + json.dumps({"text": "x"}) + "\n": "line 2",
        json.dumps({"prompt": "ok", "output_len": "eight"}) + "\n": "output_len",
        json.dumps({"prompt": "ok", "output_len": 0}) + "\n": "output_len",
        json.dumps({"prompt": "ok", "max_tokens": -2}) + "\n": "max_tokens",
        json.dumps({"prompt": 5}) + "\n": "line 1",
        json.dumps({"prompt": ""}) + "\n": "empty",
        "\n\n": "no prompts",
    }
    for i, (text, word) in enumerate(cases.items()):
        p = tmp_path / f"bad{i}.jsonl"
        p.write_text(text)
        expect_clean_error(run_ferry("bench", "throughput", "--dataset", p), word)


def test_bench_throughput_sampled(model_path):
    r = run_ferry("bench", "throughput", "--num-prompts", "4", "--input-len", "8",
                  "--output-len", "6", "--temperature", "1", "--top-p", "0.9", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["sampling"]["temperature"] == 1 and j["sampling"]["top_k"] == 0
    assert abs(j["sampling"]["top_p"] - 0.9) < 1e-6
    # EOS is ignored in the benchmark, so sampling changes which tokens, not how many.
    assert j["requests"] == 4
    assert round(j["output_tokens_per_s"] * j["duration_s"]) == 4 * 6


def test_bench_throughput_bad_options(model_path):
    r = run_ferry("bench", "throughput", "--temperature", "nan")
    assert r.returncode != 0 and "--temperature: must be a finite number" in r.stderr
    expect_clean_error(run_ferry("bench", "throughput", "--input-len", "9-3"), "--input-len")
    # Trailing or leading garbage is refused, not cut off where a number ends.
    for flag in ("--input-len", "--output-len"):
        for bad in ("7-20-99", "4x", "3-8.5", "-3", "+4", "4-", " 4", ""):
            expect_clean_error(run_ferry("bench", "throughput", flag, bad),
                               f"{flag} must be N or LO-HI, got '{bad}'")
    expect_clean_error(run_ferry("bench", "throughput", "--request-rate", "fast"),
                       "--request-rate")


def test_bench_serve_without_a_server_fails(model_path):
    # Nothing listens on this port: every request fails, which is an error, with the reason.
    r = run_ferry("bench", "serve", "--url", "http://127.0.0.1:18197", "--num-prompts", "2")
    expect_clean_error(r, "no request completed")
    assert "failed: connect" in r.stderr


def test_tiny_kv_pool_caps_the_context_instead_of_hanging(model_path):
    # One 16-slot block: a 4 + 30 token request cannot fit, so it ends at 16 tokens (it used
    # to be preempted and recomputed forever), and the cap is announced.
    for extra in ([], ["--kv", "contiguous"], ["--batching", "static"]):
        r = run_ferry("bench", "throughput", "--num-prompts", "2", "--input-len", "4",
                      "--output-len", "30", "--kv-cache-memory", "1", "--json", *extra,
                      timeout=60)
        assert r.returncode == 0, (extra, r.stderr)
        assert "KV cache holds 16 tokens" in r.stderr
        j = json.loads(r.stdout)
        assert j["requests"] == 2 and j["peak_kv_blocks"] == 1
