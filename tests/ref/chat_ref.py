"""Reference chat renderings for tests/test_chat_template.c.

For every conversation in tests/fixtures/chat/conversations.json and each of the
Qwen3, Llama-3 and Llama-3.1 tokenizers (tokenizer.json + tokenizer_config.json
under tests/.cache/tokenizers/), writes tests/fixtures/chat/<family>.json with

  text: tokenizer.apply_chat_template(messages, tokenize=False)
        (Llama-3.1: with date_string=DATE, so that the fixture does not depend
        on the day it was made; the file records DATE)
  ids:  tokenizer.encode(text, add_special_tokens=False)
  prompt_text: the conversation up to its last user message rendered with
        add_generation_prompt=True (what generate feeds the target), or null
  mask: the assistant-only loss mask (DFLASH.md section 5), derived here from
        the rendered text: each assistant turn's span runs from the end of its
        role header to the end of the end-of-turn token that closes it; a token
        gets 1 when its first byte lies inside such a span.

The token byte offsets are computed from the tokens themselves (byte-level
pieces mapped back to bytes, added tokens as their text), not from the
tokenizer's offset mapping, and are checked to add up to the (normalized) text.

usage: python3 chat_ref.py TOKENIZERS_DIR CONVERSATIONS_JSON OUT_DIR

With one argument, python3 chat_ref.py OUT_DIR writes OUT_DIR/transformers.json
from what the repository holds: every template of
tests/fixtures/chat_templates/ set on the assets/coder-tiny tokenizer, for
every conversation of tests/jinja/conversations.json, with and without the
generation prompt and with enable_thinking absent, true and false, the text
apply_chat_template renders (or the error it raises) and, for a template with
{% generation %} blocks, the token ids and the assistant mask of
return_assistant_tokens_mask. strftime_now reads the clock: the file records
the time (TZ=UTC) the renderings were made at.
"""
import json
import os
import re
import sys
import time
import unicodedata

from transformers import AutoTokenizer

HEADERS = {
    "qwen3": (re.compile(r"<\|im_start\|>([^\n]*)\n"), "<|im_end|>"),
    "llama3": (re.compile(r"<\|start_header_id\|>(.*?)<\|end_header_id\|>\n\n"), "<|eot_id|>"),
}
HEADERS["llama3.1"] = HEADERS["llama3"]
DATE = "26 Jul 2024"


def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_bytes(tok, ids, decoder):
    added = {i: t.content for i, t in tok.added_tokens_decoder.items()}
    out = []
    for i, piece in zip(ids, tok.convert_ids_to_tokens(ids)):
        out.append(added[i].encode() if i in added else bytes(decoder[c] for c in piece))
    return out


def assistant_spans(family, text):
    header, end_token = HEADERS[family]
    spans = []
    for m in header.finditer(text):
        end = text.find(end_token, m.end())
        assert end >= 0, "unterminated turn"
        if m.group(1) == "assistant":
            spans.append((m.end(), end + len(end_token)))
    return spans


def main():
    tok_dir, conv_path, out_dir = sys.argv[1:4]
    conversations = json.load(open(conv_path, encoding="utf-8"))["conversations"]
    decoder = byte_decoder()
    for family in ("qwen3", "llama3", "llama3.1"):
        extra = {"date_string": DATE} if family == "llama3.1" else {}
        tok = AutoTokenizer.from_pretrained(f"{tok_dir}/{family}")
        nfc = family == "qwen3"  # the Qwen3 tokenizer.json normalizer is NFC; Llama-3 has none
        norm = (lambda s: unicodedata.normalize("NFC", s)) if nfc else (lambda s: s)
        results = []
        for conv in conversations:
            text = tok.apply_chat_template(conv, tokenize=False, **extra)
            ids = tok.encode(text, add_special_tokens=False)
            direct = tok.apply_chat_template(conv, tokenize=True, **extra)
            if not isinstance(direct, list):  # newer transformers return a BatchEncoding
                direct = direct["input_ids"]
            assert ids == list(direct), "tokenize=True differs"
            pieces = token_bytes(tok, ids, decoder)
            assert b"".join(pieces) == norm(text).encode(), "token bytes do not add up to the text"
            spans = [(len(norm(text[:a]).encode()), len(norm(text[:b]).encode())) for a, b in assistant_spans(family, text)]
            mask, at = [], 0
            for p in pieces:
                mask.append(int(any(a <= at < b for a, b in spans)))
                at += len(p)
            users = [i for i, m in enumerate(conv) if m["role"] in ("user", "human")]
            prompt_text = (tok.apply_chat_template(conv[: users[-1] + 1], tokenize=False, add_generation_prompt=True,
                                                   **extra) if users else None)
            results.append({"text": text, "ids": ids, "mask": mask, "prompt_text": prompt_text})
        with open(f"{out_dir}/{family}.json", "w", encoding="utf-8") as f:
            json.dump({"family": family, **extra, "results": results}, f, ensure_ascii=False, separators=(",", ":"))
        print(family, len(results), "conversations")


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECIALS = ("bos_token", "eos_token", "unk_token", "pad_token")


def render_all(tok, name, src, convs, tools):
    """Every rendering of one template: a list of dicts."""
    out = []
    for conv_name, conv in convs.items():
        for agp in (0, 1):
            for think in (-1, 0, 1):
                kwargs = {"add_generation_prompt": bool(agp)}
                if think >= 0:
                    kwargs["enable_thinking"] = bool(think)
                if conv_name.startswith("tools"):
                    kwargs["tools"] = tools
                r = {"conversation": conv_name, "add_generation_prompt": agp, "enable_thinking": think}
                try:
                    r["text"] = tok.apply_chat_template(conv, chat_template=src, tokenize=False, **kwargs)
                    if "{%- generation" in src or "{% generation" in src:
                        enc = tok.apply_chat_template(conv, chat_template=src, tokenize=True, return_dict=True,
                                                      return_assistant_tokens_mask=True, **kwargs)
                        r["ids"] = list(enc["input_ids"])
                        r["mask"] = list(enc["assistant_masks"])
                except Exception as e:  # a conversation the template rejects
                    r["error"] = f"{type(e).__name__}: {e}"
                out.append(r)
    return out


def templates_main(out_dir):
    os.environ["TZ"] = "UTC"
    time.tzset()
    tok = AutoTokenizer.from_pretrained(f"{ROOT}/assets/coder-tiny")
    conv_file = json.load(open(f"{ROOT}/tests/jinja/conversations.json", encoding="utf-8"))
    tdir = f"{ROOT}/tests/fixtures/chat_templates"
    while True:
        now = int(time.time())
        templates = {}
        for f in sorted(os.listdir(tdir)):
            if f.endswith(".jinja"):
                src = open(f"{tdir}/{f}", encoding="utf-8").read()
                templates[f[:-6]] = render_all(tok, f[:-6], src, conv_file["conversations"], conv_file["tools"])
        if time.strftime("%Y-%m-%d", time.gmtime(now)) == time.strftime("%Y-%m-%d", time.gmtime()):
            break  # all renderings on the day `now` names
    specials = {k: getattr(tok, k) for k in SPECIALS if isinstance(getattr(tok, k, None), str)}
    import transformers
    with open(f"{out_dir}/transformers.json", "w", encoding="utf-8") as f:
        json.dump({"transformers": transformers.__version__, "now": now, "specials": specials, "templates": templates},
                  f, ensure_ascii=False, separators=(",", ":"))
    print(len(templates), "templates,", sum(len(v) for v in templates.values()), "renderings")


if __name__ == "__main__":
    if len(sys.argv) == 2:
        templates_main(sys.argv[1])
    else:
        main()
