#!/usr/bin/env bash
# Runs the same model, prompt length, generation length and thread count through ferry and
# llama.cpp (via a pinned llama-cpp-python built from source with native CPU flags), alternating
# A B A B so drifting machine load hits both engines alike, and prints both and their ratio.
#
# usage: bench/compare-llamacpp.sh [-m MODEL] [-p PROMPT_TOKENS] [-n GEN_TOKENS] [-t THREADS]
#                                  [-r REPEATS] [--types "q4_1 q8_0 f16"] [--json] [--install-only]
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CACHE="${FERRY_CACHE:-$HOME/.cache/ferry}"
VENV="${FERRY_BENCH_VENV:-$CACHE/bench-venv}"
# Same pin as the golden files so both compare against one llama.cpp.
LLAMA_CPP_PYTHON_VERSION="0.3.36"

MODEL="$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT=512
GEN=64
THREADS=""
REPEATS=3
TYPES="q4_1 q8_0 f16"
JSON=0
INSTALL_ONLY=0
FERRY="${FERRY_BIN:-}"

while [[ $# -gt 0 ]]; do
    case "$1" in
        -m) MODEL="$2"; shift 2 ;;
        -p) PROMPT="$2"; shift 2 ;;
        -n) GEN="$2"; shift 2 ;;
        -t) THREADS="$2"; shift 2 ;;
        -r) REPEATS="$2"; shift 2 ;;
        --types) TYPES="$2"; shift 2 ;;
        --ferry) FERRY="$2"; shift 2 ;;
        --json) JSON=1; shift ;;
        --install-only) INSTALL_ONLY=1; shift ;;
        -h|--help) sed -n 2,8p "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

log() { echo "$@" >&2; }

install_llama() {
    if [[ -x "$VENV/bin/python" ]] &&
        "$VENV/bin/python" -c "import llama_cpp,sys; sys.exit(llama_cpp.__version__!='$LLAMA_CPP_PYTHON_VERSION')" 2>/dev/null; then
        return
    fi
    log "building llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION with native CPU flags into $VENV (10+ minutes on 2 cores)"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --disable-pip-version-check -q "gguf" "numpy"
    # Native flags so llama.cpp gets the same AVX-512/VNNI paths ferry picks at run time; the
    # multimodal and tool targets are irrelevant here and double the build time.
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF" \
        "$VENV/bin/pip" install --disable-pip-version-check --no-binary llama-cpp-python \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
}

install_llama
[[ $INSTALL_ONLY == 1 ]] && exit 0

[[ -z "$THREADS" ]] && THREADS="$(lscpu -p=CORE 2>/dev/null | grep -v '^#' | sort -u | wc -l)"
if [[ -z "$FERRY" ]]; then
    for c in "$ROOT/build/ferry" "$ROOT/build-kern/ferry"; do [[ -x "$c" ]] && FERRY="$c" && break; done
fi
[[ -x "$FERRY" ]] || { log "ferry binary not found (build it or pass --ferry)"; exit 1; }

exec "$VENV/bin/python" "$HERE/compare_llamacpp.py" --ferry "$FERRY" --model "$MODEL" \
    --prompt "$PROMPT" --gen "$GEN" --threads "$THREADS" --repeats "$REPEATS" \
    --types "$TYPES" --cache "$CACHE" $([[ $JSON == 1 ]] && echo --json)
