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
