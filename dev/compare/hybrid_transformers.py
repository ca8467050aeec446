#!/usr/bin/env python3
"""transformers' forward of the Qwen3.6-27B-shaped hybrid target that
`dflash bench --device cuda --hybrid` builds (same shape, same number of
layers, random weights, bf16 on the GPU, sdpa attention), on the same tokens:
--seqs sequences of --seq-len tokens (ids[i] = (i * 7919 + 13) % (vocab - 2)
over the packed order, as dflash's bench). transformers cannot pack
variable-length sequences through the DeltaNet layers, so they run as one
batch of equal lengths (no padding either way: equal lengths).

Figures: median of --repeat timed forwards after a warm-up, torch.cuda.
synchronize around each: all layers without the head (model.model) and
all layers + logits (the causal LM); tokens/s = seqs * seq_len / time, and
ms per layer. Which DeltaNet kernels transformers used (flash-linear-
attention and causal-conv1d when installed, else its torch fallback) is
printed, since it decides transformers' speed.

Shape (public Qwen3.5-27B / Qwen3.6-27B config.json, as dflash's
qwen36_27b_shape): hidden 5120, MLP 17408, 64 layers (every 4th full
attention), 24 / 4 heads of 256 with output gate, partial rotary 0.25,
theta 1e7, DeltaNet 16 key / 48 value heads of 128, conv kernel 4,
vocabulary 248320, untied head.

With --decode, instead: transformers' greedy `generate` on the same random
model at batch 1 and 64, as dev/compare/decode_transformers.py times it (prompts of
--prompt-len tokens, --new-tokens new tokens, decode steps only), for
`dflash bench --device cuda --decode --hybrid`.

Usage: python3 dev/compare/hybrid_transformers.py [--layers 16] [--seqs 8] [--seq-len 2048]
       python3 dev/compare/hybrid_transformers.py --decode [--layers 64] [--prompt-len 512] [--new-tokens 64]
"""
import argparse
import statistics
import time

import torch


def config(layers):
    from transformers import Qwen3_5TextConfig
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
    return Qwen3_5TextConfig(
        vocab_size=248320, hidden_size=5120, intermediate_size=17408, num_hidden_layers=layers,
        num_attention_heads=24, num_key_value_heads=4, head_dim=256, rms_norm_eps=1e-6,
        max_position_embeddings=262144, tie_word_embeddings=False, layer_types=types,
        linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_num_key_heads=16, linear_num_value_heads=48,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25})


def timed(fn, repeat):
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def kernels_used():
    try:
        import transformers.models.qwen3_5.modeling_qwen3_5 as mq
    except ImportError:
        return "unknown (no transformers.models.qwen3_5.modeling_qwen3_5)"
    names = ("is_fast_path_available", "chunk_gated_delta_rule", "causal_conv1d_fn")
    return ", ".join(f"{n}={'yes' if getattr(mq, n, None) else 'no'}" for n in names)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=64)
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--decode", action="store_true")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=64)
    a = ap.parse_args()
    import transformers
    from transformers import Qwen3_5ForCausalLM
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}; "
          f"{a.layers} layers, batch {a.seqs} x {a.seq_len} tokens, bf16, sdpa; DeltaNet kernels: {kernels_used()}",
          flush=True)
    torch.manual_seed(1234)
    torch.set_default_dtype(torch.bfloat16)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = Qwen3_5ForCausalLM(config(a.layers)).eval()
    torch.set_default_dtype(torch.float32)
    print(f"random weights built in {time.perf_counter() - t0:.1f} s", flush=True)
    if a.decode:
        from decode_transformers import bench
        for batch in (1, 64):
            bench(model, f"Qwen3.6-27B shape, {a.layers} layers", 248320, batch, a.prompt_len, a.new_tokens, a.repeat)
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
        return
    n = a.seqs * a.seq_len
    ids = ((torch.arange(n, dtype=torch.int64) * 7919 + 13) % (248320 - 2)).view(a.seqs, a.seq_len).cuda()
    for name, fn in (("all layers, no head", lambda: model.model(input_ids=ids, use_cache=False)),
                     ("all layers + logits", lambda: model(input_ids=ids, use_cache=False))):
        s = timed(fn, a.repeat)
        print(f"transformers {name:22s} {n / s:9.0f} tokens/s {s * 1e3:9.2f} ms  {s * 1e3 / a.layers:7.2f} ms per "
              f"layer ({a.layers} layers)", flush=True)
    print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)


if __name__ == "__main__":
    with torch.inference_mode():
        main()
