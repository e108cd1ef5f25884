"""Perplexity of GGUF files in ferry and in llama.cpp on the same token ids and windows.

Called by bench/llamacpp-ppl.sh inside the bench venv. For each file:

- ferry's token ids for the text come from ferry itself (`ferry serve`'s POST /tokenize, which
  calls the same Tokenizer::encode(text, add_special = true, parse_special = true) as
  `ferry eval`); llama.cpp is fed those ids, so a tokenizer difference cannot hide in the
  comparison. llama.cpp's own tokenization is compared with them and reported.
- ferry's perplexity is `ferry eval --json` on the text with the same --ctx/--stride/--max-tokens;
  its token count must equal the ids' count.
- llama.cpp's perplexity is computed here with the rule of src/eval/evaluator.cpp: windows of
  ctx tokens starting at 0, stride, 2 stride, ... until one reaches the end of the text, each
  from an empty cache with no BOS added (the text's first id is BOS when the model asks for
  one, and only the first window sees it); a window scores its positions t from
  max(previous window's end, begin + 1) to its end, target tokens[t] by the logits at t - 1,
  log-softmax in double. Both use the same KV cache type (--kv-dtype, f32 by default as in
  `ferry eval`) and llama.cpp runs without flash attention.
"""
import argparse
import collections
import json
import math
import os
import subprocess
import sys
import tempfile
import urllib.request

import numpy as np

import gguf
import llama_cpp


def ferry_token_ids(ferry, model, text, threads):
    """The ids ferry's tokenizer gives the text, from a short-lived `ferry serve`."""
    proc = subprocess.Popen(
        [ferry, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "-t", str(threads),
         "--no-log-requests", "--grace", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port, lines = None, []
        for line in proc.stderr:
            lines.append(line)
            if "listening on http://" in line:
                port = int(line.split("listening on http://", 1)[1].split()[0].rsplit(":", 1)[1])
            if "ready:" in line:
                break
        if port is None or proc.poll() is not None:
            sys.exit(f"ferry serve did not start:\n{''.join(lines)}")
        body = json.dumps({"prompt": text, "add_special_tokens": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/tokenize", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)["tokens"]
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def ferry_eval(ferry, model, text_path, ctx, stride, max_tokens, threads, kv_dtype):
    cmd = [ferry, "eval", "-m", model, "--text", text_path, "--ctx", str(ctx), "-t", str(threads),
           "--kv-dtype", kv_dtype, "--json"]
    if stride > 0:
        cmd += ["--stride", str(stride)]
    if max_tokens > 0:
        cmd += ["--max-tokens", str(max_tokens)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def windows(n, ctx, stride):
    """(begin, end, first scored position) of each window, as src/eval/evaluator.cpp."""
    out, prev_end, b = [], 0, 0
    while True:
        end = min(b + ctx, n)
        out.append((b, end, max(prev_end, b + 1)))
        prev_end = end
        if b + ctx >= n:
            return out
        b += stride


# ferry's --kv-dtype to llama.cpp's KV cache type. llama.cpp's default is f16 and ferry eval's
# f32: on the default model that alone moves llama.cpp's perplexity by ~0.4 %, so both run
# with the same one.
KV_TYPES = {"f32": llama_cpp.GGML_TYPE_F32, "f16": llama_cpp.GGML_TYPE_F16}


def load_llama(model, ctx, threads, kv_dtype):
    # Flash attention off: its CPU path rounds through f16 even with an f32 cache.
    return llama_cpp.Llama(model_path=model, n_ctx=ctx, n_batch=ctx, n_ubatch=ctx,
                           n_threads=threads, n_threads_batch=threads, logits_all=True,
                           type_k=KV_TYPES[kv_dtype], type_v=KV_TYPES[kv_dtype],
                           flash_attn=False, verbose=False)


def llamacpp_ppl(llm, ids, ctx, stride):
    """(perplexity, scored tokens, windows) of ids in llama.cpp, windowed as `ferry eval`."""
    n_vocab = llm.n_vocab()
    if max(ids) >= n_vocab:
        raise RuntimeError(f"token id {max(ids)} is outside llama.cpp's vocabulary ({n_vocab})")
    nll, scored, wins = 0.0, 0, windows(len(ids), ctx, stride)
    for begin, end, first in wins:
        llm.reset()
        llm.eval(ids[begin:end])
        # Rows first-1 .. end-2 of the window predict tokens first .. end-1.
        rows = np.asarray(llm.scores[first - 1 - begin: end - 1 - begin], dtype=np.float64)
        mx = rows.max(axis=1, keepdims=True)
        lse = mx[:, 0] + np.log(np.exp(rows - mx).sum(axis=1))
        targets = np.asarray(ids[first:end])
        nll -= float((rows[np.arange(len(targets)), targets] - lse).sum())
        scored += end - first
    return math.exp(nll / scored), scored, len(wins)


def weight_types(path):
    """The file's general.file_type name and its matrices' types, most common first."""
    r = gguf.GGUFReader(path)
    counts = collections.Counter(t.tensor_type.name for t in r.tensors if len(t.shape) >= 2)
    ft = r.fields.get("general.file_type")
    ftype = None
    if ft is not None:
        v = int(ft.parts[ft.data[0]][0])
        try:
            ftype = gguf.LlamaFileType(v).name.removeprefix("MOSTLY_")
        except ValueError:
            ftype = str(v)
    return ftype, dict(counts.most_common())


def dequant_check(ferry, model, threads):
    """Whether ferry and gguf-py (llama.cpp's reference dequantization in Python) read every
    matrix of the file as the same floats: ferry's are from `ferry quantize --type f32`. Returns
    {type: [matrices, bit-identical, max |difference|]}."""
    from gguf.quants import dequantize
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, "f32.gguf")
        subprocess.run([ferry, "quantize", model, f32, "--type", "f32", "-q", "-t", str(threads)],
                       check=True, capture_output=True)
        ferry_t = {t.name: t for t in gguf.GGUFReader(f32).tensors}
        out = {}
        for t in gguf.GGUFReader(model).tensors:
            if len(t.shape) < 2:
                continue
            ref = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
            got = np.asarray(ferry_t[t.name].data, dtype=np.float32).reshape(-1)
            s = out.setdefault(t.tensor_type.name, [0, 0, 0.0])
            s[0] += 1
            s[1] += int(np.array_equal(ref, got))
            s[2] = max(s[2], float(np.abs(ref - got).max()))
        return out


def tokenization_check(llm, text, ids):
    """llama.cpp's own ids for the text against ferry's: None when equal, else a note."""
    theirs = llm.tokenize(text.encode(), add_bos=True, special=True)
    if theirs == ids:
        return None
    i = next((k for k, (a, b) in enumerate(zip(theirs, ids)) if a != b), min(len(theirs), len(ids)))
    return (f"llama.cpp tokenizes to {len(theirs)} ids, ferry to {len(ids)}; first difference "
            f"at {i}: llama.cpp {theirs[i:i + 5]} ferry {ids[i:i + 5]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--stride", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-dtype", choices=sorted(KV_TYPES), default="f32")
    ap.add_argument("--tolerance", type=float, default=1.0, help="percent")
    ap.add_argument("--no-dequant-check", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    stride = a.stride if a.stride > 0 else a.ctx // 2  # as `ferry eval`
    with open(a.text, "rb") as f:
        text = f.read().decode("utf-8")

    rows, ok = [], True
    for model in a.models:
        print(f"{os.path.basename(model)}: ferry tokenize, ferry eval, llama.cpp", file=sys.stderr)
        try:
            ftype, counts = weight_types(model)
        except ValueError as e:  # a type gguf-py does not know (ferry's own types)
            ftype, counts = f"unreadable by gguf-py: {e}", {}
        row = {"model": model, "file_type": ftype, "matrix_types": counts}
        if counts and not a.no_dequant_check:
            d = dequant_check(a.ferry, model, a.threads)
            row["dequant"] = d
            row["dequant_identical"] = all(v[0] == v[1] for v in d.values())
            ok &= row["dequant_identical"]
        full_ids = ferry_token_ids(a.ferry, model, text, a.threads)
        ids = full_ids[: a.max_tokens] if a.max_tokens > 0 else full_ids
        fe = ferry_eval(a.ferry, model, a.text, a.ctx, a.stride, a.max_tokens, a.threads,
                        a.kv_dtype)
        if fe["tokens"] != len(ids) or fe["stride"] != stride:
            sys.exit(f"{model}: ferry eval saw {fe['tokens']} tokens (stride {fe['stride']}), "
                     f"/tokenize gave {len(ids)} (stride {stride})")
        row.update(tokens=len(ids), ctx=a.ctx, stride=stride, scored_tokens=fe["scored_tokens"],
                   windows=fe["windows"], ferry_perplexity=fe["perplexity"])
        try:
            llm = load_llama(model, a.ctx, a.threads, a.kv_dtype)
            ppl, scored, n_win = llamacpp_ppl(llm, ids, a.ctx, stride)
        except Exception as e:  # llama.cpp refuses the file: that is the finding
            row.update(loads_in_llamacpp=False, error=str(e), llamacpp_perplexity=None,
                       diff_percent=None, within_tolerance=False)
            rows.append(row)
            ok = False
            continue
        if (scored, n_win) != (fe["scored_tokens"], fe["windows"]):
            sys.exit(f"{model}: llama.cpp scored {scored} tokens in {n_win} windows, ferry "
                     f"{fe['scored_tokens']} in {fe['windows']}")
        note = tokenization_check(llm, text, full_ids)
        del llm
        diff = 100.0 * (ppl / fe["perplexity"] - 1.0)
        within = abs(diff) <= a.tolerance
        ok &= within
        row.update(loads_in_llamacpp=True, llamacpp_perplexity=ppl, diff_percent=diff,
                   within_tolerance=within, llamacpp_tokenization_matches=note is None)
        if note:
            row["tokenization_note"] = note
        rows.append(row)

    if a.json:
        print(json.dumps({"text": a.text, "ctx": a.ctx, "stride": stride,
                          "max_tokens": a.max_tokens, "kv_dtype": a.kv_dtype,
                          "tolerance_percent": a.tolerance,
                          "llama_cpp_python": llama_cpp.__version__, "rows": rows}, indent=2))
    else:
        print(f"text {a.text}, ctx {a.ctx}, stride {stride}, KV cache {a.kv_dtype}; "
              f"llama-cpp-python {llama_cpp.__version__}; both fed ferry's token ids")
        print("| file | type (matrices) | dequantized alike | tokens scored | ferry PPL | "
              f"llama.cpp PPL | diff % | within {a.tolerance:g} % |")
        print("|---|---|---|---:|---:|---:|---:|---|")
        for r in rows:
            types = ", ".join(f"{k} {v}" for k, v in r["matrix_types"].items())
            name = os.path.basename(r["model"])
            d = r.get("dequant")
            deq = "not checked" if d is None else ", ".join(
                f"{k} {v[1]}/{v[0]}" + ("" if v[0] == v[1] else f" (max |d| {v[2]:.3g})")
                for k, v in d.items())
            head = f"| {name} | {r['file_type']} ({types}) | {deq} | {r['scored_tokens']} | "
            if not r["loads_in_llamacpp"]:
                print(head + f"{r['ferry_perplexity']:.4f} | does not load | | no |")
                continue
            print(head + f"{r['ferry_perplexity']:.4f} | {r['llamacpp_perplexity']:.4f} | "
                  f"{r['diff_percent']:+.3f} | {'yes' if r['within_tolerance'] else 'NO'} |")
        for r in rows:
            if r.get("error"):
                print(f"{os.path.basename(r['model'])}: llama.cpp: {r['error']}")
            if r.get("tokenization_note"):
                print(f"{os.path.basename(r['model'])}: {r['tokenization_note']}")
        print("dequantized alike: matrices of each type that ferry and gguf-py dequantize to the "
              "same floats, bit for bit")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
