"""The DFlash drafter as a PyTorch module, for transformers' trust_remote_code.

Written by dflash (https://arxiv.org/abs/2602.06036; the project's docs/DFLASH.md, sections 3, 6 and 7)
next to config.json and model.safetensors, so that

    from transformers import AutoModel
    draft = AutoModel.from_pretrained(DRAFTER_DIR, trust_remote_code=True)

loads the directory as it is. The drafter holds no embedding and no LM head: both are the target's
(frozen, shared). A block is [last committed token, MASK, ..., MASK] (block_size tokens); the drafter
fills every MASK in one forward pass, conditioned on the target's hidden states at the taps
dflash_config.target_layer_ids (the OUTPUT of those decoder layers: transformers' hidden_states[l + 1]).

    target = AutoModelForCausalLM.from_pretrained(TARGET_DIR)
    out = target(input_ids, output_hidden_states=True)
    ctx = draft.extract_context_feature(out.hidden_states)           # [batch, S, n_taps * hidden]
    block = torch.full((1, draft.block_size), draft.mask_token_id)
    block[0, 0] = next_token                                          # the target's token at position S
    h = draft(noise_embedding=target.get_input_embeddings()(block), target_hidden=ctx).last_hidden_state
    draft_tokens = target.lm_head(h).argmax(-1)[:, 1:]                # proposals for positions S+1 ..

Attention (spec section 4, step 3): a query of a block whose first token sits at position a sees the
context positions p < a (in a sliding_attention layer only the last sliding_window of them) and every
position of its own block; keys and values are [k_proj(context) ; k_proj(block)], k_norm on both, RoPE
(rotate_half, the target's base over the whole head_dim) on [context positions ; block positions].
"""
import math
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

try:
    from transformers import Qwen3Config as _DFlashConfig
except ImportError:  # older transformers: config.json's fields still load
    from transformers import PretrainedConfig as _DFlashConfig


def _rope_settings(config):
    """(theta, llama3 scaling dict or None), from rope_theta / rope_scaling or rope_parameters."""
    params = getattr(config, "rope_parameters", None) or {}
    theta = getattr(config, "rope_theta", None) or params.get("rope_theta") or 10000.0
    scaling = getattr(config, "rope_scaling", None) or params
    kind = scaling.get("rope_type", scaling.get("type")) if scaling else None
    return float(theta), (scaling if kind == "llama3" else None)


def _inverse_frequencies(config, head_dim):
    theta, scaling = _rope_settings(config)
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).double() / head_dim))
    if scaling is None:
        return inv.float()
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    mid = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(mid, (1 - smooth) * scaled / factor + smooth * scaled, scaled).float()


def _rotate(x, cos, sin):
    """x [batch, heads, n, head_dim] with cos/sin [batch, n, head_dim]: the rotate_half convention."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + turned * sin[:, None]


class DFlashRMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class DFlashAttention(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or hidden // self.heads
        types = getattr(config, "layer_types", None) or []
        sliding = layer < len(types) and types[layer] == "sliding_attention"
        self.window = int(getattr(config, "sliding_window", 0) or 0) if sliding else 0
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        self.q_norm = DFlashRMSNorm(self.head_dim, eps)
        self.k_norm = DFlashRMSNorm(self.head_dim, eps)

    def _split(self, x, heads):
        b, n, _ = x.shape
        return x.view(b, n, heads, self.head_dim).transpose(1, 2)

    def forward(self, h, ctx, rope_q, rope_k, allowed):
        """h [b, Q, H] (the block), ctx [b, S, H]; allowed [b, Q, S + Q] (True: attends)."""
        kin = torch.cat([ctx, h], dim=1)
        q = self.q_norm(self._split(self.q_proj(h), self.heads))
        k = self.k_norm(self._split(self.k_proj(kin), self.kv_heads))
        v = self._split(self.v_proj(kin), self.kv_heads)
        q, k = _rotate(q, *rope_q), _rotate(k, *rope_k)
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)).float() / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        out = torch.matmul(scores.softmax(-1).to(v.dtype), v)
        return self.o_proj(out.transpose(1, 2).reshape(h.shape[0], h.shape[1], -1))


class DFlashMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DFlashDecoderLayer(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        self.self_attn = DFlashAttention(config, layer)
        self.mlp = DFlashMLP(config)
        self.input_layernorm = DFlashRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = DFlashRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, ctx, rope_q, rope_k, allowed):
        x = x + self.self_attn(self.input_layernorm(x), ctx, rope_q, rope_k, allowed)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDraftModel(PreTrainedModel):
    """config.json's auto_map AutoModel. forward(noise_embedding, target_hidden) -> the drafter's final
    hidden states (after norm) for every block position; the target's lm_head turns them into logits."""

    config_class = _DFlashConfig
    _no_split_modules = ["DFlashDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)
        dflash = getattr(config, "dflash_config", None) or {}
        self.target_layer_ids = list(dflash["target_layer_ids"])
        self.mask_token_id = dflash.get("mask_token_id")
        self.block_size = int(getattr(config, "block_size", 16))
        hidden = config.hidden_size
        self.fc = nn.Linear(len(self.target_layer_ids) * hidden, hidden, bias=False)
        self.hidden_norm = DFlashRMSNorm(hidden, config.rms_norm_eps)
        self.layers = nn.ModuleList([DFlashDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = DFlashRMSNorm(hidden, config.rms_norm_eps)
        self.head_dim = self.layers[0].self_attn.head_dim
        self.post_init()

    def _init_weights(self, module):
        """The spec's init (section 4, step 7): normal(0, 0.02) linear weights, norms of ones."""
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(0.0, 0.02)
        elif isinstance(module, DFlashRMSNorm):
            module.weight.data.fill_(1.0)

    def extract_context_feature(self, hidden_states):
        """The tap features from a target's output_hidden_states (hidden_states[0] is the embedding
        output, so the output of decoder layer l is hidden_states[l + 1]): [batch, S, n_taps * H]."""
        return torch.cat([hidden_states[l + 1] for l in self.target_layer_ids], dim=-1)

    def _rope(self, positions, dtype):
        # computed here, not held as a buffer: transformers builds the module on the meta device and
        # materializes what the checkpoint does not hold uninitialized, which made a buffer garbage
        inv_freq = _inverse_frequencies(self.config, self.head_dim).to(positions.device)
        angles = positions[..., None].float() * inv_freq
        emb = torch.cat([angles, angles], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def _allowed(self, ctx_pos, block_pos, window):
        """[b, Q, S + Q]: context before the query's block start (within the window), its own block."""
        q = block_pos.shape[1]
        block_of = torch.arange(q, device=block_pos.device) // self.block_size
        start = block_pos[:, block_of * self.block_size]  # the position of each query's block's first token
        ctx_ok = ctx_pos[:, None, :] < start[:, :, None]
        if window > 0:
            ctx_ok = ctx_ok & (ctx_pos[:, None, :] >= start[:, :, None] - window)
        same = (block_of[:, None] == block_of[None, :]).expand(block_pos.shape[0], q, q)
        return torch.cat([ctx_ok, same], dim=-1)

    def forward(self, noise_embedding: torch.Tensor, target_hidden: torch.Tensor,
                position_ids: Optional[torch.Tensor] = None, context_position_ids: Optional[torch.Tensor] = None,
                **kwargs):
        """noise_embedding [b, Q, H]: the target's embeddings of the block tokens (Q = blocks * block_size);
        target_hidden [b, S, n_taps * H]: the tap features of the context; position_ids [b, Q]: the block
        tokens' positions (default S, S+1, ...: one block right after the context); context_position_ids
        [b, S] (default 0..S-1)."""
        b, s = target_hidden.shape[:2]
        q, device = noise_embedding.shape[1], noise_embedding.device
        if context_position_ids is None:
            context_position_ids = torch.arange(s, device=device).expand(b, s)
        if position_ids is None:
            position_ids = (s + torch.arange(q, device=device)).expand(b, q)
        dtype = noise_embedding.dtype
        ctx = self.hidden_norm(self.fc(target_hidden.to(dtype)))
        rope_q = self._rope(position_ids, dtype)
        rope_k = self._rope(torch.cat([context_position_ids, position_ids], dim=1), dtype)
        masks = {}
        x = noise_embedding
        for layer in self.layers:
            window = layer.self_attn.window
            if window not in masks:
                masks[window] = self._allowed(context_position_ids, position_ids, window)
            x = layer(x, ctx, rope_q, rope_k, masks[window])
        return BaseModelOutput(last_hidden_state=self.norm(x))
