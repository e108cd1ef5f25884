import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ferry_bin() -> str:
    return os.environ.get("FERRY_BIN", str(ROOT / "build" / "ferry"))


def default_model() -> str:
    home = os.environ.get("FERRY_HOME", os.path.expanduser("~/.cache/ferry"))
    return os.path.join(home, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def run_ferry(*args, input=None, timeout=300):
    return subprocess.run([ferry_bin(), *map(str, args)], input=input, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="session")
def model_path():
    p = default_model()
    assert os.path.exists(p), f"default model missing at {p}: run scripts/get-model.sh"
    return p


@pytest.fixture(scope="session")
def tiny_f16(tmp_path_factory):
    """A 2-layer SmolLM2-shaped model with random f16 weights (ferry synth): for tools that run
    the model many times (calibration, sensitivity) and would take minutes on the real one."""
    out = tmp_path_factory.mktemp("tiny") / "tiny-f16.gguf"
    r = run_ferry("synth", out, "--like", "smollm2-135m", "--layers", 2, "--type", "f16", "-q")
    assert r.returncode == 0, r.stderr
    return out


def train_small_heads(model_path, out, *extra):
    """Two Medusa heads trained on 256 positions of the model's own answers: seconds, enough to
    draft from. Returns the finished process (stdout holds the report under --json)."""
    return run_ferry("train-medusa", "-m", model_path, "--heads", "2", "--tokens", "256",
                     "--prompt-len", "16", "--continuation", "48", "--epochs", "1", "-t", "2",
                     "-o", out, *extra)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "soak: a timed soak against a real server; `make soak` runs these, CI does not")
