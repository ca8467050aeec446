#!/usr/bin/env python3
"""Two training runs' loss curves side by side (issue #17: the same coder-tiny run on the GPU and on the CPU).

Usage: python3 scripts/loss_parity.py A/metrics.jsonl B/metrics.jsonl [--window 50] [--tolerance 0.03]

Prints the first step's losses (the same weights and batch: their difference is one step's numeric noise,
bf16 against fp32 when A ran on the GPU), then the mean loss and train-tau of each window of steps in both
runs and their relative difference. The runs diverge step by step (bf16 rounding changes each update a
little, and the differences grow), so the windows' means are what can agree; exits 1 when some window's
mean loss differs by more than the tolerance (relative).
"""
import argparse
import json
import sys


def read(path):
    rows = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON: {e}")
            if "step" in r and "loss" in r:
                rows[r["step"]] = r
    if not rows:
        sys.exit(f"{path}: no step with a loss")
    return rows


def mean(xs):
    return sum(xs) / len(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--window", type=int, default=50)
    ap.add_argument("--tolerance", type=float, default=0.03)
    o = ap.parse_args()
    a, b = read(o.a), read(o.b)
    steps = sorted(set(a) & set(b))
    if not steps:
        sys.exit("the runs share no step")
    s0 = steps[0]
    print(f"step {s0}: loss {a[s0]['loss']:.6f} (A) {b[s0]['loss']:.6f} (B), "
          f"relative difference {abs(a[s0]['loss'] - b[s0]['loss']) / abs(b[s0]['loss']):.2e}")
    print(f"{'steps':>11} {'loss A':>9} {'loss B':>9} {'rel diff':>9} {'tau A':>7} {'tau B':>7}")
    worst = 0.0
    for lo in range(0, len(steps), o.window):
        w = steps[lo:lo + o.window]
        la, lb = mean([a[s]["loss"] for s in w]), mean([b[s]["loss"] for s in w])
        ta, tb = mean([a[s].get("train_tau", 0) for s in w]), mean([b[s].get("train_tau", 0) for s in w])
        rel = abs(la - lb) / abs(lb)
        worst = max(worst, rel)
        print(f"{w[0]:>5}-{w[-1]:<5} {la:9.4f} {lb:9.4f} {rel:9.2e} {ta:7.3f} {tb:7.3f}")
    ok = worst <= o.tolerance
    print(f"largest window difference {worst:.2e}: {'within' if ok else 'OUTSIDE'} the tolerance {o.tolerance}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
