#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine that has the driver and nothing of ferry's build
# (no Debian -dev packages, no network; docs/cuda.md). Two halves:
#
#   scripts/cuda-device-check.sh stage   here, after `make build` with nvcc present: copies the
#       CUDA-enabled binaries and the shared libraries they need (not glibc's) into .cuda-check/,
#       and writes a small synthetic model (2 layers, hidden 256, the default model's tokenizer)
#       that fits beside them within the 64 MiB a check may carry;
#   scripts/cuda-device-check.sh run     there, from the repository root: the backend's op tests
#       and the model tests on the GPU (then again under compute-sanitizer's memcheck, where the
#       toolkit has it), the same decode on the GPU and the CPU, the same greedy text with each
#       KV cache type, the same seeded sampled text drawn on the GPU and on the host, decode
#       speed with each, decode with CUDA graphs on and off (the same text, and both speeds), and
#       `ferry plan --device cuda`.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=.cuda-check
BUILD=${BUILD:-build}

stage() {
    grep -q "FERRY_CUDA:BOOL=ON" "$BUILD/CMakeCache.txt" ||
        { echo "cuda-device-check: $BUILD was configured without FERRY_CUDA (nvcc missing?)" >&2; exit 1; }
    rm -rf "$DIR" && mkdir -p "$DIR/lib"
    cp "$BUILD/ferry" "$BUILD/ferry_tests" "$DIR/"
    strip "$DIR/ferry" "$DIR/ferry_tests"
    # Every library the binaries load except the C library's own, which the machine has.
    for bin in "$DIR/ferry" "$DIR/ferry_tests"; do
        ldd "$bin" | awk '/=> \// {print $3}'
    done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
        xargs -r -I{} cp -L {} "$DIR/lib/"
    cat > "$DIR/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
 "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "vocab_size": 49152, "max_position_embeddings": 2048,
 "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": true}
EOF
    "$BUILD/ferry" synth "$DIR/tiny.gguf" --like "$DIR/config.json" --type q4_0 --seed 1 -q
    du -sh "$DIR"
    echo "cuda-device-check: staged; on the GPU machine run it with carry [\"$DIR\"]:"
    echo "  scripts/cuda-device-check.sh run"
}

run() {
    export LD_LIBRARY_PATH="$PWD/$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # FERRY_REQUIRE_CUDA: a GPU case that cannot get its device fails here instead of skipping
    # (cudart 13 needs an R580+ driver; an older one would otherwise pass as all-skipped).
    export FERRY_SOURCE_DIR="$PWD" FERRY_CUDA_TEST_MODEL="$PWD/$DIR/tiny.gguf" FERRY_REQUIRE_CUDA=1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    local rc=0
    local gpu_tests='Levels/BackendOps.*/cuda:CudaModel.*'
    "$DIR/ferry_tests" --gtest_filter="$gpu_tests" || rc=1
    # Kernels that never ran before: out-of-bounds and misaligned accesses, races on shared
    # memory. Slow, so only the op tests, and bounded.
    local sanitizer
    sanitizer=$(command -v compute-sanitizer ||
        ls /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer \
            2>/dev/null | head -1 || true)
    if [ -n "$sanitizer" ]; then
        echo "== compute-sanitizer memcheck"
        timeout 240 "$sanitizer" --tool memcheck --error-exitcode 3 \
            "$DIR/ferry_tests" --gtest_filter='Levels/BackendOps.*/cuda' || rc=1
    else
        echo "== compute-sanitizer not found; memcheck skipped"
    fi
    for dev in cuda cpu; do
        echo "== bench decode on $dev"
        "$DIR/ferry" bench decode -m "$DIR/tiny.gguf" --device "$dev" -p 128 -n 64 -r 2 --json ||
            rc=1
    done
    # CUDA graphs: the same launches replayed, so the same text bit for bit, and the decode
    # speed with and without them (the tiny model is where launch overhead shows most).
    for g in off on; do
        echo "== bench decode on cuda, --cuda-graphs $g"
        "$DIR/ferry" bench decode -m "$DIR/tiny.gguf" --device cuda --cuda-graphs "$g" -p 128 \
            -n 256 -r 3 --json || rc=1
        "$DIR/ferry" run -m "$DIR/tiny.gguf" --device cuda --cuda-graphs "$g" \
            -p "The ferry crossed" -n 200 --temperature 0 2>/dev/null \
            >"/tmp/cuda-check-graphs-$g.txt" || rc=1
    done
    cmp /tmp/cuda-check-graphs-off.txt /tmp/cuda-check-graphs-on.txt ||
        { echo "texts differ with and without graphs"; rc=1; }
    echo "== the same greedy text on the GPU and the CPU's float path"
    "$DIR/ferry" run -m "$DIR/tiny.gguf" --device cuda -p "The ferry crossed" -n 24 \
        --temperature 0 2>/dev/null | tee /tmp/cuda-check-cuda.txt || rc=1
    "$DIR/ferry" run -m "$DIR/tiny.gguf" --device cpu --activations f32 -p "The ferry crossed" \
        -n 24 --temperature 0 2>/dev/null | tee /tmp/cuda-check-cpu.txt || rc=1
    cmp /tmp/cuda-check-cuda.txt /tmp/cuda-check-cpu.txt || { echo "texts differ"; rc=1; }
    # 8-bit caches: the codes are the CPU's for the same inputs, but the inputs differ in the
    # last bits, so a code at a rounding tie may too; the texts are shown side by side, and a
    # failure to run fails the check.
    for kv in int8 fp8; do
        echo "== --kv-dtype $kv: GPU, then CPU"
        for dev in cuda cpu; do
            local act=()
            [ "$dev" = cpu ] && act=(--activations f32)
            "$DIR/ferry" run -m "$DIR/tiny.gguf" --device "$dev" "${act[@]}" --kv-dtype "$kv" \
                -p "The ferry crossed" -n 24 --temperature 0 2>/dev/null || rc=1
        done
    done
    # Sampling on the GPU: a seeded, penalised, truncated draw gives the host sampler's text
    # from the same device logits (the two differ only where a number lands within rounding of
    # a boundary, which 48 tokens should not meet).
    echo "== seeded sampling: drawn on the GPU, then on the host"
    for where in device host; do
        "$DIR/ferry" run -m "$DIR/tiny.gguf" --device cuda --sample-on "$where" \
            -p "The ferry crossed" -n 48 --temperature 0.9 --top-k 40 --top-p 0.9 --min-p 0.02 \
            --repeat-penalty 1.2 --seed 7 2>/dev/null | tee "/tmp/cuda-check-sample-$where.txt" ||
            rc=1
    done
    cmp /tmp/cuda-check-sample-device.txt /tmp/cuda-check-sample-host.txt ||
        { echo "sampled texts differ"; rc=1; }
    for where in device host; do
        echo "== bench decode on cuda, tokens picked on the $where"
        "$DIR/ferry" bench decode -m "$DIR/tiny.gguf" --device cuda --sample-on "$where" -p 128 \
            -n 64 -r 2 --json || rc=1
    done
    echo "== ferry plan --device cuda"
    "$DIR/ferry" plan -m "$DIR/tiny.gguf" --device cuda || rc=1
    return $rc
}

case "${1:-}" in
    stage) stage ;;
    run) run ;;
    *) echo "usage: $0 stage|run" >&2; exit 2 ;;
esac
