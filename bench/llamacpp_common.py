"""What bench/compare_llamacpp.py and bench/families.py share: ferry synth's model of a shape,
written once per type, and llama.cpp's native llama-bench measured where ferry's bench decode
measures (decode after the prompt)."""
import json
import os
import subprocess


def synth_model(ferry, cache_dir, like, layers, wtype):
    """ferry synth's model of `like` (cut to `layers` when > 0) in wtype, written on first use
    under cache_dir as LIKE[-Nl].WTYPE.gguf."""
    suffix = f"-{layers}l" if layers else ""
    out = os.path.join(cache_dir, f"{like}{suffix}.{wtype}.gguf")
    if not os.path.exists(out):
        os.makedirs(cache_dir, exist_ok=True)
        cmd = [ferry, "synth", out + ".tmp", "--like", like, "--type", wtype]
        if layers:
            cmd += ["--layers", str(layers)]
        subprocess.run(cmd, check=True)
        os.replace(out + ".tmp", out)
    return out


def llama_bench(bench, model, prompt, gen, threads, repeats):
    """(prefill, decode tok/s, build): `pp P` from an empty cache and `tg N @ dP`, decode from
    the prompt's depth, where ferry decodes (llama-bench's plain `tg` starts from an empty cache
    and is faster). Two invocations, because llama-bench applies -d to every test it runs."""
    pp = tg = build = None
    for depth in (0, prompt):
        out = subprocess.run([bench, "-m", model, "-p", str(prompt), "-n", str(gen), "-t",
                              str(threads), "-r", str(repeats), "-d", str(depth), "-o", "json"],
                             check=True, capture_output=True, text=True).stdout
        for e in json.loads(out):
            build = f"{e.get('build_commit', '?')} ({e.get('build_number', '?')})"
            if depth == 0 and e["n_prompt"] > 0 and e["n_gen"] == 0:
                pp = e["avg_ts"]
            elif depth == prompt and e["n_gen"] > 0 and e["n_prompt"] == 0:
                tg = e["avg_ts"]
    return pp, tg, build
