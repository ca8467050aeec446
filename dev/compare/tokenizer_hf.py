#!/usr/bin/env python3
"""Hugging Face `tokenizers` encode speed on the texts `dflash bench` uses
(each prompt and each response of a JSONL file, encoded separately, no
special tokens added): one thread (a loop of encode) and all threads
(encode_batch). Prints MB/s; run beside `dflash bench --tokenizer` on the same
machine: python3 dev/compare/tokenizer_hf.py TOKENIZER_JSON DATA_JSONL"""
import json, os, sys, time
from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1])
texts = []
for line in open(sys.argv[2], encoding="utf-8"):
    r = json.loads(line)
    texts += [r["prompt"], r["response"]]
nbytes = sum(len(t.encode("utf-8")) for t in texts)


def best(fn, repeat=3):
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


one = best(lambda: [tok.encode(t, add_special_tokens=False) for t in texts])
many = best(lambda: tok.encode_batch(texts, add_special_tokens=False))
print(f"HF tokenizers {sys.argv[1]}: {nbytes / one / 1e6:.2f} MB/s (1 thread), "
      f"{nbytes / many / 1e6:.2f} MB/s (encode_batch, {os.cpu_count()} cores) over {nbytes / 1e6:.2f} MB")
