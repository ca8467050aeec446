#!/usr/bin/env python3
"""Reference DFlash drafter training step (spec sections 3 and 4), written
directly in PyTorch from the spec and checked against the structure of the
z-lab drafter (k_norm on context and block keys, RoPE on [context ; block]
positions, keys/values = [k_proj(ctx) ; k_proj(block)]). Runs in fp32 on the
CPU; the GPU machine has torch and transformers.

Target: assets/coder-tiny (features of taps [1, 3, 5] from transformers,
hidden_states[l + 1]). Drafter: 2 layers, intermediate 128, block size 8,
gamma 4, mask token 8190. Drafter weights come from a counter-based generator
that the C test reproduces (see det_uniform below), so the fixture need not
store them. Writes tests/fixtures/drafter/step.safetensors with: the inputs
(input_ids, loss_mask, seq_starts, features, anchors, anchor_starts), the
block ids and positions, loss, per-position accuracy, train_tau, the
per-block-token weights, and the gradient of every drafter parameter under its
checkpoint name (prefix "grad."). And tests/fixtures/drafter/adamw.safetensors:
three AdamW steps with clipping, made by torch.optim.AdamW.
"""
import json, math, os, sys
import numpy as np
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
out_dir = os.path.join(root, "tests", "fixtures", "drafter")
os.makedirs(out_dir, exist_ok=True)

TAPS = [1, 3, 5]
LAYERS, INTER, B, GAMMA, MASK_ID = 2, 128, 8, 4.0, 8190
M64 = (1 << 64) - 1


def det_uniform(seed, count):
    """splitmix64 of (seed * 2^32 + i) for i in [0, count): top 24 bits to
    [0, 1), then mapped to [-1, 1). The C test computes the same numbers."""
    with np.errstate(over="ignore"):
        z = (np.uint64(seed) << np.uint64(32)) + np.arange(count, dtype=np.uint64)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float64) / float(1 << 24)
    return torch.tensor(2.0 * u - 1.0, dtype=torch.float32)


def param_list(H, nH, H_all, nh, nkv, hd, I):
    """(name, shape, kind) in a fixed order; the seed of a tensor is its index."""
    ps = [("fc.weight", (H, nH), "w"), ("hidden_norm.weight", (H,), "n")]
    for i in range(LAYERS):
        p = f"layers.{i}."
        ps += [(p + "input_layernorm.weight", (H,), "n"), (p + "self_attn.q_proj.weight", (nh * hd, H), "w"),
               (p + "self_attn.k_proj.weight", (nkv * hd, H), "w"), (p + "self_attn.v_proj.weight", (nkv * hd, H), "w"),
               (p + "self_attn.o_proj.weight", (H, nh * hd), "w"), (p + "self_attn.q_norm.weight", (hd,), "n"),
               (p + "self_attn.k_norm.weight", (hd,), "n"), (p + "post_attention_layernorm.weight", (H,), "n"),
               (p + "mlp.gate_proj.weight", (I, H), "w"), (p + "mlp.up_proj.weight", (I, H), "w"),
               (p + "mlp.down_proj.weight", (H, I), "w")]
    ps.append(("norm.weight", (H,), "n"))
    return ps


def make_params(spec):
    params = {}
    for idx, (name, shape, kind) in enumerate(spec):
        u = det_uniform(1000 + idx, int(np.prod(shape))).view(shape)
        # linear weights: uniform with std 0.05 (scale sqrt(3)*0.05); norms: 1 + 0.1*u
        params[name] = (u * (math.sqrt(3) * 0.05) if kind == "w" else 1.0 + 0.1 * u).clone().requires_grad_(True)
    return params


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    ang = pos.float()[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    half = hd // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def drafter_sequence(P, feats, ids, mask, anchors, embed, lm_head, cfg):
    S = ids.shape[0]
    H, nh, nkv, hd, eps, theta = cfg
    ctx = rms(feats @ P["fc.weight"].T, P["hidden_norm.weight"], eps)
    blocks = []
    for a in anchors:
        blocks.append([ids[a].item()] + [MASK_ID] * (B - 1))
    block_ids = torch.tensor(blocks).view(-1)
    pos_q = torch.tensor([a + k for a in anchors for k in range(B)])
    Q = block_ids.shape[0]
    # mask [Q, S + Q]: context p < a, and own block
    allow = torch.zeros(Q, S + Q, dtype=torch.bool)
    for j, a in enumerate(anchors):
        allow[j * B:(j + 1) * B, :a] = True
        allow[j * B:(j + 1) * B, S + j * B:S + (j + 1) * B] = True
    x = embed[block_ids]
    kpos = torch.cat([torch.arange(S), pos_q])
    for i in range(LAYERS):
        p = f"layers.{i}."
        h = rms(x, P[p + "input_layernorm.weight"], eps)
        q = rms((h @ P[p + "self_attn.q_proj.weight"].T).view(Q, nh, hd), P[p + "self_attn.q_norm.weight"], eps)
        kin = torch.cat([ctx, h])
        k = rms((kin @ P[p + "self_attn.k_proj.weight"].T).view(S + Q, nkv, hd), P[p + "self_attn.k_norm.weight"], eps)
        v = (kin @ P[p + "self_attn.v_proj.weight"].T).view(S + Q, nkv, hd)
        q, k = rope(q, pos_q, theta), rope(k, kpos, theta)
        rep = nh // nkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        sc = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
        sc = sc.masked_fill(~allow[None], float("-inf"))
        att = torch.einsum("hqk,khd->qhd", sc.softmax(-1), v).reshape(Q, nh * hd)
        x = x + att @ P[p + "self_attn.o_proj.weight"].T
        n = rms(x, P[p + "post_attention_layernorm.weight"], eps)
        g = n @ P[p + "mlp.gate_proj.weight"].T
        u = n @ P[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ P[p + "mlp.down_proj.weight"].T
    logits = rms(x, P["norm.weight"], eps) @ lm_head.T
    # labels and weights
    labels = torch.zeros(Q, dtype=torch.long)
    w = torch.zeros(Q)
    valid = torch.zeros(Q)
    for j, a in enumerate(anchors):
        for k in range(B):
            t = a + k
            if t < S:
                labels[j * B + k] = ids[t]
                if k >= 1 and mask[t] == 1:
                    valid[j * B + k] = 1
                    w[j * B + k] = math.exp(-(k - 1) / GAMMA)
    return block_ids, pos_q, logits, labels, w, valid


def main():
    d = os.path.join(root, "assets", "coder-tiny")
    tok = AutoTokenizer.from_pretrained(d)
    target = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    tc = target.config
    H, nh, nkv, hd, eps = tc.hidden_size, tc.num_attention_heads, tc.num_key_value_heads, tc.head_dim, tc.rms_norm_eps
    theta = tc.rope_parameters["rope_theta"]
    embed = target.model.embed_tokens.weight.detach()
    lm_head = target.lm_head.weight.detach()

    recs = [json.loads(l) for l in open(os.path.join(root, "assets", "data", "code-dev.jsonl"))][3:5]
    seqs = []
    for r, (np_, nr) in zip(recs, [(20, 41), (15, 30)]):
        p = tok(r["prompt"], add_special_tokens=False)["input_ids"][-np_:]
        q = tok(r["response"], add_special_tokens=False)["input_ids"][:nr]
        seqs.append((p + q, [0] * len(p) + [1] * len(q)))
    # explicit anchors (all valid candidates): overlapping blocks, one reaching past the end
    anchors = [[19, 23, 24, 40, 57], [14, 20, 30, 38]]

    P = make_params(param_list(H, len(TAPS) * H, None, nh, nkv, hd, INTER))
    all_ids, all_mask, all_feat, starts, all_block, all_pos, all_w, all_valid = [], [], [], [0], [], [], [], []
    losses, weights, correct, argmax = [], [], [], []
    for (ids, mask), anc in zip(seqs, anchors):
        ids_t = torch.tensor(ids)
        with torch.no_grad():
            hs = target(input_ids=ids_t[None], output_hidden_states=True).hidden_states
        feats = torch.cat([hs[l + 1][0] for l in TAPS], dim=-1)
        bi, pq, logits, labels, w, valid = drafter_sequence(P, feats, ids_t, torch.tensor(mask), anc, embed, lm_head,
                                                            (H, nh, nkv, hd, eps, theta))
        ce = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
        losses.append((w * ce).sum())
        weights.append(w.sum())
        correct.append((logits.argmax(-1) == labels).float().detach())
        argmax.append(logits.argmax(-1).to(torch.int32))
        all_ids += ids; all_mask += mask; all_feat.append(feats); starts.append(starts[-1] + len(ids))
        all_block.append(bi); all_pos.append(pq); all_w.append(w); all_valid.append(valid)
    loss = sum(losses) / sum(weights)
    loss.backward()

    corr = torch.cat(correct).view(-1, B)
    valid = torch.cat(all_valid).view(-1, B)
    acc = torch.zeros(B)
    for k in range(1, B):
        acc[k] = (corr[:, k] * valid[:, k]).sum() / valid[:, k].sum().clamp(min=1)
    # training-time acceptance: leading run of valid and correct positions k = 1, 2, ...
    run = torch.cumprod(corr[:, 1:] * valid[:, 1:], dim=1).sum(dim=1)
    train_tau = 1 + run.mean()

    t = {"input_ids": torch.tensor(all_ids, dtype=torch.int32), "loss_mask": torch.tensor(all_mask, dtype=torch.int32),
         "seq_starts": torch.tensor(starts, dtype=torch.int32), "features": torch.cat(all_feat).contiguous(),
         "anchors": torch.tensor(sum(anchors, []), dtype=torch.int32),
         "anchor_starts": torch.tensor([0, len(anchors[0]), len(anchors[0]) + len(anchors[1])], dtype=torch.int32),
         "block_ids": torch.cat(all_block).to(torch.int32), "block_pos": torch.cat(all_pos).to(torch.int32),
         "weights": torch.cat(all_w), "argmax": torch.cat(argmax), "loss": loss.detach().view(1), "accuracy": acc, "train_tau": train_tau.view(1)}
    for name, p in P.items():
        t["grad." + name] = p.grad.contiguous()
    save_file(t, os.path.join(out_dir, "step.safetensors"))
    print(f"loss {loss.item():.6f} train_tau {train_tau.item():.4f} acc {acc.tolist()}", file=sys.stderr)

    # AdamW: two tensors, three steps, global-norm clipping at 1.0, weight decay 0.1, made by torch itself
    g = torch.Generator().manual_seed(3)
    a = torch.randn(37, 19, generator=g).requires_grad_(True)
    b = torch.randn(23, generator=g).requires_grad_(True)
    at = {"p0.a": a.detach().clone(), "p0.b": b.detach().clone()}
    opt = torch.optim.AdamW([a, b], lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    for s in range(3):
        ga, gb = torch.randn(37, 19, generator=g) * (s + 1), torch.randn(23, generator=g) * (s + 1)
        at[f"g{s}.a"], at[f"g{s}.b"] = ga.clone(), gb.clone()
        a.grad, b.grad = ga.clone(), gb.clone()
        norm = torch.nn.utils.clip_grad_norm_([a, b], 1.0)
        at[f"norm{s}"] = norm.view(1)
        opt.step()
        at[f"p{s + 1}.a"], at[f"p{s + 1}.b"] = a.detach().clone(), b.detach().clone()
    save_file(at, os.path.join(out_dir, "adamw.safetensors"))


main()
