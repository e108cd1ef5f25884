"""Prompt-token logprobs (completions' echo with logprobs, max_tokens 0, vLLM's prompt_logprobs),
as loglikelihood clients such as lm-eval-harness's local-completions use them, checked against
the exact float64 NumPy forward pass (scripts/ref_forward.py) over gguf-py's dequantized
weights: every position's log-softmax, not only the last.

Tolerance: ferry's default 16-bit activations move logits by at most 0.013 from the exact
reference (tests/unit/test_golden_model.cpp); a log-probability is a logit minus a log-sum-exp,
so 0.05 is the bound. A wrong position (off by one), a cached row, or the wrong token's entry
moves them by whole units.
"""
import math
import os
import sys

import numpy as np
import openai
import pytest

from server_util import Server

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import ref_forward  # noqa: E402

TOL = 0.05
TEXTS = [
    "A ferry crosses the harbour twice an hour, carrying cars and bicycles.",
    "def area(r):\n    return 3.14159 * r * r\n",
]


@pytest.fixture(scope="module")
def server(model_path):
    # A small batch budget, so a prompt runs in several chunks and each chunk's rows count.
    s = Server("--max-num-batched-tokens", 8)
    yield s
    s.stop()


MODEL = "default"


@pytest.fixture(scope="module")
def client(server):
    global MODEL
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    MODEL = c.models.list().data[0].id
    return c


@pytest.fixture(scope="module")
def reference(model_path):
    return ref_forward.Model(model_path)


def exact_logprobs(ref, ids):
    logits = ref_forward.forward(ref, ids, "exact", all_positions=True).astype(np.float64)
    m = logits.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))
    return logits - lse[:, None]  # row i: log p(token i + 1 | tokens 0..i)


def tokenize(server, text):
    import httpx

    r = httpx.post(server.url + "/tokenize", json={"prompt": text}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


@pytest.mark.parametrize("text", TEXTS)
def test_echo_logprobs_match_the_exact_forward_pass(server, client, reference, text):
    ids = tokenize(server, text)
    lp = exact_logprobs(reference, ids)
    # lm-eval-harness's loglikelihood request: token ids, echo, logprobs, one generated token.
    r = client.completions.create(model=MODEL, prompt=[ids], max_tokens=1, logprobs=3, echo=True,
                                  temperature=0)
    c = r.choices[0]
    assert c.text.startswith(text)
    got = c.logprobs
    assert len(got.tokens) == len(ids) + 1
    assert got.token_logprobs[0] is None and got.top_logprobs[0] is None
    for i in range(1, len(ids)):
        want = lp[i - 1, ids[i]]
        assert abs(got.token_logprobs[i] - want) < TOL, (i, got.token_logprobs[i], want)
        tops = got.top_logprobs[i]
        assert len(tops) == 3
        best = int(np.argmax(lp[i - 1]))
        order = np.sort(lp[i - 1])[::-1]
        if order[0] - order[1] > 2 * TOL:  # the exact best is clear: it is ferry's best
            assert max(tops.values()) == pytest.approx(lp[i - 1, best], abs=TOL)
    # text_offset: each token starts where the text before it ends.
    off = got.text_offset
    assert off[0] == 0
    for i in range(1, len(off)):
        assert off[i] == off[i - 1] + len(got.tokens[i - 1].encode())
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 1


def test_max_tokens_zero_scores_only(server, client, reference):
    text = TEXTS[0]
    ids = tokenize(server, text)
    lp = exact_logprobs(reference, ids)
    r = client.completions.create(model=MODEL, prompt=text, max_tokens=0, logprobs=0, echo=True)
    c = r.choices[0]
    assert c.text == text
    assert c.finish_reason == "length"
    assert r.usage.completion_tokens == 0
    assert len(c.logprobs.token_logprobs) == len(ids)
    total = sum(c.logprobs.token_logprobs[1:])
    assert abs(total - sum(lp[i - 1, ids[i]] for i in range(1, len(ids)))) < TOL * len(ids)
    # Without echo there is nothing to return: max_tokens 0 is refused.
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=text, max_tokens=0)
    assert "max_tokens" in str(e.value)


def test_the_prefix_cache_does_not_answer_for_prompt_logprobs(server, client):
    """A prompt already in the cache still gets every position's logprob, the same as cold."""
    text = TEXTS[1]
    plain = client.completions.create(model=MODEL, prompt=text, max_tokens=2, temperature=0)
    assert plain.usage.prompt_tokens > 1
    first = client.completions.create(model=MODEL, prompt=text, max_tokens=0, logprobs=2, echo=True)
    again = client.completions.create(model=MODEL, prompt=text, max_tokens=0, logprobs=2, echo=True)
    a, b = first.choices[0].logprobs.token_logprobs, again.choices[0].logprobs.token_logprobs
    assert a[0] is None and len(a) == plain.usage.prompt_tokens
    assert all(abs(x - y) < 1e-5 for x, y in zip(a[1:], b[1:]))


@pytest.mark.parametrize("stream", [False, True])
def test_vllm_prompt_logprobs(server, client, reference, stream):
    import httpx

    text = TEXTS[0]
    ids = tokenize(server, text)
    lp = exact_logprobs(reference, ids)
    body = {"model": MODEL, "prompt": text, "max_tokens": 3, "temperature": 0,
            "prompt_logprobs": 2, "stream": stream}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    if stream:
        chunks = [__import__("json").loads(l[6:]) for l in r.text.splitlines()
                  if l.startswith("data: {")]
        plp = chunks[0]["choices"][0]["prompt_logprobs"]
        assert all("prompt_logprobs" not in c["choices"][0] for c in chunks[1:])
    else:
        plp = r.json()["choices"][0]["prompt_logprobs"]
    assert plp[0] is None and len(plp) == len(ids)
    for i in range(1, len(ids)):
        e = plp[i]
        own = e[str(ids[i])]
        assert abs(own["logprob"] - lp[i - 1, ids[i]]) < TOL
        want_rank = 1 + int((lp[i - 1] > lp[i - 1, ids[i]] + TOL).sum())
        assert own["rank"] >= want_rank
        assert own["rank"] <= 1 + int((lp[i - 1] > lp[i - 1, ids[i]] - TOL).sum())
        assert 2 <= len(e) <= 3  # the prompt's own token and the best two
        assert all(math.isfinite(v["logprob"]) and v["logprob"] <= 0 for v in e.values())
    # Chat carries the list at the response's top level.
    r = httpx.post(server.url + "/v1/chat/completions",
                   json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                         "max_tokens": 2, "prompt_logprobs": 0}, timeout=60)
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["prompt_logprobs"][0] is None
    assert len(j["prompt_logprobs"]) == j["usage"]["prompt_tokens"]


def test_n_choices_each_echo_the_prompt_logprobs(client):
    r = client.completions.create(model=MODEL, prompt=TEXTS[0], max_tokens=2, logprobs=1,
                                  echo=True, n=3, temperature=1.0, seed=5)
    firsts = [c.logprobs.token_logprobs[:-2] for c in r.choices]
    assert len(firsts) == 3 and firsts[0][0] is None
    assert firsts[0] == firsts[1] == firsts[2]


def test_bad_prompt_logprobs_are_refused(client):
    for bad in (-1, 21, "3"):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=MODEL, prompt="x", max_tokens=1,
                                      extra_body={"prompt_logprobs": bad})
        assert "prompt_logprobs" in str(e.value)
