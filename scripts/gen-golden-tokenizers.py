#!/usr/bin/env python3
"""Writes tests/golden/tokenizers/: token ids and decoded text for ~100 varied strings from the
reference implementations, for each kind of tokenizer ferry reads, plus the small vocabularies
the unit tests run them on.

    python3 scripts/gen-golden-tokenizers.py --libllama /path/to/libllama.so

Kinds and references:
  gemma3-spm         Gemma 3's GGUF (SentencePiece BPE, tokenizer.ggml.model "llama"): llama.cpp
                     through its C API (ctypes on libllama; llama-cpp-python's bundled library
                     works too: --libllama .../site-packages/llama_cpp/lib/libllama.so), and as
                     a cross-check sentencepiece on a ModelProto built from the same vocabulary
  gemma3-spm-prefix  the same GGUF with tokenizer.ggml.add_space_prefix flipped to true (one byte
                     patched in a copy): the Llama 2 / Mistral rule, against llama.cpp again
  smollm2-bytelevel  the tokenizer.json transformers exports from SmolLM2's GGUF (ByteLevel)
  gemma3-metaspace   a Llama-style tokenizer.json (Metaspace, prepend_scheme "first", byte
                     fallback, Strip decoder) built by transformers' LlamaTokenizer from Gemma's
                     vocabulary and merges
  gemma3-replace     the tokenizer.json transformers exports from Gemma's GGUF (Replace
                     normalizer, Split pre-tokenizer, ByteFallback / Fuse decoders)
  smollm2-nfc-qwen2  smollm2-bytelevel with Qwen2's pipeline: an NFC normalizer and its Split
                     regex before byte-level
  smollm2-nfkc       smollm2-bytelevel with an NFKC normalizer
  smollm2-gguf       the default model's own GGUF (byte-level BPE) against llama.cpp, valid UTF-8
                     cases only (the tests read the model file itself)
each tokenizer.json kind against Hugging Face tokenizers (and transformers' tokenizer(text) for
add_special=True).

Every tokenizer is trimmed to the tokens any test string can reach: a token (or merge) is kept
when its text is a substring of a test string in one of its spellings, so removing the others
cannot change a result. The script checks that claim for the tokenizer.json kinds by running
tokenizers on the trimmed file too; the unit tests check it for the SentencePiece vocabulary by
running ferry on both the trimmed vocabulary and, when it is cached, the full GGUF.

Needs: gguf, numpy, tokenizers, transformers (its GGUF tokenizer export; a stand-in `torch`
module is put on the path since that code path never touches tensors), sentencepiece and
protobuf (the cross-check; skipped with a note when missing). Models: the default SmolLM2 GGUF
and Gemma 3 270M (scripts/get-model.sh gemma3-270m). Re-running rewrites identical files.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unicodedata

from llama_cpp_capi import LlamaCpp, find_libllama

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOME = os.environ.get("FERRY_HOME", os.path.expanduser("~/.cache/ferry"))
OUT = os.path.join(REPO, "tests", "golden", "tokenizers")
SPACE = "\u2581"

# The strings every tokenizer is run on. "bytes" entries are not valid UTF-8: llama.cpp takes
# them as they are; the tokenizer.json references get them decoded with errors="replace",
# which is what ferry does before a tokenizer.json tokenizer sees them.
TEXTS = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\n\n\n\n",
    "Hello world", "Hello, world!", "hello world", " Hello world", "Hello world ",
    "  Hello   world  ", "Hello\nworld", "Hello\tworld", "HELLO WORLD", "hElLo WoRlD",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see it's what we've done, isn't it? I'd say they're right.",
    "DON'T SHOUT, I'LL HEAR YOU",
    "The capital of France is",
    "Once upon a time, in a land far, far away, there lived a ferryman who knew every current.",
    "def add(a, b):\n    return a + b\n",
    "int main() {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "    indented four\n        indented eight\n\t\ttabs two",
    "for (int i = 0; i < n; ++i) { sum += x[i] * y[i]; }",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "<div class=\"box\"><p>Hello</p></div>",
    "https://example.com/path?query=1&other=two#frag",
    "user@example.org",
    "0", "7", "42", "123", "1234", "12345678", "3.14159", "1,000,000", "-17.5e-3",
    "2024-06-01 12:34:56", "Call 555-0199 now", "x1 y22 z333", "v1.2.3",
    "!!!", "???", "...", "---", "***", "!?!?", "<<>>", "(((())))", "[[]]", "@#$%^&*",
    ";;;", "~~~", "a.b.c", "a,b;c:d", "«quotes» “curly” ‘single’",
    "Ünïcödé àçcénts", "naïve café résumé", "e\u0301", "\u0301", "A\u030a\u0323",
    "Straße", "İstanbul", "ﬁ ligature ｆｕｌｌｗｉｄｔｈ", "Ωμέγα καλημέρα",
    "你好，世界。", "今日は良い天気ですね。", "안녕하세요", "Привет, мир!",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "ภาษาไทย",
    "emoji 🙂", "👍🏽", "👨‍👩‍👧", "🇫🇷🇩🇪", "🏳️‍🌈", "🙂🙂🙂", "ab🙂cd",
    "\u00a0nbsp\u00a0", "zero\u200bwidth", "\ufeffbom", "\ufffd replacement", "tab\u000bvt",
    "a\u0000b", "\u001b[31mred\u001b[0m", "\u2581", "\u2581hello", "x\u2581\u2581y",
    "<0x41>", "<0xFF>", "<unk>", "<s>", "</s>", "<pad>", "<mask>",
    "<bos>Hello", "<eos>", "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<unused0><unused99>", "[multimodal]", "<table><tr><td>1</td></tr></table>",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>", "<|im_start", "text<|im_end|>more", "<repo_name>ferry<file_sep>",
    "Multiple     spaces    inside", "trailing spaces   ", "   leading spaces",
    # U+180E: whitespace to PCRE2 10.42's \s, not to Unicode's White_Space since 6.3.
    "a \u180eb", "a\u180eb", "\u180e's", "x\u180e\u180e y",
    # Control bytes a byte-level vocabulary may lack (SmolLM2's has no 0x04 or 0x1d).
    " \u0004", "!\u0004", "\u0004\u0004", "a\u001db",
    "line one\n\nline two\n\n\nline three",
    {"bytes": "ff"}, {"bytes": "61626380"}, {"bytes": "e282"}, {"bytes": "eda080"},
    {"bytes": "c0af"}, {"bytes": "f09f9982f09f"},
]
# One longer paragraph, so a test covers a real prompt's length.
TEXTS.append(
    "Ferries have carried people across rivers, lakes and straits for thousands of years. "
    "Early ferries were simple rafts or boats pulled by ropes; today, large vessels carry cars, "
    "trucks and trains on routes such as the English Channel (about 33 km), the Baltic Sea and "
    "Puget Sound. In 2019, Washington State Ferries alone moved 24.3 million passengers! "
    "Some ferries run 24/7; others stop when ice forms. 渡し船は今も使われています。 "
    "Les traversiers du Québec sont célèbres. ¿Dónde está el transbordador? 🚢⛴️\n")


def text_bytes(entry):
    return bytes.fromhex(entry["bytes"]) if isinstance(entry, dict) else entry.encode("utf-8")


def text_str(entry):
    return text_bytes(entry).decode("utf-8", errors="replace")


def case_key(entry):
    """How a case names its input in the golden files: the text, or its bytes in hex."""
    return {"bytes": entry["bytes"]} if isinstance(entry, dict) else {"text": entry}


def patched_gguf(src, key, value, dst):
    """A copy of `src` with the bool metadata `key` set to `value` (one byte changed)."""
    shutil.copyfile(src, dst)
    from gguf import GGUFReader
    r = GGUFReader(src)
    field = r.fields[key]
    offset = int(field.parts[field.data[0]].__array_interface__["data"][0] -
                 r.data.__array_interface__["data"][0])
    with open(dst, "r+b") as f:
        f.seek(offset)
        assert f.read(1) in (b"\x00", b"\x01")
        f.seek(offset)
        f.write(b"\x01" if value else b"\x00")
    assert bool(GGUFReader(dst).fields[key].contents()) == value


# ------------------------------------------------------------------------------ trimming


def spellings(entry, forms=()):
    """The forms a test string can take inside a tokenizer, to find the tokens it can reach
    (forms: the Unicode normal forms its normalizer applies)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    byte_char = bytes_to_unicode()
    s = text_str(entry)
    raw = [s, text_bytes(entry).decode("utf-8", errors="ignore")]
    raw += [unicodedata.normalize(f, t) for f in forms for t in raw]
    out = set()
    for t in raw:
        esc = t.replace(" ", SPACE)
        out.update({t, esc, SPACE + esc, " " + t})
        for v in (t, " " + t):
            out.add("".join(byte_char[b] for b in v.encode("utf-8")))
    return out


def reachable(vocab_texts, max_chars, forms=()):
    """Every substring (up to max_chars characters) of every spelling of every test string."""
    subs = set()
    for e in TEXTS:
        for s in spellings(e, forms):
            for i in range(len(s)):
                for j in range(i + 1, min(len(s), i + max_chars) + 1):
                    # A fragment after a special token may get a space prefix of its own.
                    subs.update((s[i:j], SPACE + s[i:j]))
    return {t for t in vocab_texts if t in subs}


# ------------------------------------------------------------------------ SentencePiece


def read_spm_vocab(path):
    from gguf import GGUFReader
    r = GGUFReader(path)
    f = r.fields
    meta = {k: f[k].contents() for k in f if k.startswith("tokenizer.ggml.") and
            k not in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                      "tokenizer.ggml.token_type")}
    return (f["tokenizer.ggml.tokens"].contents(), [float(x) for x in f["tokenizer.ggml.scores"].contents()],
            [int(x) for x in f["tokenizer.ggml.token_type"].contents()], meta)


def sentencepiece_processor(tokens, scores, types, meta, add_dummy_prefix):
    from sentencepiece import SentencePieceProcessor
    from sentencepiece import sentencepiece_model_pb2 as pb
    m = pb.ModelProto()
    for t, s, ty in zip(tokens, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = t, s, ty
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.vocab_size = len(tokens)
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id = int(meta.get("tokenizer.ggml.unknown_token_id", 0))
    m.trainer_spec.bos_id = int(meta.get("tokenizer.ggml.bos_token_id", 1))
    m.trainer_spec.eos_id = int(meta.get("tokenizer.ggml.eos_token_id", 2))
    m.trainer_spec.pad_id = int(meta.get("tokenizer.ggml.padding_token_id", -1))
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = add_dummy_prefix
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    sp = SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    return sp


def llama_cases(ll):
    """Every test string through llama.cpp: ids three ways, and their decodings."""
    cases = []
    for e in TEXTS:
        data = text_bytes(e)
        c = dict(case_key(e))
        c["ids"] = ll.tokenize(data, False, True)
        c["ids_bos"] = ll.tokenize(data, True, True)
        c["ids_raw"] = ll.tokenize(data, False, False)
        for k in ("ids", "ids_bos"):
            for special, key in ((False, f"decode_{k}"), (True, f"decode_{k}_special")):
                out = ll.detokenize(c[k], special)
                try:
                    c[key] = out.decode("utf-8")
                except UnicodeDecodeError:  # llama.cpp gives the bytes back as they are
                    c[key + "_hex"] = out.hex()
        cases.append(c)
    return cases


def gen_spm(lib, gemma, work):
    tokens, scores, types, meta = read_spm_vocab(gemma)
    prefix_path = os.path.join(work, "gemma-prefix.gguf")
    patched_gguf(gemma, "tokenizer.ggml.add_space_prefix", True, prefix_path)
    results = {}
    for name, path, prefix in (("gemma3-spm", gemma, False),
                               ("gemma3-spm-prefix", prefix_path, True)):
        ll = LlamaCpp(lib, path)
        try:
            sp = sentencepiece_processor(tokens, scores, types, meta, prefix)
        except ImportError:
            sp = None
        cases, sp_agree, sp_differ = llama_cases(ll), 0, []
        for e, c in zip(TEXTS, cases):
            if sp is not None and not isinstance(e, dict):
                # sentencepiece never parses control tokens out of text: compare with the
                # parse_special=false ids.
                if sp.encode(e) == c["ids_raw"]:
                    sp_agree += 1
                else:
                    sp_differ.append(e)
        ll.close()
        results[name] = (cases, sp_agree, sp_differ, sp is not None)

    # The vocabulary the tests run on: every token a test string can reach, the specials and
    # all byte tokens; the other ids become empty placeholders.
    max_chars = max(len(t) for t in tokens)
    keep = reachable(set(tokens), max_chars)
    kept = [[i, t, scores[i], types[i]] for i, t in enumerate(tokens)
            if t in keep or types[i] == 6 or i < 3 or t in ("<start_of_turn>", "<end_of_turn>")]
    vocab = {
        "about": "Gemma 3 270M's SentencePiece vocabulary (gemma-3-270m-q4_k_m.gguf) trimmed "
                 "to the tokens the golden strings can reach; other ids are empty. Written by "
                 "scripts/gen-golden-tokenizers.py.",
        "n_vocab": len(tokens),
        "bos": int(meta["tokenizer.ggml.bos_token_id"]),
        "eos": int(meta["tokenizer.ggml.eos_token_id"]),
        "unk": int(meta["tokenizer.ggml.unknown_token_id"]),
        "add_bos": bool(meta["tokenizer.ggml.add_bos_token"]),
        "add_eos": bool(meta["tokenizer.ggml.add_eos_token"]),
        "add_space_prefix": bool(meta["tokenizer.ggml.add_space_prefix"]),
        "tokens": kept,
    }
    return results, vocab


# ------------------------------------------------------------------------ tokenizer.json


def hf_exports(smol, gemma, work):
    """tokenizer.json + tokenizer_config.json directories made by transformers from the GGUFs."""
    stub = os.path.join(work, "torchstub")
    os.makedirs(os.path.join(stub, "torch"), exist_ok=True)
    with open(os.path.join(stub, "torch", "__init__.py"), "w") as f:
        f.write("class _Any:\n    def __init__(self, *a, **k): pass\n"
                "    def __getattr__(self, n): return _Any()\n"
                "    def __call__(self, *a, **k): return _Any()\n"
                "class Tensor(_Any): pass\nclass device(_Any): pass\nclass dtype(_Any): pass\n"
                "def __getattr__(n): return _Any()\n__version__ = '0.0'\n")
    code = r'''
import os, sys
from transformers import LlamaTokenizer, TokenizersBackend
from transformers.integrations.gguf.gguf_tokenizer_mapping import (
    add_gguf_special_tokens, get_gguf_tokenizer, get_merges)
smol, gemma, work = sys.argv[1:4]
for name, path in (("smollm2-bytelevel", smol), ("gemma3-replace", gemma)):
    d, f = os.path.split(path)
    TokenizersBackend.from_pretrained(d, gguf_file=f).save_pretrained(os.path.join(work, name))
# Llama-style: Metaspace with prepend_scheme "first" over Gemma's vocabulary and merge order.
arch, td, cfg = get_gguf_tokenizer(gemma)
tokens = ["\u2581" * len(t) if " " in t and not t.strip() else t for t in td["tokens"]]
td = dict(td, tokens=tokens, add_prefix_space=True)
merges = get_merges(td, {t: -i for i, t in enumerate(tokens)})
tok = LlamaTokenizer(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                     add_prefix_space=True, bos_token="<bos>", eos_token="<eos>",
                     unk_token="<unk>", pad_token="<pad>", add_bos_token=True)
add_gguf_special_tokens(tok, td).save_pretrained(os.path.join(work, "gemma3-metaspace"))
'''
    env = dict(os.environ, PYTHONPATH=stub + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TRANSFORMERS_VERBOSITY="error")
    subprocess.run([sys.executable, "-c", code, smol, gemma, work], check=True, env=env)
    # Qwen2's pipeline (an NFC normalizer, its Split regex, then byte-level) and an NFKC one,
    # over SmolLM2's vocabulary: the normal forms against tokenizers' own.
    for name, normalizer, pre in (("smollm2-nfc-qwen2", "NFC", QWEN2_PRE_TOKENIZER),
                                  ("smollm2-nfkc", "NFKC", None)):
        src, dst = os.path.join(work, "smollm2-bytelevel"), os.path.join(work, name)
        shutil.copytree(src, dst)
        with open(os.path.join(dst, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        tj["normalizer"] = {"type": normalizer}
        if pre:
            tj["pre_tokenizer"] = pre
        with open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False)
    return {n: os.path.join(work, n) for n in ("smollm2-bytelevel", "gemma3-replace",
                                               "gemma3-metaspace", "smollm2-nfc-qwen2",
                                               "smollm2-nfkc")}


def normal_forms(normalizer):
    """The Unicode normal forms (NFC, ...) a tokenizer.json normalizer applies."""
    if not normalizer:
        return ()
    if normalizer.get("type") == "Sequence":
        return tuple(f for n in normalizer["normalizers"] for f in normal_forms(n))
    return (normalizer["type"],) if normalizer.get("type") in ("NFC", "NFD", "NFKC", "NFKD") else ()


# Qwen2 / Qwen2.5 / Qwen3's tokenizer.json pre-tokenizer, as published.
QWEN2_PRE_TOKENIZER = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Split",
         "pattern": {"Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
         "use_regex": False}]}


def trim_tokenizer_json(tj):
    model = tj["model"]
    vocab = model["vocab"]
    max_chars = max(len(t) for t in vocab)
    added = tj["added_tokens"]
    keep = reachable(set(vocab), max_chars, normal_forms(tj.get("normalizer")))
    keep |= {t for t in vocab if len(t) == 6 and t.startswith("<0x") and t.endswith(">")}
    if model.get("unk_token"):
        keep.add(model["unk_token"])
    post = json.dumps(tj.get("post_processor"))
    contents = [a["content"] for a in added]
    keep_added = reachable(set(contents), max(len(c) for c in contents) if contents else 1)
    keep_added |= {a["content"] for a in added if a["id"] < 3 or f'"{a["content"]}"' in post}
    keep_added |= {"<eos>", "<bos>", "<end_of_turn>", "<start_of_turn>", "<|im_start|>",
                   "<|im_end|>", "<|endoftext|>"} & set(contents)
    keep |= keep_added & set(vocab)
    merges = []
    for m in model["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in keep and b in keep and a + b in keep:
            merges.append(m)
    out = dict(tj)
    out["model"] = dict(model, vocab={t: i for t, i in vocab.items() if t in keep}, merges=merges)
    out["added_tokens"] = [a for a in added if a["content"] in keep_added]
    return out


def gen_hf(name, d):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        full = json.load(f)
    with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    # Only what identifies the tokens is kept; the rest is transformers' bookkeeping.
    config = {k: v for k, v in config.items() if k in ("bos_token", "eos_token", "unk_token",
                                                      "pad_token", "add_bos_token",
                                                      "add_eos_token", "tokenizer_class")}
    trimmed = trim_tokenizer_json(full)
    tok = Tokenizer.from_str(json.dumps(full))
    small = Tokenizer.from_str(json.dumps(trimmed))
    hf = AutoTokenizer.from_pretrained(d)

    def run(t, s, add, special):
        t.encode_special_tokens = not special
        return t.encode(s, add_special_tokens=add).ids

    cases = []
    for e in TEXTS:
        s = text_str(e)
        c = dict(case_key(e))
        c["ids"] = run(tok, s, False, True)
        c["ids_bos"] = run(tok, s, True, True)
        c["ids_raw"] = run(tok, s, False, False)
        if hf(s)["input_ids"] != c["ids_bos"]:
            raise SystemExit(f"{name}: transformers and tokenizers disagree on {s!r}")
        tok.encode_special_tokens = False
        for k in ("ids", "ids_bos"):
            c[f"decode_{k}"] = tok.decode(c[k], skip_special_tokens=True)
            c[f"decode_{k}_special"] = tok.decode(c[k], skip_special_tokens=False)
        for k in ("ids", "ids_bos", "ids_raw"):
            if run(small, s, k == "ids_bos", k != "ids_raw") != c[k]:
                raise SystemExit(f"{name}: trimming changed the ids of {s!r}")
        small.encode_special_tokens = False
        for k in ("ids", "ids_bos"):
            for skip, key in ((True, f"decode_{k}"), (False, f"decode_{k}_special")):
                if small.decode(c[k], skip_special_tokens=skip) != c[key]:
                    raise SystemExit(f"{name}: trimming changed the decoding of {s!r}")
        cases.append(c)
    return cases, trimmed, config


# ---------------------------------------------------------------------------------- main


def dump(path, obj, compact_cases=False):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        if compact_cases:
            head = {k: v for k, v in obj.items() if k != "cases"}
            text = json.dumps(head, ensure_ascii=False, indent=1)[:-2]
            f.write(text + ',\n "cases": [\n')
            f.write(",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in obj["cases"]))
            f.write("\n ]\n}\n")
        else:
            json.dump(obj, f, ensure_ascii=False, indent=None, separators=(",", ":"),
                      sort_keys=False)
            f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--libllama", help="libllama.so of a llama.cpp build")
    ap.add_argument("--llama-cpp-version", default="unknown",
                    help="what the library is, for the provenance note (e.g. a commit)")
    ap.add_argument("--smollm2", default=os.path.join(HOME, "models",
                                                      "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--gemma", default=os.path.join(HOME, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()
    import tokenizers
    import transformers
    lib = find_libllama(a.libllama)
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        spm, vocab = gen_spm(lib, a.gemma, work)
        os.makedirs(os.path.join(a.out, "gemma3-spm"), exist_ok=True)
        dump(os.path.join(a.out, "gemma3-spm", "vocab.json"), vocab)
        for name, (cases, agree, differ, had_sp) in spm.items():
            n_text = sum(1 for e in TEXTS if not isinstance(e, dict))
            head = {
                "reference": f"llama.cpp {a.llama_cpp_version} (llama_tokenize / "
                             "llama_detokenize through ctypes)",
                "model": "gemma-3-270m-q4_k_m.gguf" +
                         (" with tokenizer.ggml.add_space_prefix = true" if "prefix" in name
                          else ""),
                "calls": {"ids": "add_special=false parse_special=true",
                          "ids_bos": "add_special=true parse_special=true",
                          "ids_raw": "add_special=false parse_special=false",
                          "decode_*": "llama_detokenize(remove_special=false, "
                                      "unparse_special=false)",
                          "decode_*_special": "unparse_special=true"},
                "sentencepiece_cross_check": (
                    f"sentencepiece on a ModelProto of the same pieces agrees with ids_raw on "
                    f"{agree} of {n_text} text cases; differs on {differ!r}" if had_sp
                    else "sentencepiece not installed: not checked"),
                "cases": cases,
            }
            name_dir = os.path.join(a.out, "gemma3-spm")
            dump(os.path.join(name_dir, "golden.json" if name == "gemma3-spm"
                              else "golden-prefix.json"), head, compact_cases=True)
            print(f"{name}: {len(cases)} cases; sentencepiece agrees on {agree}/{n_text}")
        # SmolLM2's own GGUF (byte-level BPE, the default model): the tests read the file.
        # Not the invalid UTF-8 cases: llama.cpp's byte-level path reads each bad byte as U+FFFD
        # and an overlong "\xc0\xaf" as "/", where ferry keeps the bytes as they are.
        ll = LlamaCpp(lib, a.smollm2)
        cases = [c for c in llama_cases(ll) if "bytes" not in c]
        ll.close()
        os.makedirs(os.path.join(a.out, "smollm2-gguf"), exist_ok=True)
        dump(os.path.join(a.out, "smollm2-gguf", "golden.json"), {
            "reference": f"llama.cpp {a.llama_cpp_version} (llama_tokenize / llama_detokenize "
                         "through ctypes)",
            "model": os.path.basename(a.smollm2) + " (the default model; not copied here)",
            "calls": {"ids": "add_special=false parse_special=true",
                      "ids_bos": "add_special=true parse_special=true",
                      "ids_raw": "add_special=false parse_special=false",
                      "decode_*": "llama_detokenize(remove_special=false, unparse_special=false)",
                      "decode_*_special": "unparse_special=true"},
            "cases": cases}, compact_cases=True)
        print(f"smollm2-gguf: {len(cases)} cases")
        for name, d in hf_exports(a.smollm2, a.gemma, work).items():
            cases, trimmed, config = gen_hf(name, d)
            dest = os.path.join(a.out, name)
            os.makedirs(dest, exist_ok=True)
            dump(os.path.join(dest, "tokenizer.json"), trimmed)
            dump(os.path.join(dest, "tokenizer_config.json"), config)
            head = {
                "reference": f"tokenizers {tokenizers.__version__} (Tokenizer.encode / decode; "
                             f"ids_bos also equals transformers {transformers.__version__}'s "
                             "tokenizer(text)['input_ids'])",
                "tokenizer": "tokenizer.json beside this file: " + {
                    "smollm2-bytelevel": "exported by transformers from SmolLM2's GGUF",
                    "gemma3-replace": "exported by transformers from Gemma 3's GGUF",
                    "gemma3-metaspace": "transformers' LlamaTokenizer over Gemma 3's vocabulary",
                    "smollm2-nfc-qwen2": "SmolLM2's export with Qwen2's NFC normalizer and "
                                         "Split pre-tokenizer",
                    "smollm2-nfkc": "SmolLM2's export with an NFKC normalizer",
                }[name] + ", trimmed (tokenizers gives the trimmed and the full file the same "
                          "results on every case)",
                "calls": {"ids": "encode(text, add_special_tokens=False)",
                          "ids_bos": "encode(text, add_special_tokens=True)",
                          "ids_raw": "encode_special_tokens=True, add_special_tokens=False",
                          "decode_*": "decode(ids, skip_special_tokens=True)",
                          "decode_*_special": "skip_special_tokens=False",
                          "bytes cases": "bytes.decode('utf-8', errors='replace') encoded"},
                "cases": cases,
            }
            dump(os.path.join(dest, "golden.json"), head, compact_cases=True)
            print(f"{name}: {len(cases)} cases, {len(trimmed['model']['vocab'])} tokens, "
                  f"{len(trimmed['model']['merges'])} merges kept")


if __name__ == "__main__":
    main()
