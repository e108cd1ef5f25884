#!/usr/bin/env python3
"""Reads the include graph of src/ and fails when it breaks the layering of docs/architecture.md:

- an include runs from a lower floor to a higher one
  (core -> gguf / hf / tokenizer / quant / grammar -> kernels / comm -> kv / model -> engine / calibrate / convert /
   eval / parallel -> server / plan -> cli);
- folders include each other in a cycle (also within a floor), or two files include each other;
- something outside src/kernels/ includes a backend's own files (kernels/cpu/, kernels/cuda/);
- src/model/ names a thread pool, a SIMD level or a packed layout.

Prints what it found; exit status 1 if anything. Run by ctest (test `layering`)."""
import os
import re
import sys

FLOORS = {
    "core": 0,
    "gguf": 1, "hf": 1, "formats": 1, "tokenizer": 1, "quant": 1, "grammar": 1,
    "kernels": 2, "comm": 2,
    "kv": 3, "model": 3,
    "engine": 4, "calibrate": 4, "convert": 4, "eval": 4, "parallel": 4,
    "server": 5, "plan": 5,
    "cli": 6,
}
BACKEND_PRIVATE = ("kernels/cpu/", "kernels/cuda/")
MODEL_FORBIDDEN = re.compile(
    r"ThreadPool|thread_pool|CpuLevel|cpu_level|\bSIMD\b|\bsimd\b|AVX|avx2|avx512|\bNEON\b|"
    r"\bneon\b|packed|PackedWeight|kernels/cpu")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def main(root):
    src = os.path.join(root, "src")
    files = {}
    for d, _, names in os.walk(src):
        for n in names:
            if n.endswith((".h", ".cpp", ".inc", ".cu", ".cuh")):
                p = os.path.join(d, n)
                files[os.path.relpath(p, src)] = p
    problems = []
    edges = {}  # folder -> set of folders
    includes = {}  # file -> set of files
    for rel, path in sorted(files.items()):
        folder = rel.split("/")[0]
        if folder not in FLOORS:
            problems.append(f"{rel}: folder '{folder}' has no floor in scripts/check-layers.py")
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for line in text.splitlines():
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            if inc not in files:
                continue  # a system or third-party header
            includes.setdefault(rel, set()).add(inc)
            to = inc.split("/")[0]
            if to not in FLOORS:
                continue
            if FLOORS[to] > FLOORS[folder]:
                problems.append(f"{rel}: includes {inc}, a higher floor ({to} above {folder})")
            if inc.startswith(BACKEND_PRIVATE) and not rel.startswith("kernels/"):
                problems.append(f"{rel}: includes {inc}, a backend's own file")
            if to != folder:
                edges.setdefault(folder, set()).add(to)
        if folder == "model":
            for i, line in enumerate(text.splitlines(), 1):
                if MODEL_FORBIDDEN.search(line):
                    problems.append(f"{rel}:{i}: the model names a backend's insides: "
                                    f"{line.strip()}")
    for a, incs in includes.items():
        for b in incs:
            if a < b and a in includes.get(b, ()):
                problems.append(f"{a} and {b} include each other")
    # Folder cycles: depth-first search for a back edge.
    state = {}

    def visit(f, path):
        state[f] = 1
        for g in sorted(edges.get(f, ())):
            if state.get(g) == 1:
                cycle = path[path.index(g):] + [g]
                problems.append("folders include each other in a cycle: " + " -> ".join(cycle))
            elif g not in state:
                visit(g, path + [g])
        state[f] = 2

    for f in sorted(edges):
        if f not in state:
            visit(f, [f])
    for p in problems:
        print(p)
    if not problems:
        n = sum(len(v) for v in includes.values())
        print(f"layering: {len(files)} files, {n} includes of ferry's own headers, no violation")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else
                  os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
