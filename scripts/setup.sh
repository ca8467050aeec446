#!/usr/bin/env bash
# Installs the Debian packages dflash builds and tests with, when missing.
set -euo pipefail
# clang (14), libclang-rt-14-dev (libFuzzer, sanitizer runtimes), libomp-14-dev (OpenMP for clang): make fuzz
PKGS="gcc make pkg-config libcjson-dev libonig-dev libutf8proc-dev libopenblas-dev libcmocka-dev liblz4-dev libzstd-dev libcairo2-dev libxxhash-dev clang libclang-rt-14-dev libomp-14-dev python3-jinja2"
# node and npm run @huggingface/jinja, a reference renderer of the chat template tests: Debian's packages
# unless a node with its npm is there already (NodeSource's nodejs bundles npm and conflicts with Debian's)
command -v node >/dev/null && command -v npm >/dev/null || PKGS="$PKGS nodejs npm"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
