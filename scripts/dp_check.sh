#!/usr/bin/env bash
# On a GPU machine: the pipeline and data parallel on coder-tiny.
#   1. one GPU, --queue-depth 1 vs 3: the same losses (the inputs do not
#      depend on the depth; equal to the bit when the kernels are deterministic);
#      the per-stage table and busy fraction of each.
#   2. two GPUs (skipped with one): two processes joined like torchrun
#      (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), --device cuda
#      = cuda:$LOCAL_RANK, gradients through NCCL: the losses against the
#      one-GPU run on the same global batch (bf16: within ~1e-2 relative), the
#      wall time against it;
#   3. two GPUs: rank 1 killed mid-run: rank 0 must exit non-zero within 10 s
#      naming rank 1;
#   4. the two-GPU run's checkpoint (step 30) resumed on one GPU to step 60:
#      losses against the one-GPU run.
#   6. two GPUs, --overlap-grad-reduce on vs off with small buckets
#      (--grad-bucket-mib 0.25: about 25 buckets, most queued during the
#      backward when on): the losses must be identical (the same buckets summed
#      by NCCL with the same algorithm in both: only when they start differs),
#      and the sequences/s of each (steps 11..60).
#   5. split layout (--layout split): two processes, CUDA_VISIBLE_DEVICES 0
#      and 1 (each sees one GPU, --device cuda:0): rank 0 runs the target
#      forward only and sends the features to rank 1 (ncclSend/ncclRecv),
#      rank 1 trains the drafter; losses against the one-GPU run
#      (dev/compare/compare_losses.py) and sequences/s of both; then the split run
#      stopped at step 30 and resumed in the split layout: losses again.
# Usage (from the tree's root, ./dflash built): bash scripts/dp_check.sh [OUTDIR] [all|split]
#   split: only 1 (depth 3, the reference) and 5.
# NCCL: found as dist/nccl.h says (DFLASH_NCCL_LIB, or PyTorch's nvidia-nccl wheel).
set -uo pipefail
OUT=${1:-/tmp/dp_check}
PART=${2:-all}
W=/tmp/dp_work
rm -rf "$W"
mkdir -p "$OUT" "$W"
source "$(dirname "$0")/nccl_env.sh"
opts="--target assets/coder-tiny --data $W/data.store --draft-layers 2 --intermediate-size 512 --num-taps 3
      --num-anchors 32 --token-budget 2048 --steps 60 --lr 1.5e-3 --save-every 30 --log-every 10"
./dflash prepare --tokenizer assets/coder-tiny --input assets/data/code-train.jsonl --output "$W/data.store" > /dev/null

# compare A B: per-step loss, max relative difference
compare() {
    python3 - "$W/$1/metrics.jsonl" "$W/$2/metrics.jsonl" "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
n = min(len(a), len(b))
rel = [abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a[:n], b[:n])]
same = sum(x["loss"] == y["loss"] for x, y in zip(a[:n], b[:n]))
print(f"{sys.argv[3]} vs {sys.argv[4]}: {n} steps, max rel loss diff {max(rel):.3g}, identical losses {same}/{n}; "
      f"last loss {a[n-1]['loss']:.4f} vs {b[n-1]['loss']:.4f}; wall {a[n-1]['elapsed_s']:.1f} s vs {b[n-1]['elapsed_s']:.1f} s")
PY
}

# throughput A: sequences/s over steps 11..N (after warm-up), from metrics.jsonl
throughput() {
    python3 - "$W/$1/metrics.jsonl" "$1" <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
warm = [x for x in m if x["step"] <= 10]
rest = [x for x in m if x["step"] > 10]
if not warm or not rest:
    print(f"{sys.argv[2]}: too few steps"); sys.exit()
dt = rest[-1]["elapsed_s"] - warm[-1]["elapsed_s"]
n = sum(x["samples"] for x in rest)
print(f"{sys.argv[2]}: {n / dt:.1f} sequences/s over steps {rest[0]['step']}..{rest[-1]['step']} "
      f"({dt:.2f} s, median step {sorted(x['step_s'] for x in rest)[len(rest) // 2] * 1e3:.1f} ms)")
PY
}

# dp2 NAME ARGS...: two processes, one GPU each, NCCL, into $W/NAME
dp2() {
    local name=$1 port=$((29500 + RANDOM % 1000))
    shift
    for r in 0 1; do
        RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            timeout 240 ./dflash train --device cuda --output "$W/$name" $opts "$@" > "$W/$name.rank$r.log" 2>&1 &
    done
    wait
    tail -18 "$W/$name.rank0.log"
    tail -2 "$W/$name.rank1.log"
}

# split NAME EXTRA...: the split layout on GPUs 0 (target) and 1 (drafter)
split() {
    local name=$1
    shift
    local port=$((29500 + RANDOM % 1000))
    for r in 0 1; do
        CUDA_VISIBLE_DEVICES=$r RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            timeout 240 ./dflash train --device cuda:0 --output "$W/$name" $opts --layout split "$@" \
            > "$W/$name.rank$r.log" 2>&1 &
    done
    wait
    tail -3 "$W/$name.rank0.log"
    tail -18 "$W/$name.rank1.log"
}

{
    if [ "$PART" = split ]; then
        echo "== 1. one GPU, queue depth 3 (the reference)"
        timeout 180 ./dflash train --device cuda:0 --output "$W/q3" $opts --queue-depth 3 2>&1 | tail -16
    else
        echo "== 1. one GPU, queue depth 1 vs 3"
        timeout 180 ./dflash train --device cuda:0 --output "$W/q1" $opts --queue-depth 1 2>&1 | tail -16
        timeout 180 ./dflash train --device cuda:0 --output "$W/q3" $opts --queue-depth 3 2>&1 | tail -16
        compare q1 q3
    fi
    if [ "$ngpu" -ge 2 ] && [ "$PART" != split ]; then
        echo "== 2. two processes, one GPU each, NCCL"
        port=$((29500 + RANDOM % 1000))
        for r in 0 1; do
            RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
                timeout 240 ./dflash train --device cuda --output "$W/dp2" $opts > "$W/dp2.rank$r.log" 2>&1 &
        done
        wait
        tail -18 "$W/dp2.rank0.log"
        tail -2 "$W/dp2.rank1.log"
        compare dp2 q1
        echo "== 3. rank 1 killed mid-run"
        port=$((29500 + RANDOM % 1000))
        # no `timeout` wrapper here: the kill must reach dflash itself; a watchdog bounds rank 0 instead
        for r in 0 1; do
            RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
                ./dflash train --device cuda --output "$W/lost" $opts --steps 100000 > "$W/lost.rank$r.log" 2>&1 &
            eval "pid$r=$!"
        done
        for _ in $(seq 600); do
            [ -f "$W/lost/metrics.jsonl" ] && [ "$(wc -l < "$W/lost/metrics.jsonl")" -ge 20 ] && break
            sleep 0.1
        done
        kill -KILL "$pid1"
        t0=$(date +%s.%N)
        (sleep 60; kill -KILL "$pid0" 2>/dev/null) &
        watchdog=$!
        wait "$pid0"
        rc=$?
        kill "$watchdog" 2>/dev/null
        echo "rank 0 exit $rc after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s (want non-zero, under 10 s): $(grep 'rank 0:' "$W/lost.rank0.log" | tail -1)"
        echo "== 4. the two-GPU checkpoint of step 30 resumed on one GPU"
        mkdir -p "$W/resume1/checkpoints"
        cp "$W/dp2/checkpoints/step-00000030.safetensors" "$W/resume1/checkpoints/"
        head -30 "$W/dp2/metrics.jsonl" > "$W/resume1/metrics.jsonl"
        timeout 180 ./dflash train --device cuda:0 --output "$W/resume1" $opts --resume 2>&1 | tail -3
        compare resume1 q1
        echo "== 6. two GPUs, --overlap-grad-reduce on vs off, 0.25 MiB buckets (losses: identical expected)"
        dp2 ovl_on --grad-bucket-mib 0.25 --overlap-grad-reduce on
        dp2 ovl_off --grad-bucket-mib 0.25 --overlap-grad-reduce off
        grep -h 'overlapped\|rank 0:' "$W/ovl_on.rank0.log" | head -3
        tail -2 "$W/ovl_off.rank0.log"
        compare ovl_on ovl_off
        throughput ovl_on
        throughput ovl_off
        throughput dp2
    fi
    if [ "$ngpu" -ge 2 ]; then
        echo "== 5. split layout: rank 0 target on GPU 0, rank 1 drafter on GPU 1 (features over NCCL)"
        split split2
        python3 dev/compare/compare_losses.py "$W/split2/metrics.jsonl" "$W/q3/metrics.jsonl"
        throughput q3
        throughput split2
        [ -f "$W/dp2/metrics.jsonl" ] && throughput dp2
        echo "== 5b. split layout stopped at step 30, resumed in the split layout"
        split split_resume --stop-at 30
        split split_resume --resume
        python3 dev/compare/compare_losses.py "$W/split_resume/metrics.jsonl" "$W/q3/metrics.jsonl"
    else
        echo "== 2-5 skipped: $ngpu GPU(s)"
    fi
} 2>&1 | tee "$OUT/dp_check.log"
for d in q1 q3 dp2 split2; do [ -f "$W/$d/stages.json" ] && cp "$W/$d/stages.json" "$OUT/stages_$d.json"; done
