#!/usr/bin/env python3
"""Reference target forward passes from transformers (run on the GPU machine).

1. coder-tiny (Qwen3, bf16 weights, tied embeddings, rope_parameters): three
   sequences of different lengths, each run on its own (positions from 0).
2. A small random Llama-3 model with llama3 rope scaling, untied embeddings,
   saved as fp16 in several shards with model.safetensors.index.json, and its
   config.json rewritten in the older `rope_theta` + `rope_scaling` spelling
   that real Llama-3 checkpoints use.

For each, tests/fixtures/target/<name>.safetensors holds: input_ids int32 [T]
(the sequences packed back to back), seq_starts int32 [nseq+1], layer_out
float32 [L, T, H] (the output of each decoder layer, = hidden_states[l+1]
before any final norm), logits float32 [T, V]. Everything runs in fp32 on the
CPU with eager attention, so the reference itself has no bf16/tf32 rounding.
"""
import json, os, sys
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, AutoTokenizer

from layer_outputs import layer_outputs, packed

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
fx = os.path.join(root, "tests", "fixtures", "target")
os.makedirs(fx, exist_ok=True)
torch.manual_seed(0)


def run_reference(model, seqs, out_path):
    layer_out, logits = layer_outputs(model, model.model.layers, seqs)
    ids, starts = packed(seqs)
    save_file({"input_ids": ids, "seq_starts": starts, "layer_out": layer_out, "logits": logits}, out_path)
    print(f"{out_path}: T={int(starts[-1])} layers={layer_out.shape[0]}", file=sys.stderr)


def coder_tiny():
    d = os.path.join(root, "assets", "coder-tiny")
    tok = AutoTokenizer.from_pretrained(d)
    recs = [json.loads(l) for l in open(os.path.join(root, "assets", "data", "code-dev.jsonl"))][:3]
    lengths = [29, 47, 13]
    seqs = [tok(r["prompt"] + r["response"], add_special_tokens=False)["input_ids"][:n] for r, n in zip(recs, lengths)]
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    run_reference(model, seqs, os.path.join(fx, "coder-tiny.safetensors"))


def llama_random():
    d = os.path.join(fx, "llama3-random")
    cfg = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
                      max_position_embeddings=2048, tie_word_embeddings=False, bos_token_id=1, eos_token_id=[2, 3],
                      rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 64})
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms away from 1 so that a skipped norm weight shows
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    model.half().save_pretrained(d, max_shard_size="100KB", safe_serialization=True)
    cp = os.path.join(d, "config.json")
    c = json.load(open(cp))
    rp = c.pop("rope_parameters")
    c["rope_theta"] = rp.pop("rope_theta")
    c["rope_scaling"] = rp
    json.dump(c, open(cp, "w"), indent=2)
    ref = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 320, (n,), generator=g).tolist() for n in (21, 70, 5)]
    run_reference(ref, seqs, os.path.join(fx, "llama3-random.safetensors"))


coder_tiny()
llama_random()
