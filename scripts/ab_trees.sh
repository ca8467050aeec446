#!/usr/bin/env bash
# The 8B bench step from two builds of the project in one call of the device tool, alternating:
# .devpack/dflash (this tree, scripts/device_pack.sh) and .devpack/base/dflash (an older tree), then
# the PyTorch peer where .devpack carries it. A kernel change that cannot be a variant of one binary
# (a shared loader, say) is measured so, on one card, against the tree before it.
# Before the call, here (the base built in a worktree; the pack is rebuilt by device_pack.sh, so copy
# it in after packing):
#   git worktree add /tmp/base BASE_COMMIT && make -C /tmp/base -j2 dflash
#   bash scripts/device_pack.sh && mkdir -p .devpack/base && cp /tmp/base/dflash .devpack/base/
# On the GPU machine (device tool, carry [".devpack"]):
#   bash scripts/ab_trees.sh new base new peer        (any order of new, base, peer)
#   REPEAT=30 bash scripts/ab_trees.sh new base       (timed steps a run: --train-repeat)
# Each run's whole-step, phase and peak lines go to $OUT/ab.txt, its output and --json to $OUT/step-N-SIDE.*.
set -uo pipefail
OUT=${OUT:-/tmp/ab_trees}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devpack/lib
n=0
for side in "$@"; do
    n=$((n + 1))
    case $side in
    new) bin=.devpack/dflash ;;
    base) bin=.devpack/base/dflash ;;
    peer)
        echo "== peer $(date +%T)" | tee -a "$OUT/ab.txt"
        PYTHONUNBUFFERED=1 timeout 300 python3 .devpack/peer_dflash.py bench 2>&1 | grep -v '^step ' | tail -6 |
            tee -a "$OUT/ab.txt"
        continue ;;
    *) echo "ab_trees.sh: '$side' is not one of new, base, peer" >&2; exit 2 ;;
    esac
    [ -x "$bin" ] || { echo "ab_trees.sh: $bin is missing (see the header)" >&2; exit 2; }
    echo "== $side $n $(date +%T)${REPEAT:+ (--train-repeat $REPEAT)}" | tee -a "$OUT/ab.txt"
    timeout 300 "$bin" bench --device cuda --train-only ${REPEAT:+--train-repeat "$REPEAT"} \
        --json "$OUT/step-$n-$side.json" > "$OUT/step-$n-$side.txt" 2>&1
    grep -E "measured peak|whole step|phases|peak GPU" "$OUT/step-$n-$side.txt" | tee -a "$OUT/ab.txt"
done
