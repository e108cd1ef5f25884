#!/usr/bin/env python3
"""lm-evaluation-harness against `ferry serve`, checked against transformers on the same weights.

    bench/lm-eval.sh [--model GGUF] [--json]      (makes the venv, then runs this)

lm-eval's `local-completions` client (the one evaluation users point at a server) runs three
small local tasks against ferry's /v1/completions: multiple choice (loglikelihood: token-id
prompts with echo + logprobs, max_tokens 1), rolling loglikelihood (perplexity over paragraphs
of data/calib/default.txt) and generate_until (greedy, stop strings). Then lm-eval's own `hf`
model runs the same tasks on transformers, with the GGUF's weights dequantized by
transformers' GGUF loader. Per request (one choice, or one whole paragraph), ferry's
loglikelihood must be within --tol nats of transformers', and every greedy generation
identical. The datasets are written here, so no download is needed past the packages.
"""
import argparse
import glob
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Japan", "Tokyo"), ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Russia", "Moscow"),
            ("China", "Beijing"), ("Greece", "Athens"), ("Portugal", "Lisbon"),
            ("Austria", "Vienna"), ("Norway", "Oslo"), ("Kenya", "Nairobi"), ("Peru", "Lima")]
OPPOSITES = [("hot", "cold"), ("up", "down"), ("big", "small"), ("fast", "slow"),
             ("day", "night"), ("happy", "sad"), ("open", "closed"), ("light", "dark"),
             ("early", "late"), ("full", "empty")]


def write_tasks(d):
    rng = random.Random(3)
    mc = []
    for pairs, stem in ((CAPITALS, "The capital of {} is"), (OPPOSITES, "The opposite of {} is")):
        for q, a in pairs:
            choices = rng.sample([x for _, x in pairs if x != a], 3) + [a]
            rng.shuffle(choices)
            mc.append({"question": stem.format(q), "choices": [" " + c for c in choices],
                       "answer": choices.index(a)})
    with open(os.path.join(ROOT, "data", "calib", "default.txt"), encoding="utf-8") as f:
        paras = [p.strip() for p in f.read().split("\n\n") if len(p.strip()) > 200][:12]
    gen = [{"question": f"Q: What is the capital of {c}?\nA:", "answer": a} for c, a in CAPITALS]
    files = {"mc": mc, "ppl": [{"text": p} for p in paras], "gen": gen}
    for name, rows in files.items():
        with open(os.path.join(d, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    head = "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {}\ntest_split: test\n"
    tasks = {
        "ferry_mc": "output_type: multiple_choice\ndoc_to_text: \"{{question}}\"\n"
                    "doc_to_choice: \"{{choices}}\"\ndoc_to_target: \"{{answer}}\"\n"
                    "target_delimiter: \"\"\nmetric_list:\n  - metric: acc\n  - metric: acc_norm\n",
        "ferry_ppl": "output_type: loglikelihood_rolling\ndoc_to_text: \"\"\n"
                     "doc_to_target: \"{{text}}\"\nmetric_list:\n  - metric: word_perplexity\n"
                     "  - metric: byte_perplexity\n  - metric: bits_per_byte\n",
        "ferry_gen": "output_type: generate_until\ndoc_to_text: \"{{question}}\"\n"
                     "doc_to_target: \"{{answer}}\"\ngeneration_kwargs:\n  until: [\"\\n\"]\n"
                     "  max_gen_toks: 24\nfilter_list:\n  - name: last_word\n    filter:\n"
                     "      - function: regex\n        regex_pattern: \"(\\\\w+)\\\\W*$\"\n"
                     "      - function: take_first\nmetric_list:\n  - metric: exact_match\n",
    }
    for name, body in tasks.items():
        data = os.path.join(d, name.split("_")[1] + ".jsonl")
        with open(os.path.join(d, name + ".yaml"), "w") as f:
            f.write(f"task: {name}\n" + head.format(data) + body)
    return list(tasks)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def samples(out, task):
    f = sorted(glob.glob(f"{out}/**/samples_{task}_*.jsonl", recursive=True))[-1]
    return sorted((json.loads(l) for l in open(f)), key=lambda x: x["doc_id"])


def results(out):
    f = sorted(glob.glob(f"{out}/**/results_*.json", recursive=True))[-1]
    return json.load(open(f))["results"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", default=os.path.join(ROOT, "build", "ferry"))
    ap.add_argument("--model", default=os.path.expanduser(
        os.path.join(os.environ.get("FERRY_HOME", "~/.cache/ferry"), "models",
                     "SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--tol", type=float, default=0.1, help="nats per request")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    work = tempfile.mkdtemp(prefix="ferry-lm-eval-")
    tasks = write_tasks(work)
    # transformers' reading of the same GGUF: tokenizer and dequantized weights.
    hf = os.path.join(work, "hf")
    src, name = os.path.split(a.model)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
    tok.save_pretrained(hf)
    AutoModelForCausalLM.from_pretrained(src, gguf_file=name, torch_dtype="float32").save_pretrained(hf)
    cfg = os.path.join(hf, "tokenizer_config.json")
    c = json.load(open(cfg))
    c["tokenizer_class"] = "PreTrainedTokenizerFast"  # what this transformers reads back
    json.dump(c, open(cfg, "w"))

    port = free_port()
    served = os.path.splitext(name)[0]
    server = subprocess.Popen([a.ferry, "serve", "-m", a.model, "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health").status == 200:
                    break
            except Exception:
                time.sleep(0.1)
        common = ["--include_path", work, "--tasks", ",".join(tasks), "--log_samples",
                  "--batch_size", "1"]
        lm_eval = [sys.executable, "-m", "lm_eval"]
        subprocess.run(lm_eval + ["--model", "local-completions", "--model_args",
                                  f"model={served},base_url=http://127.0.0.1:{port}/v1/completions,"
                                  f"tokenizer={hf},tokenized_requests=True,num_concurrent=4,"
                                  "max_retries=1,max_length=2048",
                                  "--output_path", os.path.join(work, "ferry")] + common,
                       check=True, stdout=subprocess.DEVNULL)
    finally:
        server.terminate()
        server.wait()
    subprocess.run(lm_eval + ["--model", "hf", "--model_args", f"pretrained={hf},dtype=float32",
                              "--device", "cpu", "--output_path", os.path.join(work, "hf_out")]
                   + common, check=True, stdout=subprocess.DEVNULL)

    report, ok = {"model": a.model, "tasks": {}}, True
    rf, rh = results(os.path.join(work, "ferry")), results(os.path.join(work, "hf_out"))
    for t in tasks:
        fs, hs = samples(os.path.join(work, "ferry"), t), samples(os.path.join(work, "hf_out"), t)
        row = {"metrics_ferry": {k: v for k, v in rf[t].items() if "stderr" not in k and k != "alias"},
               "metrics_transformers": {k: v for k, v in rh[t].items() if "stderr" not in k and k != "alias"}}
        if t == "ferry_gen":
            same = sum(x["resps"][0][0] == y["resps"][0][0] for x, y in zip(fs, hs))
            row["identical_generations"] = f"{same}/{len(fs)}"
            ok &= same == len(fs)
        else:
            # A response is [loglikelihood, is_greedy] (choices) or [loglikelihood] (rolling).
            def ll(r):
                return float(r[0][0] if isinstance(r[0], list) else r[0])

            d = [abs(ll(rx) - ll(ry)) for x, y in zip(fs, hs)
                 for rx, ry in zip(x["resps"], y["resps"])]
            row["requests"] = len(d)
            row["max_abs_diff_nats"] = max(d)
            row["mean_abs_diff_nats"] = sum(d) / len(d)
            ok &= max(d) <= a.tol
        report["tasks"][t] = row
    report["pass"] = ok
    shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        for t, row in report["tasks"].items():
            extra = row.get("identical_generations") or (
                f"{row['requests']} loglikelihoods, max |diff| {row['max_abs_diff_nats']:.4f}, "
                f"mean {row['mean_abs_diff_nats']:.4f} nats")
            print(f"{t:10s} ferry {row['metrics_ferry']}  transformers {row['metrics_transformers']}"
                  f"  {extra}")
        print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
