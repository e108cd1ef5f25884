#!/usr/bin/env python3
"""Writes the two structured-output workloads beside json-schema.jsonl (which was the one the
mask work was tuned on), for `ferry bench throughput --dataset F --vs-unconstrained`:

  json-schema-conformance.jsonl  the first 64 schemas of tests/integration/schemas/valid.json
                                 (formats, patterns, recursion, bounded strings and arrays)
  json-schema-generated.jsonl    64 schemas drawn at random (seed 2026): nested objects, bounded
                                 and free strings, integer ranges, enums, arrays, formats

Each request asks for up to 128 / 160 tokens. Re-running rewrites identical files.
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
VALID = os.path.join(HERE, "..", "..", "tests", "integration", "schemas", "valid.json")
WORDS = ["order", "invoice", "ticket", "recipe", "flight", "book", "song", "device", "patient",
         "repo"]


def request(content, name, schema, max_tokens, strict=None):
    js = {"name": name, "schema": schema}
    if strict is not None:
        js["strict"] = strict
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "response_format": {"type": "json_schema", "json_schema": js}}


def field(rng, depth=0):
    t = rng.choice(["str", "str", "bstr", "int", "num", "bool", "enum", "arr",
                    "obj" if depth < 1 else "str", "date"])
    if t == "str":
        return {"type": "string"}
    if t == "bstr":
        return {"type": "string", "minLength": rng.choice([0, 1, 3]),
                "maxLength": rng.choice([8, 16, 25, 50, 80, 120])}
    if t == "int":
        return {"type": "integer", "minimum": rng.choice([0, -10, 1]),
                "maximum": rng.choice([9, 99, 1000, 65535])}
    if t == "num":
        return {"type": "number"}
    if t == "bool":
        return {"type": "boolean"}
    if t == "enum":
        return {"type": "string", "enum": rng.sample(
            ["low", "medium", "high", "urgent", "none", "red", "green", "blue"], 3)}
    if t == "date":
        return {"type": "string", "format": rng.choice(["date", "date-time", "email", "uuid"])}
    if t == "arr":
        return {"type": "array", "items": field(rng, depth + 1), "maxItems": rng.choice([3, 5, 10])}
    props = {f"f{i}": field(rng, depth + 1) for i in range(rng.randint(2, 4))}
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}


def main():
    with open(VALID, encoding="utf-8") as f:
        valid = json.load(f)
    with open(os.path.join(HERE, "json-schema-conformance.jsonl"), "w") as f:
        for i, s in enumerate(valid[:64]):
            f.write(json.dumps(request(s["prompt"], f"s{i}", s["schema"], 128)) + "\n")
    rng = random.Random(2026)
    with open(os.path.join(HERE, "json-schema-generated.jsonl"), "w") as f:
        for i in range(64):
            w = rng.choice(WORDS)
            props = {f"{w}_{k}": field(rng) for k in range(rng.randint(2, 6))}
            schema = {"type": "object", "properties": props, "required": list(props),
                      "additionalProperties": False}
            f.write(json.dumps(request(f"Describe a {w} as JSON.", f"w{i}", schema, 160, False))
                    + "\n")


if __name__ == "__main__":
    main()
