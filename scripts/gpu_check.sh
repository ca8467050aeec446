#!/usr/bin/env bash
# The GPU check, in one call of the device tool, most important first: every
# CUDA test program and test_backend_ops (every op against the CPU), a short
# coder-tiny training on the GPU, the benchmarks of training (whole step, and
# dev/cuda's lm-head CE, block attention, AdamW), the reference fixtures that
# need transformers (chat templates, hybrid targets), compute-sanitizer
# memcheck on test_backend_ops' training and optimizer ops (racecheck too, as
# the part racecheck: those and the inference ops), the decode benchmarks
# (ours and transformers', dev/cuda's kv_attention), the skinny GEMM's check,
# sanitizers and timings against cuBLASLt, the hybrid target's prefill (ours
# and transformers'). Runs on the GPU
# machine from the root of a tree holding .devpack/ (scripts/device_pack.sh);
# everything it prints goes to $OUT (at most 8 files come back: logs are
# grouped). Each part has its own time limit so that one hang cannot eat the
# others' time.
# Usage (device tool, carry [".devpack"]): bash scripts/gpu_check.sh [PARTS]
#   PARTS: any of tests,memcheck,racecheck,fixtures,gputrain,train200,train,ab,peer,lmhead,gemm,decode,skinny,hybrid,prefill,
#   dp,train8b,seed,defaults8b,hydecode,spec,traineval,aims (default: all but racecheck, ab, peer, prefill, dp, train8b,
#   seed, defaults8b, hydecode, spec, traineval and aims; aims = issue #17's verdict from the other parts'
#   files, bench/step_aims.py; ab = the 8B bench step against AB_VARIANTS, see there; dp = scripts/dp_check.sh:
#   queue depths, two-GPU data parallel through NCCL, a lost rank, resume across GPU counts, the split layout;
#   run it on the 2-GPU machine)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check}
PARTS=${1:-tests,memcheck,fixtures,gputrain,train,lmhead,gemm,decode,skinny,hybrid}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devpack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export DFLASH_SOURCE_DIR=$PWD NCCL_NVLS_ENABLE=0
cp .devpack/dflash ./dflash
[ -f .devpack/tests.tgz ] && tar xzf .devpack/tests.tgz -C .devpack
T=.devpack/tests D=.devpack/dev # the test programs; the kernel benchmarks (dev/cuda/, make dev)
# test_backend_ops' cases of the training and optimizer ops (the target's causal attention, "attention
# (packed, GQA)", among them), and of the inference ops (the sanitizers' runs)
TRAIN_OPS='memory,fill_zero,rmsnorm,rope_backward,swiglu_backward,linear_weight_grad,linear_residual,block_attention,(packed,lm_head_ce,adamw,sum_squares'
INFER_OPS=kv_cache_write,argmax
want() { [[ ",$PARTS," == *",$1,"* ]]; }
section() { echo "== $1 ($(date +%T))"; }

# cuBLASLt: the toolkit's, or the one PyTorch's wheels bring
if ldd ./dflash | grep -q 'not found'; then
    lt=$(python3 -c 'import nvidia.cu13, os; print(os.path.join(os.path.dirname(nvidia.cu13.__file__), "lib"))' 2>/dev/null ||
         python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null)
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$lt
fi

if want tests; then
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used --format=csv >> "$OUT/tests.log"
    for t in "$T"/test_cuda_* "$T"/test_drafter "$T"/test_backend_ops "$T"/test_bench_train_step; do
        section "$t"
        timeout 300 "$t" 2>&1 | grep -v '^\[ RUN\|^\[       OK' | tail -40
        echo "exit ${PIPESTATUS[0]}"
    done 2>&1 | tee -a "$OUT/tests.log"
fi

# A short coder-tiny training on the GPU (the demo's settings, 30 + 30 steps with
# a resume between), for the loss curve against the CPU's and a checkpoint
# written on the GPU to resume on the CPU.
if want gputrain; then
    demo="--target assets/coder-tiny --data assets/data/code-train.jsonl --draft-layers 2 --intermediate-size 512
          --num-taps 3 --num-anchors 32 --token-budget 2048 --steps 500 --lr 1.5e-3 --save-every 30"
    {
        section "train --device cuda"
        timeout 120 ./dflash train --device cuda --output /tmp/rg $demo --stop-at 30 &&
        timeout 120 ./dflash train --device cuda --output /tmp/rg $demo --stop-at 60 --resume
        echo "exit $?"
    } > "$OUT/train_gpu.log" 2>&1
    tail -12 "$OUT/train_gpu.log"
    (cd /tmp/rg && tar czf "$OUT/train_gpu.tgz" metrics.jsonl checkpoints/step-00000030.safetensors)
fi

# 200 coder-tiny steps on the GPU (issue #17's check of the training kernels: the loss curve against
# the same run on the CPU, bench/compare_losses.py); metrics come back as train200_gpu.jsonl
if want train200; then
    {
        section "train --device cuda, 200 steps"
        timeout 200 ./dflash train --device cuda --output /tmp/r200 --target assets/coder-tiny \
            --data assets/data/code-train.jsonl --draft-layers 2 --intermediate-size 512 --num-taps 3 \
            --num-anchors 32 --token-budget 2048 --steps 200 --lr 1.5e-3 --save-every 200 2>&1 | tail -3
        echo "exit $?"
    } 2>&1 | tee "$OUT/train200.txt"
    cp /tmp/r200/metrics.jsonl "$OUT/train200_gpu.jsonl"
fi

# Held-out tau during training on the GPU (issue #18 item 1): eval.jsonl's line
# at step 8 against dflash eval of that step's exported checkpoint, on the same
# prompts; they must agree.
if want traineval; then
    {
        section "train --eval-data --device cuda"
        head -12 assets/data/code-dev.jsonl > /tmp/te-train.jsonl
        sed -n 13,15p assets/data/code-dev.jsonl > /tmp/te-held.jsonl
        timeout 200 ./dflash train --device cuda --target assets/coder-tiny --data /tmp/te-train.jsonl --output /tmp/te \
            --draft-layers 1 --intermediate-size 256 --num-taps 2 --block-size 8 --num-anchors 12 --token-budget 1100 \
            --lr 3e-3 --warmup 0.1 --seed 7 --steps 12 --save-every 4 --keep-checkpoints 0 \
            --eval-data /tmp/te-held.jsonl --eval-every 4 --eval-prompts 3 --eval-max-new-tokens 24 2>&1 | tail -4 &&
        ./dflash export /tmp/te/checkpoints/step-00000008.safetensors --output /tmp/te8 &&
        ./dflash eval --device cuda --target assets/coder-tiny --draft /tmp/te8 --input /tmp/te-held.jsonl \
            --max-new-tokens 24 --json /tmp/te8.json > /dev/null &&
        echo "eval.jsonl at step 8:" && sed -n 2p /tmp/te/eval.jsonl && echo "dflash eval:" && cat /tmp/te8.json
        echo "exit $?"
    } 2>&1 | tee "$OUT/traineval.txt"
fi

if want train; then
    section "bench --train-only" | tee "$OUT/bench_train.txt"
    timeout 400 ./dflash bench --device cuda --train-only --json "$OUT/bench_train.json" 2>&1 | tee -a "$OUT/bench_train.txt"
fi

# An A/B of kernel variants at the 8B bench step, from one binary in one call: the defaults against
# AB_VARIANTS (NAME=VALUE items, space-separated, e.g. AB_VARIANTS="gemm_search=1"), alternating
# AB_ROUNDS times (default 2), AB_REPEAT timed steps each (--train-repeat; default the bench's); each run's
# whole-step, phase and variant lines into bench_ab.txt. With the part peer, the peer's figure is this call's.
if want ab; then
    section "A/B at the 8B bench step: the defaults against ${AB_VARIANTS:-(none given)}" | tee "$OUT/bench_ab.txt"
    variant_args=()
    for v in ${AB_VARIANTS:-}; do variant_args+=(--kernel-variant "$v"); done
    for r in $(seq 1 "${AB_ROUNDS:-2}"); do
        for side in base variant; do
            [ "$side" = variant ] && [ ${#variant_args[@]} -eq 0 ] && continue
            args=(--device cuda --train-only ${AB_REPEAT:+--train-repeat "$AB_REPEAT"})
            [ "$side" = variant ] && args+=("${variant_args[@]}")
            echo "-- $side, round $r" | tee -a "$OUT/bench_ab.txt"
            timeout 300 ./dflash bench "${args[@]}" > /tmp/gpu_check_ab.txt 2>&1
            echo "exit $?" >> /tmp/gpu_check_ab.txt
            { grep 'measured peak' /tmp/gpu_check_ab.txt; grep -A30 'Qwen3-8B shape' /tmp/gpu_check_ab.txt |
                  grep -E 'whole step|phases|kernel variants|peak GPU'; tail -1 /tmp/gpu_check_ab.txt; } |
                tee -a "$OUT/bench_ab.txt"
        done
    done
fi

# The PyTorch peer (built like SpecForge's trainer, at the same Qwen3-8B shape) beside the train part's
# figure, in the same call: the ratio issue #17 asks for. device_pack.sh carries it when the project's
# shared tools sit beside the checkout.
if want peer; then
    section "PyTorch peer: peer_dflash.py bench" | tee -a "$OUT/bench_train.txt"
    if [ -f .devpack/peer_dflash.py ]; then
        PYTHONUNBUFFERED=1 timeout 400 python3 .devpack/peer_dflash.py bench 2>&1 | grep -v '^step ' | tail -6 |
            tee -a "$OUT/bench_train.txt"
    else
        echo "peer: .devpack/peer_dflash.py missing (device_pack.sh copies it from ../shared/tools)" |
            tee -a "$OUT/bench_train.txt"
    fi
fi

# dev/cuda's benchmarks of the training kernels: each validates its variants against the CPU first
if want lmhead; then
    section "lm head CE timing" >> "$OUT/bench_train.txt"
    timeout 300 "$D"/bench_lm_head 2>&1 | tee -a "$OUT/bench_train.txt"
    section "block attention timing" >> "$OUT/bench_train.txt"
    timeout 180 "$D"/bench_block_attention 2>&1 | tee -a "$OUT/bench_train.txt"
    section "causal attention timing" >> "$OUT/bench_train.txt"
    timeout 180 "$D"/bench_attention 2>&1 | tee -a "$OUT/bench_train.txt"
    section "AdamW timing" >> "$OUT/bench_train.txt"
    timeout 120 "$D"/bench_adamw 2>&1 | tee -a "$OUT/bench_train.txt"
    section "norms timing (rmsnorm, rmsnorm_rope and their backwards at the 8B step's shapes)" >> "$OUT/bench_train.txt"
    timeout 200 "$D"/bench_norms 2>&1 | grep -v '^    validated' | tee -a "$OUT/bench_train.txt"
fi

# The step's matrix products under each of cuBLASLt's heuristic algorithms and gemm_search's timed choice
if want gemm; then
    section "GEMM algorithms" | tee "$OUT/gemm.txt"
    timeout 300 "$D"/bench_gemm 2>&1 | grep -v '^    validated' | tee -a "$OUT/gemm.txt"
fi

if want fixtures; then
    {
        mkdir -p /tmp/fx/chat
        [ -f .devpack/tokenizers.tgz ] || echo "fixtures: .devpack/tokenizers.tgz missing (DEVPACK_TOKENIZERS=1 bash scripts/device_pack.sh)"
        tar xzf .devpack/tokenizers.tgz -C /tmp/fx
        section "chat_ref"
        timeout 120 python3 tests/ref/chat_ref.py /tmp/fx/tokenizers tests/fixtures/chat/conversations.json /tmp/fx/chat
        hybrid=tests/ref/hybrid_ref.py
        [ -f "$hybrid" ] || hybrid=.devpack/hybrid_ref.py
        if [ -f "$hybrid" ]; then
            section "hybrid_ref"
            mkdir -p /tmp/fx/hybrid
            timeout 180 python3 "$hybrid" /tmp/fx/hybrid
        fi
        # transformers' own bf16 forward of the hybrid fixture against its fp32 one: the
        # yardstick of test_cuda_hybrid_target's whole-model check
        section "hybrid_bf16_ref"
        mkdir -p /tmp/fx/hybrid-bf16 && cp -r tests/fixtures/hybrid/qwen35-random* /tmp/fx/hybrid-bf16/
        timeout 180 python3 tests/ref/hybrid_bf16_ref.py /tmp/fx/hybrid-bf16
        (cd /tmp/fx && tar czf "$OUT/fixtures.tgz" chat hybrid-bf16/qwen35-random-bf16.json $( [ -d hybrid ] && echo hybrid))
    } 2>&1 | tee -a "$OUT/tests.log"
fi

# memcheck: test_backend_ops' training and optimizer ops at their small shapes (DFLASH_OPS_QUICK=1)
if want memcheck; then
    {
        section "memcheck test_backend_ops ($TRAIN_OPS)"
        DFLASH_OPS_QUICK=1 DFLASH_OPS_CASES=$TRAIN_OPS timeout 200 compute-sanitizer --tool memcheck \
            --target-processes application-only "$T"/test_backend_ops 2>&1 | tail -4
    } 2>&1 | tee "$OUT/memcheck.log"
fi

# racecheck: shared-memory hazards in the kernels with barriers (block attention's
# and the dense ops' runs are in bench/README.md): test_backend_ops' training and optimizer ops, then its
# inference ops, each run up to 120 s
if want racecheck; then
    for cases in $TRAIN_OPS $INFER_OPS; do
        section "racecheck test_backend_ops ($cases)"
        DFLASH_OPS_QUICK=1 DFLASH_OPS_CASES=$cases timeout ${RACECHECK_TIMEOUT:-120} compute-sanitizer --tool racecheck \
            --racecheck-report hazard --target-processes application-only "$T"/test_backend_ops > /tmp/racecheck.txt 2>&1
        echo "exit $?"
        grep 'PASSED\|FAILED\|SUMMARY' /tmp/racecheck.txt
        # each hazard names its two accesses' kernels; NVIDIA's closed GEMM kernels (nvjet_*) are known to be
        # reported (bench/README.md, "GPU training step"), so ours are counted apart (bench/step_aims.py reads it)
        echo "hazard accesses: $(grep -c 'access at' /tmp/racecheck.txt)," \
             "outside cuBLASLt's nvjet kernels: $(grep 'access at' /tmp/racecheck.txt | grep -vc nvjet_)"
        grep 'access at' /tmp/racecheck.txt | grep -v nvjet_ | head -6 | cut -c 1-300
    done 2>&1 | tee "$OUT/racecheck.log"
fi

if want decode; then
    {
        section "bench --decode"
        timeout 300 ./dflash bench --decode --device cuda
        section "kv_attention timings"
        timeout 120 "$D"/bench_kv_attention
        section "transformers decode"
        PYTHONUNBUFFERED=1 timeout 300 python3 bench/decode_transformers.py
    } 2>&1 | tee "$OUT/decode.txt"
fi

# A hybrid target's decode (issue #16): the Qwen3.6-27B shape's batch 1 and 64
# next to its bandwidth limit (weights, KV cache of the full-attention layers,
# recurrent states), then transformers' generate on the same random model.
if want hydecode; then
    {
        section "bench --decode --hybrid"
        timeout 300 ./dflash bench --decode --hybrid --device cuda --json "$OUT/hydecode.json"
        section "transformers decode, hybrid"
        PYTHONUNBUFFERED=1 timeout 280 python3 bench/hybrid_transformers.py --decode --repeat 2
    } 2>&1 | tee "$OUT/hydecode.txt"
fi

# A speculative cycle's time against a greedy step (issue #16 item 4): a
# coder-tiny drafter trained briefly on the GPU, then eval on the dev prompts
# with the target's steps and the drafter's proposals replayed as graphs, and
# with every op queued (--no-graphs).
if want spec; then
    {
        section "train --device cuda (drafter for the timing)"
        timeout 200 ./dflash train --device cuda --output /tmp/spec --target assets/coder-tiny \
            --data assets/data/code-train.jsonl --draft-layers 2 --intermediate-size 512 --num-taps 3 \
            --num-anchors 32 --token-budget 4096 --steps 400 --lr 1.5e-3 --save-every 400 2>&1 | tail -3
        for g in "" --no-graphs; do
            section "eval --device cuda $g"
            timeout 200 ./dflash eval --device cuda $g --target assets/coder-tiny --draft /tmp/spec/final \
                --input assets/data/code-dev.jsonl --max-new-tokens 128 --json "$OUT/eval$g.json" 2>&1 | tail -8
        done
    } 2>&1 | tee "$OUT/spec.txt"
fi

# The skinny GEMM (decode's products at 1..64 rows, issue #4): its products against the CPU under
# every routing (test_backend_ops' decoding case) and its routing and determinism (test_cuda_skinny_gemm),
# memcheck and racecheck on the latter (small shapes), then its timings next to cuBLASLt's at the
# Qwen3-8B shapes (M = 1, 16, 64; GB/s of weights read; dev/cuda/bench_skinny_gemm);
# appended to decode.txt (at most 8 files come back).
if want skinny; then
    {
        section "test_backend_ops (matmul at decoding's shapes)"
        DFLASH_OPS_CASES='matmul at decoding' timeout 300 "$T"/test_backend_ops 2>&1 | grep -v '^\[ RUN\|^\[       OK'
        echo "exit ${PIPESTATUS[0]}"
        section "test_cuda_skinny_gemm"
        timeout 200 "$T"/test_cuda_skinny_gemm 2>&1 | grep -v '^\[ RUN\|^\[       OK'
        echo "exit ${PIPESTATUS[0]}"
        for tool in memcheck racecheck; do
            section "$tool test_cuda_skinny_gemm"
            DFLASH_SKINNY_QUICK=1 timeout 150 compute-sanitizer --tool $tool --target-processes application-only \
                "$T"/test_cuda_skinny_gemm 2>&1 | tail -4
        done
        section "skinny GEMM timing"
        timeout 300 "$D"/bench_skinny_gemm
    } 2>&1 | tee -a "$OUT/decode.txt"
fi

# The hybrid target's prefill (issue #9): dflash's Qwen3.6-27B-shaped random
# target on 16 of its 64 layers (plus the per-layer-scaled 64-layer
# estimate) next to transformers' forward of the same model; appended to
# decode.txt (at most 8 files come back, and the other parts write 8).
if want hybrid; then
    {
        section "bench --hybrid"
        timeout 300 ./dflash bench --device cuda --hybrid --hybrid-layers 16 --repeat 5
        section "transformers hybrid forward"
        PYTHONUNBUFFERED=1 timeout 300 python3 bench/hybrid_transformers.py --layers 16
    } 2>&1 | tee -a "$OUT/decode.txt"
fi

if want dp; then
    section "dp_check"
    timeout 900 bash scripts/dp_check.sh "$OUT" 2>&1 | tail -80
fi

# dflash train at the Qwen3-8B shape (random target weights): one GPU, and
# colocated data parallel on two when there are two (scripts/train8b_check.sh)
if want train8b; then
    section "train8b_check"
    timeout 580 bash scripts/train8b_check.sh "$OUT" 2>&1 | tee "$OUT/train8b.txt" | tail -60
fi

# Issue 15: the seed's configuration (Qwen3.6-27B-shaped hybrid target, 5-layer drafter, real records,
# --token-budget 16384) and a Qwen3-8B-shaped target at every default option, each with its memory plan
# against the measured peak; MFU against PEAK_TFLOPS when given (the bench's measured GEMM peak).
# MFU's reference: the GEMM peak the train part measured in this run, unless PEAK_TFLOPS is given
if [ -z "${PEAK_TFLOPS:-}" ] && [ -f "$OUT/bench_train.json" ]; then
    export PEAK_TFLOPS=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["gemm_peak_tflops"], 1))' \
                         "$OUT/bench_train.json" 2>/dev/null)
fi

if want seed; then
    section "the seed's configuration (scripts/seed_check.sh)" | tee "$OUT/seed.txt"
    timeout 1500 bash scripts/seed_check.sh "$OUT" 2>&1 | tee -a "$OUT/seed.txt" | tail -40
fi

if want defaults8b; then
    section "Qwen3-8B shape at the default options (SHAPE=qwen3-8b scripts/seed_check.sh)" | tee "$OUT/defaults8b.txt"
    SHAPE=qwen3-8b timeout 900 bash scripts/seed_check.sh "$OUT" 2>&1 | tee -a "$OUT/defaults8b.txt" | tail -40
fi

if want prefill; then
    timeout 300 ./dflash bench --device cuda --json "$OUT/bench_prefill.json" 2>&1 | tee "$OUT/bench_prefill.txt"
fi
# Issue #17's aims and checks, judged from what the parts above left in $OUT (and, when AIMS_ALSO names
# them, the folders an earlier call's files were fetched to): bench/step_aims.py
if want aims; then
    python3 bench/step_aims.py ${AIMS_ALSO:-} "$OUT" --allow-missing 2>&1 | tee "$OUT/aims.txt"
fi
section done
