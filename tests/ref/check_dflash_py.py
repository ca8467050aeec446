#!/usr/bin/env python3
"""Checks on the GPU machine (torch and transformers) that an exported drafter directory loads with
transformers' AutoModel.from_pretrained(DIR, trust_remote_code=True) through the dflash.py that the
export writes beside config.json (src/model/dflash.py, embedded in the binary), and that the loaded
module gives our drafter's logits.

Ours: tests/fixtures/export/zlab_logits.safetensors holds, for blocks of the first sequence of
tests/fixtures/drafter/step.safetensors (context lengths 21 and 40), the logits of the committed
drafter tests/fixtures/export/drafter/; the C test test_export_parity checks that our loader and
inference forward give those logits within 1e-4. Here the drafter is re-exported with
`dflash export` (which writes dflash.py), loaded by transformers, run on the same blocks and
compared: in fp32 on the CPU within 1e-4 (same bf16 weights, same arithmetic up to order), and, where
a GPU is present, in bf16 on it within 3e-2 (bf16 tolerance) with the argmax agreement reported.
A multi-block forward (two blocks at different anchors in one call) must equal each block alone.

Usage (from the repository root; DFLASH: the binary, ./dflash by default):
python3 tests/ref/check_dflash_py.py [DFLASH]
Exit status 0 when every check holds; the failures are printed.
"""
import json, os, subprocess, sys, tempfile
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForCausalLM

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CONTEXTS = [21, 40]


def rel_error(a, b):
    """max |a - b| / max |b|; NaN when a holds a NaN (every comparison with it then fails the check)"""
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def export_drafter(dflash, out):
    src = os.path.join(root, "tests", "fixtures", "export", "drafter")
    subprocess.run([dflash, "export", src, "--output", out], check=True)
    assert os.path.exists(os.path.join(out, "dflash.py")), "the export wrote no dflash.py"
    raw = json.load(open(os.path.join(out, "config.json")))
    assert raw["auto_map"]["AutoModel"] == "dflash.DFlashDraftModel", raw["auto_map"]


def load_drafter(path, dtype, device):
    model, info = AutoModel.from_pretrained(path, trust_remote_code=True, dtype=dtype, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    assert not bad, f"loading {path}: {bad}"
    assert type(model).__name__ == "DFlashDraftModel", type(model).__name__
    return model.to(device).eval()


def block_logits(model, embed, lm_head, ids, feats, dtype, device):
    """{S: logits [B, V]} for the block [ids[S], MASK...] after a context of S positions."""
    B, mask = model.block_size, model.mask_token_id
    out = {}
    for S in CONTEXTS:
        block = torch.tensor([int(ids[S])] + [mask] * (B - 1), device=device)
        noise = embed[block][None].to(dtype)
        h = model(noise_embedding=noise, target_hidden=feats[:S][None].to(device, dtype)).last_hidden_state
        out[S] = (h[0].float() @ lm_head.float().T).cpu()
    return out


def check_two_blocks(model, embed, lm_head, ids, feats, single, failures):
    """Both blocks in one call, each at its anchor, over the longer context: the same logits."""
    B, mask = model.block_size, model.mask_token_id
    S = max(CONTEXTS)
    blocks = torch.tensor(sum(([int(ids[a])] + [mask] * (B - 1) for a in CONTEXTS), []))
    pos = torch.tensor(sum((list(range(a, a + B)) for a in CONTEXTS), []))
    h = model(noise_embedding=embed[blocks][None], target_hidden=feats[:S][None], position_ids=pos[None]).last_hidden_state
    logits = h[0] @ lm_head.T
    for j, a in enumerate(CONTEXTS):
        err = rel_error(logits[j * B:(j + 1) * B], single[a])
        print(f"two blocks in one call, block at {a}: rel error {err:.2e} against it alone")
        if not err <= 1e-5:  # NaN fails too
            failures.append(f"multi-block forward, block at {a}: {err:.2e}")


def main():
    dflash = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "dflash")
    ours = load_file(os.path.join(root, "tests", "fixtures", "export", "zlab_logits.safetensors"))
    step = load_file(os.path.join(root, "tests", "fixtures", "drafter", "step.safetensors"))
    n0 = int(step["seq_starts"][1])
    ids, feats = step["input_ids"][:n0].long(), step["features"][:n0]
    target = AutoModelForCausalLM.from_pretrained(os.path.join(root, "assets", "coder-tiny"), dtype=torch.float32)
    embed, lm_head = target.model.embed_tokens.weight.detach(), target.lm_head.weight.detach()
    failures = []
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        path = os.path.join(tmp, "drafter")
        export_drafter(dflash, path)
        runs = [("fp32 cpu", torch.float32, "cpu", 1e-4)]
        if torch.cuda.is_available():
            runs.append(("bf16 cuda", torch.bfloat16, "cuda", 3e-2))
        for name, dtype, device, tol in runs:
            model = load_drafter(path, dtype, device)
            got = block_logits(model, embed.to(device), lm_head.to(device), ids, feats, dtype, device)
            for S in CONTEXTS:
                want = ours[f"logits.{S}"]
                assert torch.equal(ours[f"block.{S}"].long(), torch.tensor([int(ids[S])] + [model.mask_token_id] * (model.block_size - 1)))
                err = rel_error(got[S], want)
                agree = (got[S].argmax(-1) == want.argmax(-1)).float().mean().item()
                print(f"{name}: context {S}: rel error {err:.2e} (tolerance {tol:g}), argmax agreement {agree:.3f}")
                if not err <= tol:  # NaN fails too
                    failures.append(f"{name}, context {S}: rel error {err:.2e} > {tol:g}")
            if dtype == torch.float32:
                check_two_blocks(model, embed, lm_head, ids, feats, got, failures)
    for f in failures:
        print("FAIL:", f)
    print("dflash.py: " + ("all checks hold" if not failures else f"{len(failures)} checks failed"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
