#!/usr/bin/env bash
# Whether two dflash binaries train, regenerate and evaluate alike on the CPU, bit for bit: the check a
# change that must not alter behaviour (a refactoring, a move) passes. Runs, with each binary, from the
# repository root and with the same OMP_NUM_THREADS:
#   - train on the bundled data (coder-tiny, 2 draft layers, 40 steps, checkpoints at 20 and 40);
#   - train --prompts on 12 prompts cut in 2 (regenerate 48 tokens each, then 10 steps);
#   - eval of the first run's drafter on 8 held-out prompts;
# then compares every step's loss, grad norm, tokens, samples and accuracies, the prepared data stores,
# the regenerated responses, the drafters' weights and config, the checkpoints' tensors (their metadata
# may differ only where the options' record does) and eval's tau and acceptance lines.
#
# Usage: bash dev/compare/same_runs.sh OLD_DFLASH NEW_DFLASH WORKDIR   (exit 0: the same; 1: a difference)
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: bash dev/compare/same_runs.sh OLD_DFLASH NEW_DFLASH WORKDIR" >&2; exit 2; }
cd "$(dirname "$0")/../.."
OLD=$(realpath "$1"); NEW=$(realpath "$2"); W=$3
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
mkdir -p "$W"
head -12 assets/data/code-train.jsonl > "$W/prompts.jsonl"
head -8 assets/data/code-dev.jsonl > "$W/dev.jsonl"

runs() { # BINARY OUTDIR
    local b=$1 o=$2
    rm -rf "$o"; mkdir -p "$o"
    "$b" train --target assets/coder-tiny --data assets/data/code-train.regenerated.jsonl --output "$o/data" \
        --draft-layers 2 --intermediate-size 512 --num-taps 3 --num-anchors 32 --token-budget 2048 --steps 40 \
        --lr 1.5e-3 --save-every 20 --quiet > "$o/data.out" 2>&1
    "$b" train --target assets/coder-tiny --prompts "$W/prompts.jsonl" --prompt-cuts 2 --max-new-tokens 48 \
        --batch 8 --output "$o/prompts" --draft-layers 1 --intermediate-size 256 --num-anchors 16 \
        --token-budget 1024 --steps 10 --quiet > "$o/prompts.out" 2>&1
    "$b" eval --target assets/coder-tiny --draft "$o/data/final" --input "$W/dev.jsonl" --max-new-tokens 32 \
        > "$o/eval.out" 2>&1
}
runs "$OLD" "$W/old"
runs "$NEW" "$W/new"
python3 - "$W/old" "$W/new" <<'PY'
import json, struct, sys
a, b = sys.argv[1], sys.argv[2]
bad = []

def steps(path):
    return [(r["step"], r["loss"], r["grad_norm"], r["tokens"], r["samples"], r["acc"])
            for r in map(json.loads, open(path))]

def same_bytes(rel):
    return open(f"{a}/{rel}", "rb").read() == open(f"{b}/{rel}", "rb").read()

def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items()}, meta

for run in ("data", "prompts"):
    if steps(f"{a}/{run}/metrics.jsonl") != steps(f"{b}/{run}/metrics.jsonl"):
        bad.append(f"{run}: the steps' losses, grad norms or accuracies")
    for rel in ("final/model.safetensors", "final/config.json", "data.store"):
        if not same_bytes(f"{run}/{rel}"):
            bad.append(f"{run}/{rel}")
for rel in ("prompts/regenerated.jsonl", "prompts/prompts.cut.jsonl"):
    if not same_bytes(rel):
        bad.append(rel)
for s in ("00000020", "00000040"):
    (ta, ma), (tb, mb) = tensors(f"{a}/data/checkpoints/step-{s}.safetensors"), tensors(f"{b}/data/checkpoints/step-{s}.safetensors")
    if ta != tb:
        bad.append(f"checkpoint step {s}: tensors")
    differing = sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k))
    print(f"checkpoint step {s}: {len(ta)} tensors; metadata entries that differ: {differing or 'none'}")
keep = lambda p: [l for l in open(p) if l.startswith(("tau", "target forward passes", "  k="))]
if keep(f"{a}/eval.out") != keep(f"{b}/eval.out"):
    bad.append("eval's tau or acceptance")
if bad:
    print("DIFFERENT:", "; ".join(bad))
    sys.exit(1)
print("the same: every step's loss, grad norm and accuracies, the data stores, the regenerated responses, "
      "the drafters, the checkpoints' tensors and eval's tau and acceptance")
PY
