#!/usr/bin/env python3
"""The training step's aims and checks, judged from scripts/test_gpu.sh output folders.

Reads what the parts left there (the parts may have run in several calls: each file is read from the last
folder named that has it) and prints one line an aim: the figure, the bound, and PASS, FAIL or
MISSING (the part was not run, or its output has no such line):
  train      bench_train.json         8B bench step: sequences/s, MFU of the measured peak, peak memory
  peer       bench_train.txt          the PyTorch peer's "PEER seq/s" in the same call: the ratio
  seed       seed.txt                 the seed's configuration: TFLOP/s a GPU against 989 nominal, peak memory
  defaults8b defaults8b.txt           the 8B shape at the default options: peak memory
  train200   train200_gpu.jsonl       200 coder-tiny steps on the GPU against the CPU run's losses
  tests      tests.log                every CUDA test program (test_drafter: the PyTorch-fixture parity)
  memcheck   memcheck.log             compute-sanitizer memcheck: 0 errors
  racecheck  racecheck.log            compute-sanitizer racecheck: 0 hazards outside cuBLASLt's kernels
Exit status 0 when every aim that was measured passed and none is missing (--allow-missing: missing ones
are only reported).

The memory bounds are the peaks recorded before the step's kernels were reworked (8B bench 50.20 GiB; seed
134.99 GiB; 8B defaults 123.11 GiB): "no higher than before".

The loss bound: the two runs round differently (bf16 products on the GPU, fp32 on the CPU), and 200 steps
of training carry those differences forward; every GPU run recorded stayed under 5.4e-3 at its worst step
(bench/records/train200-parity-h100.txt). 1e-2, about 2.5 bf16 units in the last place
(2^-8 relative), is the bound: a kernel that is wrong moves the curve by far more (the first step's loss
alone is 22).

Usage: python3 dev/compare/step_aims.py OUTDIR [OUTDIR ...] [--cpu-losses bench/records/train200-losses-cpu.jsonl]
                                                        [--allow-missing]"""
import argparse
import json
import os
import re
import statistics
import sys

from compare_losses import losses, relative_differences  # beside this script

BENCH_AIMS = ("8B step sequences/s", "8B step MFU of measured peak", "8B step peak memory")
NOMINAL_TFLOPS = 989.0  # dense bf16, H100/H200 SXM: the seed aim's reference
AIMS = {
    "seqs_per_s": 6.0,
    "mfu_measured": 0.75,
    "peer_ratio": 1.55,
    "seed_mfu_nominal": 0.60,
    "bench_peak_gib": 50.20,
    "seed_peak_gib": 134.99,
    "defaults8b_peak_gib": 123.11,
    "train200_max_rel": 1e-2,
}


class Verdicts:
    def __init__(self):
        self.rows = []

    def add(self, aim, figure, bound, ok):
        self.rows.append((aim, figure, bound, "MISSING" if ok is None else "PASS" if ok else "FAIL"))

    def missing(self, aim, why, bound):
        self.add(aim, why, bound, None)

    def print(self):
        w = [max(len(r[i]) for r in self.rows + [("aim", "figure", "bound", "")]) for i in range(3)]
        print(f"{'aim':<{w[0]}}  {'figure':<{w[1]}}  {'bound':<{w[2]}}  verdict")
        for aim, fig, bound, v in self.rows:
            print(f"{aim:<{w[0]}}  {fig:<{w[1]}}  {bound:<{w[2]}}  {v}")

    def status(self, allow_missing):
        verdicts = [r[3] for r in self.rows]
        return 1 if "FAIL" in verdicts or (not allow_missing and "MISSING" in verdicts) else 0


def find(outs, name):
    """The file `name` from the last of the folders that has it, or None."""
    paths = [os.path.join(o, name) for o in outs if os.path.exists(os.path.join(o, name))]
    return paths[-1] if paths else None


def read(outs, name):
    path = find(outs, name)
    return open(path, errors="replace").read() if path else None


def judge_bench(outs, v):
    text = read(outs, "bench_train.json")
    if text is None:
        for aim in BENCH_AIMS:
            v.missing(aim, "no bench_train.json (part train)", "")
        return None
    j = json.loads(text)
    seqs, mfu, peak = j.get("step_qwen3_8b_seqs_per_s"), j.get("step_qwen3_8b_mfu_measured_peak"), j.get(
        "step_qwen3_8b_peak_gib")
    if None in (seqs, mfu, peak):  # the bench ran but did not finish the 8B step
        for aim in BENCH_AIMS:
            v.add(aim, "bench_train.json has no Qwen3-8B step (bench_train.txt says why)", "", False)
        return None
    gpu = j.get("gpu", "?").split(",")[0]
    v.add("8B step sequences/s", f"{seqs:.2f} ({gpu})", f">= {AIMS['seqs_per_s']}", seqs >= AIMS["seqs_per_s"])
    v.add("8B step MFU of measured peak", f"{mfu:.1%} of {j.get('gemm_peak_tflops', 0):.1f}",
          f">= {AIMS['mfu_measured']:.0%}", mfu >= AIMS["mfu_measured"])
    v.add("8B step peak memory", f"{peak:.2f} GiB", f"<= {AIMS['bench_peak_gib']:.2f}", peak <= AIMS["bench_peak_gib"])
    return seqs


def judge_peer(outs, v, seqs):
    text = read(outs, "bench_train.txt") or ""
    m = re.findall(r"PEER seq/s ([0-9.]+)", text)
    if not m or seqs is None:
        v.missing("against the peer, same call", "no PEER line or no 8B step (parts train, peer)", "")
        return
    peer = float(m[-1])
    ratio = seqs / peer
    v.add("against the peer, same call", f"{ratio:.2f}x ({seqs:.2f} / {peer:.2f})", f">= {AIMS['peer_ratio']}x",
          ratio >= AIMS["peer_ratio"])


STEADY = re.compile(r"steady state \(median of steps ([0-9]+\.\.[0-9]+).*? ([0-9.]+) TFLOP/s a GPU")
PEAK = re.compile(r"train: peak ([0-9.]+) GiB against the memory plan's ([0-9.]+) GiB")


def judge_trainer_run(outs, v, name, label, peak_bound, mfu_bound=None):
    text = read(outs, name)
    if text is None or not PEAK.search(text):
        if mfu_bound is not None:
            v.missing(f"{label} MFU of {NOMINAL_TFLOPS:.0f}", f"no finished run in {name}", "")
        v.missing(f"{label} peak memory", f"no finished run in {name}", "")
        return
    if mfu_bound is not None:
        s = STEADY.findall(text)
        if s:
            tflops = float(s[-1][1])
            mfu = tflops / NOMINAL_TFLOPS
            v.add(f"{label} MFU of {NOMINAL_TFLOPS:.0f}", f"{mfu:.1%} ({tflops:.1f} TFLOP/s, median of steps {s[-1][0]})",
                  f">= {mfu_bound:.0%}", mfu >= mfu_bound)
        else:
            v.missing(f"{label} MFU of {NOMINAL_TFLOPS:.0f}", f"no steady-state line in {name}", "")
    peak, plan = map(float, PEAK.findall(text)[-1])
    v.add(f"{label} peak memory", f"{peak:.2f} GiB (plan {plan:.2f})", f"<= {peak_bound:.2f} and plan",
          peak <= peak_bound and peak <= plan)


def judge_train200(outs, v, cpu_path):
    gpu_path = find(outs, "train200_gpu.jsonl")
    if not gpu_path or not os.path.exists(cpu_path):
        v.missing("200 coder-tiny steps, GPU vs CPU", "no train200_gpu.jsonl (part train200) or CPU run", "")
        return
    steps, rel = relative_differences(losses(gpu_path), losses(cpu_path))
    if len(steps) < 200:
        v.add("200 coder-tiny steps, GPU vs CPU", f"only {len(steps)} common steps", "200 steps", False)
        return
    worst = max(rel)
    v.add("200 coder-tiny steps, GPU vs CPU",
          f"max rel {worst:.2e} (step {steps[rel.index(worst)]}), mean {statistics.mean(rel):.2e}",
          f"max <= {AIMS['train200_max_rel']:.0e}", worst <= AIMS["train200_max_rel"])


def judge_tests(outs, v):
    text = read(outs, "tests.log")
    if text is None:
        v.missing("CUDA test programs", "no tests.log (part tests)", "")
        return
    exits = re.findall(r"^== (\S+).*\n(?:.*\n)*?exit (\d+)$", text, re.M)
    failed = [os.path.basename(t) for t, rc in exits if rc != "0"]
    drafter = [rc for t, rc in exits if t.endswith("test_drafter")]
    v.add("CUDA test programs", f"{len(exits) - len(failed)} of {len(exits)} exit 0" +
          (f" (failed: {', '.join(failed)})" if failed else ""), "all", bool(exits) and not failed)
    v.add("PyTorch-fixture parity (test_drafter)", f"exit {drafter[-1]}" if drafter else "not run", "exit 0",
          drafter[-1] == "0" if drafter else None)


def judge_sanitizers(outs, v):
    text = read(outs, "memcheck.log")
    m = re.findall(r"ERROR SUMMARY: (\d+) error", text or "")
    if m:
        v.add("memcheck", f"{m[-1]} errors", "0", int(m[-1]) == 0)
    else:
        v.missing("memcheck", "no ERROR SUMMARY in memcheck.log (part memcheck)", "0")
    text = read(outs, "racecheck.log")
    sums = re.findall(r"RACECHECK SUMMARY: (\d+) hazard", text or "")
    if not sums:
        v.missing("racecheck", "no RACECHECK SUMMARY in racecheck.log (part racecheck)", "0 outside cuBLASLt")
        return
    # test_gpu.sh counts the hazards' accesses outside NVIDIA's closed GEMM kernels (nvjet_*), which
    # racecheck is known to report
    counts = re.findall(r"hazard accesses: (\d+), outside cuBLASLt's nvjet kernels: (\d+)", text)
    total = sum(int(n) for n in sums)
    if len(counts) != len(sums):
        v.missing("racecheck", f"{total} hazards, not counted by kernel (older test_gpu.sh)", "0 outside cuBLASLt")
        return
    if total > 0 and sum(int(a) for a, _ in counts) == 0:  # the report's lines were not recognised
        v.missing("racecheck", f"{total} hazards, no 'access at' line found to name their kernels", "0 outside cuBLASLt")
        return
    n = sum(int(k) for _, k in counts)
    v.add("racecheck", f"{n} accesses in our kernels ({total} hazards in all, {len(sums)} runs)", "0 outside cuBLASLt",
          n == 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outs", nargs="+", metavar="OUTDIR", help="test_gpu.sh output folders ($OUT of each call)")
    ap.add_argument("--cpu-losses", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "records", "train200-losses-cpu.jsonl"))
    ap.add_argument("--allow-missing", action="store_true")
    a = ap.parse_args()
    for o in a.outs:
        if not os.path.isdir(o):
            sys.exit(f"step_aims: {o}: no such folder")
    v = Verdicts()
    seqs = judge_bench(a.outs, v)
    judge_peer(a.outs, v, seqs)
    judge_trainer_run(a.outs, v, "seed.txt", "seed configuration", AIMS["seed_peak_gib"], AIMS["seed_mfu_nominal"])
    judge_trainer_run(a.outs, v, "defaults8b.txt", "8B at the defaults", AIMS["defaults8b_peak_gib"])
    judge_train200(a.outs, v, a.cpu_losses)
    judge_tests(a.outs, v)
    judge_sanitizers(a.outs, v)
    v.print()
    sys.exit(v.status(a.allow_missing))


if __name__ == "__main__":
    main()
