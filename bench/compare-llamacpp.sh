#!/usr/bin/env bash
# Runs the same model, prompt length, generation length and thread count through ferry and
# llama.cpp (via a pinned llama-cpp-python built from source with native CPU flags, or llama.cpp's
# native llama-bench with --llama-bench), alternating A B A B so drifting machine load hits both
# engines alike, and prints both and their ratio. Decode is compared at the same depth: after the
# prompt (llama-bench's `tg N @ dP`).
#
# usage: bench/compare-llamacpp.sh [-m MODEL | --like PRESET [--layers N]] [-p PROMPT_TOKENS]
#                                  [-n GEN_TOKENS] [-t THREADS] [-r REPEATS]
#                                  [--types "q4_1 q8_0 f16"] [--llama-bench PATH] [--json]
#                                  [--install-only]
# --like PRESET: a `ferry synth` model of that shape per type (q4_0, q4_k_m, q8_0, ...), written
# once under the cache; --llama-bench PATH: a llama-bench built from llama.cpp's sources.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# CACHE, VENV, the llama-cpp-python pin and install_llama.
# shellcheck source=bench/llamacpp-venv.sh
source "$HERE/llamacpp-venv.sh"

MODEL="$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT=512
GEN=64
THREADS=""
REPEATS=3
TYPES="q4_1 q8_0 f16"
JSON=0
INSTALL_ONLY=0
LIKE=""
LAYERS=0
LLAMA_BENCH=""
FERRY="${FERRY_BIN:-}"

while [[ $# -gt 0 ]]; do
    case "$1" in
        -m) MODEL="$2"; shift 2 ;;
        --like) LIKE="$2"; shift 2 ;;
        --layers) LAYERS="$2"; shift 2 ;;
        --llama-bench) LLAMA_BENCH="$2"; shift 2 ;;
        -p) PROMPT="$2"; shift 2 ;;
        -n) GEN="$2"; shift 2 ;;
        -t) THREADS="$2"; shift 2 ;;
        -r) REPEATS="$2"; shift 2 ;;
        --types) TYPES="$2"; shift 2 ;;
        --ferry) FERRY="$2"; shift 2 ;;
        --json) JSON=1; shift ;;
        --install-only) INSTALL_ONLY=1; shift ;;
        -h|--help) sed -n 2,14p "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

log() { echo "$@" >&2; }

# llama-bench needs no Python package: the standard library runs the driver.
PY="$VENV/bin/python"
if [[ -n "$LLAMA_BENCH" ]]; then
    [[ -x "$LLAMA_BENCH" ]] || { log "--llama-bench $LLAMA_BENCH: not an executable"; exit 1; }
    PY=python3
else
    install_llama
fi
[[ $INSTALL_ONLY == 1 ]] && exit 0

[[ -z "$THREADS" ]] && THREADS="$(lscpu -p=CORE 2>/dev/null | grep -v '^#' | sort -u | wc -l)"
if [[ -z "$FERRY" ]]; then
    for c in "$ROOT/build/ferry" "$ROOT/build-kern/ferry"; do [[ -x "$c" ]] && FERRY="$c" && break; done
fi
[[ -x "$FERRY" ]] || { log "ferry binary not found (build it or pass --ferry)"; exit 1; }

ARGS=(--ferry "$FERRY" --prompt "$PROMPT" --gen "$GEN" --threads "$THREADS" --repeats "$REPEATS"
      --types "$TYPES" --cache "$CACHE")
if [[ -n "$LIKE" ]]; then ARGS+=(--like "$LIKE" --layers "$LAYERS"); else ARGS+=(--model "$MODEL"); fi
[[ -n "$LLAMA_BENCH" ]] && ARGS+=(--llama-bench "$LLAMA_BENCH")
[[ $JSON == 1 ]] && ARGS+=(--json)
exec "$PY" "$HERE/compare_llamacpp.py" "${ARGS[@]}"
