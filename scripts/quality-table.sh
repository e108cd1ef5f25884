#!/usr/bin/env bash
# Regenerates the quality table of docs/quantization.md: the default model written as f32 (the
# reference), then each weight type quantized from it, scored against it with `ferry eval`
# (perplexity, KL, top-1 on data/eval/lighthouse.txt; accuracy and greedy agreement on the
# default tasks) and timed with `ferry bench decode`. Progress goes to stderr, the Markdown
# table to stdout.
#
#   scripts/quality-table.sh [--types "q8_0 int8 ..."] [--model M] [--work DIR] [--ferry BIN]
#                            [--threads N] [--keep-files] [--write-doc] [--doc PATH]
#
# Types: q8_0 q6_k q4_k q4_1 q4_0 int8 fp8 int4_g32 int4_g64 int4_g128 w8a8, and METHOD:TYPE for
# a calibrated quantizer (gptq:int4_g128, awq:int4_g128, smooth:w8a8 = SmoothQuant at alpha
# 0.5), included by default only when `ferry quantize --help` lists --method / --smooth-alpha. --write-doc replaces what lies between
# <!-- quality-table:begin --> and <!-- quality-table:end --> in docs/quantization.md (or
# --doc PATH), and refuses when the markers are missing.
# A full run takes tens of minutes on 2 cores; try `--types "q8_0 int8"` first.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FERRY=${FERRY_BIN:-$ROOT/build/ferry}
MODEL=default
WORK=${TMPDIR:-/tmp}/ferry-quality-table
TYPES=""
THREADS=""
KEEP_FILES=0
WRITE_DOC=0
TEXT=$ROOT/data/eval/lighthouse.txt
DOC=$ROOT/docs/quantization.md

usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --types) TYPES=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --ferry) FERRY=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --keep-files) KEEP_FILES=1; shift ;;
    --write-doc) WRITE_DOC=1; shift ;;
    --doc) DOC=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "quality-table: unknown argument $1" >&2; usage ;;
  esac
done

PY=python3
[[ -x $ROOT/.venv/bin/python ]] && PY=$ROOT/.venv/bin/python
[[ -x $FERRY ]] || { echo "quality-table: $FERRY is not built (make build, or --ferry BIN)" >&2; exit 1; }
if [[ -z $TYPES ]]; then
  TYPES="q8_0 q6_k q4_k q4_1 q4_0 int8 fp8 int4_g32 int4_g128"
  if "$FERRY" quantize --help 2>/dev/null | grep -q -- '--method'; then
    TYPES="$TYPES gptq:int4_g128 awq:int4_g128"
  fi
  if "$FERRY" quantize --help 2>/dev/null | grep -q -- '--smooth-alpha'; then
    TYPES="$TYPES w8a8 smooth:w8a8"
  fi
fi
TARGS=()
[[ -n $THREADS ]] && TARGS=(-t "$THREADS")

START=$SECONDS
log() { printf '[%4ds] %s\n' $((SECONDS - START)) "$*" >&2; }

mkdir -p "$WORK"
if [[ $MODEL == default ]]; then
  MODEL=${FERRY_HOME:-$HOME/.cache/ferry}/models/SmolLM2-135M-Instruct.Q4_1.gguf
fi
[[ -f $MODEL ]] || { echo "quality-table: no model at $MODEL (scripts/get-model.sh)" >&2; exit 1; }
REF=$WORK/f32.gguf
if [[ ! -f $REF || $REF -ot $MODEL ]]; then
  log "writing the f32 reference $REF"
  "$FERRY" quantize "$MODEL" "$REF" --type f32 -q "${TARGS[@]}" >&2
fi

# One JSON line per row: what the table needs, pulled from ferry's JSON.
ROWS=$WORK/rows.jsonl
: > "$ROWS"

measure() {  # name method file [eval.json]
  local name=$1 method=$2 file=$3 eval_json=${4:-}
  log "$name: bench decode"
  "$FERRY" bench decode -m "$file" -p 128 -n 32 -r 2 --json "${TARGS[@]}" > "$WORK/bench.json"
  "$FERRY" info -m "$file" --json > "$WORK/info.json"
  "$PY" - "$name" "$method" "$file" "$WORK/info.json" "$WORK/bench.json" "$eval_json" >> "$ROWS" <<'EOF'
import json, os, sys
name, method, path, info, bench, ev = sys.argv[1:7]
info, bench = json.load(open(info)), json.load(open(bench))
row = {"type": name, "method": method, "mib": os.path.getsize(path) / 2**20,
       "bpw": 8 * sum(t["bytes"] for t in info["tensor_types"].values()) / info["parameters"],
       "decode": bench["decode_tokens_per_s"], "prefill": bench["prefill_tokens_per_s"]}
if ev:
    e = json.load(open(ev))
    t = e["tasks"]
    row.update(ppl=e["perplexity"], dppl=e["delta_ppl_percent"], kl=e["kl_mean"],
               top1=e["top1_agreement"], acc=t["accuracy"], agree=t["ref_agreement"],
               ref_ppl=e["ref_perplexity"], ref_acc=t["ref_accuracy"])
print(json.dumps(row))
EOF
}

measure f32 "—" "$REF"
for spec in $TYPES; do
  method=rtn; t=$spec
  if [[ $spec == *:* ]]; then method=${spec%%:*}; t=${spec#*:}; fi
  qargs=(--type "$t")
  case $t in
    int4_g*) qargs=(--type int4 --group-size "${t#int4_g}") ;;
  esac
  case $method in
    rtn) ;;
    smooth) qargs+=(--smooth-alpha 0.5) ;;  # SmoothQuant at the paper's alpha (w8a8)
    *) qargs+=(--method "$method") ;;
  esac
  out=$WORK/$method-$t.gguf
  log "$spec: quantize"
  if ! "$FERRY" quantize "$REF" "$out" "${qargs[@]}" -q "${TARGS[@]}" >&2; then
    log "$spec: ferry quantize failed, row skipped"
    continue
  fi
  log "$spec: eval (text and tasks, against f32)"
  "$FERRY" eval -m "$out" --ref "$REF" --text "$TEXT" --tasks default --json "${TARGS[@]}" \
    > "$WORK/eval-$method-$t.json"
  measure "$t" "$method" "$out" "$WORK/eval-$method-$t.json"
  [[ $KEEP_FILES == 1 ]] || rm -f "$out"
done
log "done"

TABLE=$("$PY" - "$ROWS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ref = rows[0]
# The reference's own scores come from the runs against it (eval reports ref_* keys).
scored = [r for r in rows[1:] if "ppl" in r]
if scored:
    ref["ppl"], ref["acc"] = scored[0]["ref_ppl"], scored[0]["ref_acc"]
def f(v, fmt, scale=1.0):
    return "" if v is None else format(v * scale, fmt)
print("| type | method | file MiB | bits / weight | PPL | ΔPPL % | KL mean | top-1 % "
      "| task accuracy % | task agreement % | decode tok/s | prefill tok/s |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    name = "`f32` (reference)" if r is ref else f"`{r['type']}`"
    print(f"| {name} | {r['method']} | {r['mib']:.1f} | {r['bpw']:.2f} | {f(r.get('ppl'), '.3f')} "
          f"| {f(r.get('dppl'), '+.2f')} | {f(r.get('kl'), '.4f')} | {f(r.get('top1'), '.1f', 100)} "
          f"| {f(r.get('acc'), '.1f', 100)} | {f(r.get('agree'), '.1f', 100)} "
          f"| {r['decode']:.1f} | {r['prefill']:.0f} |")
EOF
)
printf '%s\n' "$TABLE"

if [[ $WRITE_DOC == 1 ]]; then
  "$PY" - "$DOC" "$TABLE" <<'EOF'
import sys
path, table = sys.argv[1], sys.argv[2]
begin, end = "<!-- quality-table:begin -->", "<!-- quality-table:end -->"
doc = open(path, encoding="utf-8").read()
i, j = doc.find(begin), doc.find(end)
if i < 0 or j < i:
    sys.exit(f"quality-table: {path} has no {begin} ... {end} markers; table not written")
doc = doc[: i + len(begin)] + "\n" + table + "\n" + doc[j:]
open(path, "w", encoding="utf-8").write(doc)
print(f"quality-table: wrote the table into {path}", file=sys.stderr)
EOF
fi
