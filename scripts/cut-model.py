#!/usr/bin/env python3
"""The first N layers of a llama-family GGUF, as a GGUF of its own.

scripts/gpu-check.sh carries the default model cut to its first layers to the GPU machine: real
weights (with their outliers) and a real tokenizer within the 64 MiB a check may carry, where a
synthetic model's random weights would hide what real ones show. The embedding, the final norm,
the output head (if the file has one) and every metadata key are kept; `<arch>.block_count`
becomes N. Tensors are copied as they are stored, bytes and type unchanged.

usage: scripts/cut-model.py IN.gguf OUT.gguf --layers N    (the tools venv: `make venv`)
"""
import argparse
import re
import sys

import gguf


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--layers", type=int, required=True)
    a = ap.parse_args()

    r = gguf.GGUFReader(a.src)
    arch = r.fields["general.architecture"].contents()
    key_blocks = f"{arch}.block_count"
    have = r.fields[key_blocks].contents()
    if not 1 <= a.layers <= have:
        sys.exit(f"cut-model: --layers must be 1..{have} (the file's {key_blocks})")

    w = gguf.GGUFWriter(a.dst, arch)
    for name, f in r.fields.items():
        # The writer sets these itself.
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = gguf.GGUFValueType(f.types[0])
        if name == key_blocks:
            w.add_key_value(name, a.layers, vtype)
        elif vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, f.contents(), vtype, gguf.GGUFValueType(f.types[-1]))
        else:
            w.add_key_value(name, f.contents(), vtype)

    layer = re.compile(r"^blk\.(\d+)\.")
    kept = 0
    for t in r.tensors:
        m = layer.match(t.name)
        if m and int(m.group(1)) >= a.layers:
            continue
        # Stored bytes as they are; the writer infers a block type's shape from its rows' bytes.
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
        kept += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"cut-model: {a.dst}: {a.layers} of {have} layers, {kept} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
