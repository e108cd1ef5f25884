#!/usr/bin/env python3
"""Writes tests/golden/chat_template.json: real models' chat templates rendered by Python's
jinja2 exactly as Hugging Face transformers' apply_chat_template renders them, so ferry's Jinja
interpreter (src/tokenizer/jinja/) is checked against the template language itself.

    pip install jinja2 gguf            # transformers too, to cross-check (recommended)
    python3 scripts/gen-golden-chat.py [model.gguf]

The templates are tests/golden/templates/*.jinja: SmolLM2's is extracted from the model file
(the default model unless one is given), the others are the published templates of the models
named in TEMPLATES (most as llama.cpp keeps them under models/templates/). Each is rendered
over the conversations below: with and without a system turn, several turns, no generation
prompt, non-ASCII text, and for templates that take tools, a tools list with an assistant tool
call and its result. When the template raises (Llama-2's role alternation), the golden case
records the error, and ferry must fail with the same message.

The environment is built the way transformers builds it (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols; its tojson, raise_exception, strftime_now, dict
and namespace), with strftime_now fixed to FIXED_NOW for reproducibility (the C++ test fixes
the same moment). When transformers is installed, every case is also rendered through
transformers' own render_jinja_template and must agree. Re-running rewrites an identical file.
"""
import copy
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE_DIR = os.path.join(REPO, "tests", "golden", "templates")
OUT = os.path.join(REPO, "tests", "golden", "chat_template.json")
DEFAULT_MODEL = os.path.join(
    os.environ.get("FERRY_HOME", os.path.expanduser("~/.cache/ferry")),
    "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
FIXED_NOW = datetime.datetime(2025, 7, 26, 14, 30, 5)

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

LLAMA3_TOKENS = ("<|begin_of_text|>", "<|eot_id|>")
DEEPSEEK_TOKENS = ("<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>")

# name: (model it comes from, bos, eos, takes tools, extra variables for some cases)
TEMPLATES = {
    "smollm2": ("HuggingFaceTB/SmolLM2-135M-Instruct (read from the GGUF)",
                "<|im_start|>", "<|im_end|>", False, None),
    "llama2": ("meta-llama/Llama-2-7b-chat-hf", "<s>", "</s>", False, None),
    "llama3": ("meta-llama/Meta-Llama-3-8B-Instruct", *LLAMA3_TOKENS, False, None),
    "llama3.1": ("meta-llama/Llama-3.1-8B-Instruct", *LLAMA3_TOKENS, True,
                 {"tools_in_user_message": False, "date_string": "1 Aug 2025"}),
    "llama3.2": ("meta-llama/Llama-3.2-3B-Instruct", *LLAMA3_TOKENS, True, None),
    "mistral-nemo": ("mistralai/Mistral-Nemo-Instruct-2407", "<s>", "</s>", True, None),
    "mistral-small-3.2": ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "<s>", "</s>", True, None),
    "qwen2.5": ("Qwen/Qwen2.5-7B-Instruct", "", "<|im_end|>", True, None),
    "qwen3": ("Qwen/Qwen3-0.6B", "", "<|im_end|>", True, {"enable_thinking": False}),
    "qwen3-coder": ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "", "<|im_end|>", True, None),
    "gemma2": ("google/gemma-2-2b-it", "<bos>", "<eos>", False, None),
    "gemma3": ("google/gemma-3-4b-it", "<bos>", "<eos>", False, None),
    "phi3.5": ("microsoft/Phi-3.5-mini-instruct", "<s>", "<|endoftext|>", False, None),
    "deepseek-r1-distill": ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", *DEEPSEEK_TOKENS, True, None),
    "deepseek-v3.1": ("deepseek-ai/DeepSeek-V3.1", *DEEPSEEK_TOKENS, True, {"thinking": True}),
    "hermes2-pro": ("NousResearch/Hermes-2-Pro-Llama-3-8B (tool_use)", "<|begin_of_text|>",
                    "<|im_end|>", True, None),
    "command-r7b": ("CohereForAI/c4ai-command-r7b-12-2024 (tool_use)", "<BOS_TOKEN>",
                    "<|END_OF_TURN_TOKEN|>", True, None),
    "smollm3": ("HuggingFaceTB/SmolLM3-3B", "", "<|im_end|>", True, {"enable_thinking": False}),
    "granite3.3": ("ibm-granite/granite-3.3-2b-instruct", "<|end_of_text|>", "<|end_of_text|>",
                   True, None),
    "functionary-v3.2": ("meetkai/functionary-medium-v3.2", *LLAMA3_TOKENS, True, None),
    "gpt-oss": ("openai/gpt-oss-120b", "<|startoftext|>", "<|return|>", True,
                {"reasoning_effort": "low"}),
    "granite4.0": ("ibm-granite/granite-4.0-h-tiny", "<|end_of_text|>", "<|end_of_text|>",
                   True, None),
    "gemma4": ("google/gemma-4-31B-it", "<bos>", "<eos>", True, None),
    "kimi-k2": ("moonshotai/Kimi-K2-Instruct", "[BOS]", "[EOS]", True, None),
    "glm-4.6": ("zai-org/GLM-4.6", "", "<|endoftext|>", True, None),
    "minimax-m2": ("MiniMaxAI/MiniMax-M2", "]~!b[", "[e~[", True, None),
    "lfm2": ("LiquidAI/LFM2-8B-A1B", "<|startoftext|>", "<|im_end|>", True, None),
    "seed-oss": ("ByteDance-Seed/Seed-OSS-36B-Instruct", "<seed:bos>", "<seed:eos>", True,
                 {"thinking_budget": 512}),
    "nemotron-nano-v2": ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", "<s>", "</s>", True, None),
}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "max_results": {"type": "integer", "default": 5}},
            "required": ["query"]}}},
]

# Nine alphanumeric characters: Mistral's templates refuse other tool call ids.
CALL_ID = "a1b2c3d4e"


def tool_call(arguments):
    return {"id": CALL_ID, "type": "function",
            "function": {"name": "get_weather", "arguments": arguments}}


TOOL_TURNS = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": "",
     "tool_calls": [tool_call({"city": "Paris", "unit": "celsius"})]},
    {"role": "tool", "content": "{\"temperature\": 21, \"sky\": \"sunny\"}",
     "tool_call_id": CALL_ID, "name": "get_weather"},
]

# (label, messages, add_generation_prompt, with tools, with the template's extra variables)
CONVERSATIONS = [
    ("user only", [{"role": "user", "content": "Hello!"}], True, False, False),
    ("system and user", [{"role": "system", "content": "You are terse."},
                         {"role": "user", "content": "What is 2+2?"}], True, False, False),
    ("multi turn", [{"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a joke."}], True, False, False),
    ("no generation prompt", [{"role": "system", "content": "Be kind."},
                              {"role": "user", "content": "Hi"},
                              {"role": "assistant", "content": "Hey."}], False, False, False),
    ("whitespace and unicode", [{"role": "user", "content":
                                 "  spaced\n  你好 🙂 «Ünïcödé» — \"dq\" 'sq' <b>&amp;</b> \\ \n\n"}],
     True, False, False),
    ("roles do not alternate", [{"role": "user", "content": "One"},
                                {"role": "user", "content": "Two"}], True, False, False),
    ("extra variables", [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": "Hi there"}], True, False, True),
    ("tools offered", [{"role": "system", "content": "You can call tools."},
                       {"role": "user", "content": "Search for jinja2 docs."}], True, True, False),
    ("tool call and result", [{"role": "system", "content": "You can call tools."}] + TOOL_TURNS,
     True, True, False),
    # OpenAI's shape: arguments as JSON text, no content (transformers drops a null one).
    ("tool call, JSON-string arguments, answered", TOOL_TURNS[:1] + [
        {"role": "assistant", "tool_calls": [tool_call("{\"city\": \"Paris\"}")]},
        TOOL_TURNS[2],
        {"role": "assistant", "content": "It is 21 °C and sunny in Paris."},
        {"role": "user", "content": "Thanks! And in Tokyo?"}], True, True, False),
]

MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def canonical(message):
    """The key order ferry gives a message (tokenizer::ChatMessage), so dict order agrees."""
    assert set(message) <= set(MESSAGE_KEYS), message
    return {k: message[k] for k in MESSAGE_KEYS if k in message}


def make_env():
    """transformers' _compile_jinja_template environment, minus the assistant-mask tracker
    (its {% generation %} tag renders its body, which ferry does too)."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                    f"but got {name!r}. Please rename the attribute.")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = lambda *args, **kwargs: dict(*args, **kwargs)
    env.globals["namespace"] = TemplateNamespace
    return env


ENV = make_env()


def outcome(fn):
    try:
        return {"expected": fn()}
    except Exception as e:  # the golden records what jinja2 raised
        return {"error": str(e), "error_type": type(e).__name__}


def render(source, bos, eos, messages, gen, tools, extra):
    kwargs = {"bos_token": bos, "eos_token": eos, **(extra or {})}
    return ENV.from_string(source).render(messages=copy.deepcopy(messages), tools=tools,
                                          documents=None, add_generation_prompt=gen, **kwargs)


def transformers_render():
    """transformers' own renderer with strftime_now fixed, or None without transformers."""
    try:
        from transformers.utils import chat_template_utils as ctu
    except ImportError:
        return None

    def run(source, bos, eos, messages, gen, tools, extra):
        compiled = ctu._compile_jinja_template(source)
        compiled.environment.globals["strftime_now"] = lambda f: FIXED_NOW.strftime(f)
        out, _ = ctu.render_jinja_template(
            conversations=[copy.deepcopy(messages)], tools=tools, chat_template=source,
            add_generation_prompt=gen, bos_token=bos, eos_token=eos, **(extra or {}))
        return out[0]
    return run


def smollm2_source(model):
    from gguf import GGUFReader
    field = GGUFReader(model).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    os.makedirs(TEMPLATE_DIR, exist_ok=True)
    for name, text in (("smollm2", smollm2_source(model)), ("llama2", LLAMA2), ("llama3", LLAMA3)):
        with open(os.path.join(TEMPLATE_DIR, name + ".jinja"), "w", encoding="utf-8") as f:
            f.write(text)
    cross = transformers_render()
    if cross is None:
        print("note: transformers is not installed; not cross-checking against it")
    templates, cases = {}, []
    for name, (origin, bos, eos, takes_tools, extra) in TEMPLATES.items():
        with open(os.path.join(TEMPLATE_DIR, name + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        templates[name] = {"file": name + ".jinja", "model": origin, "bos": bos, "eos": eos}
        for label, messages, gen, with_tools, with_extra in CONVERSATIONS:
            if with_tools and not takes_tools:
                continue
            if with_extra and not extra:
                continue
            messages = [canonical(m) for m in messages]
            tools = TOOLS if with_tools else None
            case_extra = extra if with_extra else None
            result = outcome(lambda: render(source, bos, eos, messages, gen, tools, case_extra))
            if cross is not None:
                theirs = outcome(lambda: cross(source, bos, eos, messages, gen, tools, case_extra))
                if theirs != result:
                    sys.exit(f"{name} / {label}: transformers renders differently:\n"
                             f"  here: {result}\n  transformers: {theirs}")
            case = {"template": name, "label": label, "messages": messages,
                    "add_generation_prompt": gen}
            if tools is not None:
                case["tools"] = tools
            if case_extra:
                case["extra"] = case_extra
            case.update(result)
            cases.append(case)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"generator": "scripts/gen-golden-chat.py (jinja2 %s)" % jinja2.__version__,
                   "now": FIXED_NOW.isoformat(), "templates": templates, "cases": cases},
                  f, indent=1, ensure_ascii=False)
        f.write("\n")
    errors = sum(1 for c in cases if "error" in c)
    print("wrote %s: %d templates, %d cases (%d of them errors)" %
          (OUT, len(templates), len(cases), errors))


if __name__ == "__main__":
    main()
