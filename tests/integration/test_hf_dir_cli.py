"""`-m DIR` with a Hugging Face model directory, end to end through the CLI.

The directory is the default model rewritten the way transformers lays it out: config.json,
f32 weights in two safetensors shards written by the `safetensors` library with their index,
q and k back in rotate-half order, a ByteLevel tokenizer.json over the GGUF's vocabulary and
merges, tokenizer_config.json carrying the chat template, generation_config.json. Run with exact
float math on both sides (--activations f32), the directory must answer what the GGUF answers.
"""
import json
import os
import re

import httpx
import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.numpy import save_file

from conftest import run_ferry
from server_util import Server

PROMPTS = ["The capital of France is", "Once upon a time, in a small village,",
           "def fibonacci(n):"]

HF_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
            "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
            "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
            "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def field(r, key):
    return r.fields[key].contents()


def unpermute(w, n_head):
    # llama.cpp's converter interleaves each head's two rotary halves; transformers keeps them
    # as halves.
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)


def write_hf_dir(gguf_path, out, do_sample=True):
    r = GGUFReader(gguf_path)
    n_head = int(field(r, "llama.attention.head_count"))
    n_head_kv = int(field(r, "llama.attention.head_count_kv"))
    tensors = {}
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        parts = t.name.split(".")
        if t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            name = "model.norm.weight"
        elif t.name == "output.weight":
            name = "lm_head.weight"
        else:
            assert parts[0] == "blk", t.name
            name = f"model.layers.{parts[1]}.{HF_NAMES[parts[2]]}.weight"
            if parts[2] == "attn_q":
                w = unpermute(w, n_head)
            elif parts[2] == "attn_k":
                w = unpermute(w, n_head_kv)
        tensors[name] = np.ascontiguousarray(w)
    names = sorted(tensors)
    shards = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({n: tensors[n] for n in shard}, os.path.join(out, fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in shard})
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.nbytes for v in tensors.values())},
                   "weight_map": weight_map}, f)

    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": int(field(r, "llama.embedding_length")),
        "intermediate_size": int(field(r, "llama.feed_forward_length")),
        "num_hidden_layers": int(field(r, "llama.block_count")),
        "num_attention_heads": n_head, "num_key_value_heads": n_head_kv,
        "rms_norm_eps": float(field(r, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(field(r, "llama.rope.freq_base")),
        "max_position_embeddings": int(field(r, "llama.context_length")),
        "vocab_size": int(field(r, "llama.vocab_size")),
        "tie_word_embeddings": "lm_head.weight" not in tensors,
        "torch_dtype": "float32", "hidden_act": "silu",
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)

    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": list(merges)},
    }
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    eos = tokens[int(field(r, "tokenizer.ggml.eos_token_id"))]
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": tokens[int(field(r, "tokenizer.ggml.bos_token_id"))],
                   "eos_token": eos, "add_bos_token": False,
                   "chat_template": field(r, "tokenizer.chat_template")}, f)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": [2, 0], "do_sample": do_sample,
                   "temperature": 0.7, "top_p": 0.9}, f)
    return config


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory, model_path):
    d = tmp_path_factory.mktemp("smollm2-hf")
    write_hf_dir(model_path, str(d))
    return str(d)


def completion(*args):
    r = run_ferry("run", *args, "-n", 16, "--temperature", 0, "--activations", "f32",
                  timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_info_reads_the_directory(hf_dir, model_path):
    r = run_ferry("info", "-m", hf_dir, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    g = json.loads(run_ferry("info", "-m", model_path, "--json").stdout)
    assert d["format"] == "hf" and g["format"] == "gguf"
    for k in ["architecture", "n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff",
              "n_vocab", "context_length", "rope_theta", "parameters", "bos_token_id",
              "eos_token_id"]:
        assert d[k] == g[k], k
    assert d["rope_style"] == "neox" and g["rope_style"] == "normal"
    assert set(d["tensor_types"]) == {"f32"}
    assert d["chat_template"] == "jinja"
    assert d["generation_defaults"] == {"temperature": pytest.approx(0.7),
                                        "top_p": pytest.approx(0.9)}


def test_greedy_text_is_the_ggufs(hf_dir, model_path):
    for p in PROMPTS:
        assert completion("-m", hf_dir, "-p", p) == completion("-m", model_path, "-p", p), p


def test_chat_template_comes_from_tokenizer_config(hf_dir, model_path):
    q = "What is the capital of France?"
    a = completion("-m", hf_dir, "--chat", "-p", q)
    assert a == completion("-m", model_path, "--chat", "-p", q)
    assert "Paris" in a


def test_weights_quantized_at_load(hf_dir):
    r = run_ferry("run", "-m", hf_dir, "--weights", "q8_0", "-p", "The capital of France is",
                  "-n", 8, "--temperature", 0, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    r = run_ferry("bench", "decode", "-m", hf_dir, "--weights", "int8", "-p", 16, "-n", 4, "-r", 1,
                  "--json",
                  timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["weight_type"] == "int8"
    # SmolLM2's rows of 576 do not split into q4_k's 256-element blocks: those matrices take
    # q5_0, as `ferry quantize` (and llama.cpp) does, and the load says so.
    r = run_ferry("run", "-m", hf_dir, "--weights", "q4_k", "-p", "x", "-n", 1)
    assert r.returncode == 0, r.stderr
    assert re.search(r"note: --weights q4_k: \d+ matrices as q5_0 \(rows of 576", r.stderr), r.stderr
    r = run_ferry("run", "-m", hf_dir, "--weights", "q3_zz", "-p", "x", "-n", 1)
    assert r.returncode != 0 and "not a type ferry writes" in r.stderr, r.stderr


def test_generation_config_sets_the_sampling_defaults(hf_dir, tmp_path):
    """A model whose generation_config.json samples with top_k 1 answers greedily wherever the
    request or the command line leaves top-k out, and an explicit value still wins."""
    d = broken_copy(hf_dir, str(tmp_path / "topk1"), lambda d: replace_json(
        d, "generation_config.json", lambda j: j.update(do_sample=True, top_k=1)))
    p = "Once upon a time, in a small village,"
    greedy = completion("-m", hf_dir, "-p", p)
    r = run_ferry("run", "-m", d, "-p", p, "-n", 16, "--seed", 3, "--activations", "f32")
    assert r.returncode == 0, r.stderr
    assert r.stdout == greedy
    r = run_ferry("run", "-m", d, "-p", p, "-n", 16, "--seed", 3, "--activations", "f32",
                  "--top-k", 0, "--temperature", 1.5)
    assert r.returncode == 0, r.stderr
    assert r.stdout != greedy

    s = Server("--activations", "f32", model=d)
    try:
        body = {"prompt": p, "max_tokens": 16, "seed": 3}
        a = httpx.post(s.url + "/v1/completions", json=body, timeout=120)
        b = httpx.post(s.url + "/v1/completions", json={**body, "temperature": 0}, timeout=120)
        c = httpx.post(s.url + "/v1/completions", json={**body, "top_k": 0, "temperature": 1.5},
                       timeout=120)
        assert a.status_code == b.status_code == c.status_code == 200, (a.text, c.text)
        text = lambda r: r.json()["choices"][0]["text"]
        assert text(a) == text(b) and text(c) != text(b)
    finally:
        assert s.stop() == 0
    assert re.search(r"generation_config.json sampling:.* top_k 1\b", s.output()), s.output()


def broken_copy(src, dst, edit):
    os.makedirs(dst)
    for f in os.listdir(src):
        os.symlink(os.path.join(src, f), os.path.join(dst, f))
    edit(dst)
    return dst


def replace_json(d, name, change):
    path = os.path.join(d, name)
    j = json.load(open(path))
    os.unlink(path)
    change(j)
    with open(path, "w") as f:
        json.dump(j, f)


@pytest.mark.parametrize("case,edit,expect", [
    ("no-tokenizer", lambda d: os.unlink(os.path.join(d, "tokenizer.json")), "tokenizer.json"),
    ("architecture", lambda d: replace_json(d, "config.json", lambda j: j.update(
        architectures=["MambaForCausalLM"], model_type="mamba")), "mamba"),
    ("rope-scaling", lambda d: replace_json(d, "config.json", lambda j: j.update(
        rope_scaling={"rope_type": "longrope", "factor": 4.0})), "longrope"),
    ("missing-shard", lambda d: os.unlink(
        os.path.join(d, "model-00002-of-00002.safetensors")), "model-00002-of-00002"),
    ("bad-eos", lambda d: replace_json(d, "generation_config.json", lambda j: j.update(
        eos_token_id=[10 ** 6])), "1000000"),
    ("bad-template-list", lambda d: replace_json(d, "tokenizer_config.json", lambda j: j.update(
        chat_template=[{"name": "tool_use", "template": "x"}])), "default"),
])
def test_broken_directories_are_refused_clearly(hf_dir, tmp_path, case, edit, expect):
    d = broken_copy(hf_dir, str(tmp_path / case), edit)
    r = run_ferry("run", "-m", d, "-p", "hi", "-n", 1, timeout=300)
    assert r.returncode != 0, case
    assert expect in r.stderr, (case, r.stderr)
    assert "Traceback" not in r.stderr and not re.search(r"terminate|Aborted|what\(\)", r.stderr)


def test_a_directory_without_config_is_not_a_model(tmp_path):
    r = run_ferry("run", "-m", str(tmp_path), "-p", "hi", "-n", 1)
    assert r.returncode != 0 and "config.json" in r.stderr, r.stderr


def test_chat_template_file_overrides_the_models(hf_dir, tmp_path):
    t = tmp_path / "qa.jinja"
    t.write_text("{% for m in messages %}Q: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}A:{% endif %}")
    q = "What is the capital of France?"
    # A plain run echoes its prompt; a chat run prints the reply only.
    assert (f"Q: {q}\nA:" + completion("-m", hf_dir, "--chat-template", str(t), "--chat", "-p", q)
            == completion("-m", hf_dir, "-p", f"Q: {q}\nA:"))
    bad = tmp_path / "bad.jinja"
    bad.write_text("line one\n{% for m in messages %}{{ m.content }\n")
    r = run_ferry("run", "-m", hf_dir, "--chat-template", str(bad), "--chat", "-p", q, "-n", 1)
    assert r.returncode != 0 and "line 2" in r.stderr, r.stderr


def test_quantize_writes_the_directory_as_gguf(hf_dir, model_path, tmp_path):
    """ferry quantize DIR OUT.gguf: the SmolLM2 directory written back as GGUF answers as the
    GGUF it came from (f32, q and k re-interleaved for GGUF's llama rotation, tokenizer from
    tokenizer.json), and in q8_0 as the directory quantized at load does."""
    f32 = str(tmp_path / "smollm2-f32.gguf")
    r = run_ferry("quantize", hf_dir, f32, "--type", "f32", "-q", timeout=300)
    assert r.returncode == 0, r.stderr
    info = json.loads(run_ferry("info", "-m", f32, "--json").stdout)
    g = json.loads(run_ferry("info", "-m", model_path, "--json").stdout)
    assert info["format"] == "gguf" and info["rope_style"] == "normal"
    for k in ["architecture", "n_layer", "n_embd", "n_head", "n_head_kv", "n_vocab",
              "context_length", "rope_theta", "parameters", "bos_token_id", "eos_token_id"]:
        assert info[k] == g[k], k
    for p in PROMPTS:
        assert completion("-m", f32, "-p", p) == completion("-m", model_path, "-p", p), p
    q = "What is the capital of France?"
    assert completion("-m", f32, "--chat", "-p", q) == completion("-m", model_path, "--chat", "-p", q)

    q8 = str(tmp_path / "smollm2-q8_0.gguf")
    r = run_ferry("quantize", hf_dir, q8, "--type", "q8_0", "-q", timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(run_ferry("info", "-m", q8, "--json").stdout)["tensor_types"].keys() == {
        "q8_0", "f32"}
    p = PROMPTS[0]
    assert completion("-m", q8, "-p", p) == completion("-m", hf_dir, "--weights", "q8_0", "-p", p)


def test_quantize_refuses_what_it_cannot_write(hf_dir, tmp_path):
    out = str(tmp_path / "x.gguf")
    r = run_ferry("quantize", hf_dir, out, "--type", "int4", "--method", "gptq")
    assert r.returncode != 0 and "convert the directory first" in r.stderr, r.stderr
    # A tensor with no GGUF name would be dropped: refused, naming it.
    def add_extra(d):
        save_file({"model.vision_tower.proj.weight": np.zeros((4, 4), np.float32)},
                  os.path.join(d, "extra.safetensors"))
        replace_json(d, "model.safetensors.index.json", lambda j: j["weight_map"].update(
            {"model.vision_tower.proj.weight": "extra.safetensors"}))
    d = broken_copy(hf_dir, str(tmp_path / "extra"), add_extra)
    r = run_ferry("quantize", d, out, "--type", "f16")
    assert r.returncode != 0 and "model.vision_tower.proj.weight" in r.stderr, r.stderr
    assert not os.path.exists(out)
    # A pre-tokenizer GGUF has no name for.
    d = broken_copy(hf_dir, str(tmp_path / "pre"), lambda d: replace_json(
        d, "tokenizer.json", lambda j: j.update(pre_tokenizer={"type": "Whitespace"})))
    r = run_ferry("quantize", d, out, "--type", "f16")
    assert r.returncode != 0 and "tokenizer.ggml.pre" in r.stderr, r.stderr


def test_fused_checkpoints_refuse_calibrated_quantization(tmp_path):
    """Phi-3's fused q/k/v and gate/up convert and round to nearest; GPTQ / AWQ / SmoothQuant,
    which work on the separate matrices, say so instead of writing an unsmoothed file."""
    phi3 = os.path.join(os.path.dirname(os.path.dirname(__file__)), "golden", "hf_models", "phi3")
    f16 = str(tmp_path / "phi3-f16.gguf")
    r = run_ferry("quantize", phi3, f16, "--type", "f16", "-q")
    assert r.returncode == 0, r.stderr
    r = run_ferry("quantize", f16, str(tmp_path / "q4.gguf"), "--type", "q4_0", "-q")
    assert r.returncode == 0, r.stderr
    for extra in (["--type", "int4", "--method", "gptq"], ["--type", "int4", "--method", "awq"],
                  ["--type", "w8a8", "--smooth-alpha", "0.5"]):
        r = run_ferry("quantize", f16, str(tmp_path / "x.gguf"), *extra, "-q")
        assert r.returncode != 0 and "fuses them" in r.stderr, (extra, r.stderr)


def test_mixture_of_experts_info_quantize_and_calibration(tmp_path):
    """A mixture converts and re-rounds its stacked experts like any matrix, keeps its routers
    in f32, says what it is in `info`, and refuses calibrated methods instead of calibrating
    each expert on tokens that are not its own."""
    d = os.path.join(os.path.dirname(os.path.dirname(__file__)), "golden", "hf_models",
                     "qwen2_moe")
    r = run_ferry("info", "-m", d, "--json")
    assert r.returncode == 0, r.stderr
    ex = json.loads(r.stdout)["experts"]
    assert {k: ex[k] for k in ("n_expert", "n_expert_used", "expert_ffn", "shared_expert_ffn",
                               "weights_renormalised")} == {
        "n_expert": 4, "n_expert_used": 2, "expert_ffn": 48, "shared_expert_ffn": 96,
        "weights_renormalised": False}
    assert 0 < ex["active_parameters"] < json.loads(r.stdout)["parameters"]
    f16 = str(tmp_path / "moe-f16.gguf")
    assert run_ferry("quantize", d, f16, "--type", "f16", "-q").returncode == 0
    q8 = str(tmp_path / "moe-q8.gguf")
    r = run_ferry("quantize", f16, q8, "--type", "q8_0", "-q")
    assert r.returncode == 0, r.stderr
    ts = {t.name: t.tensor_type.name for t in GGUFReader(q8).tensors}
    assert ts["blk.0.ffn_gate_inp.weight"] == "F32" and ts["blk.0.ffn_gate_inp_shexp.weight"] == "F32"
    assert ts["blk.0.ffn_up_exps.weight"] == "Q8_0"
    r = run_ferry("run", "-m", q8, "-p", "The lighthouse", "-n", 4, "--temperature", 0)
    assert r.returncode == 0 and "generated: 4 tokens" in r.stderr, r.stderr
    for extra in (["--type", "int4", "--method", "gptq"], ["--type", "w8a8", "--smooth-alpha",
                                                           "0.5"]):
        r = run_ferry("quantize", f16, str(tmp_path / "x.gguf"), *extra, "-q")
        assert r.returncode != 0 and "mixture of experts" in r.stderr, (extra, r.stderr)
