#!/usr/bin/env bash
# The README's entry point on a fresh Debian 12 machine (as root): makes sure `make` is there,
# then runs the Makefile target named as the argument (demo or test), which installs the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-demo}"
if ! command -v make >/dev/null 2>&1; then
    echo "bootstrap: installing make" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make
fi
exec make --no-print-directory "$target"
