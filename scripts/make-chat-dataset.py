#!/usr/bin/env python3
"""Writes bench/datasets/chat-turns.jsonl: chat requests for `ferry bench serve --dataset`
(and `bench throughput --dataset`), one {"messages": [...], "output_len": N} per line.

Where the lengths come from: LMSYS-Chat-1M (Zheng et al., 2023, "LMSYS-Chat-1M: A Large-Scale
Real-World LLM Conversation Dataset", Table 1) reports 2.0 turns per conversation, 69.5 tokens
per user prompt and 214.5 tokens per response on average. Each conversation here has a
geometric number of turns with mean 2.0; each user turn is drawn from a log-normal with mean
69.5 tokens and each assistant turn (the earlier answers in the history, and the length asked
of the answer, `output_len`) from one with mean 214.5. The spreads (sigma 1.0 for prompts, 0.7
for answers) and the cuts (prompts 4-1,024 tokens, answers 8-512) are ours: the paper gives
means, not shapes. The request is the last user turn with the whole history before it, as a
chat client sends it, so a prompt grows with the turns.

Where the words come from: the docstrings and source of Python's standard library (PSF
license), cut to the drawn lengths at about 4 characters a token, under instructions of the
kinds people give (explain, summarise, fix, rewrite, answer from a text). Token counts are
estimates: `bench serve` reports what the server's tokenizer counted.

    scripts/make-chat-dataset.py [--conversations 160] [--seed 7] [-o bench/datasets/chat-turns.jsonl]
"""
import argparse
import importlib
import inspect
import json
import math
import random
import sys

MODULES = ["argparse", "collections", "json", "textwrap", "string", "re", "datetime", "pathlib",
           "functools", "itertools", "heapq", "bisect", "statistics", "fractions", "decimal",
           "csv", "configparser", "logging", "shutil", "tempfile", "zipfile", "tarfile", "gzip",
           "hashlib", "hmac", "secrets", "uuid", "urllib.parse", "http.client", "email.message",
           "html.parser", "xml.etree.ElementTree", "sqlite3", "threading", "queue", "asyncio",
           "subprocess", "socket", "selectors", "dataclasses", "enum", "contextlib",
           "abc", "copy", "pprint", "difflib", "unittest", "doctest", "timeit", "calendar",
           "locale", "gettext", "codecs", "base64", "struct", "array", "weakref", "graphlib"]

ASK = ["Explain what this does and when I would use it:\n\n{t}",
       "Summarise the following in a few sentences:\n\n{t}",
       "I found this in the documentation and do not understand it. Can you walk me through it?\n\n{t}",
       "Rewrite this so a beginner can follow it:\n\n{t}",
       "Is there a bug in this code? If so, fix it and say why.\n\n{t}",
       "Write three questions a reviewer might ask about this, with answers:\n\n{t}",
       "Using only the text below, answer: what are the main caveats?\n\n{t}",
       "Translate this explanation into plain French:\n\n{t}",
       "{t}\n\nWhat would be a simpler way to do the same thing?",
       "Turn this into a short tutorial with an example:\n\n{t}"]
FOLLOW = ["Thanks. Can you give a shorter version?", "Why is that better?",
          "Show me an example with real data.", "What happens on an empty input?",
          "Can you make it faster?", "And how would I test it?", "Explain the second point again.",
          "Now do the same for {t}"]
CHARS_PER_TOKEN = 4.0


def texts():
    """(docstring or source excerpt) pieces from the standard library, in a fixed order."""
    out = []
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if mod.__doc__:
            out.append(inspect.cleandoc(mod.__doc__))
        for _, obj in sorted(vars(mod).items()):
            if getattr(obj, "__module__", None) != mod.__name__:
                continue
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and isinstance(obj.__doc__, str):
                out.append(inspect.cleandoc(obj.__doc__))
                try:
                    src = inspect.getsource(obj)
                    if len(src) < 6000:
                        out.append(src)
                except (OSError, TypeError):
                    pass
    return [t for t in out if len(t) > 80]


def lognormal(rng, mean, sigma, lo, hi):
    mu = math.log(mean) - sigma * sigma / 2  # the log-normal's mean is exp(mu + sigma^2 / 2)
    return int(min(hi, max(lo, round(rng.lognormvariate(mu, sigma)))))


def excerpt(rng, pool, tokens):
    """About `tokens` tokens of text, from consecutive pieces starting at a random one."""
    want = int(tokens * CHARS_PER_TOKEN)
    i = rng.randrange(len(pool))
    s = ""
    while len(s) < want:
        s += ("\n\n" if s else "") + pool[i % len(pool)]
        i += 1
    s = s[:want]
    return s[: s.rfind(" ")] if " " in s[want // 2:] else s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=160)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("-o", "--out", default="bench/datasets/chat-turns.jsonl")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    pool = texts()
    lines = []
    for _ in range(a.conversations):
        turns = 1
        while rng.random() > 1 / 2.0 and turns < 8:  # geometric, mean 2.0
            turns += 1
        messages = []
        for t in range(turns):
            user_len = lognormal(rng, 69.5, 1.0, 4, 1024)
            if t == 0 or rng.random() < 0.5:
                template = rng.choice(ASK)
                # The instruction's own words count toward the drawn length.
                body = excerpt(rng, pool, max(8, user_len - len(template) // 4))
                messages.append({"role": "user", "content": template.format(t=body)})
            else:
                f = rng.choice(FOLLOW)
                messages.append({"role": "user",
                                 "content": f.format(t=excerpt(rng, pool, max(4, user_len - 8)))})
            answer = lognormal(rng, 214.5, 0.7, 8, 512)
            if t < turns - 1:
                messages.append({"role": "assistant", "content": excerpt(rng, pool, answer)})
        lines.append({"messages": messages, "output_len": answer})
    with open(a.out, "w") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    users = [len(m["content"]) / CHARS_PER_TOKEN for line in lines for m in line["messages"]
             if m["role"] == "user"]
    print(f"{a.out}: {len(lines)} conversations, {sum(len(l['messages']) // 2 + 1 for l in lines) / len(lines):.2f} "
          f"turns each, ~{sum(users) / len(users):.0f} tokens per user turn, "
          f"{sum(l['output_len'] for l in lines) / len(lines):.0f} asked per answer", file=sys.stderr)


if __name__ == "__main__":
    main()
