"""Tool calling through `ferry serve` with the official openai client: `required` and a named
function always return calls whose arguments validate against the function's schema, streamed
deltas reassemble to the non-streamed answer, `auto` round-trips a call and its result, and each
call format (Hermes through SmolLM2's template-less system prompt and Qwen 2.5's template, Llama
3.1's JSON, Mistral's [TOOL_CALLS]) parses back from its own template's model."""
import json
import os
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import openai
import pytest

from server_util import Server

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(os.path.dirname(HERE), "golden")

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "maxLength": 24},
                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "enum": ["UTC", "CET", "PST"]}},
        "required": ["timezone"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "The time in a timezone",
                                      "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]


def check_calls(message, names=None):
    assert message.tool_calls, message
    for call in message.tool_calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in (names or SCHEMAS), call.function.name
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.fixture(scope="module")
def server(model_path):
    s = Server()
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def test_required_and_named_always_validate(client):
    model = client.models.list().data[0].id
    prompts = ["What is the weather like in Paris right now?", "Is it raining in Tokyo?",
               "What time is it in Berlin?", "Tell me a joke.", "Should I take an umbrella in London?"]

    def ask(args):
        prompt, choice, temperature, parallel = args
        return client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], tools=TOOLS, tool_choice=choice,
            max_tokens=120, temperature=temperature, seed=11, parallel_tool_calls=parallel)

    named = {"type": "function", "function": {"name": "get_time"}}
    jobs = [(p, c, t, par) for p in prompts for c in ("required", named) for t in (0.0, 0.9)
            for par in (True, False)]
    finished = 0
    with ThreadPoolExecutor(len(jobs)) as pool:
        for (prompt, choice, _, parallel), r in zip(jobs, pool.map(ask, jobs)):
            c = r.choices[0]
            if c.finish_reason == "length":
                continue  # unfinished: a small model may repeat parallel calls until max_tokens
            finished += 1
            assert c.finish_reason == "tool_calls", (prompt, choice, c)
            check_calls(c.message, ["get_time"] if choice is named else None)
            if not parallel:
                assert len(c.message.tool_calls) == 1
    assert finished >= len(jobs) // 2, f"only {finished} of {len(jobs)} finished"


def test_streamed_deltas_reassemble_to_the_response(client):
    model = client.models.list().data[0].id
    kw = dict(model=model, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=120, temperature=0,
              parallel_tool_calls=False)
    full = client.chat.completions.create(**kw).choices[0]
    calls, finish, content = {}, None, ""
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for d in ch.delta.tool_calls or []:
                slot = calls.setdefault(d.index, {"name": "", "arguments": ""})
                slot["name"] += (d.function.name or "") if d.function else ""
                slot["arguments"] += (d.function.arguments or "") if d.function else ""
            finish = ch.finish_reason or finish
    assert finish == full.finish_reason == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in full.message.tool_calls]
    assert content == (full.message.content or "")


def test_auto_round_trip(client):
    model = client.models.list().data[0].id
    first = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice="required",
                                           max_tokens=120, temperature=0, parallel_tool_calls=False).choices[0]
    assert first.finish_reason == "tool_calls"
    call = first.message.tool_calls[0]
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "clear"})},
    ]
    r = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, tool_choice="auto",
                                       max_tokens=60, temperature=0).choices[0]
    assert r.finish_reason in ("stop", "length", "tool_calls")
    if r.finish_reason == "tool_calls":
        check_calls(r.message)
    else:
        assert r.message.content  # an answer in words
    # none: the tools are not offered at all, so the reply is text
    r = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice="none",
                                       max_tokens=20, temperature=0).choices[0]
    assert r.message.tool_calls is None and r.finish_reason in ("stop", "length")


def test_bad_tool_requests_are_400(server):
    url = server.url + "/v1/chat/completions"
    cases = [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "nope"),
        ({"tools": TOOLS, "tool_choice": "always"}, "always"),
        ({"tool_choice": "required"}, "needs 'tools'"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "name"),
        ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "combined"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}],
          "tool_choice": "required"}, "'not'"),
        ({"functions": [{"name": "f"}]}, "deprecated"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "tool_call_id"),
    ]
    for extra, needle in cases:
        r = httpx.post(url, json={"messages": ASK, "max_tokens": 4, **extra}, timeout=60)
        assert r.status_code == 400, (extra, r.text)
        assert needle in r.json()["error"]["message"], (extra, r.text)
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "x", "tools": TOOLS}, timeout=60)
    assert r.status_code == 400 and "chat/completions" in r.json()["error"]["message"]


FORMATS = [  # (random-weight model dir, chat template, what the template's call format is)
    ("qwen2", "qwen2.5.jinja", "<tool_call>"),
    ("llama31", "llama3.1.jinja", '"parameters"'),
    ("mistral", "mistral-nemo.jinja", "[TOOL_CALLS]"),
]


@pytest.mark.parametrize("model_dir,template,marker", FORMATS)
def test_each_format_parses_back(model_dir, template, marker):
    """A random-weight model says nothing sensible, but under `required` the grammar writes a
    well-formed call in its template's format, and the server must parse it back."""
    tmpl = os.path.join(GOLDEN, "templates", template)
    assert marker in open(tmpl).read()
    # The random models train on 128-512 positions; the tools alone are longer, and RoPE
    # runs past the trained length (the output is noise anyway).
    s = Server("--chat-template", tmpl, "--ctx", 2048, model=os.path.join(GOLDEN, "hf_models", model_dir))
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=300)
        model = c.models.list().data[0].id
        for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
            r = c.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice=choice,
                                          max_tokens=200, temperature=0, parallel_tool_calls=False).choices[0]
            assert r.finish_reason == "tool_calls", (template, r)
            check_calls(r.message, ["get_time"] if isinstance(choice, dict) else None)
    finally:
        assert s.stop() == 0
