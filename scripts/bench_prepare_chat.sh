#!/usr/bin/env bash
# Records/s of `dflash prepare` on 10,000 chat conversations (system, two
# user and two assistant turns made from assets/data/code-train.jsonl) with
# the real Qwen3 tokenizer and chat template, for each dflash binary given
# (e.g. a build before and after a change), alternating, best of 2.
# Usage: scripts/bench_prepare_chat.sh DFLASH... (default ./dflash)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fetch_test_tokenizers.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/chat10k.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open("assets/data/code-train.jsonl")]
with open(sys.argv[1], "w") as f:
    for i in range(10000):
        a, b = recs[i % len(recs)], recs[(i * 7 + 3) % len(recs)]
        msgs = [{"role": "system", "content": "You are a coding assistant."},
                {"role": "user", "content": a["prompt"][:600]}, {"role": "assistant", "content": a["response"][:600]},
                {"role": "user", "content": b["prompt"][:400]}, {"role": "assistant", "content": b["response"][:400]}]
        f.write(json.dumps({"messages": msgs}) + "\n")
PY
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(./dflash)
for run in 1 2; do
    for bin in "${bins[@]}"; do
        start=$(date +%s.%N)
        "$bin" prepare --tokenizer tests/.cache/tokenizers/qwen3 --input "$work/chat10k.jsonl" \
            --output "$work/out.store" --threads 2 --quiet > "$work/log" 2>&1
        end=$(date +%s.%N)
        echo "$bin run $run: $(python3 -c "print(f'{10000 / ($end - $start):.0f} records/s ({$end - $start:.2f} s)')"); $(tail -1 "$work/log")"
    done
done
