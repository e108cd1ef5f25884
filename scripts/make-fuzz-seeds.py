#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora (tests/fuzz/corpus/<harness>/) from the repository's
real files, cut small so each input stays a few KB: GGUF files rewritten by the `gguf` package
(llama.cpp's own writer) from the golden models' metadata with 24-token vocabularies and tiny
tensors, safetensors files written by hand from the format's spec, the golden config.json,
tokenizer.json and chat templates, schemas from the structured-output tests, and a few
hand-made texts, requests and HTTP exchanges. Run from the repository root with the tools venv:

    .venv/bin/python scripts/make-fuzz-seeds.py
"""
import json
import shutil
import struct
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fuzz/corpus"
MODELS = ROOT / "tests/golden/hf_models"


def fresh(name):
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def seeds_gguf():
    d = fresh("gguf")
    for src in sorted(MODELS.glob("*/llama.cpp.gguf")):
        r = gguf.GGUFReader(src)
        arch = r.fields["general.architecture"].contents()
        w = gguf.GGUFWriter(d / f"{src.parent.name}.gguf", arch)
        for key, f in r.fields.items():
            if key.startswith("GGUF.") or key == "general.architecture":
                continue
            vtype = f.types[0]
            val = f.contents()
            if vtype == gguf.GGUFValueType.ARRAY:
                val = val[:24]
                w.add_key_value(key, val, vtype, sub_type=f.types[-1])
            else:
                w.add_key_value(key, val, vtype)
        rng = np.random.default_rng(0)
        for i, t in enumerate(r.tensors[:3]):
            kind = [gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                    gguf.GGMLQuantizationType.Q8_0][i % 3]
            x = rng.standard_normal((2, 32)).astype(np.float32)
            if kind == gguf.GGMLQuantizationType.F16:
                w.add_tensor(t.name, x.astype(np.float16))
            elif kind == gguf.GGMLQuantizationType.Q8_0:
                w.add_tensor(t.name, gguf.quants.quantize(x, kind), raw_dtype=kind)
            else:
                w.add_tensor(t.name, x)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def safetensors_bytes(tensors, metadata=None):
    header, blob = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def seeds_safetensors():
    d = fresh("safetensors")
    rng = np.random.default_rng(1)
    for src in sorted(MODELS.glob("*/model.safetensors")):
        n = struct.unpack("<Q", src.read_bytes()[:8])[0]
        header = json.loads(src.read_bytes()[8:8 + n])
        tensors = {}
        for name, info in list((k, v) for k, v in header.items() if k != "__metadata__")[:4]:
            shape = [2, 3] if len(info["shape"]) > 1 else [3]
            size = {"F32": 4, "F16": 2, "BF16": 2, "I8": 1, "I64": 8, "F64": 8}.get(info["dtype"], 4)
            tensors[name] = (info["dtype"], shape, rng.bytes(size * int(np.prod(shape))))
        (d / f"{src.parent.name}.safetensors").write_bytes(safetensors_bytes(tensors, header.get("__metadata__")))
    kinds = {"F64": 8, "I8": 1, "I16": 2, "I32": 4, "I64": 8, "BF16": 2, "U8": 1, "BOOL": 1}
    (d / "dtypes.safetensors").write_bytes(safetensors_bytes(
        {f"t.{k}": (k, [2, 2], rng.bytes(4 * s)) for k, s in kinds.items()}, {"format": "pt"}))
    (d / "empty.safetensors").write_bytes(safetensors_bytes({"scalar": ("F32", [], rng.bytes(4)),
                                                             "none": ("F32", [0, 4], b"")}))


def seeds_copies():
    d = fresh("hf_config")
    for src in sorted(MODELS.glob("*/config.json")):
        shutil.copy(src, d / f"{src.parent.name}.json")
    d = fresh("tokenizer_json")
    for name in ["llama", "qwen2"]:
        t = (MODELS / name / "tokenizer.json").read_bytes()
        c = (MODELS / name / "tokenizer_config.json").read_bytes()
        (d / f"{name}.json").write_bytes(t + b"\0" + c)
    src = ROOT / "tests/golden/tokenizers/smollm2-bytelevel"
    (d / "smollm2.json").write_bytes((src / "tokenizer.json").read_bytes() + b"\0" +
                                     (src / "tokenizer_config.json").read_bytes())
    # The 29 real chat templates are seeds where they lie (tests/golden/templates); these add
    # what they rarely do.
    d = fresh("chat_template")
    for i, t in enumerate([
            "{% macro m(x, n=2) %}{{ x * n }}{% if n > 0 %}{{ m(x, n - 1) }}{% endif %}{% endmacro %}{{ m('ab') }}",
            "{% set ns = namespace(a=[]) %}{% for k, v in {'b': 1, 'a': 2}|dictsort %}{% set ns.a = ns.a + [k] %}"
            "{% endfor %}{{ ns.a|join(',') }}{{ loop }}",
            "{{ messages[-1]['content'][::-1]|upper|replace('A', '\\n')|tojson(indent=2) }}{{ raise_exception('x') if false }}",
            "{%- for m in messages if m.role != 'system' -%}{{ loop.index0 ~ ':' ~ m.content|default('none')|trim }}"
            "{%- else %}empty{% endfor %}{{ tools|length if tools is defined else 0 }}",
            "{% filter upper %}{{ '%s-%d'|format('a', 3) }}{% endfilter %}{{ range(3)|list|sum }}{{ 7 // 2 }}{{ 2 ** 10 }}",
            "{{ strftime_now('%Y-%m-%d') }}{{ bos_token + eos_token }}{% if add_generation_prompt %}<|assistant|>{% endif %}"]):
        (d / f"edge{i}.jinja").write_text(t)


def seeds_tokenize():
    d = fresh("tokenize")
    texts = [b"Hello, world! How are you today?", "caf\u00e9 na\u00efve \u4f60\u597d \U0001F600".encode(),
             b"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", b"   leading  and\t\ttabs\n\n\n",
             b"1234567890 3.14159 -42 1e10", b"\xff\xfe invalid \xc3 utf-8 \xe2\x82", b"def f(x):\n    return x**2\n",
             "\u0928\u092e\u0938\u094d\u0924\u0947 \u0645\u0631\u062d\u0628\u0627 \u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439".encode(),
             b"<s>[INST] hi [/INST]</s>", b"<start_of_turn>user\nhi<end_of_turn>"]
    for i, t in enumerate(texts):
        for sel in range(7):
            (d / f"t{i}_{sel}").write_bytes(bytes([sel, (i * 3 + sel) % 8]) + t)


def seeds_grammar():
    d = fresh("grammar")
    cases = json.loads((ROOT / "tests/integration/schemas/valid.json").read_text())
    for i, c in enumerate(cases[:40]):
        (d / f"schema{i:02d}").write_bytes(bytes([2 if i % 2 else 0, i]) + json.dumps(c["schema"]).encode())
    regexes = [r"\d{3}-\d{4}", r"[A-Z][a-z]+( [A-Z][a-z]+)*", r"(yes|no|maybe)", r"[\w.+-]+@[\w-]+\.[a-z]{2,}",
               r"\p{L}+", r"(a|b)*c{2,5}[^x-z]?", r"^\s*-?(0|[1-9]\d*)(\.\d+)?$"]
    for i, r in enumerate(regexes):
        (d / f"regex{i}").write_bytes(bytes([1, i]) + r.encode())
    (d / "choice").write_bytes(b"\x03\x01positive\nnegative\nneutral")
    gbnfs = ['root ::= "yes" | "no"\n',
             'root ::= item ("," item)*\nitem ::= [a-z]+ | "\\"" [^"]* "\\""\n',
             'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= [0-9]+ | "(" expr ")"\n',
             'root ::= [\\u4e00-\\u9fff]{1,4} "." # CJK\n',
             'root ::= "a"{2,3} [^\\x00-\\x1f]? .\n']
    for i, g in enumerate(gbnfs):
        (d / f"gbnf{i}").write_bytes(bytes([5, i]) + g.encode())


def seeds_openai():
    d = fresh("openai_request")
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    bodies = [
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        {"model": "m", "prompt": "Once upon", "max_tokens": 5, "temperature": 0, "n": 2, "stop": ["\n"], "logprobs": 2, "echo": True},
        {"model": "m", "prompt": ["a", "b"], "max_tokens": 0, "echo": True, "logprobs": 1, "prompt_logprobs": 2},
        {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "x"}]}],
         "tools": [tool], "tool_choice": "auto", "stream": True, "stream_options": {"include_usage": True}},
        {"model": "m", "messages": [{"role": "user", "content": "w?"}, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "21C"}], "tools": [tool],
         "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"model": "m", "messages": [{"role": "user", "content": "json"}], "response_format": {"type": "json_object"}},
        {"model": "m", "messages": [{"role": "user", "content": "j"}], "response_format": {"type": "json_schema", "json_schema": {
            "name": "p", "strict": True, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}}}},
        {"model": "m", "prompt": "x", "guided_regex": "[0-9]{3}", "top_k": 5, "top_p": 0.9, "min_p": 0.1, "seed": 3},
        {"model": "m", "prompt": "x", "guided_choice": ["a", "b"], "frequency_penalty": 0.5, "presence_penalty": 0.2, "repetition_penalty": 1.1},
        {"model": "m", "prompt": "x", "grammar": "root ::= \"ok\"", "logit_bias": {"5": -100}},
        {"model": "alias", "prompt": [[1, 2, 3]], "structured_outputs": {"json": {"type": "array", "items": {"type": "string"}}}},
        {"model": "m", "messages": [{"role": "user", "content": "t"}], "max_completion_tokens": 4, "logprobs": True, "top_logprobs": 3,
         "chat_template_kwargs": {"enable_thinking": False}, "user": "u", "parallel_tool_calls": False},
    ]
    for i, b in enumerate(bodies):
        (d / f"body{i:02d}.json").write_text(json.dumps(b))


def seeds_http():
    d = fresh("http")
    auth = "Authorization: Bearer sk-fuzz\r\n"
    def post(path, body, extra=""):
        b = json.dumps(body).encode()
        return (f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}{extra}Content-Type: application/json\r\n"
                f"Content-Length: {len(b)}\r\n\r\n").encode() + b
    reqs = [b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
            f"GET /v1/models HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode(),
            f"GET /metrics HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode(),
            b"GET / HTTP/1.0\r\n\r\n",
            b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://a\r\nAccess-Control-Request-Method: POST\r\n"
            b"Access-Control-Request-Headers: authorization, content-type\r\n\r\n",
            post("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}),
            post("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                                          "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 2}),
            post("/v1/completions", {"model": "m", "prompt": "abc", "max_tokens": 4, "n": 2, "stream": True}, "X-Request-Id: r1\r\n"),
            post("/v1/completions", {"model": "m", "prompt": "abc", "max_tokens": 0, "echo": True, "logprobs": 1}),
            post("/tokenize", {"model": "m", "prompt": "hello"}),
            post("/detokenize", {"model": "m", "tokens": [105, 102]}),
            post("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "j"}],
                                          "response_format": {"type": "json_object"}, "max_tokens": 6}),
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth.encode() + b"Transfer-Encoding: chunked\r\n\r\n"
            b"a\r\n{\"model\":\"\r\n10\r\nm\",\"prompt\":\"hi\"}\r\n0\r\n\r\n",
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\nx-api-key: sk-fuzz\r\n\r\n",
            post("/v1/completions", {"model": "m", "prompt": "x"}).replace(b"sk-fuzz", b"wrong"),
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n{",
            ]
    for i, r in enumerate(reqs):
        (d / f"req{i:02d}").write_bytes(r)


if __name__ == "__main__":
    seeds_gguf()
    seeds_safetensors()
    seeds_copies()
    seeds_tokenize()
    seeds_grammar()
    seeds_openai()
    seeds_http()
    for d in sorted(OUT.iterdir()):
        files = list(d.iterdir())
        print(f"{d.name}: {len(files)} seeds, {sum(f.stat().st_size for f in files) // 1024} KB")
