"""KV eviction (--kv-eviction streaming) through the command line and the server: a stream runs
past the context it was given, in flat memory, and gives every block back; what eviction
cannot serve is refused with a message, and without it a prompt longer than the context still
is."""
import concurrent.futures as cf
import json

import httpx
import pytest

from conftest import run_ferry
from server_util import Server

LONG = ("The keeper wrote down the weather every hour: wind from the west, a grey sea, "
        "three ships on the horizon and a gull on the rail. ") * 40  # ~1,000 tokens


def test_run_generates_past_the_context(model_path):
    args = ["run", "-m", model_path, "-p", "Once upon a time", "-n", 700, "--ctx", 512,
            "--ignore-eos", "--temp", 0]
    r = run_ferry(*args, "--kv-eviction", "streaming", "--kv-budget", 200)
    assert r.returncode == 0, r.stderr
    assert "generated: 700 tokens" in r.stderr
    assert "tokens evicted" in r.stderr
    # Without eviction the same stream stops where the context ends.
    plain = run_ferry(*args)
    assert plain.returncode == 0, plain.stderr
    assert "generated: 700 tokens" not in plain.stderr
    assert "length" in plain.stderr


def test_run_refuses_what_eviction_cannot_serve(model_path):
    r = run_ferry("run", "-m", model_path, "-p", "hi", "--kv-eviction", "streaming")
    assert r.returncode != 0 and "--kv-budget" in r.stderr
    r = run_ferry("run", "-m", model_path, "-p", "hi", "--kv-budget", 100)
    assert r.returncode != 0 and "apply to --kv-eviction" in r.stderr
    r = run_ferry("run", "-m", model_path, "-p", "hi", "--kv-eviction", "streaming",
                  "--kv-budget", 100, "--kv-dtype", "int8")
    assert r.returncode != 0 and "int8" in r.stderr
    r = run_ferry("run", "-m", model_path, "-p", "hi", "--ctx", 512, "--kv-eviction",
                  "streaming", "--kv-budget", 400)
    assert r.returncode != 0 and "exceed the 512 positions the context holds" in r.stderr
    # H2O keeps positions: a prompt past the context is still refused.
    r = run_ferry("run", "-m", model_path, "-p", LONG, "--ctx", 512, "--kv-eviction", "h2o",
                  "--kv-budget", 200)
    assert r.returncode != 0 and "context" in r.stderr


@pytest.fixture(scope="module")
def server(model_path):
    s = Server("--ctx", 512, "--kv-eviction", "streaming", "--kv-budget", 128,
               "--max-num-batched-tokens", 64, "--kv-cache-memory", 32 << 20)
    yield s
    s.stop()


def complete(server, prompt, max_tokens, stream=False):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": stream}
    if not stream:
        r = httpx.post(server.url + "/v1/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        return r.json()
    text, usage = "", None
    body["stream_options"] = {"include_usage": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=300) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            for c in ev.get("choices", []):
                text += c.get("text", "")
    return {"text": text, "usage": usage}


def test_server_serves_prompts_and_outputs_past_the_context(server):
    # Three at once: a prompt twice the context, and two streams of 600 tokens from short
    # prompts, on a 512-token context.
    with cf.ThreadPoolExecutor(3) as pool:
        long_prompt = pool.submit(complete, server, LONG, 40)
        streams = [pool.submit(complete, server, f"Story {i}: the ferry left", 600, True)
                   for i in range(2)]
        r = long_prompt.result()
        assert r["usage"]["prompt_tokens"] > 512
        assert r["usage"]["completion_tokens"] == 40
        for s in streams:
            assert s.result()["usage"]["completion_tokens"] == 600
    m = server.metrics()
    assert m["ferry:kv_evicted_tokens_total"] > 1000
    assert m["ferry:kv_cache_used_blocks"] == 0


def test_server_without_eviction_still_refuses_a_prompt_past_the_context(model_path):
    s = Server("--ctx", 512)
    try:
        r = httpx.post(s.url + "/v1/completions",
                       json={"prompt": LONG, "max_tokens": 4}, timeout=60)
        assert r.status_code == 400
        assert r.json()["error"]["code"] == "context_length_exceeded"
    finally:
        s.stop()


def test_eval_stream_scores_with_and_without_eviction(model_path, tmp_path):
    text = tmp_path / "long.txt"
    text.write_text(LONG)
    full = run_ferry("eval", "-m", model_path, "--text", text, "--stream", "--json")
    assert full.returncode == 0, full.stderr
    ev = run_ferry("eval", "-m", model_path, "--text", text, "--stream", "--json",
                   "--kv-eviction", "streaming", "--kv-budget", 256)
    assert ev.returncode == 0, ev.stderr
    a, b = json.loads(full.stdout), json.loads(ev.stdout)
    assert a["tokens"] == b["tokens"] > 900
    assert a["evicted_tokens"] == 0 and b["evicted_tokens"] > 500
    assert b["peak_kv_blocks"] < a["peak_kv_blocks"] / 2
    # A repeated text is predictable from its last repetition alone: the window keeps that.
    assert b["perplexity"] < a["perplexity"] * 1.10
    h2o = run_ferry("eval", "-m", model_path, "--text", text, "--stream", "--json",
                    "--kv-eviction", "h2o", "--kv-budget", 256)
    assert h2o.returncode == 0, h2o.stderr
    c = json.loads(h2o.stdout)
    assert c["kv_eviction"] == "h2o" and c["evicted_tokens"] > 500
    assert c["peak_kv_blocks"] < a["peak_kv_blocks"] / 2
    assert c["perplexity"] < a["perplexity"] * 1.10
    bad = run_ferry("eval", "-m", model_path, "--text", text, "--kv-eviction", "streaming",
                    "--kv-budget", 256)
    assert bad.returncode != 0 and "--stream" in bad.stderr


def test_chat_keeps_the_conversation_past_the_context(model_path):
    # The conversation outgrows a 512-token context: without eviction the oldest turns are
    # dropped and the rest recomputed; with it nothing is dropped, the old turns fade out of
    # the window, and every turn is answered.
    turns = ("Tell me about the history of Paris in detail.\n"
             "And what about London, its bridges and its river?\n"
             "Describe the canals of Amsterdam.\n"
             "What is the capital of Germany?\n/exit\n")
    args = ["chat", "--ctx", 512, "-n", 150, "--temperature", 0]
    plain = run_ferry(*args, input=turns)
    assert plain.returncode == 0, plain.stderr
    assert "dropped" in plain.stderr
    r = run_ferry(*args, "--kv-eviction", "streaming", "--kv-budget", 224, input=turns)
    assert r.returncode == 0, r.stderr
    assert "dropped" not in r.stderr and "error" not in r.stderr
    assert "Berlin" in r.stdout
