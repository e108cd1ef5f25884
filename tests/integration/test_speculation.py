"""Speculative decoding from the command line and the server: greedy output unchanged,
acceptance reported, bad switches refused with one clear line."""
import json
import re

import httpx
import pytest

from conftest import ROOT, run_ferry, train_small_heads
from server_util import Server

COPY = ("Repeat the following text exactly:\n\nThe lighthouse keeper climbed the spiral stairs "
        "every evening at dusk. He carried a small brass lamp, a flask of tea, and a notebook "
        "in which he recorded the weather and the ships that passed.")


def run_text(model_path, *extra):
    r = run_ferry("run", "-m", model_path, "--chat", "-p", COPY, "-n", "48", "--temperature", "0",
                  "-t", "2", *extra)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def test_run_output_is_unchanged_by_either_proposer(model_path):
    plain, _ = run_text(model_path)
    ngram, err = run_text(model_path, "--spec", "ngram", "--spec-k", "5", "--spec-policy", "fixed")
    assert ngram == plain
    assert "speculation (ngram, fixed)" in err and "accepted" in err
    ngram, err = run_text(model_path, "--spec", "ngram", "--spec-k", "5")  # the cost policy
    assert ngram == plain
    assert "speculation (ngram, cost)" in err
    tree, err = run_text(model_path, "--spec", "ngram", "--spec-k", "6", "--spec-tree",
                         "--spec-policy", "fixed")
    assert tree == plain  # several occurrences' continuations, verified as one tree
    assert "speculation (ngram, fixed)" in err
    draft, err = run_text(model_path, "--spec", "draft", "--draft-model", model_path,
                          "--spec-policy", "fixed")
    assert draft == plain
    assert "speculation (draft, fixed)" in err
    # The model as its own draft costs a target step per draft token: the cost policy drafts a
    # few tokens to learn that, then declines.
    draft, err = run_text(model_path, "--spec", "draft", "--draft-model", model_path)
    assert draft == plain
    declined = re.search(r"speculation \(draft, cost\).*; (\d+) steps without a draft", err)
    assert declined and int(declined.group(1)) > 0, err


def test_lookahead_leaves_the_output_unchanged(model_path):
    plain, _ = run_text(model_path)
    for policy in ("fixed", "cost"):
        out, err = run_text(model_path, "--spec", "lookahead", "--spec-k", "5", "--spec-policy",
                            policy, "--spec-lookahead-n", "3")
        assert out == plain, policy
        assert f"speculation (lookahead, {policy})" in err


def test_train_medusa_heads_then_run_speculates_with_the_same_text(model_path, tmp_path):
    heads = tmp_path / "h.medusa.gguf"
    r = train_small_heads(model_path, heads, "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["out"] == str(heads) and heads.exists()
    assert rep["style"] == "chat"  # auto: the model has a chat template
    assert [h["predicts"] for h in rep["heads"]] == ["t+2", "t+3"]
    assert rep["train_positions"] > 0 and rep["held_out_positions"] > 0
    for h in rep["heads"]:
        assert 0 <= h["held_out_top1_before"] <= 1 and 0 <= h["held_out_top1_after"] <= 1
        assert h["loss_last_epoch"] > 0
    plain, _ = run_text(model_path)
    out, err = run_text(model_path, "--spec", "medusa", "--medusa-heads", str(heads),
                        "--spec-policy", "fixed")
    assert out == plain
    assert "speculation (medusa, fixed)" in err
    out, err = run_text(model_path, "--spec", "medusa", "--medusa-heads", str(heads),
                        "--medusa-tree", "6", "--spec-policy", "fixed")
    assert out == plain  # trees of 6 verified with tree attention
    assert "speculation (medusa, fixed)" in err
    r = run_ferry("bench", "decode", "-m", model_path, "-p", "16", "-n", "24", "-r", "1", "-t",
                  "2", "--spec", "medusa", "--medusa-heads", str(heads), "--medusa-tree", "6",
                  "--spec-policy", "fixed", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["spec_medusa_tree"] == 6 and rep["spec_output_identical"] is True


@pytest.mark.parametrize("args, needle", [
    (["--spec", "draft"], "--draft-model"),
    (["--spec", "medusa", "--medusa-heads", "/nonexistent/h.gguf"], "/nonexistent/h.gguf"),
    (["--spec", "magic"], "--spec"),
    (["--spec", "ngram", "--spec-ngram-min", "5", "--spec-ngram-max", "2"], "--spec-ngram-min"),
    (["--spec", "ngram", "--spec-policy", "adaptive"], "--spec-policy"),
    (["--spec", "medusa", "--medusa-tree", "33"], "--medusa-tree"),
    # An option for a method not chosen would be dropped without a word.
    (["--spec-k", "8"], "--spec-k has no effect without --spec"),
    (["--spec", "lookahead", "--spec-tree"], "--spec-tree has no effect without --spec ngram"),
    (["--draft-model", "default"], "--draft-model has no effect without --spec draft"),
    (["--spec", "ngram", "--medusa-tree", "6"], "--medusa-tree has no effect"),
    (["--spec", "medusa", "--spec-lookahead-n", "3"], "--spec-lookahead-n has no effect"),
])
def test_bad_switches_give_one_clear_error(model_path, args, needle):
    r = run_ferry("run", "-m", model_path, "-p", "Hello", "-n", "4", *args)
    assert r.returncode != 0
    assert needle in r.stderr
    assert "terminate" not in r.stderr and "Traceback" not in r.stderr


def test_bench_decode_reports_speculation(model_path, tmp_path):
    prompt = tmp_path / "copy.txt"
    prompt.write_text(COPY)
    r = run_ferry("bench", "decode", "-m", model_path, "--prompt-file", prompt, "--chat", "-n", "32",
                  "-r", "1", "-t", "2", "--spec", "ngram", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    for key in ("spec_acceptance_rate", "spec_mean_accepted", "spec_speedup",
                "baseline_decode_tokens_per_s", "decode_tokens_per_s"):
        assert key in j, key
    assert j["spec_method"] == "ngram"
    assert j["spec_policy"] == "cost"
    assert j["spec_steps"] + j["spec_declined_steps"] > 0
    assert j["spec_output_identical"] is True
    assert 0 < j["spec_acceptance_rate"] <= 1
    assert j["spec_mean_accepted"] > 0


def test_bench_decode_reports_lookaheads_sources(model_path, tmp_path):
    prompt = tmp_path / "copy.txt"
    prompt.write_text(COPY)
    r = run_ferry("bench", "decode", "-m", model_path, "--prompt-file", prompt, "--chat", "-n", "32",
                  "-r", "1", "-t", "2", "--spec", "lookahead", "--spec-policy", "fixed", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["spec_method"] == "lookahead" and j["spec_output_identical"] is True
    sources = j["lookahead_sources"]
    assert set(sources) == {"lookup", "pool", "jacobi"}
    assert sum(s["verified"] for s in sources.values()) > 0
    for s in sources.values():
        assert 0 <= s["accepted"] <= s["reached"]


@pytest.fixture(scope="module")
def spec_server(model_path):
    s = Server("--spec", "ngram", "--spec-k", "4", "--spec-policy", "fixed")
    yield s
    assert s.stop() == 0


def complete(server, **body):
    body = {"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": COPY, "max_tokens": 32, "temperature": 0, **body}
    return httpx.post(server.url + "/v1/completions", json=body, timeout=120)


def metric(server, name):
    text = httpx.get(server.url + "/metrics", timeout=30).text
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} missing from /metrics")


def test_server_speculates_without_changing_output(spec_server):
    before = metric(spec_server, "ferry:spec_decode_num_draft_tokens_total")
    on = complete(spec_server)
    off = complete(spec_server, speculation="off")
    assert on.status_code == 200 and off.status_code == 200, on.text + off.text
    assert on.json()["choices"][0]["text"] == off.json()["choices"][0]["text"]
    drafted = metric(spec_server, "ferry:spec_decode_num_draft_tokens_total")
    accepted = metric(spec_server, "ferry:spec_decode_num_accepted_tokens_total")
    assert drafted > before and 0 < accepted <= drafted


def test_server_lookahead_per_request_gives_the_same_text(spec_server):
    on = complete(spec_server, speculation="lookahead")
    off = complete(spec_server, speculation="off")
    assert on.status_code == 200 and off.status_code == 200, on.text + off.text
    assert on.json()["choices"][0]["text"] == off.json()["choices"][0]["text"]


@pytest.mark.parametrize("value, needle", [("draft", "--draft-model"), ("medusa", "--medusa-heads"),
                                           ("fast", "speculation"),
                                           (3, "speculation")])
def test_server_refuses_bad_speculation_choice(spec_server, value, needle):
    r = complete(spec_server, speculation=value)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]
