#!/usr/bin/env bash
# The GPU check: CUDA op tests, the GPU benchmark, and the op tests again
# under compute-sanitizer memcheck. Runs on the GPU machine from the root of
# a tree holding .devpack/ (made by scripts/device_pack.sh); logs go to $OUT.
# Usage (device tool, carry [".devpack"]): bash .devpack/gpu_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devpack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export DFLASH_SOURCE_DIR=$PWD
cp .devpack/dflash ./dflash
# cuBLASLt: the toolkit's, or the one PyTorch's wheels bring
if ldd ./dflash | grep -q 'not found'; then
    lt=$(python3 -c 'import nvidia.cu13, os; print(os.path.join(os.path.dirname(nvidia.cu13.__file__), "lib"))' 2>/dev/null ||
         python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null)
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$lt
fi
ldd ./dflash | grep -E 'cuda|cublas|not found'
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used --format=csv | tee "$OUT/smi.log"
.devpack/tests/test_cuda_ops 2>&1 | tee "$OUT/ops.log"
./dflash bench --device cuda --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
timeout 240 compute-sanitizer --tool memcheck .devpack/tests/test_cuda_ops >"$OUT/memcheck.log" 2>&1
echo "memcheck exit $?"
tail -5 "$OUT/memcheck.log"
