"""`ferry serve` against the official openai client, raw HTTP and hostile input (real model)."""
import json
import random
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from conftest import run_ferry
from server_util import Server
from test_cli_run import expect_clean_error

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def server(model_path):
    s = Server("--max-num-seqs", 160)
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def model_id(client):
    return client.models.list().data[0].id


def test_models_and_health(server, client):
    assert server.first_health in (200, 503)
    models = client.models.list().data
    assert len(models) == 1 and models[0].id.startswith("SmolLM2")
    assert httpx.get(server.url + f"/v1/models/{models[0].id}").status_code == 200


def test_completion(client):
    r = client.completions.create(model=model_id(client), prompt=PROMPT, max_tokens=8, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].text.strip()
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.prompt_tokens == 5 and 0 < r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completion_prompt_forms(client):
    m = model_id(client)
    ids = [504, 3575, 282, 4649, 314]
    r = client.completions.create(model=m, prompt=ids, max_tokens=4, temperature=0)
    r2 = client.completions.create(model=m, prompt=[PROMPT, "Hello"], max_tokens=4, temperature=0)
    assert len(r2.choices) == 2 and [c.index for c in r2.choices] == [0, 1]
    assert r.choices[0].text
    r3 = client.completions.create(model=m, prompt=[ids, ids], max_tokens=4, temperature=0)
    assert r3.choices[0].text == r3.choices[1].text


def test_chat(client):
    r = client.chat.completions.create(model=model_id(client), max_tokens=12, temperature=0,
                                       messages=[{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Say hello."}])
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content
    assert r.usage.completion_tokens <= 12


@pytest.mark.parametrize("chat", [False, True])
def test_stream_with_usage_matches_non_stream(client, chat):
    m = model_id(client)
    kw = dict(model=m, max_tokens=10, temperature=0)
    if chat:
        msgs = [{"role": "user", "content": "Name a fruit."}]
        full = client.chat.completions.create(messages=msgs, **kw).choices[0].message.content
        stream = client.chat.completions.create(messages=msgs, stream=True,
                                                stream_options={"include_usage": True}, **kw)
    else:
        full = client.completions.create(prompt=PROMPT, **kw).choices[0].text
        stream = client.completions.create(prompt=PROMPT, stream=True,
                                           stream_options={"include_usage": True}, **kw)
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
            assert chunk.choices == []
            continue
        c = chunk.choices[0]
        text += (c.delta.content or "") if chat else c.text
        finish = c.finish_reason or finish
    assert text == full
    assert usage is not None and 0 < usage.completion_tokens <= 10
    assert finish in ("length", "stop")


def test_n_and_seed(client):
    m = model_id(client)
    kw = dict(model=m, prompt="Once upon a time", max_tokens=6, temperature=1.0, seed=1234)
    a = client.completions.create(n=3, **kw)
    assert sorted(c.index for c in a.choices) == [0, 1, 2]
    b = client.completions.create(n=1, **kw)
    c = client.completions.create(n=1, **kw)
    assert b.choices[0].text == c.choices[0].text, "same seed must give the same text"
    d = client.chat.completions.create(model=m, messages=[{"role": "user", "content": "Tell a story."}],
                                       max_tokens=6, temperature=1.0, seed=99, n=2)
    assert len(d.choices) == 2


def test_stop_strings(client):
    m = model_id(client)
    full = client.completions.create(model=m, prompt=PROMPT, max_tokens=16, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    # Stop at the second word boundary of the greedy continuation.
    words = full.split(" ")
    assert len(words) >= 3, full
    stop = " " + words[2]
    r = client.completions.create(model=m, prompt=PROMPT, max_tokens=16, temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == full[: full.index(stop)]
    assert stop not in r.choices[0].text
    # Streaming honours stop strings too.
    chunks = client.completions.create(model=m, prompt=PROMPT, max_tokens=16, temperature=0,
                                       stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in chunks) == r.choices[0].text


def test_logprobs(client):
    m = model_id(client)
    r = client.completions.create(model=m, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == r.usage.completion_tokens
    assert all(v <= 0 for v in lp.token_logprobs)
    assert all(1 <= len(t) <= 2 for t in lp.top_logprobs)
    # Greedy: the sampled token is the most likely one.
    for tok, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert abs(max(top.values()) - tok) < 1e-4
    c = client.chat.completions.create(model=m, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
    content = c.choices[0].logprobs.content
    assert len(content) == c.usage.completion_tokens
    assert all(len(e.top_logprobs) == 3 and e.logprob <= 0 for e in content)


def test_logit_bias_bans_a_token(server):
    body = {"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0}
    plain = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()
    assert "Paris" in plain["choices"][0]["text"]
    paris = httpx.post(server.url + "/tokenize", json={"prompt": " Paris"}).json()["tokens"]
    assert len(paris) == 1
    r = httpx.post(server.url + "/v1/completions", timeout=60,
                   json=dict(body, logit_bias={str(paris[0]): -100}))
    assert r.status_code == 200, r.text
    assert "Paris" not in r.json()["choices"][0]["text"]
    bad = httpx.post(server.url + "/v1/completions", json=dict(body, logit_bias={"x": 1}))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "logit_bias"


def test_tokenize_detokenize(server):
    t = httpx.post(server.url + "/tokenize", json={"prompt": PROMPT}).json()
    assert t["count"] == len(t["tokens"]) == 5 and t["max_model_len"] > 0
    d = httpx.post(server.url + "/detokenize", json={"tokens": t["tokens"]}).json()
    assert d["prompt"] == PROMPT
    chat = httpx.post(server.url + "/tokenize",
                      json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert chat["count"] > 3


def test_request_id_and_metrics(server, client):
    r = httpx.post(server.url + "/v1/completions", headers={"X-Request-Id": "test-req-42"},
                   json={"prompt": PROMPT, "max_tokens": 2})
    assert r.status_code == 200 and r.headers["x-request-id"] == "test-req-42"
    assert r.json()["id"].endswith("test-req-42")
    m = server.metrics()
    for name in ["ferry:num_requests_running", "ferry:num_requests_waiting", "ferry:kv_cache_usage_perc",
                 "ferry:prefix_cache_queries_total", "ferry:prefix_cache_hits_total",
                 "ferry:prompt_tokens_total", "ferry:generation_tokens_total",
                 "ferry:request_success_total", "ferry:num_preemptions_total",
                 "ferry:time_to_first_token_seconds_count", "ferry:inter_token_latency_seconds_count",
                 "ferry:e2e_request_latency_seconds_count", "ferry:request_queue_time_seconds_count"]:
        assert name in m, name
    assert m["ferry:generation_tokens_total"] > 0
    text = httpx.get(server.url + "/metrics").text
    assert 'model_name="SmolLM2' in text and 'finished_reason="length"' in text
    # The device's memory (RAM here) and the pool's bytes, consistent with each other.
    assert 'device="cpu"' in text
    total = m["ferry:device_memory_total_bytes"]
    assert 0 < m["ferry:device_memory_free_bytes"] <= total
    assert 0 < m["ferry:kv_cache_pool_bytes"] < total


def test_sampling_on_the_device_gives_the_same_seeded_text(client):
    # A server that draws on the device (Backend::sample; only ids leave the backend) gives a
    # seeded request the text this one (the host's sampler, "auto" on the CPU) gives, and counts
    # those steps as id steps.
    # A constrained request too: its grammar's mask goes to the device with the draw.
    kws = [dict(prompt="Once upon a time", max_tokens=16, temperature=0.9, top_p=0.9, seed=77,
                frequency_penalty=0.4),
           dict(prompt="Her email address is", max_tokens=24, temperature=1.0, seed=5,
                extra_body={"guided_regex": r"[a-z]{2,10}@[a-z]{2,8}\.(com|org)"})]
    want = [client.completions.create(model=model_id(client), **kw).choices[0].text for kw in kws]
    s = Server("--sample-on", "device")
    try:
        other = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        got = [other.completions.create(model=model_id(other), **kw).choices[0].text for kw in kws]
        assert got == want
        assert re.fullmatch(r"[a-z]{2,10}@[a-z]{2,8}\.(com|org)", got[1]), got[1]
        assert s.metrics()["ferry:engine_id_steps_total"] > 0
    finally:
        assert s.stop() == 0


def test_http_metrics_by_route_and_status(server):
    def count(route, status):
        m = server.metrics()
        return sum(v for (name, labels), v in ((k, v) for k, v in m.items() if isinstance(k, tuple))
                   if name == "ferry:http_requests_total"
                   and f'route="{route}"' in labels and f'status="{status}"' in labels)

    before = {k: count(*k) for k in [("/v1/completions", 200), ("/v1/completions", 400),
                                     ("other", 404), ("/v1/models/{id}", 404),
                                     ("/v1/chat/completions", 200)]}
    httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 1})
    httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": -3})
    httpx.get(server.url + "/no/such/path/" + "x" * 50)
    httpx.get(server.url + "/v1/models/not-this-one")
    with httpx.stream("POST", server.url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                            "stream": True}) as r:
        assert r.status_code == 200
        r.read()
    for k, v in before.items():
        assert count(*k) == v + 1, k
    text = httpx.get(server.url + "/metrics").text
    # A path the server does not serve is counted as "other", never as its own label.
    assert "/no/such/path" not in text
    assert 'ferry:http_request_duration_seconds_count{model_name="' in text
    assert 'route="/v1/chat/completions"' in text


@pytest.mark.parametrize("body,status,param", [
    ({"prompt": PROMPT, "temperature": "hot"}, 400, "temperature"),
    ({"prompt": PROMPT, "temperature": 5}, 400, "temperature"),
    ({"prompt": PROMPT, "max_tokens": -1}, 400, "max_tokens"),
    ({"prompt": PROMPT, "n": 1000}, 400, "n"),
    ({"prompt": PROMPT, "logprobs": 50}, 400, "logprobs"),
    ({"prompt": PROMPT, "top_p": 0}, 400, "top_p"),
    ({"prompt": PROMPT, "stop": 5}, 400, "stop"),
    ({"prompt": [1, 2, 10**9]}, 400, "prompt"),
    ({"prompt": PROMPT, "model": "no-such-model"}, 404, "model"),
    ({"max_tokens": 3}, 400, "prompt"),
])
def test_errors(server, body, status, param):
    r = httpx.post(server.url + "/v1/completions", json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"] and err["type"]


CHAT = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("path,body,param,words", [
    # A misspelt field is not run with the defaults (4,000 tokens where one was meant).
    ("/v1/chat/completions", {"messages": CHAT, "max_token": 1}, "max_token", "Unrecognized"),
    ("/v1/completions", {"prompt": PROMPT, "temprature": 0}, "temprature", "Unrecognized"),
    ("/v1/chat/completions", {"messages": CHAT, "prompt": "x"}, "prompt", "completions field"),
    ("/v1/chat/completions", {"messages": CHAT, "echo": True}, "echo", "completions field"),
    ("/v1/completions", {"prompt": PROMPT, "messages": CHAT}, "messages", "chat field"),
    ("/v1/completions", {"prompt": PROMPT, "top_logprobs": 2}, "top_logprobs", "chat field"),
    ("/v1/chat/completions", {"messages": CHAT, "store": True}, "store", "store"),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "max_completion_tokens": 3},
     "max_completion_tokens", "disagree"),
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": 1e30}, "max_tokens", "between"),
    ("/tokenize", {}, "prompt", "required"),
    ("/tokenize", {"prompt": "hi", "add_special": False}, "add_special", "Unrecognized"),
    ("/tokenize", {"prompt": "hi", "messages": CHAT}, "prompt", "completions field"),
])
def test_fields_are_never_dropped_silently(server, path, body, param, words):
    r = httpx.post(server.url + path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"], err


def test_no_op_fields_clients_send_are_accepted(server):
    r = httpx.post(server.url + "/v1/chat/completions",
                   json={"messages": CHAT, "max_completion_tokens": 2, "max_tokens": 2,
                         "store": False, "user": "u", "metadata": {"k": "v"},
                         "service_tier": "auto", "guided_decoding_backend": "xgrammar"})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 2


def test_scoring_a_prompt_that_fills_the_context(server, client):
    ctx = httpx.post(server.url + "/tokenize", json={"prompt": "hi"}).json()["max_model_len"]
    ids = [42] * ctx
    r = httpx.post(server.url + "/v1/completions", timeout=300,
                   json={"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 0})
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]["token_logprobs"]
    assert len(lp) == ctx and lp[0] is None and all(x is not None for x in lp[1:])
    # Generating even one token from it does not fit.
    r = httpx.post(server.url + "/v1/completions", json={"prompt": ids, "max_tokens": 1})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


def test_expect_100_continue_is_answered(server):
    # curl sends this for bodies over 1 MB and waits a second for the 100 before sending.
    body = json.dumps({"prompt": "hi"}).encode()
    host, port = server.url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        s.settimeout(0.5)  # a server that ignores the header leaves the client waiting
        first = s.recv(4096)
        assert first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), first
        s.settimeout(10)
        s.sendall(body)
        reply = first[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
        while b'"count"' not in reply:
            chunk = s.recv(4096)
            assert chunk, reply
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200"), reply
    # A body over --max-body-bytes is refused before it is sent.
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                  b"Content-Length: 999999999\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 413")


def test_errors_via_openai_client(client):
    m = model_id(client)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=m, prompt=PROMPT, temperature=-1)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-nothing", prompt=PROMPT)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=m, prompt="word " * 5000, max_tokens=4)
    assert "tokens" in str(e.value) and "context" in str(e.value)
    assert e.value.code == "context_length_exceeded" and e.value.param == "prompt"
    with pytest.raises(openai.BadRequestError) as e:  # the prompt fits, the answer asked for not
        client.chat.completions.create(model=m, messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=1 << 20)
    assert e.value.code == "context_length_exceeded" and e.value.param == "max_tokens"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=m, messages=[{"role": "wizard", "content": "x"}])
    assert e.value.code != "context_length_exceeded"


def test_http_errors(server):
    assert httpx.get(server.url + "/v1/nothing").status_code == 404
    r = httpx.get(server.url + "/v1/completions")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = httpx.post(server.url + "/v1/models", content=b"{}")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
    r = httpx.post(server.url + "/v1/completions", content=b'{"prompt": "x' + b"a" * (5 << 20) + b'"}')
    assert r.status_code == 413 and r.json()["error"]["message"]
    r = httpx.post(server.url + "/v1/completions", content=b'{"prompt": ')
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]


def stream_one(url, prompt, max_tokens):
    text, done, usage, finish = "", False, None, None
    with httpx.stream("POST", url + "/v1/completions", timeout=120,
                      json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                            "stream": True, "stream_options": {"include_usage": True},
                            "ignore_eos": True}) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                continue
            j = json.loads(data)
            if j["usage"]:
                usage = j["usage"]
            for c in j["choices"]:
                text += c["text"]
                finish = c["finish_reason"] or finish
    return text, done, usage, finish


def test_128_concurrent_streams(server, client):
    ref = client.completions.create(model=model_id(client), prompt=PROMPT, max_tokens=6, temperature=0,
                                    extra_body={"ignore_eos": True}).choices[0].text
    with ThreadPoolExecutor(128) as pool:
        results = list(pool.map(lambda _: stream_one(server.url, PROMPT, 6), range(128)))
    first_word = ref.split()[0]
    for text, done, usage, finish in results:
        assert done and finish == "length"
        assert usage["completion_tokens"] == 6
        # Batched greedy decoding may break near-ties differently from a lone request (the
        # engine's batched kernels are not bit-identical), so only the confident start is fixed.
        assert text.split()[0] == first_word, (text, ref)


def test_disconnect_frees_everything(server):
    def start_and_drop():
        s = socket.create_connection(("127.0.0.1", server.port))
        body = json.dumps({"prompt": PROMPT, "max_tokens": 2000, "ignore_eos": True,
                           "stream": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data: ") < 3:
            got += s.recv(4096)
        s.close()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: start_and_drop(), range(8)))
    deadline = time.time() + 5
    while time.time() < deadline:
        m = server.metrics()
        if m["ferry:num_requests_running"] == 0 and m["ferry:kv_cache_used_blocks"] == 0:
            break
        time.sleep(0.05)
    assert m["ferry:num_requests_running"] == 0 and m["ferry:num_requests_waiting"] == 0
    assert m["ferry:kv_cache_used_blocks"] == 0
    assert m["ferry:http_client_disconnects_total"] >= 8


def malformed_bodies(rng):
    base = json.dumps({"prompt": PROMPT, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    out = []
    for _ in range(60):  # truncated JSON
        out.append(base[: rng.randrange(1, len(base) - 1)].encode())
    values = [None, True, "x", -1, 0, 10**30, -10**30, 1e308, 1.5, [], {}, [[1]], "\u0000", "9" * 400]
    fields = ["prompt", "max_tokens", "temperature", "top_p", "n", "stop", "logprobs", "seed",
              "messages", "stream", "stream_options", "top_k", "min_p", "presence_penalty",
              "frequency_penalty", "repetition_penalty", "stop_token_ids", "model", "echo"]
    for _ in range(90):  # wrong types and huge numbers
        body = {"prompt": PROMPT, "max_tokens": 2}
        for f in rng.sample(fields, 2):
            body[f] = rng.choice(values)
        if all(body.get(k) in (None, PROMPT, 2) for k in body):
            body["n"] = -5
        out.append(json.dumps(body).encode())
    for _ in range(30):  # invalid UTF-8
        b = bytearray(base.encode())
        i = rng.randrange(12, 12 + len(PROMPT))
        b[i:i] = bytes([rng.choice([0xff, 0xc0, 0xe2, 0x80, 0xfe])])
        out.append(bytes(b))
    for _ in range(20):  # deep nesting
        d = rng.randrange(65, 100000)
        out.append(b'{"prompt":' + b"[" * d + b"]" * d + b"}")
    out += [b"", b"null", b"[]", b"42", b'"str"', b"{", b"}" * 10, b"\x00" * 10]
    return out


def test_malformed_bodies(server):
    rng = random.Random(5)
    bodies = malformed_bodies(rng)
    assert len(bodies) >= 200
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for i, b in enumerate(bodies):
            path = "/v1/chat/completions" if i % 2 else "/v1/completions"
            r = c.post(path, content=b, headers={"Content-Type": "application/json"})
            # A body can be valid by chance (a truncation that still parses is rare but not
            # impossible); everything else must be a clean 4xx with the OpenAI error shape.
            if r.status_code == 200:
                continue
            assert 400 <= r.status_code < 500, (b[:200], r.status_code, r.text[:200])
            assert "error" in r.json()
    assert httpx.get(server.url + "/health").status_code == 200
    assert server.proc.poll() is None
    # The request log quotes what the clients sent; it must stay valid UTF-8 line by line.
    log = server.raw_output().decode("utf-8")
    assert all(line.isprintable() for line in log.splitlines()), "control bytes in the log"


def test_auth(model_path):
    s = Server(api_key="sekrit")
    try:
        ok = openai.OpenAI(base_url=s.url + "/v1", api_key="sekrit", max_retries=0)
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0)
        assert ok.completions.create(model=model_id(ok), prompt=PROMPT, max_tokens=2).choices
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        r = httpx.post(s.url + "/v1/completions", json={"prompt": PROMPT})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(s.url + "/health").status_code == 200
        assert httpx.get(s.url + "/").status_code == 200  # the page asks for the key itself
        # x-api-key (Anthropic-style clients, some gateways) counts as the key too
        r = httpx.post(s.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 1},
                       headers={"x-api-key": "sekrit"})
        assert r.status_code == 200, r.text
        assert httpx.post(s.url + "/v1/completions", json={"prompt": PROMPT},
                          headers={"x-api-key": "nope"}).status_code == 401
        # /metrics is behind the key when there is one
        assert httpx.get(s.url + "/metrics").status_code == 401
        m = httpx.get(s.url + "/metrics", headers={"Authorization": "Bearer sekrit"})
        assert m.status_code == 200 and "ferry:" in m.text
    finally:
        assert s.stop() == 0
    s = Server("--public-metrics", "--host", "localhost", api_key="sekrit")
    try:
        assert httpx.get(s.url + "/metrics").status_code == 200
        assert httpx.get(s.url + "/v1/models").status_code == 401
    finally:
        assert s.stop() == 0


def test_api_key_from_the_environment(model_path, monkeypatch):
    # FERRY_API_KEY keeps the key out of the command line (`ps`); a flag still wins over it.
    monkeypatch.setenv("FERRY_API_KEY", "from-env")
    s = Server()
    try:
        with open(f"/proc/{s.proc.pid}/cmdline", "rb") as f:
            assert b"from-env" not in f.read()
        assert httpx.get(s.url + "/v1/models").status_code == 401
        r = httpx.get(s.url + "/v1/models", headers={"Authorization": "Bearer from-env"})
        assert r.status_code == 200, r.text
    finally:
        assert s.stop() == 0
    s = Server(api_key="from-flag")
    try:
        assert httpx.get(s.url + "/v1/models",
                         headers={"Authorization": "Bearer from-env"}).status_code == 401
        assert httpx.get(s.url + "/v1/models",
                         headers={"Authorization": "Bearer from-flag"}).status_code == 200
    finally:
        assert s.stop() == 0
    # Set but empty is the `--api-key "$UNSET"` mistake: refused, not an open server.
    monkeypatch.setenv("FERRY_API_KEY", "")
    expect_clean_error(run_ferry("serve", "--port", "0"), "FERRY_API_KEY is set but empty")


def test_cors_preflight_reflects_the_requested_headers(server):
    asked = "authorization, content-type, x-stainless-os, x-stainless-lang, openai-organization"
    r = httpx.options(server.url + "/v1/chat/completions",
                      headers={"Origin": "http://example.com", "Access-Control-Request-Method": "POST",
                               "Access-Control-Request-Headers": asked})
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == "*"
    assert r.headers["access-control-allow-headers"] == asked
    assert "POST" in r.headers["access-control-allow-methods"]


def test_overload_gets_429_and_accepted_complete(model_path):
    s = Server("--max-queue", 4, "--max-num-seqs", 2)
    try:
        def one(_):
            r = httpx.post(s.url + "/v1/completions", timeout=120,
                           json={"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": True})
            return r.status_code, r.headers.get("retry-after"), r.json()

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(one, range(16)))
        codes = [c for c, _, _ in results]
        assert 429 in codes and 200 in codes, codes
        for code, retry, body in results:
            if code == 429:
                assert retry and body["error"]["type"]
            else:
                assert code == 200 and body["usage"]["completion_tokens"] == 8
    finally:
        assert s.stop() == 0


def test_sigterm_drains_running_request(model_path):
    s = Server("--grace", 20)
    result = {}

    def run():
        result["r"] = stream_one(s.url, PROMPT, 40)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    rc = s.stop()
    t.join(30)
    assert rc == 0
    text, done, usage, finish = result["r"]
    assert done and finish in ("length", "abort")
    with pytest.raises(httpx.TransportError):
        httpx.get(s.url + "/health", timeout=2)


def test_sigterm_past_grace_reports_503_not_a_completion(model_path):
    """A request the shutdown cuts off (grace 0) is an error the client can see and retry,
    not a 200 with empty text."""
    s = Server("--grace", 0)
    result = {}

    def run():
        result["r"] = httpx.post(s.url + "/v1/completions", timeout=60,
                                 json={"prompt": PROMPT, "max_tokens": 2000, "temperature": 0,
                                       "ignore_eos": True})

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1.0)
    s.stop()
    t.join(30)
    r = result["r"]
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "shutting_down"


def test_bench_serve(server):
    from conftest import run_ferry
    r = run_ferry("bench", "serve", "--url", server.url, "--num-prompts", 6, "--request-rate", 20,
                  "--input-len", 8, 16, "--output-len", 4, "--max-concurrency", 4,
                  "--slo-ttft-ms", 60000, "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["completed"] == 6 and j["failed"] == 0 and j["total_output_tokens"] == 24
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(j[k]) == {"mean", "p50", "p90", "p99"}
    assert j["goodput"] > 0


def test_serve_applies_activation_and_kv_options():
    """`serve --activations` and `--kv-dtype` reach the engine it runs (its ready line says
    which), and the exact float path still answers."""
    s = Server("--activations", "f32", "--kv-dtype", "f32")
    try:
        r = httpx.post(s.url + "/v1/completions",
                       json={"prompt": "The capital of France is", "max_tokens": 4,
                             "temperature": 0}, timeout=60)
        assert r.status_code == 200, r.text
        assert "Paris" in r.json()["choices"][0]["text"]
    finally:
        s.stop()
    log = s.output()
    assert "f32 activations, f32 KV cache" in log, log


def test_continue_final_message_continues_the_assistant_text(client):
    m = model_id(client)
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is"}]
    r = client.chat.completions.create(model=m, messages=msgs, max_tokens=8, temperature=0,
                                       extra_body={"continue_final_message": True,
                                                   "add_generation_prompt": False})
    text = r.choices[0].message.content
    assert "Paris" in text and not text.startswith("The capital")
    # The same prompt written out by hand in SmolLM2's ChatML, left open after the text.
    raw = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
           "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
           "<|im_start|>assistant\nThe capital of France is")
    c = client.completions.create(model=m, prompt=raw, max_tokens=8, temperature=0)
    assert text == c.choices[0].text
    assert r.usage.prompt_tokens == c.usage.prompt_tokens
    # Streamed, the same; without the flag the final turn is closed and a new one opened.
    stream = client.chat.completions.create(model=m, messages=msgs, max_tokens=8, temperature=0,
                                            stream=True,
                                            extra_body={"continue_final_message": True})
    assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices) == text
    plain = client.chat.completions.create(model=m, messages=msgs, max_tokens=8, temperature=0)
    assert plain.usage.prompt_tokens > r.usage.prompt_tokens
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=m, messages=msgs[:2], max_tokens=4,
                                       extra_body={"continue_final_message": True})
    assert e.value.param == "continue_final_message"
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=m, messages=msgs, max_tokens=4, tools=[tool],
                                       extra_body={"continue_final_message": True})
    assert e.value.param == "continue_final_message"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=m, messages=msgs, max_tokens=4,
                                       response_format={"type": "json_object"},
                                       extra_body={"continue_final_message": True})
    assert e.value.param == "continue_final_message"
    # A final text that also occurs in the template's closing tokens ("end" in <|im_end|>):
    # the prompt still ends right after it.
    short = msgs[:2] + [{"role": "assistant", "content": "end"}]
    r = client.chat.completions.create(model=m, messages=short, max_tokens=4, temperature=0,
                                       extra_body={"continue_final_message": True})
    c = client.completions.create(model=m, prompt=raw.replace("The capital of France is", "end"),
                                  max_tokens=4, temperature=0)
    assert r.usage.prompt_tokens == c.usage.prompt_tokens
    assert r.choices[0].message.content == c.choices[0].text


def test_include_stop_str_in_output(client):
    m = model_id(client)
    args = dict(model=m, prompt="1, 2, 3, 4, 5,", max_tokens=20, temperature=0, stop=[" 8"])
    cut = client.completions.create(**args)
    kept = client.completions.create(**args, extra_body={"include_stop_str_in_output": True})
    assert cut.choices[0].text == " 6, 7,"
    assert kept.choices[0].text == " 6, 7, 8"
    assert kept.choices[0].finish_reason == "stop"
    stream = client.completions.create(**args, stream=True,
                                       extra_body={"include_stop_str_in_output": True})
    assert "".join(ch.choices[0].text for ch in stream if ch.choices) == " 6, 7, 8"
