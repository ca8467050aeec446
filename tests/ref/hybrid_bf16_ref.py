#!/usr/bin/env python3
"""How far transformers' own bf16 forward of the hybrid fixture model lies
from its fp32 forward: the yardstick for our bf16 GPU forward of the same
model (tests/test_cuda_hybrid_target.c), measured with the same figure the C
test uses (max |a - b| over max |b|, per decoder layer output and for the
logits).

Usage: hybrid_bf16_ref.py [FIXTURE_DIR]   (default tests/fixtures/hybrid)

Reads FIXTURE_DIR/qwen35-random (the model) and
FIXTURE_DIR/qwen35-random.safetensors (its input ids, sequence starts and the
fp32 layer outputs and logits made by hybrid_ref.py), runs the model in bf16
(on the GPU when there is one: sdpa attention, the torch fallback of the
delta rule), each sequence on its own as hybrid_ref.py does, and writes
FIXTURE_DIR/qwen35-random-bf16.json:
  {"layer_rel_error": [L floats], "logits_rel_error": float, "device", "transformers", "torch"}
It also prints the figures of the fp32 forward recomputed here against the
fixture (they should be ~1e-6: the same model and inputs).
"""
import json, os, sys
import torch
import transformers
from safetensors.torch import load_file
from transformers import Qwen3_5ForCausalLM

from layer_outputs import layer_outputs

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
fixture_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "fixtures", "hybrid")
device = "cuda" if torch.cuda.is_available() else "cpu"


def rel_error(a, b):
    """The C tests' df_rel_error: max |a - b| / max |b|."""
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def forward(dtype):
    model = Qwen3_5ForCausalLM.from_pretrained(os.path.join(fixture_dir, "qwen35-random"), dtype=dtype,
                                               attn_implementation="sdpa").to(device)
    seqs = [ids[a:b].tolist() for a, b in zip(starts[:-1], starts[1:])]
    return layer_outputs(model, model.model.layers, seqs, device)


ref = load_file(os.path.join(fixture_dir, "qwen35-random.safetensors"))
ids, starts = ref["input_ids"].long(), ref["seq_starts"].tolist()
report = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
          "transformers": transformers.__version__, "torch": torch.__version__}
for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
    layers, logits = forward(dtype)
    errs = [rel_error(layers[l], ref["layer_out"][l]) for l in range(layers.shape[0])]
    lerr = rel_error(logits, ref["logits"])
    print(f"{name} vs the fp32 fixture: layers {' '.join(f'{e:.3g}' for e in errs)}, logits {lerr:.3g}")
    if name == "bf16":
        report.update(layer_rel_error=errs, logits_rel_error=lerr)
path = os.path.join(fixture_dir, "qwen35-random-bf16.json")
with open(path, "w") as f:
    json.dump(report, f, indent=1)
    f.write("\n")
print(f"wrote {path}")
