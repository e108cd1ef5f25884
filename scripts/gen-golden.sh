#!/usr/bin/env bash
# Regenerates ferry's golden reference files in tests/golden/ from an implementation we did
# not write: llama.cpp, through its Python binding llama-cpp-python (pinned below), plus a
# small NumPy reference forward pass (scripts/ref_forward.py) that brackets llama.cpp's
# 8-bit-activation arithmetic from the exact-f32 side.
#
#   scripts/gen-golden.sh            # set up the venv if needed, then write tests/golden/
#   scripts/gen-golden.sh --setup    # only build/install the venv
#
# The venv lives at ${FERRY_HOME:-~/.cache/ferry}/golden-venv and is reused. The first run
# builds llama.cpp from source (CPU only, 2 jobs): ~15-25 minutes on a 2-core machine.
# Running the script again rewrites byte-identical files.
#
# Build flags: GGML_NATIVE=OFF with a fixed x86-64-v3 feature set (AVX, AVX2, FMA, F16C, BMI2;
# no AVX-512) so the kernels that ggml picks, and hence the float summation order and the
# golden logits, do not depend on which CPU the generator happened to run on. A native build
# on an AVX-512 machine would take different code paths than on a laptop or CI runner.
# OpenMP is turned off: ggml's own thread pool is used, and we run with a fixed thread count.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="0.3.36"
GGUF_VERSION="0.19.0"
NUMPY_VERSION="2.2.6"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
home="${FERRY_HOME:-$HOME/.cache/ferry}"
venv="$home/golden-venv"
stamp="$venv/.ferry-golden-stamp"
want="llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION gguf==$GGUF_VERSION numpy==$NUMPY_VERSION"

setup_venv() {
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    local py
    py=$(command -v python3 || true)
    [ -n "$py" ] || { echo "gen-golden: python3 is needed" >&2; exit 1; }
    echo "gen-golden: creating $venv (builds llama.cpp from source, this takes a while) ..." >&2
    "$py" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pip >&2
    # llama-cpp-python's own dependencies are pinned too (none of them touches the numbers)
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "numpy==$NUMPY_VERSION" "gguf==$GGUF_VERSION" \
        typing-extensions==4.16.0 diskcache==5.6.3 jinja2==3.1.6 MarkupSafe==3.0.4 >&2
    local t0=$SECONDS
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_OPENMP=OFF -DGGML_BLAS=OFF \
-DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=2 \
        "$venv/bin/pip" install --disable-pip-version-check --no-cache-dir --no-binary llama-cpp-python \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
    echo "gen-golden: llama-cpp-python built in $((SECONDS - t0)) s" >&2
    echo "$want" >"$stamp"
}

setup_venv
if [ "${1:-}" = "--setup" ]; then
    echo "$venv"
    exit 0
fi

model="$("$here/get-model.sh")"
exec "$venv/bin/python" "$here/gen_golden.py" --model "$model" --out "$repo/tests/golden" \
    --llama-cpp-python-version "$LLAMA_CPP_PYTHON_VERSION" --gguf-version "$GGUF_VERSION" "$@"
