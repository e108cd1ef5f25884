#!/usr/bin/env bash
# Perplexity of GGUF files in ferry (`ferry eval`) and in llama.cpp (the pinned
# llama-cpp-python of bench/llamacpp-venv.sh) on the same token ids, windows and scored
# positions; prints both, their relative difference and whether it is within --tolerance %.
#
# usage: bench/llamacpp-ppl.sh [GGUF ...] [-m SOURCE] [--types "q4_k q8_0"] [--text FILE]
#                              [--ctx N] [--stride S] [--max-tokens N] [-t THREADS]
#                              [--kv-dtype f32|f16] [--tolerance PCT] [--no-dequant-check]
#                              [--ferry BIN] [--json]
# Without GGUF arguments: SOURCE (default: the default model, Q4_1) and, for each of --types,
# SOURCE written by `ferry quantize --type T` into $CACHE/models/<stem>.ferry-<T>.gguf.
# Each file's matrices are also dequantized by ferry (`quantize --type f32`) and by gguf-py and
# compared bit for bit. Exit status 1 when a file does not load in llama.cpp, its perplexity
# differs by more than the tolerance, or a matrix dequantizes differently.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# CACHE, VENV, the llama-cpp-python pin and install_llama.
# shellcheck source=bench/llamacpp-venv.sh
source "$HERE/llamacpp-venv.sh"

SOURCE="$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"
TYPES="q4_k q8_0"
TEXT="$ROOT/data/eval/lighthouse.txt"
CTX=512
STRIDE=0
MAX_TOKENS=0
THREADS=""
KV_DTYPE=f32
TOLERANCE=1
EXTRA=()  # flags passed through to llamacpp_ppl.py
FERRY="${FERRY_BIN:-}"
FILES=()

while [[ $# -gt 0 ]]; do
    case "$1" in
        -m) SOURCE="$2"; shift 2 ;;
        --types) TYPES="$2"; shift 2 ;;
        --text) TEXT="$2"; shift 2 ;;
        --ctx) CTX="$2"; shift 2 ;;
        --stride) STRIDE="$2"; shift 2 ;;
        --max-tokens) MAX_TOKENS="$2"; shift 2 ;;
        -t) THREADS="$2"; shift 2 ;;
        --kv-dtype) KV_DTYPE="$2"; shift 2 ;;
        --tolerance) TOLERANCE="$2"; shift 2 ;;
        --ferry) FERRY="$2"; shift 2 ;;
        --no-dequant-check|--json) EXTRA+=("$1"); shift ;;
        -h|--help) sed -n 2,15p "$0"; exit 0 ;;
        -*) echo "unknown argument: $1" >&2; exit 2 ;;
        *) FILES+=("$1"); shift ;;
    esac
done

log() { echo "$@" >&2; }

install_llama

[[ -z "$THREADS" ]] && THREADS="$(lscpu -p=CORE 2>/dev/null | grep -v '^#' | sort -u | wc -l)"
if [[ -z "$FERRY" ]]; then
    for c in "$ROOT/build/ferry" "$ROOT/build-kern/ferry"; do [[ -x "$c" ]] && FERRY="$c" && break; done
fi
[[ -x "$FERRY" ]] || { log "ferry binary not found (build it or pass --ferry)"; exit 1; }

if [[ ${#FILES[@]} -eq 0 ]]; then
    [[ -f "$SOURCE" ]] || SOURCE="$("$ROOT/scripts/get-model.sh")"
    FILES=("$SOURCE")
    stem="$(basename "$SOURCE" .gguf)"
    stem="${stem%.*}"  # SmolLM2-135M-Instruct.Q4_1 -> SmolLM2-135M-Instruct
    mkdir -p "$CACHE/models"
    for t in $TYPES; do
        out="$CACHE/models/$stem.ferry-${t^^}.gguf"
        # Rewritten when the source or the ferry binary is newer, so a changed writer is tested.
        if [[ ! -f "$out" || "$SOURCE" -nt "$out" || "$FERRY" -nt "$out" ]]; then
            log "ferry quantize --type $t -> $out"
            "$FERRY" quantize "$SOURCE" "$out.tmp" --type "$t" -q -t "$THREADS"
            mv "$out.tmp" "$out"
        fi
        FILES+=("$out")
    done
fi

exec "$VENV/bin/python" "$HERE/llamacpp_ppl.py" --ferry "$FERRY" --text "$TEXT" --ctx "$CTX" \
    --stride "$STRIDE" --max-tokens "$MAX_TOKENS" --threads "$THREADS" --kv-dtype "$KV_DTYPE" \
    --tolerance "$TOLERANCE" "${EXTRA[@]}" "${FILES[@]}"
