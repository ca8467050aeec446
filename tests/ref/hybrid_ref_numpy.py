#!/usr/bin/env python3
"""Stand-in for hybrid_ref.py when no machine with transformers is at hand:
the same files (see hybrid_ref.py for what each holds), made with numpy in
float64 from the formulas of transformers' Qwen3.5 modeling code, written
independently of the C code and with a different algorithm where it matters:
the Gated DeltaNet runs in the chunked form (64-token chunks, the UT
transform solved per chunk) as transformers' torch fallback does for a
prefill, while the C code runs the token-by-token recurrence; the script
checks its chunked form against a plain recurrence before writing anything.

Usage: python3 hybrid_ref_numpy.py [OUT_DIR]   (default tests/fixtures/hybrid)
Needs only numpy (Debian: python3-numpy). Running hybrid_ref.py on a machine
with transformers replaces these files with transformers' own outputs; the C
test reads either.
"""
import json, os, struct, sys
import numpy as np

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "fixtures", "hybrid")
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)

V, H, I, L = 256, 64, 64, 4
NH, NKV, HD = 4, 2, 16
NK, NV, DK, DV, KCONV = 2, 4, 16, 24, 4
EPS, THETA, PARTIAL = 1e-6, 1000000.0, 0.25
RD = int(HD * PARTIAL)
LAYER_TYPES = ["linear_attention", "linear_attention", "full_attention", "linear_attention"]  # = interval 3
KEY_DIM, VALUE_DIM = NK * DK, NV * DV
CONV_DIM = 2 * KEY_DIM + VALUE_DIM


def randn(*shape, scale=0.08, center=0.0):
    return center + scale * rng.standard_normal(shape)


def make_weights():
    w = {"model.embed_tokens.weight": randn(V, H)}
    for i, t in enumerate(LAYER_TYPES):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = randn(H, scale=0.2)
        w[p + "post_attention_layernorm.weight"] = randn(H, scale=0.2)
        if t == "full_attention":
            w[p + "self_attn.q_proj.weight"] = randn(NH * HD * 2, H)
            w[p + "self_attn.k_proj.weight"] = randn(NKV * HD, H)
            w[p + "self_attn.v_proj.weight"] = randn(NKV * HD, H)
            w[p + "self_attn.o_proj.weight"] = randn(H, NH * HD)
            w[p + "self_attn.q_norm.weight"] = randn(HD, scale=0.2)
            w[p + "self_attn.k_norm.weight"] = randn(HD, scale=0.2)
        else:
            a = p + "linear_attn."
            w[a + "in_proj_qkv.weight"] = randn(CONV_DIM, H)
            w[a + "in_proj_z.weight"] = randn(VALUE_DIM, H)
            w[a + "in_proj_b.weight"] = randn(NV, H)
            w[a + "in_proj_a.weight"] = randn(NV, H)
            w[a + "conv1d.weight"] = randn(CONV_DIM, 1, KCONV, scale=0.4)
            w[a + "dt_bias"] = randn(NV, scale=0.5)
            w[a + "A_log"] = np.log(rng.uniform(0.05, 3.0, NV))
            w[a + "norm.weight"] = randn(DV, scale=0.2, center=1.0)
            w[a + "out_proj.weight"] = randn(H, VALUE_DIM)
        w[p + "mlp.gate_proj.weight"] = randn(I, H)
        w[p + "mlp.up_proj.weight"] = randn(I, H)
        w[p + "mlp.down_proj.weight"] = randn(H, I)
    w["model.norm.weight"] = randn(H, scale=0.2)
    w["lm_head.weight"] = randn(V, H)
    # round through fp32 once: the checkpoint holds fp32, the reference uses exactly those values
    return {k: v.astype(np.float32).astype(np.float64) for k, v in w.items()}


def save_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, arr in tensors.items():
        dtype = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[arr.dtype]
        data = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- the forward, float64 ---------------------------------------------------

def rmsnorm(x, w, unit_offset=True):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS)
    return y * ((1.0 + w) if unit_offset else w)


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def rope_partial(x, pos):  # x [S, heads, HD]; rotate_half on the first RD values
    inv = 1.0 / THETA ** (np.arange(0, RD, 2, dtype=np.float64) / RD)
    ang = pos[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    r, rest = x[..., :RD], x[..., RD:]
    rot = np.concatenate([-r[..., RD // 2:], r[..., :RD // 2]], -1)
    return np.concatenate([r * cos + rot * sin, rest], -1)


def gated_attention(h, w, p):
    S = h.shape[0]
    qg = (h @ w[p + "q_proj.weight"].T).reshape(S, NH, 2 * HD)
    q, gate = qg[..., :HD], qg[..., HD:].reshape(S, NH * HD)
    k = (h @ w[p + "k_proj.weight"].T).reshape(S, NKV, HD)
    v = (h @ w[p + "v_proj.weight"].T).reshape(S, NKV, HD)
    q, k = rmsnorm(q, w[p + "q_norm.weight"]), rmsnorm(k, w[p + "k_norm.weight"])
    pos = np.arange(S, dtype=np.float64)
    q, k = rope_partial(q, pos), rope_partial(k, pos)
    o = np.zeros((S, NH, HD))
    mask = np.triu(np.full((S, S), -np.inf), 1)
    for hh in range(NH):
        kv = hh // (NH // NKV)
        sc = q[:, hh] @ k[:, kv].T / np.sqrt(HD) + mask
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        o[:, hh] = pr @ v[:, kv]
    return (o.reshape(S, NH * HD) * sigmoid(gate)) @ w[p + "o_proj.weight"].T


def l2norm(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


def delta_rule_recurrent(q, k, v, g, beta):  # per head: q, k [S, DK]; v [S, DV]; g, beta [S]
    state, out = np.zeros((q.shape[1], v.shape[1])), np.zeros_like(v)
    for t in range(q.shape[0]):
        state = state * np.exp(g[t])
        delta = beta[t] * (v[t] - state.T @ k[t])
        state = state + np.outer(k[t], delta)
        out[t] = state.T @ q[t]
    return out


def delta_rule_chunked(q, k, v, g, beta, chunk=64):
    S = q.shape[0]
    pad = (-S) % chunk
    q, k, v = (np.pad(x, ((0, pad), (0, 0))) for x in (q, k, v))
    g, beta = np.pad(g, (0, pad)), np.pad(beta, (0, pad))
    state, out = np.zeros((q.shape[1], v.shape[1])), np.zeros_like(v)
    low = np.tril(np.ones((chunk, chunk)))
    for c0 in range(0, S + pad, chunk):
        sl = slice(c0, c0 + chunk)
        qc, kc, vc, bc = q[sl], k[sl], v[sl], beta[sl]
        gc = np.cumsum(g[sl])
        decay = np.exp(gc[:, None] - gc[None, :]) * low  # decay between j and i, j <= i
        # (I + strictly lower(k_beta k^T * decay)) U = [v_beta | k_beta exp(gc)]: the delta rule inside the chunk
        system = np.eye(chunk) + np.tril((kc * bc[:, None]) @ kc.T * decay, -1)
        u = np.linalg.solve(system, vc * bc[:, None])
        w_ = np.linalg.solve(system, kc * bc[:, None] * np.exp(gc)[:, None])
        v_new = u - w_ @ state
        out[sl] = (qc * np.exp(gc)[:, None]) @ state + ((qc @ kc.T) * decay) @ v_new
        state = state * np.exp(gc[-1]) + (kc * np.exp(gc[-1] - gc)[:, None]).T @ v_new
    return out[:S]


def gated_deltanet(h, w, p, check):
    S = h.shape[0]
    mixed = h @ w[p + "in_proj_qkv.weight"].T
    cw = w[p + "conv1d.weight"][:, 0, :]
    padded = np.concatenate([np.zeros((KCONV - 1, CONV_DIM)), mixed], 0)
    conv = silu(sum(cw[:, j][None, :] * padded[j:j + S] for j in range(KCONV)))
    q = l2norm(conv[:, :KEY_DIM].reshape(S, NK, DK)) / np.sqrt(DK)
    k = l2norm(conv[:, KEY_DIM:2 * KEY_DIM].reshape(S, NK, DK))
    v = conv[:, 2 * KEY_DIM:].reshape(S, NV, DV)
    z = (h @ w[p + "in_proj_z.weight"].T).reshape(S, NV, DV)
    beta = sigmoid(h @ w[p + "in_proj_b.weight"].T)
    g = -np.exp(w[p + "A_log"]) * softplus(h @ w[p + "in_proj_a.weight"].T + w[p + "dt_bias"])
    o = np.zeros((S, NV, DV))
    for hv in range(NV):
        hk = hv // (NV // NK)
        o[:, hv] = delta_rule_chunked(q[:, hk], k[:, hk], v[:, hv], g[:, hv], beta[:, hv])
        if check:
            r = delta_rule_recurrent(q[:, hk], k[:, hk], v[:, hv], g[:, hv], beta[:, hv])
            assert np.abs(r - o[:, hv]).max() <= 1e-9 * max(1.0, np.abs(r).max()), "chunked != recurrent"
    o = rmsnorm(o, w[p + "norm.weight"], unit_offset=False) * silu(z)
    return o.reshape(S, VALUE_DIM) @ w[p + "out_proj.weight"].T


def forward(w, ids, check=False):
    x = w["model.embed_tokens.weight"][ids]
    layer_out = []
    for i, t in enumerate(LAYER_TYPES):
        p = f"model.layers.{i}."
        h = rmsnorm(x, w[p + "input_layernorm.weight"])
        if t == "full_attention":
            x = x + gated_attention(h, w, p + "self_attn.")
        else:
            x = x + gated_deltanet(h, w, p + "linear_attn.", check)
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"])
        x = x + (silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)) @ \
            w[p + "mlp.down_proj.weight"].T
        layer_out.append(x)
    logits = rmsnorm(x, w["model.norm.weight"]) @ w["lm_head.weight"].T
    return np.stack(layer_out), logits


# ---- files --------------------------------------------------------------------

TEXT_CONFIG = {
    "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": [2, 3], "head_dim": HD,
    "hidden_act": "silu", "hidden_size": H, "initializer_range": 0.02, "intermediate_size": I,
    "layer_types": LAYER_TYPES, "linear_conv_kernel_dim": KCONV, "linear_key_head_dim": DK,
    "linear_num_key_heads": NK, "linear_num_value_heads": NV, "linear_value_head_dim": DV,
    "max_position_embeddings": 4096, "num_attention_heads": NH, "num_hidden_layers": L, "num_key_value_heads": NKV,
    "pad_token_id": None, "rms_norm_eps": EPS,
    "rope_parameters": {"partial_rotary_factor": PARTIAL, "rope_theta": THETA, "rope_type": "default"},
    "tie_word_embeddings": False, "use_cache": True, "vocab_size": V,
}


def write_causal(w):
    d = os.path.join(out, "qwen35-random")
    os.makedirs(d, exist_ok=True)
    cfg = {"architectures": ["Qwen3_5ForCausalLM"], "dtype": "float32", "model_type": "qwen3_5_text", **TEXT_CONFIG}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2, sort_keys=True)
    save_safetensors(os.path.join(d, "model.safetensors"), {k: v.astype(np.float32) for k, v in w.items()})


def write_conditional_generation(w):
    """The released checkpoints' layout: text fields in text_config (here with
    full_attention_interval 3 instead of layer_types, and the mrope keys of the
    released rope_parameters), decoder tensors under model.language_model.,
    plus tensors of a vision tower and an MTP head that a text forward ignores."""
    d = os.path.join(out, "qwen35-vl-random")
    os.makedirs(d, exist_ok=True)
    text = dict(TEXT_CONFIG, model_type="qwen3_5_text", attn_output_gate=True, full_attention_interval=3,
                mtp_num_hidden_layers=1, dtype="float32", eos_token_id=3,
                rope_parameters={"mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_type": "default",
                                 "rope_theta": THETA, "partial_rotary_factor": PARTIAL})
    del text["layer_types"], text["tie_word_embeddings"]
    cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "image_token_id": 250,
           "video_token_id": 251, "vision_start_token_id": 252, "vision_end_token_id": 253,
           "tie_word_embeddings": False, "text_config": text,
           "vision_config": {"model_type": "qwen3_5_vision", "depth": 1, "hidden_size": 16, "out_hidden_size": H}}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2, sort_keys=True)
    t = {(k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k): v.astype(np.float32)
         for k, v in w.items()}
    t["model.visual.patch_embed.proj.weight"] = randn(16, 3, 1, 2, 2).astype(np.float32)
    t["mtp.fc.weight"] = randn(H, 2 * H).astype(np.float32)
    save_safetensors(os.path.join(d, "model.safetensors"), t)


weights = make_weights()
seqs = [rng.integers(0, V, n) for n in (70, 9, 33, 1)]
outs, logits = [], []
for i, s in enumerate(seqs):
    lo, lg = forward(weights, s, check=(i == 0))
    outs.append(lo)
    logits.append(lg)
starts = np.cumsum([0] + [len(s) for s in seqs]).astype(np.int32)
write_causal(weights)
write_conditional_generation(weights)
save_safetensors(os.path.join(out, "qwen35-random.safetensors"), {
    "input_ids": np.concatenate(seqs).astype(np.int32), "seq_starts": starts,
    "layer_out": np.concatenate(outs, 1).astype(np.float32), "logits": np.concatenate(logits, 0).astype(np.float32)})
print(f"{out}: T={starts[-1]} layers={L}", file=sys.stderr)
