#!/usr/bin/env python3
"""Writes tests/golden/hf_models/: small Hugging Face model directories with random weights,
built by transformers from a config, and what transformers' own forward pass computes on them.

    python3 scripts/gen-golden-hf-models.py [--ferry build/ferry] [--libllama PATH/libllama.so]

One directory per architecture ferry reads from a directory, each exercising what sets it apart:
  llama    untied lm_head, grouped-query attention (8 heads over 2), a byte-level BPE tokenizer
           with SmolLM2's pre-tokenizer (digits split, then ByteLevel)
  llama31  Llama 3.1's rope scaling (rope_type llama3) over a trained context of 16, shorter
           than the test texts, so every pair's frequency matters; tied embeddings
  qwen2    q/k/v biases, tied embeddings, Qwen2's Split regex then ByteLevel
  qwen3    per-head q/k RMSNorms (random, like every norm here), head_dim 32 apart from
           hidden/heads (so q is wider than the residual), no biases, YaRN rope scaling (its
           ramp over dimensions and attention factor)
  phi3     fused qkv_proj and gate_up_proj, partial rotation (half of each head), a sliding
           window of 8 (shorter than every test text), GPT-2's
           ByteLevel pre-tokenizer alone
  mistral  head_dim given apart from hidden/heads, sliding_window, linear rope scaling, a
           SentencePiece-style BPE (Metaspace, byte fallback, <0xNN> tokens) as Llama 2 and
           Mistral ship it
  gemma3   (see build())
  mixtral  a mixture of 4 experts, 2 per token, weights renormalised over the chosen two;
           one tensor per expert (block_sparse_moe.experts.E.w1/w2/w3), as the Hub has it
  qwen3_moe  8 experts of 32, 2 per token, norm_topk_prob, with Qwen3's q/k norms
  qwen2_moe  4 experts, 2 per token, not renormalised, a shared expert of 96 behind its
           sigmoid gate, q/k/v biases, an untied lm_head

Each holds config.json, model.safetensors (bf16, so the files stay small; transformers runs
them upcast to f32, as ferry's --activations f32 reads them), tokenizer.json (trained here by
the tokenizers library on data/calib/default.txt), tokenizer_config.json with a chat template,
generation_config.json, and golden.json:
  cases[]: text, ids (tokenizers' encoding, special tokens added), last_logits (transformers'
           logits at the last position, f32), argmax (per position), greedy (12 tokens of
           transformers' generate(do_sample=False))

With --ferry and --libllama the script also writes each directory out as GGUF with
`ferry quantize DIR OUT.gguf --type f32` and runs llama.cpp on it through its C API: the
tokenization must equal tokenizers' and the last logits transformers' (max |diff| printed and
kept in golden.json's llama_cpp field). That is the check that ferry's GGUF output is a file
llama.cpp reads as the model transformers runs.

With --llama-cpp-src (a llama.cpp source tree: its convert_hf_to_gguf.py and gguf-py), every
directory but gemma3 is also converted by llama.cpp's own converter, as bf16 (the weights' own values),
into llama.cpp.gguf beside it: the test reads that file as a user's GGUF and checks it against
transformers too. Its pre-tokenizer table knows real tokenizers by a hash of their output, so
the name is given (PRE below). The converter reads a SentencePiece-style vocabulary (mistral)
from tokenizer.model, as Llama 2 and Mistral ship it, so that directory carries one: the same pieces as tokenizer.json, each merge's result scored by the merge's rank
(SentencePiece's BPE merges the best-scored pair, tokenizers' BPE the best-ranked merge). Phi-3's
byte-level vocabulary it reads as GPT-2's when tokenizer_config.json names GPT2Tokenizer, as
Phi-4's does. --convert-only converts the directories already written, rebuilding nothing
else. gemma3 is not converted: the converter writes Gemma 3 as Google ships it, every sixth
layer global and no space before the first word, while this model has a global fourth layer and
Metaspace's prefix. (The real Gemma 3 270M test reads a GGUF written by that converter.)

Needs torch, transformers, tokenizers, safetensors (a venv: pip install torch transformers).
Re-running with the same versions rewrites identical files (seeded).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
import tokenizers
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers

from llama_cpp_capi import LlamaCpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "golden", "hf_models")
CALIB = os.path.join(ROOT, "data", "calib", "default.txt")

TEXTS = [
    "The lighthouse keeper climbed 127 stairs at dawn.",
    "def add(a, b):\n    return a + b",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "Good morning",  # shorter than phi3's sliding window, so llama.cpp's logits compare there
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


# The pre-tokenizer llama.cpp's converter would detect for each byte-level directory.
PRE = {"llama": "smollm", "llama31": "smollm", "qwen2": "qwen2", "qwen3": "qwen2",
       "mixtral": "smollm", "qwen3_moe": "qwen2", "qwen2_moe": "qwen2", "phi3": "gpt-2",
       "mistral": "default"}
METASPACE = ("mistral",)
LLAMA_CPP_CONVERT = """
import os, runpy, sys
src, pre = sys.argv[1], sys.argv[2]
sys.path[:0] = [os.path.join(src, "gguf-py"), src]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[3:]
runpy.run_path(os.path.join(src, "convert_hf_to_gguf.py"), run_name="__main__")
"""

NAMES = ["llama", "llama31", "qwen2", "qwen3", "phi3", "mistral", "gemma3", "mixtral",
         "qwen3_moe", "qwen2_moe"]


def corpus():
    with open(CALIB, encoding="utf-8") as f:
        text = f.read()
    return [text] + TEXTS


def byte_level_tokenizer(pre, vocab_size, specials=SPECIALS):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    return json.loads(tok.to_str())


def metaspace_tokenizer(vocab_size):
    """Llama 2's tokenizer.json shape: <unk> <s> </s>, the 256 byte tokens, then merges' tokens;
    Metaspace (prepend "first"), byte fallback, the Replace/ByteFallback/Fuse/Strip decoder."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first",
                                                 split=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    j = json.loads(tok.to_str())
    old = j["model"]["vocab"]
    order = sorted(old, key=lambda t: old[t])
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = ["<0x%02X>" % b for b in range(256)]
    rest = [t for t in order if t not in specials and t not in byte_tokens]
    vocab = {t: i for i, t in enumerate(specials + byte_tokens + rest)}
    j["model"]["vocab"] = vocab
    for a in j["added_tokens"]:
        a["id"] = vocab[a["content"]]
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [vocab["<s>"]], "tokens": ["<s>"]}}}
    return j


def write_sentencepiece_model(tj, path):
    """tokenizer.model for a Metaspace BPE tokenizer.json (metaspace_tokenizer's shape)."""
    from sentencepiece import sentencepiece_model_pb2 as pb
    vocab = tj["model"]["vocab"]
    rank = {}
    for r, merge in enumerate(tj["model"]["merges"]):
        a, b = merge.split(" ") if isinstance(merge, str) else merge
        rank.setdefault(a + b, r)
    specials = {a["content"] for a in tj["added_tokens"]}
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.vocab_size = len(vocab)
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id, m.trainer_spec.bos_id = vocab["<unk>"], vocab["<s>"]
    m.trainer_spec.eos_id, m.trainer_spec.pad_id = vocab["</s>"], -1
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = True  # Metaspace's prepend_scheme "first"
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for piece in sorted(vocab, key=lambda t: vocab[t]):
        p = m.pieces.add()
        p.piece = piece
        p.score = -float(rank.get(piece, len(rank)))
        if piece == "<unk>":
            p.type = pb.ModelProto.SentencePiece.UNKNOWN
        elif piece in specials:
            p.type = pb.ModelProto.SentencePiece.CONTROL
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            p.type = pb.ModelProto.SentencePiece.BYTE
        else:
            p.type = pb.ModelProto.SentencePiece.NORMAL
    with open(path, "wb") as f:
        f.write(m.SerializeToString())


def convert_with_llama_cpp(src, name, d):
    if name in METASPACE:
        with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
            write_sentencepiece_model(json.load(f), os.path.join(d, "tokenizer.model"))
    if name == "phi3":
        path = os.path.join(d, "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            tconf = json.load(f)
        tconf["tokenizer_class"] = "GPT2Tokenizer"
        with open(path, "w", encoding="utf-8") as f:
            json.dump(tconf, f, ensure_ascii=False, indent=1)
    subprocess.run([sys.executable, "-c", LLAMA_CPP_CONVERT, src, PRE[name], d, "--outfile",
                    os.path.join(d, "llama.cpp.gguf"), "--outtype", "bf16"], check=True,
                   capture_output=True)


def build(name):
    if name == "llama":
        tj = byte_level_tokenizer(pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False)]), 512)
        cfg = transformers.LlamaConfig(
            vocab_size=len(tj["model"]["vocab"]), hidden_size=64, intermediate_size=160,
            num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
            max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-5, initializer_range=0.15,
            tie_word_embeddings=False, bos_token_id=None, eos_token_id=2)
        model_cls = transformers.LlamaForCausalLM
        tconf = {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}
    elif name == "llama31":
        tj = byte_level_tokenizer(pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False)]), 384)
        # Llama 3.1's rope scaling with a trained context of 16, so the test texts (15 to 42
        # tokens) reach past it and every pair's frequency is changed by it.
        cfg = transformers.LlamaConfig(
            vocab_size=len(tj["model"]["vocab"]), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=128, rms_norm_eps=1e-5, initializer_range=0.15,
            rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
                             "rope_theta": 10000.0},
            tie_word_embeddings=True, bos_token_id=None, eos_token_id=2)
        model_cls = transformers.LlamaForCausalLM
        tconf = {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}
    elif name == "qwen2":
        tj = byte_level_tokenizer(pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers.Regex(QWEN2_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), 448)
        cfg = transformers.Qwen2Config(
            vocab_size=len(tj["model"]["vocab"]), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=256, rope_theta=1000000.0, rms_norm_eps=1e-6, initializer_range=0.15,
            tie_word_embeddings=True, use_sliding_window=False, bos_token_id=None,
            eos_token_id=2)
        model_cls = transformers.Qwen2ForCausalLM
        tconf = {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}
    elif name == "qwen3":
        tj = byte_level_tokenizer(pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers.Regex(QWEN2_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), 400)
        cfg = transformers.Qwen3Config(
            vocab_size=len(tj["model"]["vocab"]), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            max_position_embeddings=256, rms_norm_eps=1e-6, initializer_range=0.15,
            rope_parameters={"rope_type": "yarn", "factor": 4.0,
                             "original_max_position_embeddings": 32, "rope_theta": 1000000.0},
            tie_word_embeddings=True, use_sliding_window=False, bos_token_id=None,
            eos_token_id=2)
        model_cls = transformers.Qwen3ForCausalLM
        tconf = {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}
    elif name == "phi3":
        # Phi-3 keeps Llama 2's <unk> <s> </s> (llama.cpp sets their flags on any model named phi3).
        tj = byte_level_tokenizer(pre_tokenizers.ByteLevel(add_prefix_space=False), 420,
                                  SPECIALS + ["<unk>", "<s>", "</s>"])
        # Phi-4-mini's partial rotation (a half of each head here) over Phi-3's fused matrices.
        cfg = transformers.Phi3Config(
            vocab_size=len(tj["model"]["vocab"]), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=256, original_max_position_embeddings=256,
            rms_norm_eps=1e-5, initializer_range=0.15,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.5},
            tie_word_embeddings=False, sliding_window=8, bos_token_id=None, eos_token_id=2,
            pad_token_id=0)
        # ... and rstrips its special tokens but those three, as llama.cpp knows by the name.
        for a in tj["added_tokens"]:
            a["rstrip"] = a["content"] not in ("<unk>", "<s>", "<|endoftext|>")
        model_cls = transformers.Phi3ForCausalLM
        tconf = {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}
    elif name == "gemma3":
        # Gemma 3's differences at once: three sliding layers of window 8 (shorter than the
        # texts) then a global one, the two rope bases (the global one linearly scaled, as the
        # 4B+ models are), query_pre_attn_scalar, final logit soft-capping, GeGLU, sandwich
        # norms, q/k norms, sqrt(hidden) embedding scale; a SentencePiece-style tokenizer.
        tj = metaspace_tokenizer(600)
        cfg = transformers.Gemma3TextConfig(
            vocab_size=len(tj["model"]["vocab"]), hidden_size=64, intermediate_size=128,
            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            query_pre_attn_scalar=32, max_position_embeddings=512, sliding_window=8,
            layer_types=["sliding_attention"] * 3 + ["full_attention"],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                "rope_theta": 1000000.0}},
            final_logit_softcapping=4.0, rms_norm_eps=1e-6, initializer_range=0.15,
            tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)
        model_cls = transformers.Gemma3ForCausalLM
        tconf = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                 "add_bos_token": True}
    elif name == "mixtral":
        tj = byte_level_tokenizer(pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False)]), 420)
        cfg = transformers.MixtralConfig(
            vocab_size=len(tj["model"]["vocab"]), hidden_size=64, intermediate_size=96,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=256,
            rope_theta=10000.0, rms_norm_eps=1e-5, initializer_range=0.15, sliding_window=None,
            tie_word_embeddings=False, bos_token_id=None, eos_token_id=2)
        model_cls = transformers.MixtralForCausalLM
        tconf = {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}
    elif name in ("qwen3_moe", "qwen2_moe"):
        tj = byte_level_tokenizer(pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers.Regex(QWEN2_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), 440)
        common = dict(vocab_size=len(tj["model"]["vocab"]), hidden_size=64,
                      intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
                      initializer_range=0.15, tie_word_embeddings=True,
                      use_sliding_window=False, decoder_sparse_step=1, mlp_only_layers=[],
                      num_experts_per_tok=2, bos_token_id=None, eos_token_id=2)
        if name == "qwen3_moe":
            cfg = transformers.Qwen3MoeConfig(**common, num_experts=8, moe_intermediate_size=32,
                                              norm_topk_prob=True, rope_theta=1000000.0)
            model_cls = transformers.Qwen3MoeForCausalLM
        else:
            # Untied, as Qwen1.5-MoE is (llama.cpp's qwen2moe requires output.weight).
            common["tie_word_embeddings"] = False
            cfg = transformers.Qwen2MoeConfig(**common, num_experts=4, moe_intermediate_size=48,
                                              shared_expert_intermediate_size=96,
                                              norm_topk_prob=False, rope_theta=1000000.0)
            model_cls = transformers.Qwen2MoeForCausalLM
        tconf = {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}
    else:
        tj = metaspace_tokenizer(640)
        cfg = transformers.MistralConfig(
            vocab_size=len(tj["model"]["vocab"]), hidden_size=64, intermediate_size=192,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
            max_position_embeddings=512, sliding_window=128,
            rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
            rms_norm_eps=1e-5, initializer_range=0.15, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
        model_cls = transformers.MistralForCausalLM
        tconf = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                 "add_bos_token": True}
    torch.manual_seed({"llama": 1, "qwen2": 2, "mistral": 3, "llama31": 4, "qwen3": 5,
                       "phi3": 6, "gemma3": 7, "mixtral": 8, "qwen3_moe": 9,
                       "qwen2_moe": 10}[name])
    model = model_cls(cfg)
    # transformers initialises norms to 1 and biases to 0; random ones make a wrong norm or a
    # dropped bias show in the logits.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_((1.0 if "norm" in pname else 0.0) + 0.2 * torch.randn_like(p))
    return tj, cfg, model, tconf


def write_dir(name, d):
    tj, cfg, model, tconf = build(name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    # The reference is the directory as transformers loads it for a user, in f32 (the model in
    # memory went through bf16 whole, its rotary frequencies too).
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
    tconf = dict(tconf, chat_template=CHATML, model_max_length=cfg.max_position_embeddings,
                 tokenizer_class="PreTrainedTokenizerFast")
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tconf, f, ensure_ascii=False, indent=1)
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    cases = []
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=True).ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
            gen = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 eos_token_id=None, pad_token_id=0)[0][len(ids):]
        cases.append({"text": text, "ids": ids,
                      "last_logits": [round(float(x), 6) for x in logits[-1]],
                      "argmax": [int(x) for x in logits.argmax(-1)],
                      "greedy": [int(x) for x in gen]})
    return cases


def check_llama_cpp(lib, gguf_path, cases, window):
    """Tokens always; logits where llama.cpp runs the same attention: it reads a sliding window
    but runs phi3 and llama-architecture files without one, so a text longer than the window is
    not compared (returns None when none was)."""
    llm = LlamaCpp(lib, gguf_path)
    worst = None
    for c in cases:
        ids = llm.tokenize(c["text"].encode(), True, True)
        if ids != c["ids"]:
            sys.exit(f"{gguf_path}: llama.cpp tokenizes {c['text']!r} as {ids}, "
                     f"tokenizers as {c['ids']}")
        if window and len(ids) > window:
            continue
        worst = worst or 0.0
        got = llm.last_logits(ids)
        want = np.array(c["last_logits"])
        worst = max(worst, float(np.max(np.abs(got - want))))
        if int(np.argmax(got)) != int(np.argmax(want)):
            sys.exit(f"{gguf_path}: llama.cpp's top token differs from transformers'")
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", help="ferry binary: also convert each directory to GGUF")
    ap.add_argument("--libllama", help="llama.cpp's libllama.so: check ferry's GGUF with it")
    ap.add_argument("--llama-cpp-src", help="llama.cpp's source tree: also write llama.cpp.gguf")
    ap.add_argument("--only", choices=NAMES)
    ap.add_argument("--convert-only", action="store_true",
                    help="with --llama-cpp-src: convert the directories as they are")
    args = ap.parse_args()
    for name in NAMES:
        if args.only and name != args.only:
            continue
        d = os.path.join(OUT, name)
        if args.convert_only and name not in PRE:
            continue  # gemma3 (above)
        if args.convert_only:
            with open(os.path.join(d, "golden.json"), encoding="utf-8") as f:
                golden = json.load(f)
            convert_with_llama_cpp(args.llama_cpp_src, name, d)
            golden["llama_cpp_gguf"] = "llama.cpp.gguf, by llama.cpp's convert_hf_to_gguf.py"
            with open(os.path.join(d, "golden.json"), "w", encoding="utf-8") as f:
                json.dump(golden, f, ensure_ascii=False, indent=1)
                f.write("\n")
            print(f"{name}: llama.cpp.gguf")
            continue
        cases = write_dir(name, d)
        golden = {"generator": "scripts/gen-golden-hf-models.py",
                  "versions": {"torch": torch.__version__,
                               "transformers": transformers.__version__,
                               "tokenizers": tokenizers.__version__},
                  "cases": cases}
        if args.ferry and args.libllama:
            with tempfile.TemporaryDirectory() as tmp:
                g = os.path.join(tmp, name + ".gguf")
                subprocess.run([args.ferry, "quantize", d, g, "--type", "f32", "-q"], check=True)
                # llama.cpp applies Gemma 3's window, not the others'.
                window = None if name == "gemma3" else json.load(
                    open(os.path.join(d, "config.json"))).get("sliding_window")
                worst = check_llama_cpp(args.libllama, g, cases, window)
                if worst is None:
                    print(f"{name}: llama.cpp on ferry's GGUF: tokens identical; logits not "
                          f"compared (every text is longer than the sliding window {window}, "
                          "which llama.cpp does not apply)")
                    golden["llama_cpp"] = {"tokens": "identical"}
                else:
                    print(f"{name}: llama.cpp on ferry's GGUF: max |logit diff| {worst:.2e}")
                    golden["llama_cpp"] = {"max_abs_logit_diff": round(worst, 6)}
        if args.llama_cpp_src and name in PRE:
            convert_with_llama_cpp(args.llama_cpp_src, name, d)
            golden["llama_cpp_gguf"] = "llama.cpp.gguf, by llama.cpp's convert_hf_to_gguf.py"
        with open(os.path.join(d, "golden.json"), "w", encoding="utf-8") as f:
            json.dump(golden, f, ensure_ascii=False, indent=1)
            f.write("\n")
        n = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"{name}: {len(cases)} cases, {n / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
