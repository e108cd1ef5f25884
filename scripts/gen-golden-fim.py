#!/usr/bin/env python3
"""Writes tests/golden/fim/: a Qwen2.5-Coder-style tokenizer with fill-in-the-middle tokens, and
the prompt ids Hugging Face's `tokenizers` gives each case's prefix-suffix-middle text.

    python3 scripts/gen-golden-fim.py      (needs: pip install tokenizers)

The tokenizer is trained like tests/golden/hf_models/qwen2's (Qwen2's split regex, then
ByteLevel; 448 tokens, so that directory's random-weight model serves it): the chat specials,
then <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>. A case's ids are `tokenizers`' encoding of
"<|fim_prefix|>" + prefix + "<|fim_suffix|>" + suffix + "<|fim_middle|>", which is what
ferry's fill-in-the-middle prompt (tokenizer/fim.h, the server's `suffix`) must equal.
Re-running with the same tokenizers version rewrites identical files.
"""
import json
import os

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "golden", "fim")
CALIB = os.path.join(ROOT, "data", "calib", "default.txt")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>",
            "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CASES = [
    ("def add(a, b):\n    ", "\n\nprint(add(2, 3))\n"),
    ("The lighthouse keeper climbed ", " stairs at dawn."),
    ("for (int i = 0; i < n; ++i) {\n", "\n}\n"),
    ("<html>\n  <body>", "</body>\n</html>"),
    ("x", ""),
]


def main():
    with open(CALIB, encoding="utf-8") as f:
        corpus = [f.read()] + [p + s for p, s in CASES]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(QWEN2_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=448, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(json.loads(tok.to_str()), indent=1, ensure_ascii=False) + "\n")
    with open(os.path.join(OUT, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}, f,
                  indent=1)
        f.write("\n")
    cases = []
    for prefix, suffix in CASES:
        text = "<|fim_prefix|>" + prefix + "<|fim_suffix|>" + suffix + "<|fim_middle|>"
        cases.append({"prefix": prefix, "suffix": suffix, "ids": tok.encode(text).ids})
    with open(os.path.join(OUT, "golden.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizers": tokenizers.__version__, "vocab_size": tok.get_vocab_size(),
                   "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {OUT}: {tok.get_vocab_size()} tokens, {len(cases)} cases")


if __name__ == "__main__":
    main()
