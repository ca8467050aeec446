#!/usr/bin/env bash
# The GPU checks, from a normal checkout on any CUDA machine (Hopper, sm_90a; nvcc, compute-sanitizer and
# the Debian packages of scripts/setup.sh installed): builds, runs the CUDA tests, the op registry on CUDA
# (every op against the CPU), compute-sanitizer memcheck and racecheck, and the benchmarks of record
# (bench/RESULTS.md), writing every log into OUTDIR. docs/kernels.md ("Checking on a GPU") lists the parts
# and the file each writes.
#
# Usage: bash scripts/test_gpu.sh OUTDIR [--peer PATH]
#   --peer PATH   a PyTorch trainer of the same training step, run as `python3 PATH bench` beside
#                 `dflash bench --train-only` (part peer); its "PEER seq/s" line gives the ratio
#   PARTS=a,b,... the parts to run (default: all but seed, defaults8b and dp)
#   PEAK_TFLOPS   MFU's reference for seed and defaults8b (default: the GEMM peak part train measured)
# Each part has its own time limit, so a hang cannot take the others' time. Exit status: 1 when a part
# failed (its log says which), else 0.
set -uo pipefail
usage() { echo "usage: bash scripts/test_gpu.sh OUTDIR [--peer PATH]" >&2; exit 2; }
[ $# -ge 1 ] || usage
OUT=$1; shift
PEER=
while [ $# -gt 0 ]; do
    case $1 in
        --peer) [ $# -ge 2 ] || usage; PEER=$2; shift 2 ;;
        *) usage ;;
    esac
done
[ -z "$PEER" ] || [ -f "$PEER" ] || { echo "test_gpu.sh: --peer $PEER: no such file" >&2; exit 2; }
cd "$(dirname "$0")/.."
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
PARTS=${PARTS:-build,tests,ops,memcheck,racecheck,train,peer,train200,portable,decode,hybrid,kernels,verdict}
export NCCL_NVLS_ENABLE=0
T=build/tests D=build/dev/cuda
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
want() { [[ ",$PARTS," == *",$1,"* ]]; }
section() { echo "== $1 ($(date +%T))"; }
# run LIMIT CMD...: the command under a time limit, then its "exit N" line (dev/compare/step_aims.py reads
# them); a failure is noted in a file, as run may sit in a pipeline's subshell
run() {
    local limit=$1; shift
    timeout "$limit" "$@"
    local rc=$?
    echo "exit $rc"
    [ $rc -eq 0 ] || echo "$*" >> "$WORK/failed"
    return $rc
}
has_transformers() { python3 -c 'import torch, transformers' 2>/dev/null; }

# The sanitizers' cases of test_backend_ops (words of the case names): the training and optimizer ops,
# the causal attention among them as "attention (packed, GQA)", and the inference ops
TRAIN_OPS='memory,fill_zero,rmsnorm,rope_backward,swiglu_backward,linear_weight_grad,linear_residual,block_attention,(packed,lm_head_ce,adamw,sum_squares'
INFER_OPS=kv_cache_write,qkv_rope_cache,argmax

if want build; then
    {
        section build
        nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv
        tests=$(ls tests/test_cuda_*.c | sed 's|tests/\(.*\)\.c|build/tests/\1|')
        run 1800 make -j"$(nproc)" dflash dev $tests build/tests/test_drafter build/tests/test_backend_ops \
            build/tests/test_bench_train_step
        timeout 300 bash scripts/fetch_test_tokenizers.sh || echo "tokenizers not fetched: the parity tests that need them skip"
    } > "$OUT/build.log" 2>&1
    tail -3 "$OUT/build.log"
    [ -x ./dflash ] || { echo "test_gpu.sh: the build failed ($OUT/build.log)" >&2; exit 1; }
fi

if want tests; then
    for t in "$T"/test_cuda_* "$T"/test_drafter "$T"/test_bench_train_step; do
        section "$t"
        run 600 "$t" 2>&1 | grep -v '^\[ RUN\|^\[       OK' | tail -40
    done > "$OUT/tests.log" 2>&1
    echo "tests: $(grep -c '^exit 0' "$OUT/tests.log") of $(grep -c '^exit' "$OUT/tests.log") programs passed"
fi

if want ops; then
    { section "test_backend_ops on CUDA"; run 1200 "$T"/test_backend_ops 2>&1 | grep -v '^\[ RUN\|^\[       OK'; } \
        > "$OUT/ops.log" 2>&1
    tail -3 "$OUT/ops.log"
fi

if want memcheck; then
    {
        section "memcheck test_backend_ops ($TRAIN_OPS,$INFER_OPS)"
        DFLASH_OPS_QUICK=1 DFLASH_OPS_CASES=$TRAIN_OPS,$INFER_OPS run 900 compute-sanitizer --tool memcheck \
            --error-exitcode 1 --target-processes application-only "$T"/test_backend_ops 2>&1 | tail -4
    } > "$OUT/memcheck.log" 2>&1
    tail -2 "$OUT/memcheck.log"
fi

# racecheck: NVIDIA's closed GEMM kernels (nvjet_*) are known to be reported, so the hazards' accesses
# in our kernels are counted apart (dev/compare/step_aims.py reads the count)
if want racecheck; then
    for cases in $TRAIN_OPS $INFER_OPS; do
        section "racecheck test_backend_ops ($cases)"
        DFLASH_OPS_QUICK=1 DFLASH_OPS_CASES=$cases timeout 300 compute-sanitizer --tool racecheck \
            --racecheck-report hazard --target-processes application-only "$T"/test_backend_ops > "$WORK/race.txt" 2>&1
        echo "exit $?"
        grep 'PASSED\|FAILED\|SUMMARY' "$WORK/race.txt"
        ours=$(grep 'access at' "$WORK/race.txt" | grep -vc nvjet_)
        echo "hazard accesses: $(grep -c 'access at' "$WORK/race.txt"), outside cuBLASLt's nvjet kernels: $ours"
        grep 'access at' "$WORK/race.txt" | grep -v nvjet_ | head -6 | cut -c 1-300
        [ "$ours" -eq 0 ] || echo "racecheck $cases" >> "$WORK/failed"
    done > "$OUT/racecheck.log" 2>&1
    grep 'outside' "$OUT/racecheck.log" | sort | uniq -c
fi

if want train; then
    { section "bench --train-only"
      run 600 ./dflash bench --device cuda --train-only --json "$OUT/bench_train.json"; } > "$OUT/bench_train.txt" 2>&1
    grep -A30 'Qwen3-8B shape' "$OUT/bench_train.txt" | grep 'whole step'
fi

if want peer && [ -n "$PEER" ]; then
    { section "peer: python3 $PEER bench"
      PYTHONUNBUFFERED=1 run 600 python3 "$PEER" bench 2>&1 | grep -v '^step ' | tail -6; } >> "$OUT/bench_train.txt" 2>&1
    grep 'PEER' "$OUT/bench_train.txt"
fi

# train200 DFLASH NAME: 200 coder-tiny steps of that binary on the GPU against the CPU run recorded in
# bench/records/ (the losses into OUTDIR/NAME.jsonl)
train200() {
    local bin=$1 name=$2
    if run 600 "$bin" train --device cuda --output "$WORK/$name" --target assets/coder-tiny \
           --data assets/data/code-train.jsonl --draft-layers 2 --intermediate-size 512 --num-taps 3 \
           --num-anchors 32 --token-budget 2048 --steps 200 --lr 1.5e-3 --save-every 200 > "$WORK/$name.log" 2>&1
    then
        cp "$WORK/$name/metrics.jsonl" "$OUT/$name.jsonl"
        python3 dev/compare/compare_losses.py bench/records/train200-losses-cpu.jsonl "$OUT/$name.jsonl" ||
            echo "compare_losses $name" >> "$WORK/failed"
    fi
    tail -4 "$WORK/$name.log"
}

if want train200; then
    { section "train --device cuda, 200 steps"; train200 ./dflash train200_gpu; } > "$OUT/train200.txt" 2>&1
    tail -2 "$OUT/train200.txt"
fi

# The portable tier (docs/kernels.md, "GPU tiers"): a build of the compute_80 PTX alone, which the driver
# compiles for this GPU as it would for a Blackwell one, runs the CUDA tests (against a tree of links whose
# dflash is that build, as make test-sanitize does), every op against the CPU, 200 steps against the CPU
# record and the 8B training step; then every op case with the GPU made to look like an A100.
if want portable; then
    P=build-ptx
    {
        section "portable tier: CUDA_ARCHS=compute_80 build"
        tests=$(ls tests/test_cuda_*.c | sed "s|tests/\(.*\)\.c|$P/tests/\1|")
        run 1800 make -j"$(nproc)" BUILD=$P CUDA_ARCHS=compute_80 $P/dflash $tests $P/tests/test_backend_ops \
            $P/tests/test_gpu_tier
        mkdir -p $P/root
        for d in assets tests src; do ln -sfn "$PWD/$d" $P/root/$d; done
        ln -sfn "$PWD/$P/dflash" $P/root/dflash
        $P/dflash --version
        for t in $P/tests/test_cuda_* $P/tests/test_gpu_tier $P/tests/test_backend_ops; do
            section "$t (compute_80 PTX)"
            DFLASH_SOURCE_DIR=$PWD/$P/root run 1200 "$t" 2>&1 | grep -v '^\[ RUN\|^\[       OK' | tail -20
        done
        # (the block attention is left out: at head_dim 256 its kernels take 165-199 KiB, more than an A100's)
        section "test_backend_ops, the GPU seen as an A100"
        DFLASH_OPS_GPU_AS=a100 DFLASH_OPS_SKIP=block_attention run 1200 "$T"/test_backend_ops 2>&1 | grep -v '^\[ RUN\|^\[       OK' | tail -8
        section "train --device cuda, 200 steps (compute_80 PTX)"
        train200 $P/dflash train200_portable
        section "bench --train-only (compute_80 PTX)"
        run 900 $P/dflash bench --device cuda --train-only --json "$OUT/bench_train_portable.json" \
            > "$OUT/portable_bench_train.txt" 2>&1
        grep 'whole step\|block_attention' "$OUT/portable_bench_train.txt"
    } > "$OUT/portable.log" 2>&1
    grep -c '^exit 0' "$OUT/portable.log" | sed 's/$/ portable-tier programs passed/'
fi

if want decode; then
    {
        section "bench --decode"
        run 600 ./dflash bench --decode --device cuda --json "$OUT/bench_decode.json"
        if has_transformers; then
            section "transformers decode"
            PYTHONUNBUFFERED=1 run 600 python3 dev/compare/decode_transformers.py
        fi
    } > "$OUT/bench_decode.txt" 2>&1
    grep -i 'of the limit' "$OUT/bench_decode.txt" | head -4
fi

if want hybrid; then
    {
        section "bench --hybrid (prefill)"
        run 600 ./dflash bench --device cuda --hybrid --hybrid-layers 16 --repeat 5
        section "bench --hybrid --decode"
        run 600 ./dflash bench --device cuda --hybrid --decode --json "$OUT/bench_hybrid_decode.json"
        if has_transformers; then
            section "transformers, hybrid prefill and decode"
            PYTHONUNBUFFERED=1 run 600 python3 dev/compare/hybrid_transformers.py --layers 16
            PYTHONUNBUFFERED=1 run 600 python3 dev/compare/hybrid_transformers.py --decode --repeat 2
        fi
    } > "$OUT/bench_hybrid.txt" 2>&1
    grep -i 'tokens/s' "$OUT/bench_hybrid.txt" | head -4
fi

# dev/cuda's benchmarks: each validates its kernel variants against the CPU before timing them
if want kernels; then
    for b in "$D"/bench_*; do
        section "$b"
        run 600 "$b" 2>&1 | grep -v '^    validated'
    done > "$OUT/kernels.txt" 2>&1
    # the block attention at the recipe's drafter too (head dim 64, packed chunks)
    { section "$D/bench_block_attention recipe"
      run 600 "$D/bench_block_attention" recipe 2>&1 | grep -v '^    validated'; } >> "$OUT/kernels.txt" 2>&1
fi

# MFU's reference for the trainer runs: the GEMM peak part train measured, unless PEAK_TFLOPS is given
if [ -z "${PEAK_TFLOPS:-}" ] && [ -f "$OUT/bench_train.json" ]; then
    PEAK_TFLOPS=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["gemm_peak_tflops"], 1))' \
                  "$OUT/bench_train.json" 2>/dev/null) && export PEAK_TFLOPS
fi

if want seed; then
    { section "the seed configuration (scripts/seed_check.sh)"
      run 1800 bash scripts/seed_check.sh "$OUT/seed"; } > "$OUT/seed.txt" 2>&1
    tail -4 "$OUT/seed.txt"
fi

if want defaults8b; then
    { section "Qwen3-8B shape at the default options"
      SHAPE=qwen3-8b run 1200 bash scripts/seed_check.sh "$OUT/defaults8b"; } > "$OUT/defaults8b.txt" 2>&1
    tail -4 "$OUT/defaults8b.txt"
fi

# two GPUs or more: data parallel and the split layout against one GPU (scripts/dp_check.sh)
if want dp; then
    { section "dp_check"; run 1800 bash scripts/dp_check.sh "$OUT/dp"; } > "$OUT/dp.txt" 2>&1
    tail -10 "$OUT/dp.txt"
fi

if want verdict; then
    python3 dev/compare/step_aims.py "$OUT" --allow-missing > "$OUT/verdict.txt" 2>&1 ||
        echo verdict >> "$WORK/failed"
    cat "$OUT/verdict.txt"
fi
section "done: $OUT"
if [ -s "$WORK/failed" ]; then
    echo "failed:"; sed 's/^/  /' "$WORK/failed"
    exit 1
fi
