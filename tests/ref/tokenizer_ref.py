#!/usr/bin/env python3
"""Reference token ids from Hugging Face `tokenizers` (run on the GPU machine,
which has it): for each tokenizer and each corpus string, the ids of
encode(text, add_special_tokens=False) and the decode of those ids.
Writes tests/fixtures/tokenizer/ids_<name>.jsonl, one {"ids", "decoded"} a line."""
import json, os, sys
from tokenizers import Tokenizer

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
fx = os.path.join(root, "tests", "fixtures", "tokenizer")
sources = {"coder-tiny": os.path.join(root, "assets", "coder-tiny", "tokenizer.json"),
           "qwen3": os.path.join(root, "tests", ".cache", "tokenizers", "qwen3", "tokenizer.json"),
           "llama3": os.path.join(root, "tests", ".cache", "tokenizers", "llama3", "tokenizer.json")}
texts = [json.loads(l)["text"] for l in open(os.path.join(fx, "corpus.jsonl"), encoding="utf-8")]
for name, path in sources.items():
    tok = Tokenizer.from_file(path)
    out = os.path.join(fx, f"ids_{name}.jsonl")
    with open(out, "w", encoding="utf-8") as f:
        for t in texts:
            ids = tok.encode(t, add_special_tokens=False).ids
            f.write(json.dumps({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)}, ensure_ascii=False) + "\n")
    print(f"{name}: {len(texts)} strings -> {out}", file=sys.stderr)
