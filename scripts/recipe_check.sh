#!/usr/bin/env bash
# The recipe's time to a useful drafter on the bundled target: for each N in CUTS and each set of train
# options in SETS, `dflash train --prompts PROMPTS --prompt-cuts N SET` (the target's responses to the
# prompts cut N ways regenerated, then a drafter trained on them), then `dflash eval` of its drafter on the
# held-out prompts of DEV. Prints a row per (N, set): the responses, the seconds to regenerate, to train
# (its steps) and to evaluate, their sum, the dev tau and the speed against greedy decoding. The data for
# choosing the defaults of --prompt-cuts, --epochs and --lr: the least time that gives the tau wanted.
# The responses of a cuts value are regenerated once, by its first set; the later sets train on a copy of
# them (train finds the regeneration complete), and their rows repeat the first set's regeneration time.
# Knobs: CUTS (default "20 40 80"); SETS, sets of train options separated by ";" (default: one empty set,
# every option at its default; e.g. "; --epochs 3 --lr 1.2e-3"); DEVICE (cuda); PROMPTS
# (assets/data/code-train.jsonl); DEV (assets/data/code-dev.jsonl); EVAL_TOKENS (128, as make demo).
# Usage (from the tree's root, ./dflash built): bash scripts/recipe_check.sh OUTDIR
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: bash scripts/recipe_check.sh OUTDIR" >&2; exit 2; }
cd "$(dirname "$0")/.."
OUT=$1
CUTS=${CUTS:-20 40 80}
SETS=${SETS:-}
DEVICE=${DEVICE:-cuda}
PROMPTS=${PROMPTS:-assets/data/code-train.jsonl}
DEV=${DEV:-assets/data/code-dev.jsonl}
EVAL_TOKENS=${EVAL_TOKENS:-128}
mkdir -p "$OUT"
failed=0
IFS=';' read -r -a sets <<< "$SETS"
[ ${#sets[@]} -gt 0 ] || sets=("")

# the seconds of generate's last progress line ("... 27s  5070547 tokens ..." or "... 1m02s ...")
regen_seconds() {
    grep -E "^generate: [0-9]+/[0-9]+ \(100.0%\)" "$1" | tail -n 1 |
        sed -E 's/.* records\/s, ([0-9hms]+) +[0-9]+ tokens.*/\1/' |
        awk '{ s = 0; n = $0; if (n ~ /h/) { split(n, a, "h"); s += a[1] * 3600; n = a[2] }
               if (n ~ /m/) { split(n, a, "m"); s += a[1] * 60; n = a[2] } sub(/s/, "", n); print s + n }'
}

printf "%-6s %10s %8s %8s %8s %7s %8s %7s %8s  %s\n" cuts responses regen_s train_s steps eval_s total_s tau \
    speedup options | tee "$OUT/recipe.txt"
for n in $CUTS; do
    regen=
    for k in "${!sets[@]}"; do
        opts=${sets[$k]}
        run=$OUT/cuts$n-set$k log=$OUT/train-cuts$n-set$k.txt
        rm -rf "$run"
        if [ "$k" -gt 0 ]; then
            mkdir -p "$run" && cp "$OUT/cuts$n-set0/prompts.cut.jsonl" "$OUT/cuts$n-set0"/regenerated.jsonl* "$run/" ||
                { echo "no regenerated responses at --prompt-cuts $n to train set $k on"; failed=1; continue; }
        fi
        t0=$SECONDS
        # shellcheck disable=SC2086
        ./dflash train --device "$DEVICE" --target assets/coder-tiny --prompts "$PROMPTS" \
            --prompt-cuts "$n" --output "$run" $opts > "$log" 2>&1 ||
            { echo "train at --prompt-cuts $n $opts failed: $log"; failed=1; continue; }
        t1=$SECONDS
        ./dflash eval --device "$DEVICE" --target assets/coder-tiny --draft "$run/final" --input "$DEV" \
            --max-new-tokens "$EVAL_TOKENS" --json "$run/eval.json" > "$OUT/eval-cuts$n-set$k.txt" 2>&1 ||
            { echo "eval at --prompt-cuts $n $opts failed: $OUT/eval-cuts$n-set$k.txt"; failed=1; continue; }
        t2=$SECONDS
        # the regeneration is inside the first set's train time; a later set's train time is its own
        if [ "$k" -eq 0 ]; then regen=$(regen_seconds "$log"); own_regen=$regen; else own_regen=0; fi
        python3 - "$n" "$run" "${regen:-nan}" "$own_regen" "$((t1 - t0))" "$((t2 - t1))" "$opts" <<'PY' | tee -a "$OUT/recipe.txt"
import json, sys
n, run, regen, own_regen, train_s, eval_s, opts = sys.argv[1:8]
regen, train_s, eval_s = float(regen), int(train_s) - float(own_regen), int(eval_s)
responses = sum(1 for _ in open(f"{run}/regenerated.jsonl"))
steps = sum(1 for _ in open(f"{run}/metrics.jsonl"))
e = json.load(open(f"{run}/eval.json"))
speed = e.get("speedup", float("nan"))
total = regen + train_s + eval_s
print(f"{n:<6} {responses:>10} {regen:>8.0f} {train_s:>8.0f} {steps:>8} {eval_s:>7} {total:>8.0f} {e['tau']:>7.2f} "
      f"{speed:>8.2f}  {opts.strip() or '(defaults)'}")
PY
    done
done
exit $failed
