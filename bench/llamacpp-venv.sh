# shellcheck shell=bash
# Sourced (not run) by bench/compare-llamacpp.sh and bench/llamacpp-ppl.sh: the one pinned
# llama-cpp-python, built from source with native CPU flags, in a venv both scripts share.
#
# Sets CACHE, VENV and LLAMA_CPP_PYTHON_VERSION (CACHE and VENV from $FERRY_CACHE and
# $FERRY_BENCH_VENV when set) and defines install_llama, which builds the venv unless it
# already holds that version.

CACHE="${FERRY_CACHE:-$HOME/.cache/ferry}"
VENV="${FERRY_BENCH_VENV:-$CACHE/bench-venv}"
# Same pin as the golden files so both compare against one llama.cpp.
LLAMA_CPP_PYTHON_VERSION="0.3.36"

install_llama() {
    if [[ -x "$VENV/bin/python" ]] &&
        "$VENV/bin/python" -c "import llama_cpp,sys; sys.exit(llama_cpp.__version__!='$LLAMA_CPP_PYTHON_VERSION')" 2>/dev/null; then
        return
    fi
    echo "building llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION with native CPU flags into $VENV (10+ minutes on 2 cores)" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --disable-pip-version-check -q "gguf" "numpy"
    # Native flags so llama.cpp gets the same AVX-512/VNNI paths ferry picks at run time; the
    # multimodal and tool targets are irrelevant here and double the build time.
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF" \
        "$VENV/bin/pip" install --disable-pip-version-check --no-binary llama-cpp-python \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
}
