#!/usr/bin/env python3
"""Reference forward passes of a small random hybrid Qwen3.5 target (Gated
DeltaNet + gated full attention) from transformers (run on the GPU machine,
on its CPU, in fp32 with eager attention).

Usage: hybrid_ref.py [OUT_DIR]   (default tests/fixtures/hybrid)

The committed fixtures were made by this script with transformers 5.17 (CPU
torch on the GPU machine, a CUDA machine with torch).

Writes under OUT_DIR:
  qwen35-random/            config.json + model.safetensors of a
                            Qwen3_5ForCausalLM: 4 layers (linear, linear,
                            full, linear), grouped DeltaNet heads (2 key heads,
                            4 value heads, key dim != value dim), partial
                            rotary 0.25, untied lm head, every weight random
                            (norm weights away from their neutral value so
                            that a skipped (1 + w) or gate shows).
  qwen35-random.safetensors input_ids int32 [T] (sequences packed back to
                            back), seq_starts int32 [nseq+1], layer_out
                            float32 [L, T, H] (output of each decoder layer =
                            hidden_states[l+1]), logits float32 [T, V]; each
                            sequence run on its own with positions from 0.
                            One sequence is longer than the 64-token chunk of
                            transformers' chunked delta rule.
  qwen35-vl-random/         the same text weights inside a
                            Qwen3_5ForConditionalGeneration (nested
                            text_config, weights under model.language_model.,
                            a tiny vision tower), the layout of the released
                            Qwen3.5 / Qwen3.6 checkpoints. Its logits are
                            checked here to equal the causal LM's.
"""
import json, os, sys
import torch
from safetensors.torch import save_file
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

from layer_outputs import layer_outputs, packed

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "fixtures", "hybrid")
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)

TEXT = dict(vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
            max_position_embeddings=4096, tie_word_embeddings=False, bos_token_id=1, eos_token_id=[2, 3],
            layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=24,
            linear_num_key_heads=2, linear_num_value_heads=4,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25})


def randomize(model):
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("linear_attn.norm.weight"):  # plain weight (gated norm)
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif "norm" in n:  # zero-centred (1 + w) norms
                p.copy_(0.2 * torch.randn_like(p))
            elif n.endswith("A_log"):  # decays spread from slow to fast
                p.copy_(torch.empty_like(p).uniform_(0.05, 3.0).log())
            elif n.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn_like(p))
            elif "conv1d" in n:
                p.copy_(0.4 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))


def run_reference(model, layers, seqs, out_path):
    layer_out, logits = layer_outputs(model, layers, seqs)
    ids, starts = packed(seqs)
    tensors = {"input_ids": ids, "seq_starts": starts, "layer_out": layer_out, "logits": logits}
    if out_path:
        save_file(tensors, out_path)
        print(f"{out_path}: T={int(starts[-1])} layers={len(layers)}", file=sys.stderr)
    return tensors


def causal_lm(seqs):
    d = os.path.join(out, "qwen35-random")
    model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**TEXT))
    randomize(model)
    model.save_pretrained(d, safe_serialization=True)
    print(open(os.path.join(d, "config.json")).read(), file=sys.stderr)
    ref = Qwen3_5ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    return ref, run_reference(ref, ref.model.layers, seqs, os.path.join(out, "qwen35-random.safetensors"))


def conditional_generation(causal, seqs, expected):
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, in_channels=3, patch_size=2,
                  spatial_merge_size=1, temporal_patch_size=1, out_hidden_size=TEXT["hidden_size"],
                  num_position_embeddings=16)
    cfg = Qwen3_5Config(text_config=dict(TEXT, eos_token_id=3), vision_config=vision, tie_word_embeddings=False,
                        image_token_id=250, video_token_id=251, vision_start_token_id=252, vision_end_token_id=253)
    model = Qwen3_5ForConditionalGeneration(cfg)
    sd = {}
    for k, v in causal.state_dict().items():
        sd[k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k] = v
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all(k.startswith("model.visual.") for k in missing), [k for k in missing if "visual" not in k]
    d = os.path.join(out, "qwen35-vl-random")
    model.save_pretrained(d, safe_serialization=True)
    print(open(os.path.join(d, "config.json")).read(), file=sys.stderr)
    ref = Qwen3_5ForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    got = run_reference(ref, ref.model.language_model.layers, seqs, None)
    diff = (got["logits"] - expected["logits"]).abs().max().item()
    print(f"conditional generation vs causal LM: max logit difference {diff:.3g}", file=sys.stderr)
    assert diff < 1e-4


g = torch.Generator().manual_seed(1)
sequences = [torch.randint(0, TEXT["vocab_size"], (n,), generator=g).tolist() for n in (70, 9, 33, 1)]
causal, expected = causal_lm(sequences)
try:
    conditional_generation(causal, sequences, expected)
except Exception as e:  # the causal-LM fixture stands on its own
    print(f"conditional generation variant failed: {type(e).__name__}: {e}", file=sys.stderr)
