"""`ferry quantize` to ferry's own types (int8, int4, fp8), `--keep-f16`, and the files read
back by `ferry info` and `ferry eval` (gguf-py and llama.cpp do not know these type ids)."""

import json

from conftest import ROOT, run_ferry

EVAL_TEXT = ROOT / "data" / "eval" / "lighthouse.txt"
N_LAYER = 30


def tensor_types(path):
    r = run_ferry("info", "-m", path, "--json")
    assert r.returncode == 0, r.stderr
    return {k: v["tensors"] for k, v in json.loads(r.stdout)["tensor_types"].items()}


def eval_against(model, ref):
    r = run_ferry("eval", "-m", model, "--ref", ref, "--text", EVAL_TEXT,
                  "--ctx", "128", "--max-tokens", "256", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_int4_groups_fall_back_to_the_next_smaller_group(model_path, tmp_path):
    out = tmp_path / "int4.gguf"
    r = run_ferry("quantize", model_path, out, "--type", "int4", "-q")  # G128 by default
    assert r.returncode == 0, r.stderr
    assert ("rows of 576 elements do not split into int4_g128 blocks of 128; "
            "those tensors are written as int4_g64") in r.stderr
    types = tensor_types(out)
    assert types["int4_g128"] == N_LAYER  # ffn_down: rows of 1536
    assert types["int4_g64"] == 6 * N_LAYER + 1  # the other matrices and token_embd
    j = eval_against(out, model_path)
    assert 1 < j["perplexity"] < 2.5 * j["ref_perplexity"]

    out32 = tmp_path / "int4_g32.gguf"
    r = run_ferry("quantize", model_path, out32, "--type", "int4", "--group-size", "32", "-q")
    assert r.returncode == 0, r.stderr
    assert "do not split" not in r.stderr
    assert set(tensor_types(out32)) == {"int4_g32", "f32"}


def test_int8_with_keep_and_keep_f16(model_path, tmp_path):
    out = tmp_path / "int8.gguf"
    r = run_ferry("quantize", model_path, out, "--type", "int8", "--keep", "token_embd*",
                  "--keep-f16", "blk.0.*", "-q")
    assert r.returncode == 0, r.stderr
    assert "1 kept by --keep" in r.stderr and "7 f16 by --keep-f16" in r.stderr
    types = tensor_types(out)
    assert types["q8_0"] == 1  # token_embd as downloaded
    assert types["f16"] == 7  # blk.0's matrices; its norms stay f32
    assert types["int8"] == 7 * (N_LAYER - 1)
    j = eval_against(out, model_path)
    assert j["top1_agreement"] >= 0.9 and 0 < j["kl_mean"] < 0.02


def test_fp8_runs(model_path, tmp_path):
    out = tmp_path / "fp8.gguf"
    r = run_ferry("quantize", model_path, out, "--type", "fp8", "-q")
    assert r.returncode == 0, r.stderr
    assert set(tensor_types(out)) == {"fp8", "f32"}
    j = eval_against(out, model_path)
    assert j["top1_agreement"] >= 0.8 and abs(j["delta_ppl_percent"]) < 10


def test_group_size_is_checked(model_path, tmp_path):
    r = run_ferry("quantize", model_path, tmp_path / "x.gguf", "--type", "int4",
                  "--group-size", "100")
    assert r.returncode != 0 and "--group-size 100" in r.stderr
    r = run_ferry("quantize", model_path, tmp_path / "x.gguf", "--type", "int8",
                  "--group-size", "64")
    assert r.returncode != 0 and "int4 only" in r.stderr
    assert not (tmp_path / "x.gguf").exists()
