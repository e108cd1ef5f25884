#!/usr/bin/env python3
"""Writes ferry's golden reference files (tests/golden/) with llama.cpp via llama-cpp-python,
plus a NumPy reference forward pass (scripts/ref_forward.py). Run through scripts/gen-golden.sh,
which sets up the pinned venv. Deterministic: running it again rewrites identical files.

  tokenizer.json       text -> token ids (llama_tokenize, add_bos=False, special=True)
  logits/index.json    prompts, ids, argmax, top-10, llama.cpp vs NumPy differences
  logits/NN_name.f32         llama.cpp final-position logits, little-endian float32 [n_vocab]
  logits/NN_name.numpy.f32   NumPy (exact, float64 math) final-position logits, same layout
  greedy.json          32-token greedy continuations (argmax over raw logits), with margins
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # keep NumPy's BLAS deterministic
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_forward  # noqa: E402

N_THREADS = 1  # llama.cpp threads used for every golden number (see check_threads)
N_CTX = 1024
N_BATCH = 512
N_GREEDY = 32

SYSTEM_DEFAULT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(messages, add_generation_prompt=True):
    """The model's own chat template (tokenizer.chat_template), written out: a default
    system message is inserted when the first message is not a system one."""
    out = ""
    if messages[0][0] != "system":
        out += f"<|im_start|>system\n{SYSTEM_DEFAULT}<|im_end|>\n"
    for role, content in messages:
        out += f"<|im_start|>{role}\n{content}<|im_end|>\n"
    if add_generation_prompt:
        out += "<|im_start|>assistant\n"
    return out


LONG_PARAGRAPH = (
    "The history of computing is often told as a sequence of machines, but it is just as much "
    "a history of ideas about representation. Early mechanical calculators such as Pascal's "
    "arithmetic machine (1642) and Leibniz's stepped reckoner stored numbers as the positions of "
    "gears; Babbage's Analytical Engine, designed in the 1830s, separated the 'store' from the "
    "'mill', anticipating the memory and processor of modern computers. Ada Lovelace's notes on "
    "that engine described an algorithm for computing Bernoulli numbers and speculated that such "
    "a machine might one day compose music. A century later, Claude Shannon showed that Boolean "
    "algebra could describe relay circuits, and Alan Turing defined computation itself with an "
    "abstract machine reading and writing symbols on an unbounded tape. The ENIAC, completed in "
    "1945, weighed about 27 tonnes, used roughly 17,468 vacuum tubes and consumed 150 kW of "
    "power; it was programmed by rewiring plugboards, a job done largely by six women whose "
    "contributions were overlooked for decades. The stored-program concept, described in the "
    "1945 'First Draft of a Report on the EDVAC', let instructions live in the same memory as "
    "data. Transistors (1947), integrated circuits (1958) and microprocessors (1971) then shrank "
    "the hardware by many orders of magnitude: Intel's 4004 had 2,300 transistors, while a "
    "modern GPU has more than 80 billion. Software grew alongside: FORTRAN (1957) and COBOL "
    "(1959) made programs portable, UNIX and C (early 1970s) made operating systems portable, "
    "and the World Wide Web (1989-1991) made documents linkable across the planet. Today's "
    "language models continue the story by representing text as sequences of integer tokens, "
    "each mapped to a vector of a few hundred or thousand floating-point numbers."
)

TOKENIZER_CASES = [
    # English
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "hello",
    " hello",
    "Hello",
    "HELLO WORLD",
    "Once upon a time, in a land far, far away, there lived a curious cat.",
    "Tokenization is the process of splitting text into smaller units.",
    "antidisestablishmentarianism",
    "Mr. O'Neil's e-mail: isn't it state-of-the-art?",
    # contractions
    "don't",
    "I'LL",
    "they've",
    "We're sure you'd've known; it's theirs, not hers'.",
    "DON'T STOP, CAN'T STOP, WON'T STOP",
    # whitespace
    "",
    " ",
    "  ",
    "   ",
    "    ",
    "     ",
    "      ",
    "       ",
    "        ",
    "a b  c   d    e     f      g       h        i",
    "\t",
    "\t\tindented with tabs",
    "\n",
    "\n\n",
    "\r\n",
    "line one\nline two\n\nline four\r\nline five",
    "   leading spaces",
    "trailing spaces   ",
    "\n\n  mixed \t whitespace \n ",
    # digits and numbers
    "0",
    "7",
    "42",
    "123",
    "1234",
    "12345678",
    "3.14159",
    "-273.15",
    "1,000,000",
    "2024-05-17T12:34:56Z",
    "Call 555-0123 or +44 20 7946 0958.",
    "1e-9 and 6.022e23",
    "0xDEADBEEF 0b1011",
    # punctuation
    "!!!",
    "???!!!...",
    "...",
    "--- *** ### @@@ $$$ %%%",
    "(a[b]{c}<d>)",
    "\"quoted\" 'single' `backtick`",
    "a/b\\c|d_e~f^g",
    # code
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n\tprint(i, end=' ')\n",
    "class Foo:\n    def __init__(self):\n        self.x = {'k': [1, 2, 3]}\n",
    "#include <vector>\nint main() {\n    std::vector<int> v{1, 2, 3};\n    return v.size() > 2 ? 0 : 1;\n}\n",
    "template <typename T> auto f(T&& x) -> decltype(x) { return std::forward<T>(x); }",
    '{\n  "name": "ferry",\n  "version": "0.1.0",\n  "tags": ["llm", "c++"],\n  "nested": {\n    "ok": true,\n    "n": null\n  }\n}',
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "<div class=\"x\">a &amp; b</div>",
    "x += 1; y -= 2; z *= 3; w /= 4; a == b != c <= d >= e && f || !g",
    # URLs, emails, paths
    "https://example.com/path/to/page?query=1&lang=en#section",
    "Visit http://www.example.org or email someone@example.com today.",
    "/usr/local/bin/python3 C:\\Windows\\System32",
    # non-English
    "你好，世界！",
    "我爱自然语言处理。",
    "日本語のテキストです。",
    "こんにちは、カタカナとひらがな。",
    "مرحبا بالعالم",
    "Привет, мир!",
    "Γειά σου Κόσμε",
    "안녕하세요",
    "नमस्ते दुनिया",
    "Ünïcödé àccénts: café, naïve, façade, Zürich",
    "ﬁ ligature, Ω, ½, ™, ©, ∑, ∞, →",
    # emoji
    "😀",
    "I love pizza 🍕🍕!",
    "👨‍👩‍👧‍👦",
    "👍🏽",
    "🇫🇷🇯🇵🇺🇸",
    "🏳️‍🌈 and ❤️",
    # special tokens inside text
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text before<|endoftext|>text after",
    "<|im_start|><|im_end|>",
    "<|im_start",
    "<repo_name>ferry<file_sep>main.cpp",
    # mixed
    "The price is $19.99 (was €25,00) — a 20% discount!",
    "Mixing 中文 and English and 123 numbers",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
    # long
    LONG_PARAGRAPH,
]

LOGITS_PROMPTS = [
    ("hello", "Hello"),
    ("capital", "The capital of France is"),
    ("chat_capital", chatml([("user", "What is the capital of France?")])),
    ("python", "def fibonacci(n):\n    if n < 2:\n        return n\n    return"),
    ("mixed", "Bonjour! 你好，世界。 The year 2024 had 366 days; pi is about 3.14159, and"),
    ("chat_multiturn", chatml([
        ("system", "You are a concise assistant."),
        ("user", "Name a primary color."),
        ("assistant", "Red."),
        ("user", "Name another one."),
    ])),
    ("long", LONG_PARAGRAPH[:1000]),
]

GREEDY_PROMPTS = [
    ("capital", "The capital of France is"),
    ("once", "Once upon a time"),
    ("fox", "The quick brown fox"),
    ("code_add", "def add(a, b):\n"),
    ("count", "1, 2, 3, 4, 5,"),
    ("chat_capital", chatml([("user", "What is the capital of France?")])),
    ("chat_haiku", chatml([("user", "Write a haiku about the sea.")])),
    ("chat_colors", chatml([("user", "List three primary colors.")])),
    ("chat_translate", chatml([("user", "Translate 'good morning' into Spanish.")])),
    ("chat_hi", chatml([("user", "hi")])),
]


# ----------------------------------------------------------------------------------------


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Runner:
    """llama.cpp through llama-cpp-python's low-level pieces: eval() to decode, and
    llama_get_logits_ith(ctx, -1) to read the last position's logits (in 0.3.36, Llama.scores
    is not filled when logits_all=False)."""

    def __init__(self, model_path, n_threads):
        import llama_cpp
        self.lc = llama_cpp
        self.llm = llama_cpp.Llama(
            model_path=model_path, n_ctx=N_CTX, n_batch=N_BATCH, n_ubatch=N_BATCH,
            n_threads=n_threads, n_threads_batch=n_threads, logits_all=False,
            flash_attn=False, seed=0, verbose=False, n_gpu_layers=0,
        )
        self.n_vocab = self.llm.n_vocab()
        self.vocab = llama_cpp.llama_model_get_vocab(self.llm._model.model)

    def tokenize(self, text):
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def is_eog(self, tok):
        return bool(self.lc.llama_vocab_is_eog(self.vocab, tok))

    def last_logits(self):
        p = self.lc.llama_get_logits_ith(self.llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_float)),
                                     shape=(self.n_vocab,)).copy()

    def prompt_logits(self, ids):
        self.llm.reset()
        self.llm.eval(ids)
        return self.last_logits()

    def step(self, tok):
        self.llm.eval([tok])
        return self.last_logits()


def top_k(logits, k):
    return [int(i) for i in np.argsort(-logits, kind="stable")[:k]]


def margin(logits):
    a, b = np.partition(logits, -2)[-2:]
    return float(b - a)


def r6(x):
    return float(f"{x:.6g}")


def dump_json(obj, path, compact_lists=True):
    """Indented JSON, but lists of numbers on one line."""
    text = json.dumps(obj, indent=1, ensure_ascii=False)
    if compact_lists:
        import re
        text = re.sub(r"\[\s*([-0-9.e,\s]*?)\s*\]",
                      lambda m: "[" + ", ".join(s.strip() for s in m.group(1).split(",") if s.strip()) + "]",
                      text)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text + "\n")


def dump_intermediates(model_path, ids, out_path):
    """Decode `ids` in one batch with llama.cpp's eval callback and save every contiguous f32
    tensor of the graph by its ggml name (e.g. "ffn_out-28") to an .npz. For debugging a
    forward pass layer by layer against llama.cpp."""
    import llama_cpp as L
    gb = ctypes.CDLL(os.path.join(os.path.dirname(L.__file__), "lib", "libggml-base.so"))
    gb.ggml_get_name.restype, gb.ggml_get_name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    gb.ggml_nelements.restype, gb.ggml_nelements.argtypes = ctypes.c_int64, [ctypes.c_void_p]
    gb.ggml_get_data.restype, gb.ggml_get_data.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    gb.ggml_is_contiguous.restype, gb.ggml_is_contiguous.argtypes = ctypes.c_bool, [ctypes.c_void_p]
    dumps = {}

    def cb(t, ask, _ud):
        if ask:
            return True
        typ = ctypes.c_int32.from_address(t).value  # struct ggml_tensor: type, buffer, ne[4], ...
        ne = [ctypes.c_int64.from_address(t + 16 + 8 * i).value for i in range(4)]
        if typ == 0 and gb.ggml_is_contiguous(t):  # GGML_TYPE_F32
            p = ctypes.cast(gb.ggml_get_data(t), ctypes.POINTER(ctypes.c_float))
            a = np.ctypeslib.as_array(p, shape=(gb.ggml_nelements(t),)).copy()
            dumps[gb.ggml_get_name(t).decode()] = a.reshape(ne[::-1]).squeeze()
        return True

    cbf = L.ggml_backend_sched_eval_callback(cb)
    model = L.llama_model_load_from_file(model_path.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = N_CTX, N_BATCH, N_BATCH
    cp.n_threads = cp.n_threads_batch = N_THREADS
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.cb_eval = cbf
    ctx = L.llama_init_from_model(model, cp)
    toks = (L.llama_token * len(ids))(*ids)
    rc = L.llama_decode(ctx, L.llama_batch_get_one(toks, len(ids)))
    assert rc == 0, f"llama_decode returned {rc}"
    np.savez(out_path, **dumps)
    L.llama_free(ctx)
    L.llama_model_free(model)
    print(f"{len(dumps)} tensors -> {out_path}")


# ----------------------------------------------------------------------------------------


def gen_tokenizer(run, meta, out):
    cases = [{"text": t, "ids": run.tokenize(t)} for t in TOKENIZER_CASES]
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8", newline="\n") as f:
        head = dict(meta)
        head["call"] = "llama_tokenize(text, add_special=False (no BOS), parse_special=True)"
        f.write("{\n")
        for k, v in head.items():
            f.write(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n")
        f.write(' "cases": [\n')
        for i, c in enumerate(cases):
            sep = "," if i + 1 < len(cases) else ""
            f.write("  " + json.dumps(c, ensure_ascii=False) + sep + "\n")
        f.write(" ]\n}\n")
    n_tok = sum(len(c["ids"]) for c in cases)
    print(f"tokenizer.json: {len(cases)} cases, {n_tok} tokens")
    return cases


def check_threads(model_path, prompts_ids, ref):
    """Are llama.cpp's logits bit-identical across thread counts? (recorded, not assumed)"""
    res = {}
    for nt in (2, 4):
        other = Runner(model_path, nt)
        got = [other.prompt_logits(ids) for ids in prompts_ids]
        same = all(np.array_equal(g, r) for g, r in zip(got, ref))
        maxd = max(float(np.max(np.abs(g - r))) for g, r in zip(got, ref))
        res[f"threads_{nt}_bit_identical_to_{N_THREADS}"] = same
        res[f"threads_{nt}_max_abs_diff"] = r6(maxd)
        del other
    return res


def gen_logits(run, ref, model_path, meta, out):
    d = os.path.join(out, "logits")
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.endswith(".f32"):
            os.remove(os.path.join(d, f))
    entries, lc_all, ids_all = [], [], []
    worst = worst_ggml = worst_f32 = 0.0
    agree = 0
    for n, (name, text) in enumerate(LOGITS_PROMPTS):
        ids = run.tokenize(text)
        lc = run.prompt_logits(ids)
        assert lc.dtype == np.float32 and lc.shape == (run.n_vocab,)
        t0 = time.time()
        npl = ref_forward.forward(ref, ids, mode="exact")
        emu = ref_forward.forward(ref, ids, mode="ggml")
        f32 = ref_forward.forward(ref, ids, mode="f32")
        dt = time.time() - t0
        base = f"{n:02d}_{name}"
        lc.astype("<f4").tofile(os.path.join(d, base + ".f32"))
        npl.astype("<f4").tofile(os.path.join(d, base + ".numpy.f32"))
        diff = float(np.max(np.abs(npl - lc)))
        diff_emu = float(np.max(np.abs(emu - lc)))
        diff_f32 = float(np.max(np.abs(f32 - npl)))
        worst, worst_ggml, worst_f32 = max(worst, diff), max(worst_ggml, diff_emu), max(worst_f32, diff_f32)
        a_lc, a_np = int(np.argmax(lc)), int(np.argmax(npl))
        agree += a_lc == a_np
        t10_lc, t10_np = top_k(lc, 10), top_k(npl, 10)
        entries.append({
            "name": name, "text": text, "n_tokens": len(ids), "ids": ids,
            "file": base + ".f32", "numpy_file": base + ".numpy.f32",
            "argmax": a_lc, "top10": t10_lc,
            "top10_logits": [r6(float(lc[i])) for i in t10_lc],
            "top1_top2_margin": r6(margin(lc)),
            "numpy_argmax": a_np, "numpy_top10": t10_np,
            "numpy_vs_llamacpp_max_abs_diff": r6(diff),
            "numpy_vs_llamacpp_rms_diff": r6(float(np.sqrt(np.mean((npl - lc) ** 2)))),
            "ggml_emulation_vs_llamacpp_max_abs_diff": r6(diff_emu),
            "numpy_f32_vs_numpy_max_abs_diff": r6(diff_f32),
        })
        lc_all.append(lc)
        ids_all.append(ids)
        print(f"  {base:18s} {len(ids):4d} tok  argmax {a_lc:6d} (numpy {a_np:6d})  "
              f"|numpy-llama.cpp| max {diff:.4f}  |ggml-emu-llama.cpp| max {diff_emu:.4f}  "
              f"|f32-f64| max {diff_f32:.5f}  ({dt:.1f} s numpy)")

    # rope style check on a mid-length prompt: "norm" must match, "neox" must not
    ids = ids_all[3]
    rope_check = {s: r6(float(np.max(np.abs(ref_forward.forward(ref, ids, "exact", s) - lc_all[3]))))
                  for s in ("norm", "neox")}
    threads = check_threads(model_path, ids_all, lc_all)
    index = dict(meta)
    index.update({
        "layout": "little-endian float32, n_vocab values, logits of the final prompt position",
        "n_vocab": run.n_vocab,
        "llamacpp_settings": {"n_threads": N_THREADS, "n_batch": N_BATCH, "n_ctx": N_CTX,
                              "logits_all": False, "flash_attn": False, "kv_cache": "f16",
                              "prompt": "one llama_decode of the whole prompt"},
        "numpy_file_is": "scripts/ref_forward.py mode=exact: gguf-dequantized weights, float64 math, "
                           "rope NORM (adjacent pairs), stored as float32",
        "numpy_vs_llamacpp_max_abs_diff": r6(worst),
        "numpy_vs_llamacpp_argmax_agreement": f"{agree}/{len(entries)}",
        "ggml_emulation_vs_llamacpp_max_abs_diff": r6(worst_ggml),
        "ggml_emulation_note": "ref_forward.py mode=ggml reproduces each llama.cpp op to ~1e-7 relative when fed "
                               "llama.cpp's own inputs, yet the free-running result still differs by this much: "
                               "Q8 activation rounding flips in blocks holding huge activation outliers "
                               "(residual stream up to ~2e4) are amplified, mostly in the last 2 layers",
        "numpy_f32_vs_numpy_max_abs_diff": r6(worst_f32),
        "numpy_f32_note": "ref_forward.py mode=f32 (float32 weights and activations, a plain f32 engine) vs the "
                          "stored float64 numpy logits",
        "rope_check_max_abs_diff_vs_llamacpp": rope_check,
        "thread_check": threads,
        "prompts": entries,
    })
    dump_json(index, os.path.join(d, "index.json"))
    print(f"logits: numpy vs llama.cpp max |diff| {worst:.4f}, argmax agree {agree}/{len(entries)}; "
          f"ggml emulation vs llama.cpp {worst_ggml:.4f}; numpy f32 vs f64 {worst_f32:.5f}; "
          f"rope {rope_check}; {threads}")
    return index


def numpy_greedy(ref, run, ids, n):
    gen, margins = [], []
    for _ in range(n):
        logits = ref_forward.forward(ref, ids + gen, mode="exact")
        tok = int(np.argmax(logits))
        gen.append(tok)
        margins.append(margin(logits))
        if run.is_eog(tok):
            break
    return gen, min(margins)


def gen_greedy(run, ref, meta, out):
    res = []
    for name, text in GREEDY_PROMPTS:
        ids = run.tokenize(text)
        logits = run.prompt_logits(ids)
        gen, margins, eos = [], [], False
        for _ in range(N_GREEDY):
            tok = int(np.argmax(logits))  # ties -> lowest id
            margins.append(margin(logits))
            gen.append(tok)
            if run.is_eog(tok):
                eos = True
                break
            if len(gen) < N_GREEDY:
                logits = run.step(tok)
        m = int(np.argmin(margins))
        np_gen, np_margin = numpy_greedy(ref, run, ids, N_GREEDY)
        n_agree = next((i for i, (a, b) in enumerate(zip(gen, np_gen)) if a != b), min(len(gen), len(np_gen)))
        res.append({
            "name": name, "prompt": text, "prompt_ids": ids, "ids": gen,
            "text": run.llm.detokenize(gen).decode("utf-8", errors="replace"),
            "stopped_at_eos": eos,
            "min_margin": r6(margins[m]), "min_margin_step": m,
            "margins": [round(x, 4) for x in margins],
            "numpy_ids": np_gen,
            "numpy_agree_tokens": n_agree,
            "numpy_min_margin": r6(np_margin),
        })
        print(f"  {name:15s} min margin {margins[m]:7.4f} @ {m:2d}  numpy agrees {n_agree:2d}/{len(gen):2d}  "
              f"{res[-1]['text'][:50]!r}")
    g = dict(meta)
    g.update({
        "sampling": "greedy: argmax of raw logits (ties -> lowest id), no penalties; prompt decoded in "
                    "one batch, then one token per llama_decode; stop only at an end-of-generation token "
                    "(llama_vocab_is_eog), which is included in ids",
        "max_new_tokens": N_GREEDY,
        "margins": "top-1 minus top-2 logit at each step; a small min_margin marks a fragile continuation",
        "numpy_ids": "greedy continuation by scripts/ref_forward.py mode=exact (float64, no activation "
                     "quantization); numpy_agree_tokens = length of the common prefix with ids; "
                     "numpy_min_margin = smallest top-1 minus top-2 along numpy_ids",
        "llamacpp_settings": {"n_threads": N_THREADS, "n_batch": N_BATCH, "n_ctx": N_CTX,
                              "flash_attn": False, "kv_cache": "f16"},
        "cases": res,
    })
    dump_json(g, os.path.join(out, "greedy.json"))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--llama-cpp-python-version", required=True)
    ap.add_argument("--gguf-version", required=True)
    ap.add_argument("--dump-ids", help="debug: comma-separated prompt ids; dump llama.cpp's intermediate "
                    "f32 tensors (attn_norm-0, Qcur-0, ..., l_out-29, result_output) to --dump-out and exit")
    ap.add_argument("--dump-out", default="llamacpp-dump.npz")
    a = ap.parse_args()

    import llama_cpp
    assert llama_cpp.__version__ == a.llama_cpp_python_version, llama_cpp.__version__
    os.makedirs(a.out, exist_ok=True)
    meta = {
        "model": os.path.basename(a.model),
        "sha256": sha256(a.model),
        "generator": f"llama-cpp-python=={llama_cpp.__version__}",
        "numpy_reference": f"gguf=={a.gguf_version}, numpy=={np.__version__}",
        "script": "scripts/gen-golden.sh",
    }
    if a.dump_ids:
        dump_intermediates(a.model, [int(t) for t in a.dump_ids.split(",")], a.dump_out)
        return 0
    t0 = time.time()
    run = Runner(a.model, N_THREADS)
    gen_tokenizer(run, meta, a.out)
    ref = ref_forward.Model(a.model)
    print(f"numpy reference loaded in {time.time() - t0:.1f} s")
    gen_greedy(run, ref, meta, a.out)
    gen_logits(run, ref, a.model, meta, a.out)
    print(f"done in {time.time() - t0:.0f} s; files in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
