"""Fill-in-the-middle through /v1/completions' `suffix`: a random-weight Qwen2 served from a
directory whose tokenizer has <|fim_prefix|> / <|fim_suffix|> / <|fim_middle|>
(tests/golden/fim, from scripts/gen-golden-fim.py). The prompt the model reads must be the ids
Hugging Face's `tokenizers` gives the prefix-suffix-middle text, so the reply equals the one to
those ids sent as the prompt; a model without the tokens gets a 400 that says so."""
import json
import os
import shutil

import httpx
import pytest

from server_util import Server

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(__file__)), "golden")


@pytest.fixture(scope="module")
def fim_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("fim_model")
    qwen2 = os.path.join(GOLDEN, "hf_models", "qwen2")
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(qwen2, name), d / name)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(GOLDEN, "fim", name), d / name)
    s = Server("--threads", "2", model=str(d))
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def server(model_path):
    s = Server("--threads", "2")
    yield s
    assert s.stop() == 0


def cases():
    with open(os.path.join(GOLDEN, "fim", "golden.json"), encoding="utf-8") as f:
        return json.load(f)["cases"]


def complete(server, **body):
    body = {"max_tokens": 8, "temperature": 0, **body}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("case", cases()[:4], ids=lambda c: c["prefix"][:12])
def test_the_prompt_is_tokenizers_prefix_suffix_middle(fim_server, case):
    fim = complete(fim_server, prompt=case["prefix"], suffix=case["suffix"])
    as_ids = complete(fim_server, prompt=case["ids"])
    assert fim["usage"]["prompt_tokens"] == len(case["ids"])
    assert fim["choices"][0]["text"] == as_ids["choices"][0]["text"]
    # The same request streamed, and over token ids for the prefix.
    with httpx.stream("POST", fim_server.url + "/v1/completions", timeout=60,
                      json={"prompt": case["prefix"], "suffix": case["suffix"], "max_tokens": 8,
                            "temperature": 0, "stream": True}) as r:
        assert r.status_code == 200
        text = ""
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                text += json.loads(line[6:])["choices"][0].get("text", "")
    assert text == as_ids["choices"][0]["text"]


def test_a_prompt_of_ids_and_several_prompts(fim_server):
    c = cases()[0]
    prefix_ids = c["ids"][1:c["ids"].index(4)]  # between <|fim_prefix|> and <|fim_suffix|>
    by_ids = complete(fim_server, prompt=prefix_ids, suffix=c["suffix"])
    assert by_ids["usage"]["prompt_tokens"] == len(c["ids"])
    two = complete(fim_server, prompt=[c["prefix"], cases()[1]["prefix"]], suffix=c["suffix"])
    assert len(two["choices"]) == 2
    assert two["choices"][0]["text"] == by_ids["choices"][0]["text"]


def test_echo_with_a_suffix_is_refused(fim_server):
    r = httpx.post(fim_server.url + "/v1/completions", timeout=30,
                   json={"prompt": "x", "suffix": "y", "echo": True, "max_tokens": 2})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "echo"


def test_a_model_without_fim_tokens_says_so(server):
    r = httpx.post(server.url + "/v1/completions", timeout=30,
                   json={"prompt": "def f(", "suffix": "):\n", "max_tokens": 2})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "suffix"
    assert "fill-in-the-middle" in err["message"]
