#!/usr/bin/env python3
"""transformers' generate at the shapes of `dflash bench --decode`, for the
comparison beside it (same GPU, same run): coder-tiny from
assets/coder-tiny and a Qwen3-8B-shaped model with random weights built from
a config, both bf16 on the GPU, greedy, batch 1 and 64, prompts of
--prompt-len random tokens, --new-tokens new tokens each (EOS ignored).

Decode tokens/s = batch * (new_tokens - 1) / (time(generate new_tokens) -
time(generate 1 token)): the prefill and the first token cancel out, as in
dflash's figure, which times decode steps only. Median of --repeat runs
after a warm-up, torch.cuda.synchronize around each.

Usage: python3 dev/compare/decode_transformers.py [--target assets/coder-tiny]
"""
import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM


def qwen3_8b_config():
    # config.json of Qwen/Qwen3-8B (the shape dflash's bench builds)
    return Qwen3Config(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                       rms_norm_eps=1e-6, tie_word_embeddings=False)


def timed_generate(model, ids, new_tokens):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                   do_sample=False, pad_token_id=0, eos_token_id=None)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def bench(model, name, vocab, batch, prompt_len, new_tokens, repeat):
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(0, vocab - 2, (batch, prompt_len), generator=g).cuda()
    timed_generate(model, ids, 4)  # warm-up
    full = statistics.median(timed_generate(model, ids, new_tokens) for _ in range(repeat))
    first = statistics.median(timed_generate(model, ids, 1) for _ in range(repeat))
    decode_s = (full - first) / (new_tokens - 1)
    print(f"{name:26s} batch {batch:3d} {batch / decode_s:9.1f} tokens/s {decode_s * 1e3:8.3f} ms/step "
          f"(generate {new_tokens}: {full:.3f} s, prefill + 1: {first:.3f} s)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="assets/coder-tiny")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-8b", action="store_true")
    a = ap.parse_args()
    import transformers
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}; "
          f"prompts of {a.prompt_len} tokens, {a.new_tokens} new tokens, greedy, bf16, sdpa attention", flush=True)
    model = AutoModelForCausalLM.from_pretrained(a.target, dtype=torch.bfloat16).cuda().eval()
    for batch in (1, 64):
        bench(model, a.target, model.config.vocab_size, batch, a.prompt_len, a.new_tokens, a.repeat)
    del model
    torch.cuda.empty_cache()
    if a.skip_8b:
        return
    torch.manual_seed(1234)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(qwen3_8b_config()).eval()
    torch.set_default_dtype(torch.float32)
    for batch in (1, 64):
        bench(model, "Qwen3-8B shape (random)", 151936, batch, a.prompt_len, a.new_tokens, a.repeat)


if __name__ == "__main__":
    with torch.inference_mode():
        main()
