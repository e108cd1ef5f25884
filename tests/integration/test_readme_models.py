"""The README's table of what loads is kept true: every type it lists for --weights is one
ferry quantizes to at load, and the architectures it names are the ones the loader accepts."""
import os
import re

import pytest
from safetensors.numpy import save_file

from conftest import run_ferry

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def readme_row(name):
    text = open(f"{REPO}/README.md").read()
    m = re.search(rf"^\| {re.escape(name)} \| (.*) \|$", text, re.M)
    assert m, f"README has no '{name}' row"
    return m.group(1)


def listed_weight_types():
    m = re.search(r"`--weights ([^`]*)`", readme_row("quantize at load"))
    return m.group(1).replace("\\|", "|").split("|")


@pytest.mark.parametrize("wtype", listed_weight_types())
def test_every_listed_weight_type_loads(model_path, wtype):
    r = run_ferry("run", "-m", model_path, "--weights", wtype, "-p", "The capital of France is",
                  "-n", 2, "--temperature", 0, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("The capital of France is")


def test_listed_architectures_are_the_loaders(tmp_path):
    listed = set(re.findall(r"`(\w+)`", readme_row("architectures")))
    (tmp_path / "config.json").write_text('{"model_type": "nonesuch"}')
    save_file({}, str(tmp_path / "model.safetensors"))
    r = run_ferry("info", "-m", str(tmp_path))
    m = re.search(r"ferry runs ([\w, ]+)\)", r.stderr)
    assert m, r.stderr
    assert set(m.group(1).replace(",", " ").split()) == listed
