#!/usr/bin/env bash
# Regeneration's speed at a model's shape on one GPU, without its weights:
#   - `bench --decode --batch LIST` at the Qwen3-8B shape and at the Qwen3.6-27B hybrid shape: decode
#     tokens/s at each batch beside its limit (bandwidth or GEMM peak, measured in the same run);
#   - `generate --random-target-weights` end to end at the Qwen3-8B shape on 4,000 prompts of the
#     bundled data (assets/data/code-train.jsonl, its 1,000 prompts four times), 256 new tokens each,
#     the batch as the memory plan picks it (printed at the start), then at --batch 64 for comparison
#     (COMPARE_BATCH: another batch);
#   - the bundled target's regeneration as the recipe runs it: `train --prompts
#     assets/data/code-train.jsonl --prompt-cuts 20` on assets/coder-tiny (19,995 prompts, the batch by
#     the plan, one training step after it), generate's last progress line giving its time.
# The Qwen3-8B target is a directory with its config.json (written here) and a tokenizer: Qwen3's
# (tests/.cache/tokenizers/qwen3, what scripts/fetch_test_tokenizers.sh fetches; carry it to a machine
# without network) when present, else coder-tiny's (the prompts then have coder-tiny's lengths and most
# of the random target's ids have no text; tokens/s counts ids).
#
# Usage: bash scripts/generate_check.sh OUTDIR   (BATCHES_8B, BATCHES_27B, PROMPTS, NEW_TOKENS, COMPARE_BATCH, BUNDLED override;
# an empty BATCHES_8B, BATCHES_27B, COMPARE_BATCH or BUNDLED leaves that part out)
set -uo pipefail
failed=0
[ $# -eq 1 ] || { echo "usage: bash scripts/generate_check.sh OUTDIR" >&2; exit 2; }
cd "$(dirname "$0")/.."
OUT=$1
W=$OUT/work
BATCHES_8B=${BATCHES_8B-1,64,256,512}
BATCHES_27B=${BATCHES_27B-1,64,128,256}
PROMPTS=${PROMPTS:-4000}
NEW_TOKENS=${NEW_TOKENS:-256}
COMPARE_BATCH=${COMPARE_BATCH-64}
BUNDLED=${BUNDLED-yes}
mkdir -p "$W/qwen3-8b"

# each part runs even when one before it failed (a batch that does not fit this GPU, say); the exit
# status says whether any failed
if [ -n "$BATCHES_8B" ]; then
    ./dflash bench --device cuda --decode --batch "$BATCHES_8B" --json "$OUT/decode-qwen3-8b.json" \
        2>&1 | tee "$OUT/decode-qwen3-8b.txt" || failed=1
fi
if [ -n "$BATCHES_27B" ]; then
    ./dflash bench --device cuda --decode --hybrid --batch "$BATCHES_27B" --json "$OUT/decode-qwen36-27b.json" \
        2>&1 | tee "$OUT/decode-qwen36-27b.txt" || failed=1
fi

python3 scripts/shape_config.py qwen3-8b "$W/qwen3-8b" || exit 1
python3 - "$W" "$PROMPTS" <<'PY'
import json, sys
w, n = sys.argv[1], int(sys.argv[2])
prompts = [json.loads(l)["prompt"] for l in open("assets/data/code-train.jsonl")]
with open(f"{w}/prompts.jsonl", "w") as out:
    for i in range(n):
        out.write(json.dumps({"id": f"p{i}", "prompt": prompts[i % len(prompts)]}) + "\n")
PY
[ $? -eq 0 ] || exit 1
tok=tests/.cache/tokenizers/qwen3
[ -f "$tok/tokenizer.json" ] || { echo "no $tok: coder-tiny's tokenizer instead" >&2; tok=assets/coder-tiny; }
cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$W/qwen3-8b/" || exit 1

run_generate() { # NAME EXTRA...
    local name=$1; shift
    rm -f "$W/$name.jsonl" "$W/$name.jsonl.generate.json"
    local t0 t1
    t0=$(date +%s.%N)
    ./dflash generate --device cuda --target "$W/qwen3-8b" --random-target-weights \
        --input "$W/prompts.jsonl" --output "$W/$name.jsonl" --max-new-tokens "$NEW_TOKENS" "$@" \
        > "$OUT/generate-$name.txt" 2>&1 || { echo "generate $name failed: $OUT/generate-$name.txt"; failed=1; }
    t1=$(date +%s.%N)
    grep -E "^generate: batch" "$OUT/generate-$name.txt"
    tail -n 1 "$OUT/generate-$name.txt"
    python3 -c "import sys; print(f'wall {float(sys.argv[2]) - float(sys.argv[1]):.1f} s (weights built included)')" "$t0" "$t1"
    rm -f "$W/$name.jsonl"
}
echo "generate, Qwen3-8B shape, random weights, $PROMPTS prompts x $NEW_TOKENS new tokens, batch by the plan:"
run_generate planned
if [ -n "$COMPARE_BATCH" ]; then
    echo "the same at --batch $COMPARE_BATCH:"
    run_generate "batch$COMPARE_BATCH" --batch "$COMPARE_BATCH"
fi
if [ -n "$BUNDLED" ]; then
    echo "the bundled target's regeneration, as train --prompts runs it (--prompt-cuts 20, the batch by the plan):"
    rm -rf "$W/bundled"
    ./dflash train --device cuda --target assets/coder-tiny --prompts assets/data/code-train.jsonl --prompt-cuts 20 \
        --output "$W/bundled" --steps 1 > "$OUT/regenerate-bundled.txt" 2>&1 ||
        { echo "train --prompts failed: $OUT/regenerate-bundled.txt"; failed=1; }
    grep -E "prompts cut|^generate: batch" "$OUT/regenerate-bundled.txt"
    grep -E "^generate: [0-9]+/[0-9]+ \(100.0%\)" "$OUT/regenerate-bundled.txt" | tail -n 1
    rm -rf "$W/bundled"
fi
exit $failed
