#!/usr/bin/env python3
"""Greedy speculative decoding written from spec section 6 in PyTorch, to
check `dflash eval` on the GPU machine: same target, drafter and prompts,
the same accepted length n in every cycle, hence the same tau.

No KV caches: every cycle reruns the target on the whole committed prefix
plus the block (fp32, CPU, eager attention) and takes the tap features of
the committed prefix from that run; the drafter (the z-lab-structured torch
drafter of export_ref.py, loaded strictly from the directory) sees the
features of every committed position before the block.

usage: eval_ref.py TARGET_DIR DRAFT_DIR PROMPTS.jsonl MAX_NEW OURS.jsonl
(OURS.jsonl: `dflash eval --output` of the same run)."""
import json, os, sys
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_ref import Drafter  # noqa: E402


def spec_decode(target, drafter, embed, lm_head, taps, prompt, max_new, B, mask_id, eos):
    def run(ids):
        out = target(input_ids=torch.tensor([ids]), output_hidden_states=True)
        feats = torch.cat([out.hidden_states[l + 1][0] for l in taps], dim=-1)
        return out.logits[0].argmax(-1).tolist(), feats

    greedy, feats = run(prompt)
    t, new, accepted = greedy[-1], [], []
    if t in eos:
        return new, accepted
    new.append(t)
    while len(new) < max_new:
        prefix = prompt + new[:-1]  # positions whose target features are known
        S = len(prefix)
        block = torch.tensor([t] + [mask_id] * (B - 1))
        h = drafter(embed[block], feats[:S], torch.arange(S), torch.arange(S, S + B))
        draft = (h @ lm_head.T).argmax(-1).tolist()
        greedy, feats = run(prefix + [t] + draft[1:])
        verify = greedy[S:S + B]  # the target's next token after each block position
        n = 0
        while n < B - 1 and draft[n + 1] == verify[n]:
            n += 1
        accepted.append(n)
        for tok in draft[1:n + 1] + [verify[n]]:
            if tok in eos or len(new) >= max_new:
                return new, accepted
            new.append(tok)
        t = new[-1]
    return new, accepted


def main():
    target_dir, draft_dir, prompts, max_new, ours_path = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    cfg = Qwen3Config.from_pretrained(draft_dir)
    drafter = Drafter(cfg).float().eval()
    drafter.load_state_dict({k: v.float() for k, v in load_file(os.path.join(draft_dir, "model.safetensors")).items()},
                            strict=True)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(target_dir)
    eos = target.config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    embed, lm_head = target.model.embed_tokens.weight.detach(), target.lm_head.weight.detach()
    ours = [json.loads(l) for l in open(ours_path)]
    cycles = same = 0
    total_ref = total_ours = 0
    with torch.no_grad():
        for rec, o in zip((json.loads(l) for l in open(prompts)), ours):
            ids = tok(rec["prompt"], add_special_tokens=False)["input_ids"]
            new, acc = spec_decode(target, drafter, embed, lm_head, cfg.dflash_config["target_layer_ids"], ids, max_new,
                                   cfg.block_size, cfg.dflash_config["mask_token_id"], eos)
            match = acc == o["accepted"] and tok.decode(new) == o["response"]
            print(f"{o['id']}: cycles {len(acc)} / {len(o['accepted'])}, tau ref {sum(a + 1 for a in acc) / len(acc):.4f} "
                  f"ours {o['tau']:.4f}, {'identical' if match else 'DIFFERENT'}")
            cycles += len(acc)
            same += match
            total_ref += sum(a + 1 for a in acc)
            total_ours += sum(a + 1 for a in o["accepted"])
    print(f"tau over all cycles: reference {total_ref / cycles:.4f}, dflash eval {total_ours / max(1, sum(len(o['accepted']) for o in ours)):.4f}; "
          f"{same} of {len(ours)} prompts identical (accepted lengths and text)")


if __name__ == "__main__":
    main()
