"""`ferry synth`: files with a real architecture's shapes and random weights, read back by
gguf-py (llama.cpp's own GGUF reader), then loaded and run by ferry."""

import json
import os

import pytest

from conftest import run_ferry

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
from gguf.quants import dequantize  # noqa: E402


def field(reader, key):
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v[0]


def synth(tmp_path, name, *args):
    out = tmp_path / name
    r = run_ferry("synth", out, *args)
    assert r.returncode == 0, r.stderr
    return out, r


@pytest.mark.parametrize("like, arch, hidden, heads, kv_heads, ffn, vocab, tied, bias", [
    ("tinyllama-1.1b", "llama", 2048, 32, 4, 5632, 32000, False, False),
    ("llama-3.2-1b", "llama", 2048, 32, 8, 8192, 128256, True, False),
    ("qwen2.5-0.5b", "qwen2", 896, 14, 2, 4864, 151936, True, True),
])
def test_preset_shapes_read_back_in_gguf_py(tmp_path, like, arch, hidden, heads, kv_heads, ffn,
                                            vocab, tied, bias):
    out, r = synth(tmp_path, f"{like}.gguf", "--like", like, "--layers", 2, "--type", "q8_0")
    assert "2 layers" in r.stderr
    rd = gguf.GGUFReader(out)
    assert field(rd, "general.architecture") == arch
    assert field(rd, f"{arch}.block_count") == 2
    assert field(rd, f"{arch}.embedding_length") == hidden
    assert field(rd, f"{arch}.attention.head_count") == heads
    assert field(rd, f"{arch}.attention.head_count_kv") == kv_heads
    assert field(rd, f"{arch}.feed_forward_length") == ffn
    assert field(rd, "general.file_type") == 7  # LLAMA_FTYPE_MOSTLY_Q8_0
    ts = {t.name: t for t in rd.tensors}
    hd = hidden // heads
    assert list(ts["token_embd.weight"].shape) == [hidden, vocab]
    assert list(ts["blk.1.attn_k.weight"].shape) == [hidden, kv_heads * hd]
    assert list(ts["blk.1.ffn_down.weight"].shape) == [ffn, hidden]
    assert ("output.weight" in ts) == (not tied)
    assert ("blk.0.attn_q.bias" in ts) == bias
    assert ts["blk.0.attn_q.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert ts["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    # The tokenizer is the default model's, fitted to the shape's vocabulary.
    tokens = rd.fields["tokenizer.ggml.tokens"]
    assert len(tokens.data) == vocab
    assert field(rd, "tokenizer.ggml.model") == "gpt2"

    # ferry loads and runs it: greedy output is whatever random weights say, but it is made.
    run = run_ferry("run", "-m", out, "-p", "The capital of France is", "-n", 4,
                    "--temperature", 0)
    assert run.returncode == 0, run.stderr
    assert "generated: 4 tokens" in run.stderr


def test_gemma3_has_its_norms_window_and_runs(tmp_path):
    out, _ = synth(tmp_path, "g.gguf", "--like", "gemma-3-270m", "--layers", 2, "--type", "q8_0")
    rd = gguf.GGUFReader(out)
    assert field(rd, "general.architecture") == "gemma3"
    assert field(rd, "gemma3.attention.key_length") == 256
    assert field(rd, "gemma3.attention.sliding_window") == 512
    assert field(rd, "gemma3.attention.sliding_window_pattern") == 6  # the real model's period
    ts = {t.name for t in rd.tensors}
    for t in ("attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm"):
        assert f"blk.1.{t}.weight" in ts
    run = run_ferry("run", "-m", out, "-p", "The capital of France is", "-n", 4,
                    "--temperature", 0)
    assert run.returncode == 0, run.stderr
    assert "generated: 4 tokens" in run.stderr


@pytest.mark.parametrize("name, arch", [("mixtral", "llama"), ("qwen3_moe", "qwen3moe"),
                                        ("qwen2_moe", "qwen2moe")])
def test_mixture_of_experts_stacks_its_experts_and_bench_counts_their_tokens(tmp_path, name, arch):
    # The shapes of the random-weight directories the golden tests run, from their config.json.
    cfg_path = f"{REPO}/tests/golden/hf_models/{name}/config.json"
    cfg = json.load(open(cfg_path))
    out, _ = synth(tmp_path, "moe.gguf", "--like", cfg_path, "--type", "q8_0")
    rd = gguf.GGUFReader(out)
    n_exp = cfg.get("num_experts") or cfg["num_local_experts"]
    ff = cfg.get("moe_intermediate_size", cfg["intermediate_size"])
    assert field(rd, "general.architecture") == arch
    assert field(rd, f"{arch}.expert_count") == n_exp
    assert field(rd, f"{arch}.expert_used_count") == 2
    ts = {t.name: t for t in rd.tensors}
    assert list(ts["blk.1.ffn_gate_exps.weight"].shape) == [64, ff, n_exp]
    assert list(ts["blk.1.ffn_down_exps.weight"].shape) == [ff, 64, n_exp]
    # The router stays f32 (as llama.cpp keeps it); the experts take the asked-for type.
    assert ts["blk.0.ffn_gate_inp.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert ts["blk.0.ffn_up_exps.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert ("blk.0.ffn_gate_shexp.weight" in ts) == (name == "qwen2_moe")
    assert "blk.0.ffn_gate.weight" not in ts

    r = run_ferry("bench", "decode", "-m", out, "-p", 16, "-n", 8, "-r", 2, "--json")
    assert r.returncode == 0, r.stderr
    ex = json.loads(r.stdout)["experts"]
    assert ex["n_expert"] == n_exp and ex["n_expert_used"] == 2
    # Each measured run forwards the 16 prompt tokens and 7 decoded ones; every token takes 2
    # experts in each of the 2 layers.
    assert sum(ex["tokens_per_expert"]) == 2 * (16 + 7) * 2 * 2
    assert len(ex["tokens_per_expert"]) == n_exp
    assert ex["max"] == max(ex["tokens_per_expert"]) and ex["imbalance"] >= 1

    # Through the serving engine: 4 requests of 10 prompt tokens and 4 generated forward 13
    # tokens each (the last one generated is never run).
    r = run_ferry("bench", "throughput", "-m", out, "--num-prompts", 4, "--input-len", 10,
                  "--output-len", 4, "--json")
    assert r.returncode == 0, r.stderr
    ex = json.loads(r.stdout)["experts"]
    assert sum(ex["tokens_per_expert"]) == 2 * 4 * 13 * 2


def test_weights_are_the_stated_distribution_and_norms_are_one(tmp_path):
    out, _ = synth(tmp_path, "f32.gguf", "--like", "smollm2-135m", "--layers", 1, "--type",
                   "f32")
    rd = gguf.GGUFReader(out)
    ts = {t.name: t for t in rd.tensors}
    w = np.asarray(ts["blk.0.ffn_up.weight"].data, dtype=np.float64).ravel()
    assert abs(w.mean()) < 5e-4
    assert abs(w.std() - 0.02) < 5e-4
    # Irwin-Hall(4), normalised: bounded at sqrt(3) * 2 standard deviations.
    assert np.abs(w).max() <= 0.02 * 2 * np.sqrt(3) + 1e-6
    assert np.abs(w).max() > 0.02 * 2.5  # but with tails past 2.5 sigma
    assert np.all(np.asarray(ts["blk.0.attn_norm.weight"].data) == 1.0)
    assert field(rd, "ferry.synth.seed") == 0


def test_same_seed_same_file_other_seed_other_weights(tmp_path):
    a, _ = synth(tmp_path, "a.gguf", "--like", "smollm2-135m", "--layers", 1, "-t", 1)
    b, _ = synth(tmp_path, "b.gguf", "--like", "smollm2-135m", "--layers", 1, "-t", 2)
    c, _ = synth(tmp_path, "c.gguf", "--like", "smollm2-135m", "--layers", 1, "--seed", 7)
    assert a.read_bytes() == b.read_bytes()  # thread count does not matter
    ta = {t.name: t for t in gguf.GGUFReader(a).tensors}["blk.0.attn_q.weight"]
    tc = {t.name: t for t in gguf.GGUFReader(c).tensors}["blk.0.attn_q.weight"]
    qa = dequantize(ta.data, ta.tensor_type)
    qc = dequantize(tc.data, tc.tensor_type)
    assert qa.shape == qc.shape and not np.array_equal(qa, qc)
    assert abs(float(np.corrcoef(qa.ravel(), qc.ravel())[0, 1])) < 0.01


def test_like_a_config_json_and_a_cut_vocabulary_still_tokenizes(tmp_path):
    config = {"model_type": "qwen2", "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 20000, "max_position_embeddings": 1024, "rope_theta": 1e6,
              "rms_norm_eps": 1e-6, "tie_word_embeddings": True}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out, r = synth(tmp_path, "cfg.gguf", "--like", path, "--type", "q4_k")
    assert "cut to 20000" in r.stderr
    rd = gguf.GGUFReader(out)
    assert field(rd, "qwen2.rope.freq_base") == pytest.approx(1e6)
    assert field(rd, "qwen2.attention.layer_norm_rms_epsilon") == pytest.approx(1e-6)
    ts = {t.name: t for t in rd.tensors}
    # Rows of 256 and 512 both split into q4_k's 256-element blocks.
    assert ts["blk.0.ffn_up.weight"].tensor_type == gguf.GGMLQuantizationType.Q4_K
    # Every merge of the cut vocabulary is among its tokens, so text still encodes.
    toks = {bytes(rd.fields["tokenizer.ggml.tokens"].parts[i]).decode()
            for i in rd.fields["tokenizer.ggml.tokens"].data}
    merges = rd.fields["tokenizer.ggml.merges"]
    for i in merges.data[:2000]:
        a, b = bytes(merges.parts[i]).decode().split(" ")
        assert a in toks and b in toks and a + b in toks
    run = run_ferry("run", "-m", out, "-p", "Tokenizers, unicode: é ü 漢字 and numbers 12345",
                    "-n", 2, "--temperature", 0)
    assert run.returncode == 0, run.stderr


def test_tokenizer_from_another_file(tmp_path):
    # Where the default model is not (a GPU machine), another GGUF's tokenizer. The source here
    # has a vocabulary cut to 20000, so a model of 49152 fitted from it has placeholders where one
    # fitted from the default model would have that model's tokens. A missing source is one line.
    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
              "vocab_size": 20000, "max_position_embeddings": 512}
    (tmp_path / "config.json").write_text(json.dumps(config))
    src, _ = synth(tmp_path, "src.gguf", "--like", tmp_path / "config.json", "-q")
    out, _ = synth(tmp_path, "out.gguf", "--like", "smollm2-135m", "--layers", 1,
                   "--tokenizer-from", src, "-q")
    a, b = gguf.GGUFReader(src), gguf.GGUFReader(out)
    ta, tb = a.fields["tokenizer.ggml.tokens"], b.fields["tokenizer.ggml.tokens"]
    got = [bytes(tb.parts[i]).decode() for i in tb.data]
    assert len(got) == 49152
    assert got[:20000] == [bytes(ta.parts[i]).decode() for i in ta.data]
    assert got[20000] == "<|synth_unused_20000|>" and got[-1] == "<|synth_unused_49151|>"
    r = run_ferry("synth", tmp_path / "x.gguf", "--like", "smollm2-135m", "--tokenizer-from",
                  tmp_path / "none.gguf")
    assert r.returncode != 0 and "none.gguf" in r.stderr
    assert not (tmp_path / "x.gguf").exists()


def test_bad_input_is_one_clear_line(tmp_path):
    r = run_ferry("synth", tmp_path / "x.gguf", "--like", "llama-9-1t")
    assert r.returncode != 0 and "unknown model preset" in r.stderr
    r = run_ferry("synth", tmp_path / "x.gguf", "--like", "tinyllama-1.1b", "--type", "q3_k")
    assert r.returncode != 0 and "not a type ferry writes" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "mamba", "hidden_size": 64,
                               "intermediate_size": 64, "num_hidden_layers": 1,
                               "num_attention_heads": 1, "vocab_size": 100}))
    r = run_ferry("synth", tmp_path / "x.gguf", "--like", bad)
    assert r.returncode != 0 and "mamba" in r.stderr
    assert not (tmp_path / "x.gguf").exists()


def test_an_output_that_is_not_a_file_is_refused_and_left_alone(tmp_path):
    # The writers write OUT.tmp and rename it over OUT: as root, `synth ... /dev/full` replaced
    # the device node. Anything but a regular file is refused before any work, and kept.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    small = ("--like", "smollm2-135m", "--layers", "1", "-q")
    for out, what in ((fifo, "not a regular file"), (folder, "is a directory"),
                      (tmp_path / "no" / "x.gguf", "does not exist")):
        for cmd in (("synth", out, *small), ("quantize", "default", out, "--type", "q8_0"),
                    ("prune", "default", out, "--sparsity", "2:4")):
            r = run_ferry(*cmd)
            assert r.returncode != 0 and what in r.stderr, (cmd, r.stderr)
    assert fifo.is_fifo() and folder.is_dir() and not (tmp_path / "no").exists()
    assert not list(tmp_path.glob("*.tmp"))
