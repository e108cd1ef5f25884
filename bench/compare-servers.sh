#!/usr/bin/env bash
# The same load against `ferry serve` and llama.cpp's servers on the same model, threads and
# concurrency, one server at a time, alternating (A B C, then C B A, ...), driven by
# `ferry bench serve`; prints one table and writes the JSON (and, with --plot, the figures).
#
#   llama.cpp (python): `python -m llama_cpp.server` from the pinned llama-cpp-python
#                       (bench/llamacpp-venv.sh; built from source on first use, 10+ minutes)
#   llama.cpp (native): `llama-server`, when one is on PATH or given with --llama-server
#
# usage: bench/compare-servers.sh [-m MODEL]... [-t THREADS] [--slots N] [--rates "1 2 4 inf"]
#          [--num-prompts N] [--endpoint chat] [--dataset FILE] [--shared-prefix-len N] [--rounds N]
#          [--servers "ferry llama-server llama-cpp-python"] [--slo-ttft-ms MS] [--slo-tpot-ms MS]
#          [--out results.json] [--plot FILE] [--ferry BIN] [--llama-server BIN]
# Every option after the script's own is passed to bench/compare_servers.py (--help there).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# CACHE, VENV, the llama-cpp-python pin and install_llama.
# shellcheck source=bench/llamacpp-venv.sh
source "$HERE/llamacpp-venv.sh"

if [[ " $* " == *" -h "* || " $* " == *" --help "* ]]; then
    sed -n 2,15p "$0"
    exit 0
fi
NEED_PY=1
[[ " $* " == *" --servers "* && " $* " != *"llama-cpp-python"* ]] && NEED_PY=0
if [[ $NEED_PY == 1 ]]; then
    install_llama
    # The server's own dependencies (FastAPI, uvicorn, ...), beside the pinned build.
    "$VENV/bin/python" -c "import llama_cpp.server.app" 2>/dev/null ||
        "$VENV/bin/pip" install --disable-pip-version-check -q \
            "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION"
fi
PY="$VENV/bin/python"
[[ -x "$PY" ]] || PY="$ROOT/.venv/bin/python"
exec "$PY" "$HERE/compare_servers.py" --root "$ROOT" --cache "$CACHE" --llama-python "$VENV/bin/python" "$@"
