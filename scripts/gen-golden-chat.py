#!/usr/bin/env python3
"""Writes tests/golden/chat_template.json: conversations rendered by real Jinja2 the way
Hugging Face's apply_chat_template does (sandboxed, trim_blocks, lstrip_blocks), so the
C++ ChatTemplate is checked against the template language itself, not our reading of it.

    python3 scripts/gen-golden-chat.py [model.gguf]

The SmolLM2 template is read from the model file; the Llama-2/3 and Gemma templates are
copied from their Hugging Face tokenizer_config.json files (Gemma's trimmed to string
content). Needs the `gguf` and `jinja2` packages. Re-running rewrites an identical file.
"""
import json
import os
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from gguf import GGUFReader

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(
    os.environ.get("FERRY_HOME", os.path.expanduser("~/.cache/ferry")),
    "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] "
          "| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content "
          "%}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
          "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
          "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
          "{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
          "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
          "roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 "
          "== 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
          "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] "
          "%}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
          "content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + "
          "content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")

GEMMA3 = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {{- message['content'] | trim -}}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

CONVERSATIONS = [
    ("user only", [{"role": "user", "content": "Hello!"}], True),
    ("system and user", [{"role": "system", "content": "You are terse."},
                         {"role": "user", "content": "What is 2+2?"}], True),
    ("multi turn", [{"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a joke."}], True),
    ("no generation prompt", [{"role": "user", "content": "Hi"},
                              {"role": "assistant", "content": "Hey."}], False),
    ("whitespace and unicode", [{"role": "user", "content": "  spaced\n  你好 🙂 \n\n"}], True),
    ("empty conversation", [], True),
]


def render(source, bos, eos, messages, add_generation_prompt):
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source).render(messages=messages, bos_token=bos, eos_token=eos,
                                          add_generation_prompt=add_generation_prompt)


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    field = GGUFReader(model).fields["tokenizer.chat_template"]
    smollm2 = bytes(field.parts[field.data[0]]).decode("utf-8")
    templates = {
        "smollm2": {"source": smollm2, "bos": "<|im_start|>", "eos": "<|im_end|>",
                    "family": "chatml"},
        "llama3": {"source": LLAMA3, "bos": "<|begin_of_text|>", "eos": "<|eot_id|>",
                   "family": "llama3"},
        "llama2": {"source": LLAMA2, "bos": "<s>", "eos": "</s>", "family": "llama2"},
        "gemma3": {"source": GEMMA3, "bos": "<bos>", "eos": "<eos>", "family": "gemma"},
    }
    cases = []
    for name, t in templates.items():
        for label, messages, gen in CONVERSATIONS:
            try:
                expected = render(t["source"], t["bos"], t["eos"], messages, gen)
            except jinja2.exceptions.TemplateError:
                continue  # e.g. Llama-2's template indexes messages[0]: no empty chats
            cases.append({"template": name, "label": label, "messages": messages,
                          "add_generation_prompt": gen, "expected": expected})
    out = os.path.join(REPO, "tests", "golden", "chat_template.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"generator": "scripts/gen-golden-chat.py (jinja2 %s)" % jinja2.__version__,
                   "templates": templates, "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote %s (%d cases)" % (out, len(cases)))


if __name__ == "__main__":
    main()
