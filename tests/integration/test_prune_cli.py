"""`ferry prune` end to end: the pruned file is read back by gguf-py and its matrices checked for
the pattern there (not by ferry's own check), it runs, and it stays pruned when quantized to q4_0
afterwards. Bad switches give one clear line and write nothing."""

import json

import pytest

from conftest import run_ferry

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
from gguf.quants import dequantize  # noqa: E402

PRUNED = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def matrices(path):
    r = gguf.GGUFReader(path)
    return {t.name: t for t in r.tensors}, r


def weights(t):
    return dequantize(t.data, t.tensor_type).reshape(-1, int(t.shape[0]))


def assert_n_m(w, n, m, name):
    groups = (w.reshape(w.shape[0], -1, m) != 0).sum(axis=2)
    assert groups.max() <= n, f"{name}: a group of {m} keeps {groups.max()} weights"


@pytest.fixture(scope="module")
def pruned_2_4(model_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("prune") / "wanda-2-4.gguf"
    r = run_ferry("prune", model_path, out, "--sparsity", "2:4", "--method", "wanda",
                  "--calib-tokens", "256", "-q")
    assert r.returncode == 0, r.stderr
    assert "2:4 (wanda)" in r.stderr
    return out


def test_every_layer_matrix_is_2_4_and_the_rest_is_untouched(model_path, pruned_2_4):
    src, _ = matrices(model_path)
    out, reader = matrices(pruned_2_4)
    assert src.keys() == out.keys()
    pruned = 0
    for name, t in out.items():
        if any(f".{p}.weight" in name for p in PRUNED):
            assert t.tensor_type == gguf.GGMLQuantizationType.F16, name
            w = weights(t)
            assert_n_m(w, 2, 4, name)
            assert (w == 0).mean() >= 0.5, name
            pruned += 1
        else:
            assert t.tensor_type == src[name].tensor_type, name
            assert bytes(t.data) == bytes(src[name].data), name
    assert pruned == 7 * 30
    f = reader.fields["ferry.sparsity.pattern"]
    assert bytes(f.parts[f.data[0]]).decode() == "2:4"
    f = reader.fields["general.file_type"]
    assert f.parts[f.data[0]][0] == 1  # mostly f16, as the layers now are (the input: q4_1)


def test_the_pruned_model_runs(pruned_2_4):
    r = run_ferry("run", "-m", pruned_2_4, "-p", "The capital of France is", "-n", "8",
                  "--temperature", "0", "-t", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


# Round to nearest, and AWQ, which only scales the weights (and the norms before them): either
# way the zeros stay zeros.
@pytest.mark.parametrize("method", [[], ["--method", "awq", "--calib-tokens", "96"]])
def test_the_pruned_model_stays_pruned_through_q4_0(pruned_2_4, tmp_path, method):
    q = tmp_path / "q4_0.gguf"
    r = run_ferry("quantize", pruned_2_4, q, "--type", "q4_0", *method, "-q")
    assert r.returncode == 0, r.stderr
    out, _ = matrices(q)
    for name in ("blk.0.attn_v.weight", "blk.12.ffn_up.weight", "blk.29.ffn_down.weight"):
        assert out[name].tensor_type == gguf.GGMLQuantizationType.Q4_0
        assert_n_m(weights(out[name]), 2, 4, name)


def test_magnitude_unstructured_zeroes_the_fraction_of_each_row(model_path, tmp_path):
    out = tmp_path / "mag.gguf"
    r = run_ferry("prune", model_path, out, "--sparsity", "0.3", "--method", "magnitude",
                  "--type", "q8_0", "-q")
    assert r.returncode == 0, r.stderr
    t, reader = matrices(out)
    for name in ("blk.3.attn_k.weight", "blk.20.ffn_gate.weight"):
        w = weights(t[name])
        zeros = (w == 0).sum(axis=1)
        assert zeros.min() >= round(0.3 * w.shape[1]), name
    # Recorded as --sparsity takes it.
    f = reader.fields["ferry.sparsity.pattern"]
    assert bytes(f.parts[f.data[0]]).decode() == "0.3"


@pytest.mark.parametrize("args, needle", [
    (["--sparsity", "4:2"], "N:M"),
    (["--sparsity", "half"], "--sparsity"),
    (["--sparsity", "2:4", "--type", "q4_1"], "--type"),
    (["--sparsity", "2:4", "--method", "magnitude", "--damp", "0.1"], "--damp"),
    (["--sparsity", "2:4", "--method", "magnitude", "--calib-tokens", "64"], "--calib"),
    (["--sparsity", "2:4", "--method", "pruney"], "--method"),
    (["--sparsity", "4:8", "--method", "magnitude", "--type", "int4s"], "--sparsity 4:8"),
    (["--sparsity", "2:4", "--method", "magnitude", "--group-size", "64"], "--group-size"),
    (["--sparsity", "2:4", "--type", "int4s", "--group-size", "48"], "--group-size 48"),
])
def test_bad_switches_give_one_clear_error_and_write_nothing(model_path, tmp_path, args, needle):
    out = tmp_path / "out.gguf"
    r = run_ferry("prune", model_path, out, *args)
    assert r.returncode != 0
    assert needle in r.stderr, r.stderr
    assert "terminate" not in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("args, needle", [
    (["--type", "q4_1"], "--type q4_1"),
    (["--type", "q4_k"], "--type q4_k"),
    (["--auto-mixed", "--budget", "6", "--mix-types", "q4_0,q4_1,q8_0"], "--mix-types q4_1"),
])
def test_quantizing_a_pruned_file_to_a_type_that_loses_zeros_is_refused(pruned_2_4, tmp_path, args,
                                                                         needle):
    out = tmp_path / "q.gguf"
    r = run_ferry("quantize", pruned_2_4, out, *args, "-q")
    assert r.returncode != 0
    assert "is pruned (2:4)" in r.stderr and needle in r.stderr, r.stderr
    assert not out.exists()


def test_int4_rows_that_do_not_split_into_groups_of_128_fall_back_and_keep_the_pattern(
        model_path, tmp_path):
    out = tmp_path / "int4.gguf"
    r = run_ferry("prune", model_path, out, "--sparsity", "2:4", "--method", "magnitude",
                  "--type", "int4", "-q")
    assert r.returncode == 0, r.stderr
    r = run_ferry("run", "-m", out, "-p", "Hello", "-n", "4", "-t", "2")
    assert r.returncode == 0, r.stderr


def test_a_pattern_the_rows_do_not_split_into_is_refused_before_any_work(model_path, tmp_path):
    out = tmp_path / "out.gguf"
    r = run_ferry("prune", model_path, out, "--sparsity", "3:7", "--method", "wanda")
    assert r.returncode != 0
    assert "groups of 7" in r.stderr, r.stderr
    assert "calibration" not in r.stderr
    assert not out.exists()


def test_int4s_stores_the_2_4_file_in_three_quarters_of_int4s_bytes_and_runs_the_same(
        pruned_2_4, tmp_path):
    # int4s holds int4's values on the pattern, and its kernels give int4's bits: the same text.
    files, texts = {}, {}
    for t in ("int4", "int4s"):
        files[t] = tmp_path / f"{t}.gguf"
        r = run_ferry("quantize", pruned_2_4, files[t], "--type", t, "--group-size", "64", "-q")
        assert r.returncode == 0, r.stderr
        r = run_ferry("run", "-m", files[t], "-p", "The capital of France is", "-n", "12",
                      "--temperature", "0", "-t", "2")
        assert r.returncode == 0, r.stderr
        texts[t] = r.stdout
    assert texts["int4s"] == texts["int4"]
    # 210 matrices of the layers, 106,168,320 weights: 28 bytes per 64 instead of 36.
    saved = files["int4"].stat().st_size - files["int4s"].stat().st_size
    assert abs(saved - 106168320 * 8 // 64) < 65536, saved
    info = run_ferry("info", "-m", files["int4s"])
    assert "int4s_g64: 210" in info.stdout, info.stdout


def test_int4s_of_a_file_not_pruned_2_4_is_refused_before_any_work(model_path, tmp_path):
    out = tmp_path / "int4s.gguf"
    r = run_ferry("quantize", model_path, out, "--type", "int4s", "-q")
    assert r.returncode != 0
    assert "not pruned" in r.stderr and "ferry prune" in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.parametrize("method", ["wanda", "sparsegpt"])
def test_sequential_calibrates_each_layer_on_the_pruned_layers_before_it(tiny_f16, tmp_path,
                                                                         method):
    # Layer 0 sees the same inputs either way, so it is pruned the same; layer 1's inputs come
    # through a pruned layer 0 only with --sequential, so its mask (or SparseGPT's updates)
    # differ. Both follow the pattern.
    src = tiny_f16
    out = {}
    for mode in ([], ["--sequential"]):
        path = tmp_path / f"{method}{len(mode)}.gguf"
        r = run_ferry("prune", src, path, "--sparsity", "2:4", "--method", method,
                      "--calib-tokens", "128", *mode, "-q")
        assert r.returncode == 0, r.stderr
        out[len(mode)] = matrices(path)[0]
    for name in ("blk.0.attn_q.weight", "blk.0.ffn_down.weight"):
        assert bytes(out[0][name].data) == bytes(out[1][name].data), name
    changed = 0
    for p in PRUNED:
        name = f"blk.1.{p}.weight"
        assert_n_m(weights(out[1][name]), 2, 4, name)
        changed += bytes(out[0][name].data) != bytes(out[1][name].data)
    assert changed >= 4, changed
    r = run_ferry("prune", src, tmp_path / "m.gguf", "--sparsity", "2:4", "--method",
                  "magnitude", "--sequential")
    assert r.returncode != 0 and "--sequential applies to" in r.stderr, r.stderr


def test_int4s_mixes_with_auto_mixed_and_the_dense_tensors_stay_int4(tiny_f16, tmp_path):
    # Pruning leaves the embedding dense, so --auto-mixed offers it int4 where int4s is named
    # (as --type int4s writes it), and --group-size reaches prune's int4s.
    pruned = tmp_path / "p.gguf"
    r = run_ferry("prune", tiny_f16, pruned, "--sparsity", "2:4", "--method", "magnitude",
                  "--type", "int4s", "--group-size", 64, "-q")
    assert r.returncode == 0, r.stderr
    info = json.loads(run_ferry("info", "-m", pruned, "--json").stdout)
    assert info["tensor_types"]["int4s_g64"]["tensors"] == 14, info["tensor_types"]
    out = tmp_path / "m.gguf"
    r = run_ferry("quantize", tiny_f16_pruned_f16(tiny_f16, tmp_path), out, "--auto-mixed",
                  "--calib-tokens", 48, "--budget", 5, "--mix-types", "int4s,q8_0")
    assert r.returncode == 0, r.stderr
    embd = next(x for x in r.stderr.splitlines() if "token_embd" in x)
    assert "int4s" not in embd and ("int4_g64" in embd or "q8_0" in embd), embd
    types = json.loads(run_ferry("info", "-m", out, "--json").stdout)["tensor_types"]
    assert "int4s_g64" in types, types
    run = run_ferry("run", "-m", out, "-p", "The lighthouse", "-n", 4, "--temp", 0)
    assert run.returncode == 0, run.stderr


def tiny_f16_pruned_f16(src, tmp_path):
    out = tmp_path / "p16.gguf"
    r = run_ferry("prune", src, out, "--sparsity", "2:4", "--method", "magnitude", "-q")
    assert r.returncode == 0, r.stderr
    return out
