#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/corpus.jsonl: a few thousand varied strings
for tokenizer parity (code, prose, Unicode in many scripts, emoji, whitespace
runs, CRLF, digits, contractions, special tokens written in the text, NFC and
NFD forms, lone combining marks). Deterministic (seeded); runs anywhere."""
import json, random, sys, os

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>",
            "<|start_header_id|>", "<|end_header_id|>", "<think>", "</think>", "<|MASK|>"]
PIECES = ["def ", "return", "    ", "\t", "\n", "\r\n", "  \n\n", "   ", "if x == 1:", "self.", "__init__",
          "import numpy as np", "# comment", "'s", "'T", "'re", "'VE", "'m", "'ll", "'d", "don't", "I'M",
          "12345", "3.14159", "0x1F", "1,000,000", "", " ", "?!", "...", "—", "–", "«guillemets»",
          "naïve café", "Ångström", "e\u0301", "A\u030a", "\u0301", "한국어", "日本語のテキスト", "中文字符",
          "Ελληνικά", "русский язык", "עברית", "العربية", "हिन्दी", "ไทย", "😀", "👩‍👩‍👧", "🇫🇷",
          "\u00a0", "\u2003", "\u200b", "\ufeff", "ﬁ", "Ⅻ", "①", "½", "x²", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\x00", "\x1b[0m",
          "{\"key\": [1, 2, 3]}", "<div class=\"a\">", "a\\nb", "@decorator", "lambda x: x**2", "ßẞ", "İı"]

def random_text(rng):
    n = rng.randint(1, 12)
    parts = []
    for _ in range(n):
        r = rng.random()
        if r < 0.55:
            parts.append(rng.choice(PIECES))
        elif r < 0.65:
            parts.append(rng.choice(SPECIALS))
        elif r < 0.8:
            parts.append(" " * rng.randint(1, 9) + rng.choice(["\n", "\t", "", "x", "\r\n"]))
        else:
            parts.append("".join(chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff),
                                                rng.randint(0x3000, 0x9fff), rng.randint(0x1f300, 0x1faff)]))
                                 for _ in range(rng.randint(1, 8))))
    return "".join(parts)

def main():
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    rng = random.Random(20261130)
    texts = [random_text(rng) for _ in range(2400)]
    data = os.path.join(root, "assets", "data", "code-dev.jsonl")
    with open(data) as f:
        for i, line in enumerate(f):
            if i >= 300: break
            rec = json.loads(line)
            texts.append(rec["prompt"][:1500])
            texts.append(rec["response"][:800])
    out = os.path.join(root, "tests", "fixtures", "tokenizer", "corpus.jsonl")
    with open(out, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    print(f"{len(texts)} strings -> {out}", file=sys.stderr)

main()
