#!/usr/bin/env python3
"""Writes the config.json of a model shape the GPU scripts train and generate at without its weights
(`--random-target-weights`): the one home of these shapes for scripts/seed_check.sh, train8b_check.sh and
generate_check.sh (dflash bench's own are src/bench/bench_shapes.c).

  qwen3-8b     Qwen3-8B: 36 layers, hidden 4096, 32 heads of 128 with 8 KV heads
  qwen3.6-27b  Qwen3.6-27B's text model: 64 layers (every fourth full attention, the rest Gated
               DeltaNet), hidden 5120, 24 heads of 256 with 4 KV heads and a quarter of each head
               rotated, DeltaNet 16 key heads and 48 value heads of 128

Usage: python3 scripts/shape_config.py SHAPE DIR   (writes DIR/config.json)"""
import json
import sys

QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
            "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0, "max_position_embeddings": 40960, "tie_word_embeddings": False,
            "hidden_act": "silu", "attention_bias": False, "torch_dtype": "bfloat16",
            "bos_token_id": 151643, "eos_token_id": 151645}

QWEN36_27B = {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "hidden_size": 5120,
              "intermediate_size": 17408, "num_hidden_layers": 64,
              "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(64)],
              "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
              "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "vocab_size": 248320,
              "rms_norm_eps": 1e-6, "partial_rotary_factor": 0.25,
              "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
              "max_position_embeddings": 262144, "tie_word_embeddings": False, "hidden_act": "silu",
              "attention_bias": False, "bos_token_id": 1, "eos_token_id": 2}

SHAPES = {"qwen3-8b": QWEN3_8B, "qwen3.6-27b": QWEN36_27B}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        sys.exit(f"usage: python3 scripts/shape_config.py {{{','.join(SHAPES)}}} DIR")
    with open(f"{sys.argv[2]}/config.json", "w") as f:
        json.dump(SHAPES[sys.argv[1]], f, indent=1)
