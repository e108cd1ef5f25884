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
