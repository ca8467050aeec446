#!/usr/bin/env bash
# Packs what a run on the GPU machine needs into .devpack/ (git-ignored; name it in the
# device tool's `carry`): ./dflash, the GPU test programs and the kernel benchmarks (dev/cuda/,
# make dev) built here (the GPU machine has nvcc, gcc and OpenBLAS but not cJSON, utf8proc or
# cmocka), plus those shared libraries.
# On the GPU machine: export LD_LIBRARY_PATH=$PWD/.devpack/lib; .devpack/dflash ... (the test programs
# and the benchmarks come as .devpack/tests.tgz: tar xzf .devpack/tests.tgz -C .devpack gives
# .devpack/tests/ and .devpack/dev/) or the whole check: bash scripts/gpu_check.sh (see there).
# Usage: [DEVPACK_DEST=DIR] [DEVPACK_TOKENIZERS=1] bash scripts/device_pack.sh [SOURCE_TREE]
#   SOURCE_TREE defaults to this checkout, DIR to .devpack/ in it. The programs are stripped of their
#   debug information and the real tokenizers (7 MB, for gpu_check.sh's fixtures part) come only with
#   DEVPACK_TOKENIZERS=1: the device tool carries at most 64 MiB, the tracked tree included.
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
dest=${DEVPACK_DEST:-"$(cd "$(dirname "$0")/.." && pwd)/.devpack"}
rm -rf "$dest" && mkdir -p "$dest/lib" "$dest/tests" "$dest/dev"
make -C "$src" -j2 dflash dev $(cd "$src" && ls tests/test_*.c | grep -v test_util | sed 's|tests/\(.*\)\.c|build/tests/\1|') >/dev/null
cp "$src/dflash" "$dest/"
# the test programs that exercise the GPU (scripts/gpu_check.sh runs them): the CUDA ones (those of
# this tree's sources, not older programs left in build/), and those that also run on the CUDA
# backend where there is one (the drafter's parity, every op of the list against the CPU, the bench's
# training step settings)
for t in $(cd "$src" && ls tests/test_cuda_*.c | sed 's|tests/\(.*\)\.c|\1|') test_drafter test_backend_ops \
         test_bench_train_step; do
    cp "$src/build/tests/$t" "$dest/tests/"
done
# the kernel benchmarks (each validates its kernels against the CPU, then times them)
for b in $(cd "$src" && ls dev/cuda/bench_*.c | sed 's|dev/cuda/\(.*\)\.c|\1|'); do
    cp "$src/build/dev/cuda/$b" "$dest/dev/"
done
strip --strip-debug "$dest/dflash" "$dest"/tests/* "$dest"/dev/*
# each program holds the whole library with its GPU code (about 2.8 MB): packed, a third of that
tar czf "$dest/tests.tgz" -C "$dest" tests dev && rm -rf "$dest/tests" "$dest/dev"
for lib in libcjson.so.1 libutf8proc.so.2 libcmocka.so.0 libonig.so.5 libcairo.so.2; do
    cp -L "/usr/lib/x86_64-linux-gnu/$lib" "$dest/lib/"
done
# what libcairo (dflash plot, OUTPUT/curves.png) links, glibc's own libraries left out
for lib in $(ldd /usr/lib/x86_64-linux-gnu/libcairo.so.2 | awk '/=>/ {print $3}' |
             grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so'); do
    cp -L "$lib" "$dest/lib/"
done
# the real tokenizers of the chat-template references (tests/ref/chat_ref.py), when fetched
if [ "${DEVPACK_TOKENIZERS:-0}" = 1 ] && [ -d "$src/tests/.cache/tokenizers" ]; then
    tar czf "$dest/tokenizers.tgz" -C "$src/tests/.cache" tokenizers
fi
# the PyTorch peer trainer (gpu_check.sh part peer), where this checkout sits beside the project's
# shared folder: never committed, carried in .devpack only
peer="$src/../shared/tools/peer_dflash.py"
[ -f "$peer" ] && cp "$peer" "$dest/"
du -sh "$dest"
