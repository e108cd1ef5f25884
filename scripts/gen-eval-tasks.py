#!/usr/bin/env python3
"""Writes data/eval/tasks.jsonl, the default task file of `ferry eval --tasks default`.

The tasks are written for ferry (CC0-1.0, like data/eval/lighthouse.txt); this script is their
source, kept so the long-input item can be rebuilt from readable pieces rather than edited as
one 7 KB JSON line. Format: docs/eval.md. Run from the repository root:

    python3 scripts/gen-eval-tasks.py > data/eval/tasks.jsonl
"""

import json
import sys


def chat(*turns):
    """user, assistant, user, ... → messages."""
    roles = ["user", "assistant"]
    return [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]


TASKS = []


def task(id, category, *, prompt=None, messages=None, answer=None, match=None, max_tokens=None):
    t = {"id": id, "category": category}
    if prompt is not None:
        t["prompt"] = prompt
    else:
        t["messages"] = messages
    if answer is not None:
        t["answer"] = answer
    if match is not None:
        t["match"] = match
    if max_tokens is not None:
        t["max_tokens"] = max_tokens
    TASKS.append(t)


# --- arithmetic: small sums and products. A 135M model does these best as completions after
# two worked examples (no trailing space: the answer's token carries its own leading space);
# the chat prompts check the same skill through the template and accept the number as a
# whole word anywhere, since chat answers often restate the question.
for a, b in [(2, 3), (4, 5), (7, 6), (10, 12), (15, 20), (9, 9)]:
    task(f"add-{a}-{b}", "arithmetic", prompt=f"1 + 1 = 2\n3 + 4 = 7\n{a} + {b} =",
         answer=a + b, max_tokens=3)
for a, b in [(3, 4), (5, 6), (2, 8), (10, 10)]:
    task(f"mul-{a}-{b}", "arithmetic", prompt=f"2 x 2 = 4\n3 x 5 = 15\n{a} x {b} =",
         answer=a * b, max_tokens=3)
task("sub-10-4", "arithmetic", prompt="5 - 2 = 3\n9 - 5 = 4\n10 - 4 =", answer=6, max_tokens=3)
task("qa-add-2-3", "arithmetic", prompt="Question: What is 2 plus 3?\nAnswer:", answer=5,
     max_tokens=3)
task("qa-mul-4-5", "arithmetic", prompt="Question: What is 4 times 5?\nAnswer:", answer=20,
     max_tokens=3)
for a, b in [(2, 2), (6, 7), (12, 3)]:
    task(f"chat-add-{a}-{b}", "arithmetic",
         messages=chat(f"What is {a} plus {b}? Reply with the number only."),
         answer=rf"(^|[^0-9]){a + b}([^0-9]|$)", match="regex", max_tokens=16)
task("chat-mul-4-3", "arithmetic",
     messages=chat("What is 4 times 3? Reply with the number only."),
     answer=r"(^|[^0-9])12([^0-9]|$)", match="regex", max_tokens=16)

# --- extraction: a name, date, number or place from one sentence.
EXTRACT = [
    ("name", "Maria Lopez signed the contract on behalf of the company.",
     "Who signed the contract? Answer with the name only.", "Maria Lopez"),
    ("city", "The conference will be held in Lisbon next spring.",
     "In which city will the conference be held? Answer with one word.", "Lisbon"),
    ("year", "The bridge was completed in 1932 after six years of work.",
     "In which year was the bridge completed? Answer with the year only.", "1932"),
    ("price", "The ticket costs 45 dollars and includes a guided tour.",
     "How many dollars does the ticket cost? Answer with the number only.", "45"),
    ("color", "She painted the front door bright green last summer.",
     "What color is the front door? Answer with one word.", "green"),
    ("animal", "The farmer's dog, a collie named Rex, guards the sheep.",
     "What is the dog's name? Answer with the name only.", "Rex"),
    ("date", "The meeting was moved to Friday, March 14.",
     "On which day of the week is the meeting? Answer with one word.", "Friday"),
    ("count", "There are 12 eggs in the basket on the kitchen table.",
     "How many eggs are in the basket? Answer with the number only.", "12"),
]
for id, sentence, question, answer in EXTRACT:
    task(f"extract-{id}", "extraction", messages=chat(f"{sentence}\n{question}"),
         answer=answer, match="contains", max_tokens=16)
task("extract-completion-capital", "extraction", prompt="The capital of France is",
     answer="Paris", match="contains", max_tokens=8)
task("extract-completion-author", "extraction",
     prompt="Text: \"Ana Silva wrote the report.\"\nQuestion: Who wrote the report?\nAnswer:",
     answer="Ana Silva", match="contains", max_tokens=8)

# --- format following: the answer's shape is the test.
task("format-yes", "format",
     messages=chat("Is the sky blue on a clear day? Answer only yes or no."),
     answer=r"^\s*(yes|Yes|YES)\b", match="regex", max_tokens=8)
task("format-no", "format",
     messages=chat("Is fire cold? Answer only yes or no."),
     answer=r"^\s*(no|No|NO)\b", match="regex", max_tokens=8)
task("format-upper", "format",
     messages=chat("Write the word apple in uppercase letters. Output only the word."),
     answer="APPLE", match="contains", max_tokens=8)
task("format-lower", "format",
     messages=chat("Write the word ORANGE in lowercase letters. Output only the word."),
     answer="orange", match="contains", max_tokens=8)
task("format-json-key", "format",
     messages=chat('Output a JSON object with the key "name" set to "Alice". Output only JSON.'),
     answer=r'"name"\s*:\s*"Alice"', match="regex", max_tokens=24)
task("format-list", "format",
     messages=chat("List three colors, separated by commas, on one line."),
     answer=r"^\s*\w+,\s*\w+,\s*\w+", match="regex", max_tokens=16)
task("format-repeat", "format",
     messages=chat("Repeat exactly this word and nothing else: banana"),
     answer="banana", match="contains", max_tokens=8)
task("format-one-word", "format",
     messages=chat("What is the opposite of hot? Answer with one word."),
     answer=r"^\s*\W*[Cc]old\b", match="regex", max_tokens=8)
task("format-number-word", "format",
     messages=chat("Spell the number 3 as an English word. Output only the word."),
     answer=r"[Tt]hree", match="regex", max_tokens=8)
task("format-completion-list", "format", prompt="Monday, Tuesday, Wednesday,",
     answer="Thursday", match="contains", max_tokens=6)

# --- long input: ~1,500 tokens of prose (a few paragraphs repeated) with a fact in the middle
# and a question at the end; quantization error accumulates over long contexts.
PROSE = [
    "The harbour town woke slowly in winter. Fishing boats rocked against the stone quay, "
    "their ropes creaking in the cold wind, while gulls circled above the market stalls where "
    "traders set out baskets of bread, apples and dried fish.",
    "Beyond the breakwater the sea turned grey and restless. Old sailors sat on the benches by "
    "the chandlery and argued about the weather, the price of diesel and which of the young "
    "captains would be the first to lose a net to the rocks off the northern point.",
    "In the afternoons the schoolchildren ran down the hill to watch the ferry come in. It "
    "carried post, tinned food and the occasional visitor, who always looked surprised that a "
    "place so small had a bakery, a library and a brass band that practised on Thursdays.",
    "At night the lamps along the harbour wall were lit one by one, and the lighthouse on the "
    "headland swept its beam across the water every twelve seconds, as it had done for more "
    "than a hundred years.",
]
NEEDLE = "The keeper of the lighthouse kept a small blue boat, and the boat was named Marigold."
long_text = []
for i in range(7):
    long_text.extend(PROSE)
    if i == 3:
        long_text.append(NEEDLE)
long_body = "\n\n".join(long_text)
task("long-needle", "long_input",
     messages=chat(long_body + "\n\nWhat was the name of the lighthouse keeper's boat?"),
     answer="Marigold", match="contains", max_tokens=24)
task("long-summary", "long_input",
     messages=chat(long_body + "\n\nSummarize the text above in one sentence."),
     max_tokens=24)
task("long-completion", "long_input", prompt=long_body + "\n\nThe name of the keeper's boat was",
     answer="Marigold", match="contains", max_tokens=8)

# --- special symbols: no fixed answer; scored by agreement with the reference's greedy output.
task("symbols-emoji", "symbols",
     messages=chat("What do these emoji mean together: 🌧️ ☂️ 🏠? Answer in one sentence."),
     max_tokens=24)
task("symbols-math", "symbols",
     messages=chat("Explain in one sentence what ∀x ∈ ℝ: x² ≥ 0 means."), max_tokens=24)
task("symbols-code", "symbols",
     messages=chat("What does this C function return for n = 3?\n"
                   "int f(int n) { if (n <= 1) { return 1; } return n * f(n - 1); }"),
     max_tokens=24)
task("symbols-json", "symbols",
     messages=chat('Given {"a": [1, 2, {"b": "c"}], "d": null}, what is the value of "d"?'),
     max_tokens=16)
task("symbols-cjk", "symbols", messages=chat("Translate to English: 我喜欢喝茶。"), max_tokens=16)
task("symbols-cyrillic", "symbols", messages=chat("Translate to English: Доброе утро!"),
     max_tokens=16)
task("symbols-arabic", "symbols", messages=chat("What language is this: مرحبا بالعالم"),
     max_tokens=16)
task("symbols-punct", "symbols",
     prompt="Symbols: @#$%^&*()_+-=[]{}|;':\",./<>?~` and then the text continues", max_tokens=16)

# --- multi-turn chats (3-5 turns): the answer depends on an earlier turn.
task("multi-name", "multi_turn",
     messages=chat("Hi, my name is Alice.", "Hello Alice! How can I help you today?",
                   "What is my name?"),
     answer="Alice", match="contains", max_tokens=16)
task("multi-color", "multi_turn",
     messages=chat("My favourite color is red.", "Red is a lovely color!",
                   "I also like the sea.", "The sea is beautiful.",
                   "What is my favourite color?"),
     answer="red", match="contains", max_tokens=16)
task("multi-count", "multi_turn",
     messages=chat("I have 3 apples.", "Okay, you have 3 apples.",
                   "I buy 2 more apples. How many apples do I have now?"),
     answer=r"(^|[^0-9])5([^0-9]|$)|five", match="regex", max_tokens=24)
task("multi-story", "multi_turn",
     messages=chat("Let's write a story about a cat.", "Once upon a time there was a cat named Tom.",
                   "Where did Tom live?", "Tom lived in a small house by the river.",
                   "Continue the story with one more sentence."),
     max_tokens=24)
task("multi-system", "multi_turn",
     messages=[{"role": "system", "content": "You are a pirate. Always talk like a pirate."},
               *chat("Hello!", "Ahoy, matey!", "What is your favourite food?")],
     max_tokens=24)


def main():
    for t in TASKS:
        sys.stdout.write(json.dumps(t, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
