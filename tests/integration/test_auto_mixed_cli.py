"""`ferry quantize --auto-mixed --budget BITS`: on a two-layer model with SmolLM2's shapes
(`ferry synth`), the mixed file is read back by gguf-py, its bits per weight counted there (not by
ferry) and checked against the budget, and it runs; int3 (ferry's own type) mixes and runs too.
Bad switches give one clear line and write nothing."""

import pytest

from conftest import run_ferry

gguf = pytest.importorskip("gguf")

MIXED = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def mix(src, out, *args):
    return run_ferry("quantize", src, out, "--auto-mixed", "--calib-tokens", 48, *args)


def bits_per_weight(reader):
    n_bytes = sum(int(t.n_bytes) for t in reader.tensors)
    n_elements = sum(int(t.n_elements) for t in reader.tensors)
    return 8.0 * n_bytes / n_elements


def field(reader, key):
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else float(v[0])


@pytest.mark.parametrize("budget", [5.0, 6.5])
def test_the_mix_fits_the_budget_and_uses_both_types(tiny_f16, tmp_path, budget):
    out = tmp_path / "mixed.gguf"
    r = mix(tiny_f16, out, "--budget", budget, "--mix-types", "q8_0,q4_0")
    assert r.returncode == 0, r.stderr
    assert "chose" in r.stderr and "summed single-matrix KL" in r.stderr
    rd = gguf.GGUFReader(out)
    types = {t.name: t.tensor_type for t in rd.tensors}
    q = gguf.GGMLQuantizationType
    matrices = [n for n in types if n == "token_embd.weight" or any(f".{m}." in n for m in MIXED)]
    assert len(matrices) == 1 + 7 * 2
    assert {types[n] for n in matrices} == {q.Q4_0, q.Q8_0}
    assert all(types[n] == q.F32 for n in types if n not in matrices)
    assert bits_per_weight(rd) <= budget
    # Nothing left at q4_0 could have moved to q8_0 (16 more bytes per 32 weights) within the
    # budget: the allocation is exact, and q8_0 always rounds closer.
    n_elements = sum(int(t.n_elements) for t in rd.tensors)
    spare = budget * n_elements / 8 - sum(int(t.n_bytes) for t in rd.tensors)
    for t in rd.tensors:
        if t.tensor_type == q.Q4_0:
            assert int(t.n_elements) // 32 * 16 > spare, t.name
    assert field(rd, "ferry.weight_type") == "mixed"
    assert field(rd, "ferry.mixed.budget_bpw") == pytest.approx(budget)
    assert field(rd, "ferry.mixed.types") == "q4_0,q8_0"
    assert "general.file_type" not in rd.fields

    run = run_ferry("run", "-m", out, "-p", "The lighthouse", "-n", 4, "--temp", 0)
    assert run.returncode == 0, run.stderr


def test_a_larger_budget_never_costs_more_kl(tiny_f16, tmp_path):
    def summed_kl(budget):
        r = mix(tiny_f16, tmp_path / f"m{budget}.gguf", "--budget", budget, "--mix-types",
                "q8_0,q4_0")
        assert r.returncode == 0, r.stderr
        line = next(x for x in r.stderr.splitlines() if "summed single-matrix KL" in x)
        return float(line.split("summed single-matrix KL ")[1].split()[0])

    kls = [summed_kl(b) for b in (4.6, 5.5, 8.6)]
    assert kls[0] >= kls[1] >= kls[2]
    assert kls[0] > kls[2]


def test_int3_mixes_and_runs(tiny_f16, tmp_path):
    out = tmp_path / "mixed3.gguf"
    r = mix(tiny_f16, out, "--budget", 4.5, "--mix-types", "int3,int4,q8_0", "--group-size", 32)
    assert r.returncode == 0, r.stderr
    assert "int3_g32" in r.stderr
    info = run_ferry("info", "-m", out)
    assert info.returncode == 0, info.stderr
    assert "int3_g32" in info.stdout
    run = run_ferry("run", "-m", out, "-p", "The lighthouse", "-n", 4, "--temp", 0)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("args, message", [
    (["--budget", 2.0, "--mix-types", "q4_0,q8_0"], "smallest candidate types give"),
    (["--mix-types", "q4_0,q8_0"], "--auto-mixed needs --budget"),
    (["--budget", 5, "--type", "q4_0"], "drop --type"),
    (["--budget", 5, "--mix-types", "q4_0"], "at least two types"),
    (["--budget", 5, "--mix-types", "q4_0,q9_9"], "--type q9_9"),
    (["--budget", 5, "--method", "gptq"], "rounds to nearest"),
])
def test_bad_switches_say_what_is_wrong_and_write_nothing(tiny_f16, tmp_path, args, message):
    out = tmp_path / "bad.gguf"
    r = mix(tiny_f16, out, *args)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert not out.exists()


def test_budget_and_mix_types_need_auto_mixed(tiny_f16, tmp_path):
    out = tmp_path / "bad.gguf"
    r = run_ferry("quantize", tiny_f16, out, "--type", "q4_0", "--budget", 5)
    assert r.returncode != 0
    assert "apply to --auto-mixed only" in r.stderr
    assert not out.exists()
