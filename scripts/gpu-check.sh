#!/usr/bin/env bash
# Issue 18's GPU check, prepared as one script. The GPU machine has the NVIDIA driver, nvcc, CMake
# and Python with PyTorch and transformers, but none of ferry's Debian packages and no network,
# and a check carries at most 64 MiB (docs/cuda.md). Two halves:
#
#   scripts/gpu-check.sh stage   here, after `make build` with nvcc present: .gpu-check/ gets the
#       CUDA-enabled ferry and ferry_tests with the shared libraries they need (not glibc's), xz'd;
#       the default model cut to its first 2 layers (scripts/cut-model.py: real weights and
#       tokenizer, 35 MiB). Checks the size.
#   scripts/gpu-check.sh run     there, from the repository root, with carry [".gpu-check"]: one
#       run of at most GPU_CHECK_BUDGET_S seconds (460) that prints one JSON last
#       (scripts/gpu_check.py says what it holds); exits non-zero when a GPU test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=.gpu-check
BUILD=${BUILD:-build}
LIMIT_MIB=64

stage() {
    grep -q "FERRY_CUDA:BOOL=ON" "$BUILD/CMakeCache.txt" ||
        { echo "gpu-check: $BUILD was configured without FERRY_CUDA (nvcc missing?)" >&2; exit 1; }
    local model=${FERRY_HOME:-$HOME/.cache/ferry}/models/SmolLM2-135M-Instruct.Q4_1.gguf
    [ -f "$model" ] || { echo "gpu-check: the default model is not at $model (make model)" >&2; exit 1; }
    local py=${PY:-.venv/bin/python}
    rm -rf "$DIR" && mkdir -p "$DIR/bin/lib"
    cp "$BUILD/ferry" "$BUILD/ferry_tests" "$DIR/bin/"
    strip "$DIR/bin/ferry" "$DIR/bin/ferry_tests"
    # Every library the binaries load except the C library's own, which the machine has.
    for bin in "$DIR/bin/ferry" "$DIR/bin/ferry_tests"; do
        ldd "$bin" | awk '/=> \// {print $3}'
    done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
        xargs -r -I{} cp -L {} "$DIR/bin/lib/"
    tar -C "$DIR/bin" -cf - . | xz -T0 -6 > "$DIR/bin.tar.xz"
    rm -rf "$DIR/bin"
    "$py" scripts/cut-model.py "$model" "$DIR/real.gguf" --layers 2
    local mib
    mib=$(du -sm "$DIR" | cut -f1)
    echo "gpu-check: staged $DIR, $mib MiB"
    [ "$mib" -le "$LIMIT_MIB" ] || { echo "gpu-check: over the ${LIMIT_MIB} MiB a check carries" >&2; exit 1; }
    echo "gpu-check: on the GPU machine run it with carry [\"$DIR\"] and a timeout of ~540 s:"
    echo "  scripts/gpu-check.sh run"
}

case "${1:-}" in
    stage) stage ;;
    run) exec python3 scripts/gpu_check.py ;;
    *) echo "usage: $0 stage|run" >&2; exit 2 ;;
esac
