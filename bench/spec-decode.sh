#!/usr/bin/env bash
# Speculative decoding, measured: every row is one `ferry bench decode` run that alternates plain
# decoding and speculation (A B A B) and checks the greedy outputs are identical, so the speed-up
# is a ratio taken under the same machine load. Then the batch sweep: the same grounded chat
# workload through the serving engine at 1..16 concurrent sequences, speculation on vs off.
#
# usage: bench/spec-decode.sh [-t THREADS] [-n GEN_TOKENS] [-r REPEATS] [--k K] [--skip-draft]
#                             [--skip-sweep]
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
FERRY="${FERRY_BIN:-$ROOT/build/ferry}"
WORK="${FERRY_SPEC_WORK:-${TMPDIR:-/tmp}/ferry-spec}"
THREADS=2
GEN=128
REPEATS=2
K=4
DRAFT=1
SWEEP=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        -t) THREADS="$2"; shift 2 ;;
        -n) GEN="$2"; shift 2 ;;
        -r) REPEATS="$2"; shift 2 ;;
        --k) K="$2"; shift 2 ;;
        --skip-draft) DRAFT=0; shift ;;
        --skip-sweep) SWEEP=0; shift ;;
        -h|--help) sed -n 2,8p "$0"; exit 0 ;;
        *) echo "spec-decode.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
mkdir -p "$WORK"
row() {  # label, then bench decode arguments
    local label="$1"; shift
    echo "  $label ..." >&2
    "$FERRY" bench decode -t "$THREADS" -n "$GEN" -r "$REPEATS" --json "$@" 2>/dev/null |
        python3 -c "
import json, sys
j = json.load(sys.stdin)
print('| $label | %s | %.1f | %.1f | **%.2fx** | %.0f %% | %.2f | %s |' % (
    j['spec_method'], j['baseline_decode_tokens_per_s'], j['decode_tokens_per_s'],
    j['spec_speedup'], 100 * j['spec_acceptance_rate'], j['spec_mean_accepted'],
    'yes' if j['spec_output_identical'] else 'NO'))"
}

echo "| workload | proposer | plain tok/s | speculative tok/s | speed-up | accepted | per step | identical |"
echo "|---|---|---|---|---|---|---|---|"
for p in repeat-text edit-code extract-list; do
    row "$p (Q4_1, k $K)" -m default --prompt-file "$HERE/prompts/$p.txt" --chat --spec ngram \
        --spec-k "$K"
done
if [[ $DRAFT == 1 ]]; then
    # The issue's setting: the default model in F32 as the target, its Q4_1 file as the draft
    # (5.6x fewer bytes per token).
    [[ -f "$WORK/smol-f32.gguf" ]] ||
        "$FERRY" quantize default "$WORK/smol-f32.gguf" --type f32 >/dev/null 2>&1
    for p in repeat-text edit-code; do
        row "$p (F32 target, k $K)" -m "$WORK/smol-f32.gguf" --prompt-file "$HERE/prompts/$p.txt" \
            --chat --spec draft --draft-model default --spec-k "$K"
    done
    row "repeat-text (F32 target, ngram k $K)" -m "$WORK/smol-f32.gguf" \
        --prompt-file "$HERE/prompts/repeat-text.txt" --chat --spec ngram --spec-k "$K"
fi
if [[ $SWEEP == 1 ]]; then
    echo
    echo "| concurrent sequences | spec off out tok/s | ngram out tok/s | ratio | accepted |"
    echo "|---|---|---|---|---|"
    for n in 1 2 4 8 16; do
        echo "  batch $n ..." >&2
        off=$("$FERRY" bench throughput -t "$THREADS" --dataset "$HERE/prompts/grounded.jsonl" \
            --num-prompts $((n * 2)) --max-num-seqs "$n" --spec off --json 2>/dev/null)
        on=$("$FERRY" bench throughput -t "$THREADS" --dataset "$HERE/prompts/grounded.jsonl" \
            --num-prompts $((n * 2)) --max-num-seqs "$n" --spec ngram --spec-k "$K" \
            --spec-disable-batch 0 --json 2>/dev/null)
        python3 -c "
import json, sys
off, on = json.loads(sys.argv[1]), json.loads(sys.argv[2])
a, b = off['output_tokens_per_s'], on['output_tokens_per_s']
print('| $n | %.1f | %.1f | %.2fx | %.0f %% |' % (a, b, b / a, 100 * on['spec_acceptance_rate']))" \
            "$off" "$on"
    done
fi
