#!/usr/bin/env python3
"""Checks that a drafter directory exported by `dflash train` loads as the
serving stacks load it, and makes the logits the C test compares with.

The drafter here is rebuilt as torch modules with the structure of the public
z-lab DFlashDraftModel (Qwen3-style decoder layers whose attention takes
keys/values from [k_proj(context); k_proj(block)], k_norm on both, RoPE on
[context positions; block positions], fc + hidden_norm on the target features),
configured from config.json through transformers' Qwen3Config, and its weights
loaded with load_state_dict(strict=True) from model.safetensors: a missing,
extra or misshapen tensor fails here. Runs on the GPU machine (torch and
transformers), in fp32 on the CPU.

Input: tests/fixtures/export/drafter/ (a `dflash train` output, committed),
the target assets/coder-tiny, and the first sequence of
tests/fixtures/drafter/step.safetensors (ids and target tap features).
Output: tests/fixtures/export/zlab_logits.safetensors with, for each context
length S in CONTEXTS, the block [ids[S], MASK...] at positions S..S+B-1 and
the drafter's logits [B, V] for it (lm head = the target's tied embedding).
"""
import json, math, os, sys
import torch
from torch import nn
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config, AutoModelForCausalLM

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
draft_dir = os.path.join(root, "tests", "fixtures", "export", "drafter")
CONTEXTS = [21, 40]


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(n)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, pos, theta):
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    ang = pos.float()[:, None] * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    rot = torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1)
    return x * cos[:, None] + rot * sin[:, None]


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.theta = c.rope_parameters["rope_theta"]  # transformers maps config.json's rope_theta here
        self.q_proj = nn.Linear(c.hidden_size, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, c.hidden_size, bias=False)
        self.q_norm, self.k_norm = RMSNorm(self.hd, c.rms_norm_eps), RMSNorm(self.hd, c.rms_norm_eps)

    def forward(self, h, ctx, pos_ctx, pos_q):
        Q, S = h.shape[0], ctx.shape[0]
        q = self.q_norm(self.q_proj(h).view(Q, self.nh, self.hd))
        k = self.k_norm(torch.cat([self.k_proj(ctx), self.k_proj(h)]).view(S + Q, self.nkv, self.hd))
        v = torch.cat([self.v_proj(ctx), self.v_proj(h)]).view(S + Q, self.nkv, self.hd)
        q, k = rotate(q, pos_q, self.theta), rotate(k, torch.cat([pos_ctx, pos_q]), self.theta)
        rep = self.nh // self.nkv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        p = (torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(self.hd)).softmax(-1)  # one block sees all
        return self.o_proj(torch.einsum("hqk,khd->qhd", p, v).reshape(Q, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn, self.mlp = Attention(c), MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x, ctx, pos_ctx, pos_q):
        x = x + self.self_attn(self.input_layernorm(x), ctx, pos_ctx, pos_q)
        return x + self.mlp(self.post_attention_layernorm(x))


class Drafter(nn.Module):
    def __init__(self, c):
        super().__init__()
        taps = c.dflash_config["target_layer_ids"]
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.num_hidden_layers)])
        self.fc = nn.Linear(len(taps) * c.hidden_size, c.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, noise_embedding, target_hidden, pos_ctx, pos_q):
        ctx = self.hidden_norm(self.fc(target_hidden))
        x = noise_embedding
        for layer in self.layers:
            x = layer(x, ctx, pos_ctx, pos_q)
        return self.norm(x)


def main():
    cfg = Qwen3Config.from_pretrained(draft_dir)  # the serving stacks' config path
    raw = json.load(open(os.path.join(draft_dir, "config.json")))
    assert raw["architectures"] == ["DFlashDraftModel"] and cfg.block_size == raw["block_size"]
    model = Drafter(cfg).float().eval()
    state = {k: v.float() for k, v in load_file(os.path.join(draft_dir, "model.safetensors")).items()}
    model.load_state_dict(state, strict=True)
    target = AutoModelForCausalLM.from_pretrained(os.path.join(root, "assets", "coder-tiny"), dtype=torch.float32)
    embed, lm_head = target.model.embed_tokens.weight.detach(), target.lm_head.weight.detach()
    step = load_file(os.path.join(root, "tests", "fixtures", "drafter", "step.safetensors"))
    n0 = int(step["seq_starts"][1])
    ids, feats = step["input_ids"][:n0].long(), step["features"][:n0]
    B, mask_id = cfg.block_size, cfg.dflash_config["mask_token_id"]
    out = {}
    with torch.no_grad():
        for S in CONTEXTS:
            block = torch.tensor([int(ids[S])] + [mask_id] * (B - 1))
            h = model(embed[block], feats[:S], torch.arange(S), torch.arange(S, S + B))
            out[f"block.{S}"] = block.to(torch.int32)
            out[f"logits.{S}"] = (h @ lm_head.T).contiguous()
            print(S, (h @ lm_head.T).argmax(-1).tolist(), file=sys.stderr)
    save_file(out, os.path.join(root, "tests", "fixtures", "export", "zlab_logits.safetensors"))


if __name__ == "__main__":
    main()
