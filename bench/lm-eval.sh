#!/usr/bin/env bash
# lm-evaluation-harness's local-completions client against `ferry serve`, checked against
# transformers on the same GGUF weights (bench/lm_eval_check.py). Makes its own venv the first
# time (torch and lm-eval from PyPI: a few GB, several minutes); not part of `make test`.
#   bench/lm-eval.sh [--model GGUF] [--ferry build/ferry] [--tol NATS] [--json]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${FERRY_HOME:-$HOME/.cache/ferry}/lm-eval-venv"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    # lm-eval 0.4.9 imports names transformers 5 and datasets 4 removed.
    "$venv/bin/pip" install -q "lm-eval==0.4.9" "transformers<5" "datasets<4" tenacity aiohttp \
        tiktoken requests protobuf sentencepiece gguf
fi
exec "$venv/bin/python" "$here/lm_eval_check.py" "$@"
