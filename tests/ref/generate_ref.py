#!/usr/bin/env python3
"""Greedy continuations from transformers' generate() for coder-tiny (run on
the GPU machine, in fp32 on the CPU so that no bf16/tf32 rounding can flip an
argmax). Writes tests/fixtures/generate/greedy.jsonl: one
{"id", "prompt_ids", "output_ids"} per prompt, output_ids being the new
tokens only, stopped at EOS (EOS itself excluded) or at max_new_tokens."""
import json, os, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
out_dir = os.path.join(root, "tests", "fixtures", "generate")
os.makedirs(out_dir, exist_ok=True)
d = os.path.join(root, "assets", "coder-tiny")
tok = AutoTokenizer.from_pretrained(d)
model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
eos = model.config.eos_token_id
MAX_NEW = 48
recs = [json.loads(l) for l in open(os.path.join(root, "assets", "data", "code-dev.jsonl"))][5:13]
with open(os.path.join(out_dir, "greedy.jsonl"), "w") as f:
    for i, r in enumerate(recs):
        ids = tok(r["prompt"], add_special_tokens=False)["input_ids"][-(40 + 23 * i):]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False,
                                 eos_token_id=eos, pad_token_id=eos)
        new = out[0, len(ids):].tolist()
        if eos in new:
            new = new[:new.index(eos)]
        f.write(json.dumps({"id": r["id"], "prompt_ids": ids, "output_ids": new, "max_new_tokens": MAX_NEW}) + "\n")
        print(i, len(ids), len(new), file=sys.stderr)
