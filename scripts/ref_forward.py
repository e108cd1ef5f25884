#!/usr/bin/env python3
"""A small NumPy reference of the llama-family forward pass, read straight from a GGUF file.

Readable first (llama2.c style): one function per step, no caching tricks. Used by
scripts/gen_golden.py to bracket llama.cpp's logits from the "exact" side:

  mode "exact"  weights dequantized with the `gguf` package (Q4_1 / Q8_0 -> float), every
                activation kept in float64. This is what an ideal f32 implementation of the
                quantized model approaches.
  mode "f32"    the same math with float32 activations and float32 weights, i.e. what a
                straightforward C++ f32 implementation (dequantize, then f32 dot) computes.
  mode "ggml"   emulates what llama.cpp's CPU backend does on AVX2: activations quantized to
                Q8_1 (for Q4_1 weights) or Q8_0 (for Q8_0 weights) blocks of 32 before every
                matmul, Q/K/V and the softmax probabilities rounded to f16 (f16 KV cache,
                no flash attention), RoPE angles built in f32 the way ggml builds them.
                Used to check that we understand where llama.cpp's numbers come from.
  mode "int8"   ferry's Activations::Int8: each block of 32 activations rounded to steps of
                amax / 127 (float32, ties to even) before every matmul, everything else exact.
                With `dither` > 0 every activation is first moved by a relative dither of that
                size (seeded), which stands in for the float-rounding differences between two
                correct implementations (ferry's scalar, AVX2 and AVX-512 levels): on the 8-bit
                grid those flip roundings and the flips compound over the layers.
                scripts/activation_noise.py samples that spread.

Layout facts (checked against llama.cpp's logits, see tests/golden/README.md):
  * GGUF stores a 2-D weight with ne = [n_in, n_out]; as a NumPy array it is (n_out, n_in),
    so y = W @ x.
  * arch "llama" uses LLAMA_ROPE_TYPE_NORM: rotate adjacent pairs (x[2i], x[2i+1]) by
    pos * base^(-2i/head_dim). The HF->GGUF converter permutes the Q/K rows so that this
    matches HF's rotate_half ("NEOX") on the original weights.
  * GQA: query head h reads kv head h // (n_head / n_head_kv).
  * no output.weight -> the LM head is tied to token_embd.weight.

Usage: ref_forward.py MODEL.gguf --ids 504,3575,282,4649,314 [--mode exact|ggml] [--rope norm|neox]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize

QK = 32  # block size of Q4_1 / Q8_0 / Q8_1


# ----------------------------------------------------------------------------------------
# loading


class Weight:
    """One weight matrix (n_out, n_in). `w` is the dequantized float64 matrix. For Q4_1 we
    also keep the per-block scale part (d*q) and the per-block mins m separately, which is
    what the ggml emulation needs (ggml computes sum(d4*d8*sum(q4*q8)) + sum(m4*s8))."""

    def __init__(self, tensor):
        self.qtype = tensor.tensor_type
        n_in = int(tensor.shape[0])
        w = dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        self.w = w.reshape(-1, n_in).astype(np.float64)
        self.dq = None
        self.m = None
        if self.qtype == GGMLQuantizationType.Q4_1:
            raw = np.asarray(tensor.data, dtype=np.uint8).reshape(-1, 20)  # d f16, m f16, 16 B nibbles
            d = raw[:, 0:2].copy().view(np.float16).astype(np.float64)
            m = raw[:, 2:4].copy().view(np.float16).astype(np.float64)
            qs = raw[:, 4:]
            q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float64)  # j, j+16
            self.dq = (d * q).reshape(self.w.shape)
            self.m = m.reshape(self.w.shape[0], -1)  # (n_out, n_in/32)
            # our own Q4_1 parsing must agree with the gguf package's dequantizer
            ref = (self.dq.reshape(-1, QK) + m).reshape(self.w.shape).astype(np.float32)
            assert np.array_equal(ref, self.w.astype(np.float32)), "Q4_1 layout mismatch"


class Model:
    def __init__(self, path: str):
        r = GGUFReader(path)
        f = r.fields
        arch = f["general.architecture"].contents()
        self.arch = arch
        self.n_layer = int(f[f"{arch}.block_count"].contents())
        self.n_embd = int(f[f"{arch}.embedding_length"].contents())
        self.n_head = int(f[f"{arch}.attention.head_count"].contents())
        self.n_head_kv = int(f[f"{arch}.attention.head_count_kv"].contents())
        self.eps = float(np.float32(f[f"{arch}.attention.layer_norm_rms_epsilon"].contents()))
        self.rope_base = float(f[f"{arch}.rope.freq_base"].contents())
        self.head_dim = self.n_embd // self.n_head
        t = {x.name: x for x in r.tensors}
        self.tok_embd = Weight(t["token_embd.weight"])
        self.output = Weight(t["output.weight"]) if "output.weight" in t else self.tok_embd
        self.output_norm = np.asarray(t["output_norm.weight"].data, dtype=np.float64)
        self.layers = []
        for i in range(self.n_layer):
            p = f"blk.{i}."
            self.layers.append({
                "attn_norm": np.asarray(t[p + "attn_norm.weight"].data, dtype=np.float64),
                "ffn_norm": np.asarray(t[p + "ffn_norm.weight"].data, dtype=np.float64),
                **{k: Weight(t[p + k + ".weight"]) for k in
                   ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")},
            })


# ----------------------------------------------------------------------------------------
# ggml emulation helpers


def f16(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)


def quantize_q8(x):
    """ggml's AVX2 quantize_row_q8_0 / q8_1: per block of 32, d = amax/127 (stored f16),
    q = round-half-even(x * 127/amax), s = f16(d * sum(q)). x: (T, n) -> q (T, n/32, 32),
    d16 (T, n/32, 1), s16 (T, n/32)."""
    xb = np.asarray(x, dtype=np.float32).reshape(x.shape[0], -1, QK)
    amax = np.max(np.abs(xb), axis=2, keepdims=True)
    d = amax / np.float32(127.0)
    with np.errstate(divide="ignore"):
        idv = np.where(amax != 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    q = np.rint(xb * idv).astype(np.float64)
    d16 = f16(d)
    s16 = f16((d.astype(np.float32)[..., 0] * q.sum(axis=2).astype(np.float32)))
    return q, d16, s16


DITHER = {"size": 0.0, "rng": None}


def quantize_int8(x):
    """ferry's 8-bit grid: per block of 32, d = amax / 127 in float32, v = rint(x / d)."""
    xb = np.asarray(x, dtype=np.float64)
    if DITHER["size"] > 0:
        xb = xb * (1.0 + DITHER["size"] * DITHER["rng"].standard_normal(xb.shape))
    xb = xb.astype(np.float32).reshape(x.shape[0], -1, QK)
    amax = np.max(np.abs(xb), axis=2, keepdims=True)
    d = amax / np.float32(127.0)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    v = np.rint(xb * idv).astype(np.float64)
    return (v * d.astype(np.float64)).reshape(x.shape)


def matmul(x, W: Weight, mode: str):
    """y[t] = W @ x[t] for x (T, n_in)."""
    if mode == "exact":
        return x @ W.w.T
    if mode == "int8":
        return quantize_int8(x) @ W.w.T
    if mode == "f32":
        if not hasattr(W, "w32"):
            W.w32 = W.w.astype(np.float32)
        return x.astype(np.float32) @ W.w32.T
    q, d16, s16 = quantize_q8(x)
    xq = (q * d16).reshape(x.shape)  # the activations ggml actually multiplies with
    if W.qtype == GGMLQuantizationType.Q4_1:
        return xq @ W.dq.T + s16 @ W.m.T
    if W.qtype == GGMLQuantizationType.Q8_0:
        return xq @ W.w.T
    raise NotImplementedError(f"ggml emulation of {W.qtype.name}")


# ----------------------------------------------------------------------------------------
# the forward pass


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_angles(n_pos, head_dim, base, mode):
    """(n_pos, head_dim/2) angles pos * base^(-2i/head_dim)."""
    if mode in ("exact", "f32"):
        inv = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        return np.arange(n_pos, dtype=np.float64)[:, None] * inv[None, :]
    # ggml_rope_cache_init: theta = pos (f32); theta *= powf(base, -2/n_dims) per pair
    scale = np.float32(np.power(np.float32(base), np.float32(-2.0) / np.float32(head_dim)))
    ang = np.zeros((n_pos, head_dim // 2), dtype=np.float32)
    theta = np.arange(n_pos, dtype=np.float32)
    for i in range(head_dim // 2):
        ang[:, i] = theta
        theta = (theta * scale).astype(np.float32)
    return ang.astype(np.float64)


def rope(x, ang, style):
    """x: (T, H, D). style "norm": pairs (2i, 2i+1); "neox": pairs (i, i + D/2)."""
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    D = x.shape[-1]
    if style == "norm":
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., : D // 2], x[..., D // 2:]
    ra, rb = a * cos - b * sin, a * sin + b * cos
    out = np.empty_like(x)
    if style == "norm":
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., : D // 2], out[..., D // 2:] = ra, rb
    return out


def attention(q, k, v, n_rep, mode):
    """q (T, H, D), k/v (T, Hkv, D); causal; returns (T, H*D)."""
    T, H, D = q.shape
    if mode == "ggml":  # f16 KV cache; ggml converts q to f16 for the f16 dot
        q, k, v = f16(q), f16(k), f16(v)
    k = np.repeat(k, n_rep, axis=1)  # kv head for query head h is h // n_rep
    v = np.repeat(v, n_rep, axis=1)
    s = np.einsum("thd,shd->hts", q, k) * q.dtype.type(1.0 / np.sqrt(D))
    s = s + np.triu(np.full((T, T), -np.inf, dtype=s.dtype), k=1)[None]
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(axis=-1, keepdims=True)
    if mode == "ggml":
        p = f16(p)
    o = np.einsum("hts,shd->thd", p, v)
    return o.reshape(T, H * D)


def silu(x):
    with np.errstate(over="ignore"):  # exp(-x) -> inf for very negative x gives silu -> -0
        return x / (1.0 + np.exp(-x))


def forward(model: Model, ids, mode="exact", rope_style="norm", dither=0.0, seed=0,
            all_positions=False):
    """Final-position logits (float32, n_vocab) for the prompt `ids`; with all_positions, every
    position's (T, n_vocab): row i is the distribution of token i + 1."""
    DITHER["size"], DITHER["rng"] = dither, np.random.default_rng(seed)
    ids = np.asarray(ids, dtype=np.int64)
    T = len(ids)
    H, Hkv, D = model.n_head, model.n_head_kv, model.head_dim
    dt = np.float32 if mode == "f32" else np.float64
    x = model.tok_embd.w[ids].astype(dt)  # get_rows dequantizes exactly
    ang = rope_angles(T, D, model.rope_base, mode).astype(dt)
    for L in model.layers:
        h = rmsnorm(x, L["attn_norm"].astype(dt), dt(model.eps))
        q = matmul(h, L["attn_q"], mode).reshape(T, H, D)
        k = matmul(h, L["attn_k"], mode).reshape(T, Hkv, D)
        v = matmul(h, L["attn_v"], mode).reshape(T, Hkv, D)
        q, k = rope(q, ang, rope_style), rope(k, ang, rope_style)
        x = x + matmul(attention(q, k, v, H // Hkv, mode), L["attn_output"], mode)
        h = rmsnorm(x, L["ffn_norm"].astype(dt), dt(model.eps))
        g = silu(matmul(h, L["ffn_gate"], mode)) * matmul(h, L["ffn_up"], mode)
        x = x + matmul(g, L["ffn_down"], mode)
    h = rmsnorm(x if all_positions else x[-1:], model.output_norm.astype(dt), dt(model.eps))
    logits = matmul(h, model.output, mode).astype(np.float32)
    return logits if all_positions else logits[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--mode", choices=["exact", "f32", "ggml", "int8"], default="exact")
    ap.add_argument("--rope", choices=["norm", "neox"], default="norm")
    ap.add_argument("--dither", type=float, default=0.0, help="relative dither (mode int8)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    m = Model(a.model)
    logits = forward(m, [int(t) for t in a.ids.split(",")], a.mode, a.rope, a.dither, a.seed)
    top = np.argsort(-logits, kind="stable")[:10]
    print("top-10:", ", ".join(f"{int(i)}:{logits[i]:.4f}" for i in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
