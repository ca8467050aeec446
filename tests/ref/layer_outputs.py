"""Shared by the target reference scripts (target_ref.py, hybrid_ref.py,
hybrid_bf16_ref.py): transformers' output of every decoder layer and the
logits, each sequence run on its own with positions from 0, packed back to
back as the C tests read them."""
import torch


def layer_outputs(model, layers, seqs, device="cpu"):
    """Returns (layer_out float32 [L, T, H], logits float32 [T, V]) on the CPU
    for the token lists seqs, T their total length; layers: the model's
    decoder layers, whose outputs are captured by forward hooks."""
    model.eval()
    captured = []
    hooks = [l.register_forward_hook(lambda m, i, o: captured.append((o[0] if isinstance(o, tuple) else o).detach()))
             for l in layers]
    outs, logits = [], []
    with torch.no_grad():
        for s in seqs:
            captured.clear()
            r = model(input_ids=torch.tensor([s], device=device), use_cache=False)
            outs.append(torch.stack([c[0] for c in captured]).float().cpu())  # [L, len, H]
            logits.append(r.logits[0].float().cpu())
    for h in hooks:
        h.remove()
    return torch.cat(outs, dim=1).contiguous(), torch.cat(logits, dim=0).contiguous()


def packed(seqs):
    """The fixtures' input_ids int32 [T] and seq_starts int32 [nseq + 1]."""
    starts = [0]
    for s in seqs:
        starts.append(starts[-1] + len(s))
    return torch.tensor(sum(seqs, []), dtype=torch.int32), torch.tensor(starts, dtype=torch.int32)
