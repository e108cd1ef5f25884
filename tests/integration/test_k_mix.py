"""llama.cpp's Q4_K_M / Q5_K_M mixes and the plain Q5 and K types, checked against the files
llama.cpp's own llama-quantize writes from the same input (tests/golden/quant/k_mix/, made by
scripts/gen-golden-k-mix.py): every tensor's type, and its bytes."""

import hashlib
import json
import os

import pytest

from conftest import run_ferry

gguf = pytest.importorskip("gguf")

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "golden", "quant", "k_mix")
with open(os.path.join(GOLDEN, "expected.json")) as f:
    EXPECTED = json.load(f)


def describe(path):
    r = gguf.GGUFReader(path)
    f = r.fields["general.file_type"]
    return int(f.parts[f.data[0]][0]), {
        t.name: f"{t.tensor_type.name} {hashlib.sha256(t.data.tobytes()).hexdigest()[:16]}"
        for t in r.tensors}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Each golden model as ferry synth writes it in f16, checked against the recorded input."""
    tmp = tmp_path_factory.mktemp("k_mix")
    out = {}
    for name, model in EXPECTED["models"].items():
        path = tmp / f"{name}-f16.gguf"
        r = run_ferry("synth", path, "--like", os.path.join(GOLDEN, name + ".json"), "--type",
                      "f16", "--seed", EXPECTED["seed"], "-q")
        assert r.returncode == 0, r.stderr
        assert describe(path)[1] == model["input"], f"{name}: ferry synth's f16 input changed"
        out[name] = path
    return out


@pytest.mark.parametrize("model", sorted(EXPECTED["models"]))
@pytest.mark.parametrize("ferry_type", ["q4_k_m", "q5_k_m", "q5_0", "q5_1", "q4_k", "q5_k"])
def test_the_file_is_llama_quantizes_tensor_for_tensor(sources, tmp_path, model, ferry_type):
    want = EXPECTED["models"][model]["files"][ferry_type]
    out = tmp_path / "out.gguf"
    r = run_ferry("quantize", sources[model], out, "--type", ferry_type)
    assert r.returncode == 0, r.stderr
    file_type, got = describe(out)
    assert file_type == want["file_type"]
    assert set(got) == set(want["tensors"])
    wrong_type = {n: (got[n].split()[0], w.split()[0]) for n, w in want["tensors"].items()
                  if got[n].split()[0] != w.split()[0]}
    assert not wrong_type, f"types differ from llama-quantize {want['llama_quantize']}: {wrong_type}"
    wrong_bytes = [n for n, w in want["tensors"].items() if got[n] != w]
    assert not wrong_bytes, f"bytes differ from llama-quantize {want['llama_quantize']}: {wrong_bytes}"
    if ferry_type.endswith("_m"):  # one line says what the mix chose
        assert f"{ferry_type} matrices:" in r.stderr and " q6_k" in r.stderr, r.stderr


@pytest.mark.parametrize("ferry_type", ["q4_k_m", "q5_k_m"])
def test_synth_writes_the_mix_with_the_same_types(tmp_path, ferry_type):
    name = "mixtral-8-experts"
    out = tmp_path / "s.gguf"
    r = run_ferry("synth", out, "--like", os.path.join(GOLDEN, name + ".json"), "--type",
                  ferry_type, "-q")
    assert r.returncode == 0, r.stderr
    file_type, got = describe(out)
    want = EXPECTED["models"][name]["files"][ferry_type]
    assert file_type == want["file_type"]
    assert {n: v.split()[0] for n, v in got.items()} == \
        {n: v.split()[0] for n, v in want["tensors"].items()}


def test_a_mix_is_refused_where_one_type_is_asked(tmp_path):
    r = run_ferry("run", "-m", "default", "--weights", "q4_k_m", "-p", "x", "-n", 1)
    assert r.returncode != 0
    assert "q4_k_m: llama.cpp's mix of q4_k and q6_k is written by ferry quantize" in r.stderr
    r = run_ferry("quantize", "default", tmp_path / "x.gguf", "--auto-mixed", "--budget", "4.5",
                  "--mix-types", "q4_k_m,q8_0")
    assert r.returncode != 0 and "here name one type" in r.stderr, r.stderr
    assert not (tmp_path / "x.gguf").exists()
