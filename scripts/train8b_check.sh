#!/usr/bin/env bash
# Data parallel at the Qwen3-8B shape on a GPU machine: `dflash train` of a
# 5-layer drafter against a Qwen3-8B-shaped target with random weights
# (--random-target-weights: its config.json written here, coder-tiny's
# tokenizer), on samples of about 2,000 tokens (code records of
# assets/data joined end to end), 512 anchors per sample, block 16:
#   1. one GPU, global token budget 4608 (two samples a step);
#   2. two processes, one GPU each, colocated data parallel through NCCL,
#      token budget 9216: the same work per GPU, for the scaling figure;
#   3. each extra layout given in LAYOUTS (e.g. "split"), as its flags say.
# ONE_GPU_RATE=S (sequences/s of an earlier one-GPU run, e.g. 5.645) skips
# runs 1 and 2 and measures only the LAYOUTS against it.
# Prints each run's progress lines and stage table; writes the runs'
# metrics.jsonl and stages.json under OUTDIR, and the steady-state
# sequences/s (median over steps after the first 5) and scaling.
# Usage (from the tree's root, ./dflash built): bash scripts/train8b_check.sh [OUTDIR] [STEPS]
set -uo pipefail
OUT=${1:-/tmp/train8b}
STEPS=${2:-30}
W=/tmp/train8b_work
rm -rf "$W"
mkdir -p "$OUT" "$W/target"
source "$(dirname "$0")/nccl_env.sh"

python3 "$(dirname "$0")/shape_config.py" qwen3-8b "$W/target" || exit 2
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
# samples of ~7,000 characters (~2,000 tokens of code), all of it response (trained on)
out, buf, n = open(f"{w}/long.jsonl", "w"), "", 0
for line in open("assets/data/code-train.jsonl"):
    r = json.loads(line)
    buf += r["prompt"] + r["response"]
    while len(buf) >= 7000:
        out.write(json.dumps({"id": f"long-{n}", "prompt": "#", "response": buf[:7000]}) + "\n")
        buf, n = buf[7000:], n + 1
print(f"{n} samples of 7000 characters", file=sys.stderr)
PY
cp assets/coder-tiny/tokenizer.json assets/coder-tiny/tokenizer_config.json "$W/target/"
./dflash prepare --tokenizer "$W/target" --input "$W/long.jsonl" --output "$W/long.store" 2>&1 | tail -2

opts="--target $W/target --random-target-weights --data $W/long.store --draft-layers 5 --num-anchors 512
      --block-size 16 --steps $STEPS --lr 1e-4 --log-every 5"

# steady-state sequences/s of a run: median of the per-step figures after step 5
rate() {
    python3 - "$W/$1/metrics.jsonl" <<'PY'
import json, statistics, sys
m = [json.loads(l) for l in open(sys.argv[1])]
steady = [x for x in m if x["step"] > 5]
print(f"{statistics.median(x['seqs_per_s'] for x in steady):.3f} "
      f"{statistics.median(x['tokens_per_s'] for x in steady):.0f} "
      f"{statistics.median(x['busy'] for x in steady):.3f} "
      f"{statistics.median(x['mfu'] for x in steady):.3f}")
PY
}
report() { # name gpus
    read -r seqs toks busy mfu <<< "$(rate "$1")"
    echo "$1: $2 GPU(s): $seqs sequences/s, $toks tokens/s, busy $busy, MFU $mfu (median, steps 6..$STEPS)"
    cp "$W/$1/metrics.jsonl" "$OUT/train8b-$1-metrics.jsonl"
    cp "$W/$1/stages.json" "$OUT/train8b-$1-stages.json" 2>/dev/null
    rm -rf "$W/$1/checkpoints" "$W/$1/final" # 18 GB each at this size: the disk would fill
}

if [ -n "${ONE_GPU_RATE:-}" ]; then
    one=$ONE_GPU_RATE
    echo "== 1. one GPU: $one sequences/s, from an earlier run (ONE_GPU_RATE)"
else
    echo "== 1. one GPU"
    timeout 300 ./dflash train --device cuda:0 --output "$W/g1" $opts --token-budget 4608 2>&1 | grep -v '^train: preparing' | tail -24
    report g1 1
    one=$(rate g1 | cut -d' ' -f1)
fi

launch2() { # name, extra options
    local name=$1
    shift
    local port=$((29500 + RANDOM % 1000))
    for r in 0 1; do
        RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            timeout 300 ./dflash train --device cuda --output "$W/$name" $opts --token-budget 9216 "$@" \
            > "$W/$name.rank$r.log" 2>&1 &
    done
    wait
    tail -24 "$W/$name.rank0.log"
    tail -3 "$W/$name.rank1.log"
    report "$name" 2
    two=$(rate "$name" | cut -d' ' -f1)
    python3 -c "print(f'$name scaling: {$two / (2 * $one):.3f} of twice one GPU ($two vs 2 x $one sequences/s)')"
}

if [ "$ngpu" -ge 2 ]; then
    if [ -z "${ONE_GPU_RATE:-}" ]; then
        echo "== 2. two GPUs, colocated data parallel"
        launch2 dp2
    fi
    for layout in ${LAYOUTS:-}; do
        echo "== 3. two GPUs, layout $layout"
        launch2 "$layout" --layout "$layout"
    done
fi
