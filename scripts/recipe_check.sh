#!/usr/bin/env bash
# The recipe's time to a useful drafter on the bundled target, at several --prompt-cuts: for each N in
# CUTS, `dflash train --prompts assets/data/code-train.jsonl --prompt-cuts N` (the target's responses to
# the bundled prompts cut N ways regenerated, then a drafter trained on them, every other option at its
# default), then `dflash eval` of its drafter on the 64 held-out prompts of assets/data/code-dev.jsonl
# (128 new tokens, as make demo evaluates). Prints a row per N: the responses, the seconds to regenerate,
# to train (its steps) and to evaluate, the dev tau and the speed against greedy decoding. The data for
# choosing --prompt-cuts' default: the least time that gives the tau wanted.
# Knobs: CUTS (default "20 40 80"), DEVICE (cuda), PROMPTS (assets/data/code-train.jsonl), EXTRA (more
# train options, e.g. "--batch 256" or "--epochs 3").
# Usage (from the tree's root, ./dflash built): bash scripts/recipe_check.sh OUTDIR
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: bash scripts/recipe_check.sh OUTDIR" >&2; exit 2; }
cd "$(dirname "$0")/.."
OUT=$1
CUTS=${CUTS:-20 40 80}
DEVICE=${DEVICE:-cuda}
EXTRA=${EXTRA:-}
PROMPTS=${PROMPTS:-assets/data/code-train.jsonl}
mkdir -p "$OUT"
failed=0

# the seconds of generate's last progress line ("... 27s  5070547 tokens ..." or "... 1m02s ...")
regen_seconds() {
    grep -E "^generate: [0-9]+/[0-9]+ \(100.0%\)" "$1" | tail -n 1 |
        sed -E 's/.* records\/s, ([0-9hms]+) +[0-9]+ tokens.*/\1/' |
        awk '{ s = 0; n = $0; if (n ~ /h/) { split(n, a, "h"); s += a[1] * 3600; n = a[2] }
               if (n ~ /m/) { split(n, a, "m"); s += a[1] * 60; n = a[2] } sub(/s/, "", n); print s + n }'
}

printf "%-6s %10s %10s %10s %8s %9s %7s %8s\n" cuts responses regen_s train_s steps eval_s tau speedup | tee "$OUT/recipe.txt"
for n in $CUTS; do
    run=$OUT/cuts$n
    rm -rf "$run"
    t0=$SECONDS
    # shellcheck disable=SC2086
    ./dflash train --device "$DEVICE" --target assets/coder-tiny --prompts "$PROMPTS" \
        --prompt-cuts "$n" --output "$run" $EXTRA > "$OUT/train-cuts$n.txt" 2>&1 ||
        { echo "train at --prompt-cuts $n failed: $OUT/train-cuts$n.txt"; failed=1; continue; }
    t1=$SECONDS
    ./dflash eval --device "$DEVICE" --target assets/coder-tiny --draft "$run/final" \
        --input assets/data/code-dev.jsonl --max-new-tokens 128 --json "$run/eval.json" > "$OUT/eval-cuts$n.txt" 2>&1 ||
        { echo "eval at --prompt-cuts $n failed: $OUT/eval-cuts$n.txt"; failed=1; continue; }
    t2=$SECONDS
    regen=$(regen_seconds "$OUT/train-cuts$n.txt")
    python3 - "$n" "$run" "$regen" "$((t1 - t0))" "$((t2 - t1))" <<'PY' | tee -a "$OUT/recipe.txt"
import json, sys
n, run, regen, train_s, eval_s = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
responses = sum(1 for _ in open(f"{run}/regenerated.jsonl"))
steps = sum(1 for _ in open(f"{run}/metrics.jsonl"))
e = json.load(open(f"{run}/eval.json"))
speed = e.get("speedup", float("nan"))
print(f"{n:<6} {responses:>10} {regen:>10.0f} {train_s - regen:>10.0f} {steps:>8} {eval_s:>9} {e['tau']:>7.2f} {speed:>8.2f}")
PY
done
exit $failed
