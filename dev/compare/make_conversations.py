#!/usr/bin/env python3
"""Writes N chat records ({"messages": [...]}) for the prepare benchmark,
deterministically, from the chat test conversations with varied lengths:
python3 dev/compare/make_conversations.py N OUT.jsonl"""
import json, os, random, sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
convs = json.load(open(os.path.join(root, "tests", "fixtures", "chat", "conversations.json")))["conversations"]
code = [json.loads(l) for l in open(os.path.join(root, "assets", "data", "code-train.jsonl"))]
n, out = int(sys.argv[1]), sys.argv[2]
rng = random.Random(7)
with open(out, "w") as f:
    for i in range(n):
        base = rng.choice(convs)
        msgs = [dict(m) for m in (base["messages"] if isinstance(base, dict) else base)]
        rec = rng.choice(code)  # a code prompt/answer turn so that lengths look like training data
        msgs += [{"role": "user", "content": rec["prompt"][:1500]}, {"role": "assistant", "content": rec["response"][:1500]}]
        if msgs[0]["role"] != "system" and rng.random() < 0.5:
            msgs.insert(0, {"role": "system", "content": "You are a helpful coding assistant."})
        f.write(json.dumps({"messages": msgs}, ensure_ascii=False) + "\n")
