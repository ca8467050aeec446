#!/usr/bin/env bash
# The seed's own configuration on the GPU machine: `dflash train`
# of a 5-layer drafter (its attention shape the published one for this
# family: 32 heads of 128, 8 KV heads; about 1.7 B parameters) against a
# Qwen3.6-27B-shaped hybrid target with random weights
# (--random-target-weights: its config.json written here, coder-tiny's
# tokenizer), on real records (assets/data/code-train.jsonl, about 500 tokens
# each), --token-budget 16384, every other option at its default (512
# anchors, block 16, micro-batches sized by the memory plan).
# (--draft-layers 5 is the default.) Prints the memory plan, the progress and stage table, then the steady-state
# tokens/s, sequences/s and MFU (median over the steps after the first 5) and
# the peak memory against the plan; keeps metrics.jsonl and stages.json
# under OUTDIR.
# Several GPUs (GPUS=N, one process each, started as torchrun would):
#   LAYOUT=colocated (default): data parallel, the token budget per GPU kept
#     (global budget N x 16384);
#   LAYOUT=split TARGET_RANKS=T: ranks 0..T-1 run the target, the others the
#     drafter (the seed's 2 pairs on 4 GPUs: GPUS=4 TARGET_RANKS=2).
# SHAPE=qwen3-8b instead: a Qwen3-8B-shaped dense target and every option
# at its default (--token-budget 8192), the same records: the defaults a new
# user runs.
# Other knobs: STEPS (30), BUDGET (16384; 8192 for qwen3-8b), EXTRA (more train options, e.g.
# "--max-drafter-tokens 32768", or "--kernel-variant gemm_search=1" for an A/B of a kernel variant), PEAK_TFLOPS (MFU's reference; default the
# trainer's for the GPU).
# Usage (from the tree's root, ./dflash built): bash scripts/seed_check.sh [OUTDIR]
set -uo pipefail
OUT=${1:-/tmp/seed_check}
STEPS=${STEPS:-30}
SHAPE=${SHAPE:-qwen3.6-27b}
[ "$SHAPE" = qwen3-8b ] && BUDGET=${BUDGET:-8192}
BUDGET=${BUDGET:-16384}
GPUS=${GPUS:-1}
LAYOUT=${LAYOUT:-colocated}
TARGET_RANKS=${TARGET_RANKS:-1}
W=/tmp/seed_check_work
rm -rf "$W"
mkdir -p "$OUT" "$W/target"
source "$(dirname "$0")/nccl_env.sh"

python3 "$(dirname "$0")/shape_config.py" "$SHAPE" "$W/target" || exit 2
cp assets/coder-tiny/tokenizer.json assets/coder-tiny/tokenizer_config.json "$W/target/"
# prepared once here, so that the ranks of a multi-GPU run share one store
./dflash prepare --tokenizer "$W/target" --input assets/data/code-train.jsonl --output "$W/code.store" 2>&1 | tail -1

opts="--target $W/target --random-target-weights --data $W/code.store
      --token-budget $BUDGET --steps $STEPS --log-every 5 ${PEAK_TFLOPS:+--peak-tflops $PEAK_TFLOPS}
      ${EXTRA:-}"

summary() { # run dir, GPUs
    python3 - "$W/$1/metrics.jsonl" "$2" <<'PY'
import json, statistics, sys
m = [json.loads(l) for l in open(sys.argv[1])]
steady = [x for x in m if x["step"] > 5] or m
med = lambda k: statistics.median(x[k] for x in steady if x.get(k) is not None)
gpus = int(sys.argv[2])
print(f"steady state (median of steps {steady[0]['step']}..{steady[-1]['step']}, {gpus} GPU(s)): "
      f"{med('tokens_per_s'):.0f} tokens/s, {med('seqs_per_s'):.3f} sequences/s, "
      f"{med('tflops'):.1f} TFLOP/s a GPU, MFU {med('mfu'):.3f}, busy {med('busy'):.3f}, step {med('step_s'):.2f} s")
PY
}

keep() { # run dir
    cp "$W/$1/metrics.jsonl" "$OUT/$1-metrics.jsonl"
    cp "$W/$1/stages.json" "$OUT/$1-stages.json" 2>/dev/null
    rm -rf "$W/$1/checkpoints" "$W/$1/final" # tens of GB at this size: the disk would fill
}

nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv
if [ "$GPUS" -le 1 ]; then
    name=$SHAPE-g1
    echo "== $SHAPE, one GPU ($(date +%T))"
    timeout 1500 ./dflash train --device cuda:0 --output "$W/$name" $opts 2>&1 | grep -v '^train: preparing'
    echo "exit ${PIPESTATUS[0]}"
else
    name="$SHAPE-$LAYOUT$GPUS"
    extra=""
    [ "$LAYOUT" = split ] && extra="--layout split --target-ranks $TARGET_RANKS"
    [ "$LAYOUT" = split ] || opts="${opts/--token-budget $BUDGET/--token-budget $((BUDGET * GPUS))}"
    echo "== $SHAPE on $GPUS GPUs, layout $LAYOUT ($(date +%T))"
    port=$((29500 + RANDOM % 1000))
    for ((r = 0; r < GPUS; r++)); do
        RANK=$r WORLD_SIZE=$GPUS LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            timeout 1500 ./dflash train --device cuda --output "$W/$name" $opts $extra > "$W/$name.rank$r.log" 2>&1 &
    done
    wait
    for ((r = 0; r < GPUS; r++)); do
        echo "-- rank $r"
        grep -v '^train: preparing' "$W/$name.rank$r.log" | tail -40
    done
fi
summary "$name" "$GPUS"
keep "$name"
