"""`ferry plan` as a user runs it: presets, the default GGUF, config.json, JSON keys, errors."""
import json
import os

from conftest import run_ferry


def plan_json(*args):
    r = run_ferry("plan", "--json", *args, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_text_report_for_70b_on_h100():
    r = run_ferry("plan", "--model", "llama-3-70b", "--device", "H100-SXM", "--ctx", "8192",
                  "--batch", "16", timeout=60)
    assert r.returncode == 0, r.stderr
    for words in ("weights", "KV cache per token", "without GQA", "activations",
                  "framework overhead", "capacity", "DOES NOT FIT", "concurrent sequences",
                  "tok/s per sequence", "prefill", "bandwidth-bound", "tensor parallelism"):
        assert words in r.stdout, words


def test_seed_numbers_in_json():
    j = plan_json("-m", "llama-2-70b", "-d", "a100-80gb", "--ctx", "4096", "--weights", "f16")
    m = j["memory"]
    assert abs(m["weights_bytes"] / 1e9 - 140) < 3
    assert abs(m["kv_bytes_per_token_mha"] / 1e6 - 2.62) < 0.01
    assert abs(m["kv_bytes_per_token"] / 1e6 - 0.33) < 0.01
    assert m["kv_bytes_per_sequence"] == m["kv_bytes_per_token"] * 4096
    j4 = plan_json("-m", "llama-2-7b", "-d", "T4", "--ctx", "2048", "--weights", "int4")
    assert abs(j4["memory"]["weights_bytes"] / 1e9 - 3.5) < 0.15
    assert j4["memory"]["fits"] is True


def test_advice_and_tensor_parallel_count():
    # 13B: 26 GB at fp16 > 23.2 GB usable on an A10; 13 GB at int8 + 3.4 GB of KV fits.
    j = plan_json("-m", "llama-2-13b", "-d", "A10", "--ctx", "4096")
    assert j["advice"]["recommendation"] == "int8"
    # 70B: 69 GB at int8 plus KV and 10 % overhead just misses 77 GB usable; int4 fits.
    j = plan_json("-m", "llama-2-70b", "-d", "H100-SXM", "--ctx", "4096")
    assert j["advice"]["recommendation"] == "int4"
    j = plan_json("-m", "llama-2-7b", "-d", "H100-SXM", "--ctx", "4096")
    assert j["advice"]["recommendation"] == "keep_16bit"
    assert j["memory"]["max_sequences"] > 1
    j = plan_json("-m", "qwen2.5-72b", "-d", "RTX-4090", "--ctx", "8192", "--batch", "8")
    assert j["advice"]["recommendation"] == "tensor_parallel"
    n = j["advice"]["min_devices_16bit"]
    assert n > 1 and 64 % n == 0
    fits = plan_json("-m", "qwen2.5-72b", "-d", "RTX-4090", "--ctx", "8192", "--batch", "8",
                     "--weights", "f16", "--tp", str(n))
    assert fits["memory"]["fits"] is True


def test_default_gguf_and_cpu_device(model_path):
    j = plan_json("--device", "cpu", "--ctx", "2048", "--kv-cache-memory", "200000000")
    assert j["model"]["source"] == "gguf"
    assert abs(j["model"]["params"] / 1e6 - 134.5) < 0.5
    assert j["device"]["measured"] is True and j["device"]["bandwidth_gbs"] > 0
    assert j["memory"]["kv_bytes_total"] == 200000000
    assert j["memory"]["max_sequences"] == 200000000 // j["memory"]["kv_bytes_per_sequence"]
    assert j["settings"]["weights"] == "q4_1"


def test_config_json_input(tmp_path):
    cfg = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "vocab_size": 32000, "max_position_embeddings": 32768, "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    from_file = plan_json("-m", tmp_path / "config.json", "-d", "L4", "--ctx", "4096")
    from_dir = plan_json("-m", tmp_path, "-d", "L4", "--ctx", "4096")
    preset = plan_json("-m", "mistral-7b", "-d", "L4", "--ctx", "4096")
    assert from_file["model"]["params"] == from_dir["model"]["params"] == preset["model"]["params"]
    assert from_file["memory"]["total_bytes"] == preset["memory"]["total_bytes"]


def test_files_are_known_by_their_bytes_not_their_names(tmp_path, model_path):
    # A GGUF and a config.json under names without their extensions, and a FIFO, which
    # would block a read forever.
    import os
    import shutil
    gguf_copy = tmp_path / "model.bin"
    shutil.copyfile(model_path, gguf_copy)
    by_name = plan_json("-m", model_path, "-d", "L4", "--ctx", "2048")
    by_bytes = plan_json("-m", gguf_copy, "-d", "L4", "--ctx", "2048")
    assert by_bytes["model"]["source"] == "gguf"
    assert by_bytes["model"]["params"] == by_name["model"]["params"]
    cfg = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
           "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": True}
    (tmp_path / "cfg").write_text(json.dumps(cfg))
    j = plan_json("-m", tmp_path / "cfg", "-d", "L4", "--ctx", "2048")
    assert abs(j["model"]["params"] / 1e9 - 1.24) < 0.01
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    r = run_ferry("plan", "-m", fifo, "-d", "L4", timeout=60)
    assert r.returncode != 0 and "not a regular file" in r.stderr, r.stderr


def test_unknown_device_and_preset_are_clear_errors():
    r = run_ferry("plan", "-m", "llama-2-7b", "-d", "tpu-v9", timeout=60)
    assert r.returncode != 0
    assert "unknown device 'tpu-v9'" in r.stderr and "H100-SXM" in r.stderr
    r = run_ferry("plan", "-m", "gpt-5", "-d", "T4", timeout=60)
    assert r.returncode != 0
    assert "unknown model preset 'gpt-5'" in r.stderr and "llama-3-8b" in r.stderr
    r = run_ferry("plan", "-m", "llama-2-7b", "-d", "T4", "--weights", "int3", timeout=60)
    assert r.returncode != 0 and "int3" in r.stderr


def test_sizes_too_large_to_count_are_refused_not_wrapped(tmp_path):
    # Each once wrapped around 2^64 into a plan that fit (or took -1 as 2^64 - 1 bytes).
    for args, says in [(("--ctx", "100000000000000000"), "more than the 1 EiB"),
                       (("--ctx", "9223372036854775807"), "lower --ctx or --batch"),
                       (("--batch", "9223372036854775807"), "9223372036854775807 sequences"),
                       (("--kv-cache-memory", "-1"), "--kv-cache-memory must be a byte count")]:
        for json_flag in ((), ("--json",)):
            r = run_ferry("plan", "-m", "smollm2-135m", "-d", "H100-SXM", *args, *json_flag,
                          timeout=60)
            assert r.returncode != 0 and says in r.stderr, (args, r.stdout, r.stderr)
    cfg = {"model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536,
           "vocab_size": 49152, "max_position_embeddings": 4611686018427387904}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = run_ferry("plan", "-m", tmp_path / "config.json", "-d", "H100-SXM", timeout=60)
    assert r.returncode != 0 and "(the model's context)" in r.stderr, r.stderr
    # A parameter count past 2^63 once printed as a negative number and planned on.
    huge = dict(cfg, hidden_size=2**31, intermediate_size=2**33, vocab_size=2**31,
                num_hidden_layers=100000, max_position_embeddings=4096)
    (tmp_path / "huge.json").write_text(json.dumps(huge))
    for cmd in (("plan", "-m", tmp_path / "huge.json", "-d", "L4"),
                ("synth", tmp_path / "x.gguf", "--like", tmp_path / "huge.json")):
        r = run_ferry(*cmd, timeout=60)
        assert r.returncode != 0 and "parameters, more than ferry plans for" in r.stderr, r.stderr
    assert not (tmp_path / "x.gguf").exists()


def test_moe_presets_total_active_and_decode_reads():
    one = plan_json("-m", "mixtral-8x7b", "-d", "H100-SXM", "--ctx", "1", "--weights", "f16")
    big = plan_json("-m", "mixtral-8x7b", "-d", "H100-SXM", "--ctx", "1", "--weights", "f16",
                    "--batch", "64")
    m = one["model"]
    assert m["params"] == m["params_total"]
    assert abs(m["params_total"] / 46.7e9 - 1) < 0.005
    assert abs(m["params_active"] / 12.9e9 - 1) < 0.005
    assert m["n_experts"] == 8 and m["n_experts_used"] == 2
    # Memory holds every expert; batch 1 reads the active share, batch 64 nearly all of them.
    assert one["memory"]["weights_bytes"] == 2 * m["params_total"]
    w1 = one["performance"]["decode_weight_bytes_per_step"]
    w64 = big["performance"]["decode_weight_bytes_per_step"]
    embed = 2 * 32000 * 4096  # untied: looked up a row per token, not streamed
    assert abs(w1 - (2 * m["params_active"] - embed + embed / 32000)) < 16
    assert w1 < w64 <= one["memory"]["weights_bytes"]
    assert w64 > 0.98 * one["memory"]["weights_bytes"]
    r = run_ferry("plan", "-m", "qwen3-30b-a3b", "-d", "H100-SXM", "--ctx", "4096", timeout=60)
    assert r.returncode == 0, r.stderr
    for words in ("3.35 B active", "128 experts top-8", "uniform routing"):
        assert words in r.stdout, words


def test_gemma_sliding_kv_and_refused_moe_configs(tmp_path):
    j = plan_json("-m", "gemma-3-27b", "-d", "H200", "--ctx", "131072")
    m = j["memory"]
    assert j["model"]["n_sliding_layers"] == 52 and j["model"]["sliding_window"] == 1024
    assert m["kv_bytes_per_sequence"] == 8192 * (10 * 131072 + 52 * 1024)
    assert m["kv_bytes_per_sequence_no_window"] == m["kv_bytes_per_token"] * 131072
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
           "num_attention_heads": 128, "intermediate_size": 18432, "vocab_size": 129280}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = run_ferry("plan", "-m", tmp_path, "-d", "H100-SXM", timeout=60)
    assert r.returncode != 0 and "model_type 'deepseek_v3' is not one ferry plan models" in r.stderr


def test_decode_bytes_are_what_the_engine_reads(tmp_path, model_path):
    """plan's bytes per decode step at batch 1 are the engine's own count (`info`: every matrix
    in the layout it reads): an untied embedding is a lookup, a mixture reads its k experts."""
    golden = os.path.join(os.path.dirname(os.path.dirname(__file__)), "golden", "hf_models")
    moe = tmp_path / "moe.gguf"
    r = run_ferry("synth", moe, "--like", os.path.join(golden, "mixtral", "config.json"),
                  "--type", "q8_0", "-q")
    assert r.returncode == 0, r.stderr
    for f in (model_path, str(moe)):  # tied and dense; untied with 4 experts, 2 per token
        plan = plan_json("-m", f, "-d", "cpu", "--ctx", "1")["performance"]
        r = run_ferry("info", "-m", f, "--json")
        assert r.returncode == 0, r.stderr
        engine = json.loads(r.stdout)["weight_bytes_per_token"]
        assert abs(plan["decode_weight_bytes_per_step"] / engine - 1) < 0.01, (f, plan, engine)


def test_plan_on_cuda_measures_the_gpu_or_says_why_not():
    # `--device cuda` measures this machine's GPU; CI's machines have none, and the plan stops
    # with the reason rather than planning for a card that is not there.
    r = run_ferry("plan", "--device", "cuda", "--json")
    if r.returncode == 0:
        d = json.loads(r.stdout)["device"]
        assert d["measured"] and d["memory_bytes"] > 1 << 30
        return
    assert "ferry: error: --device cuda:" in r.stderr, r.stderr
    assert "cuda" in run_ferry("plan", "--list").stdout
