#!/usr/bin/env python3
"""Compares the loss curves of two `dflash train` runs (their metrics.jsonl), step by step:
prints the largest and the mean relative difference over the steps both have, and the
mean loss of the first and last 10 of them in each run.

Usage: python3 dev/compare/compare_losses.py A/metrics.jsonl B/metrics.jsonl"""
import json
import statistics
import sys


def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r.get("loss") is not None}


def relative_differences(a, b):
    """The steps both loss maps have, and |a - b| / |b| at each (b is the reference)."""
    steps = sorted(set(a) & set(b))
    return steps, [abs(a[s] - b[s]) / abs(b[s]) for s in steps]


def main():
    a, b = losses(sys.argv[1]), losses(sys.argv[2])
    steps, rel = relative_differences(a, b)
    print(f"{len(steps)} common steps ({steps[0]}..{steps[-1]}): relative loss difference max {max(rel):.2e} "
          f"(step {steps[rel.index(max(rel))]}), mean {statistics.mean(rel):.2e}")
    for name, d in (("A", a), ("B", b)):
        print(f"{name}: mean loss of the first 10 {statistics.mean(d[s] for s in steps[:10]):.4f}, "
              f"of the last 10 {statistics.mean(d[s] for s in steps[-10:]):.4f}")


if __name__ == "__main__":
    main()
