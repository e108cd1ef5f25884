"""`ferry eval --tasks`: the JSON keys, the default task file, and errors in a task file."""

import json

from conftest import ROOT, run_ferry

EVAL_TEXT = ROOT / "data" / "eval" / "lighthouse.txt"
TASKS = ROOT / "data" / "eval" / "tasks.jsonl"

SMALL_TASKS = (
    '{"id": "paris", "category": "extraction", "prompt": "The capital of France is", '
    '"answer": "Paris", "match": "contains", "max_tokens": 4}\n'
    '{"id": "sum", "category": "arithmetic", "prompt": "2 + 3 =", "answer": 5, "max_tokens": 3}\n'
)


def test_text_and_tasks_give_perplexity_and_task_keys(model_path):
    r = run_ferry("eval", "-m", "default", "--text", EVAL_TEXT, "--tasks", TASKS,
                  "--max-tokens", 200, "--json", timeout=900)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["perplexity"] > 1
    t = j["tasks"]
    assert {"accuracy", "n", "n_scored", "correct", "by_category", "file"} <= t.keys()
    n_lines = sum(1 for line in TASKS.read_text().splitlines() if line.strip())
    assert t["n"] == n_lines
    assert 0 <= t["accuracy"] <= 1
    assert {"arithmetic", "extraction", "format", "long_input", "symbols",
            "multi_turn"} <= t["by_category"].keys()
    assert sum(c["n"] for c in t["by_category"].values()) == t["n"]
    for c in t["by_category"].values():
        assert {"accuracy", "n"} <= c.keys()
    assert "ref_agreement" not in t  # only with --ref
    assert "items" not in t  # only with --task-items


def test_tasks_against_itself_agree_fully(model_path, tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(SMALL_TASKS)
    r = run_ferry("eval", "-m", model_path, "--ref", model_path, "--tasks", f, "--json",
                  "--task-items")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert "perplexity" not in j  # no --text: tasks only
    t = j["tasks"]
    assert t["n"] == 2 and t["ref_agreement"] == 1.0
    assert t["by_category"]["extraction"]["ref_agreement"] == 1.0
    assert t["by_category"]["extraction"]["accuracy"] == 1.0
    assert t["accuracy"] == t["ref_accuracy"]
    items = {i["id"]: i for i in t["items"]}
    assert "Paris" in items["paris"]["output"]
    assert items["paris"]["ref_output"] == items["paris"]["output"]


def test_tasks_default_resolves_through_the_data_dir(model_path, tmp_path, monkeypatch):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "tasks.jsonl").write_text(SMALL_TASKS)
    monkeypatch.setenv("FERRY_DATA_DIR", str(tmp_path))
    r = run_ferry("eval", "-m", model_path, "--tasks", "default", "--json")
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["tasks"]
    assert t["file"] == str(tmp_path / "eval" / "tasks.jsonl")
    assert t["n"] == 2


def test_malformed_task_file_fails_with_one_line_naming_the_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "fine", "answer": "x"}\n\n{"prompt": "broken", "answer": }\n')
    r = run_ferry("eval", "-m", "default", "--text", EVAL_TEXT, "--tasks", f)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("ferry: error:")
    assert f"{f}:3:" in lines[0]
    assert r.stdout == ""  # nothing ran before the check


def test_unknown_key_names_the_key_and_line(tmp_path):
    f = tmp_path / "typo.jsonl"
    f.write_text('{"prompt": "p", "answr": "x"}\n')
    r = run_ferry("eval", "-m", "default", "--tasks", f)
    assert r.returncode == 1
    assert f'{f}:1: unknown key "answr"' in r.stderr


def test_eval_needs_text_or_tasks():
    r = run_ferry("eval", "-m", "default")
    assert r.returncode == 1
    assert r.stderr.startswith("ferry: error: eval needs --text")


def test_task_items_without_json_and_tasks_is_refused(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(SMALL_TASKS)
    r = run_ferry("eval", "-m", "default", "--tasks", f, "--task-items")  # the table: no room
    assert r.returncode == 1
    assert "--task-items" in r.stderr and "--json" in r.stderr, r.stderr
    r = run_ferry("eval", "-m", "default", "--text", EVAL_TEXT, "--json", "--task-items")
    assert r.returncode == 1
    assert "needs --tasks" in r.stderr, r.stderr
    assert r.stdout == ""
