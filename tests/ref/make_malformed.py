#!/usr/bin/env python3
"""Writes the malformed-input catalogue under tests/malformed/ (committed; rerun
to regenerate). One small file (or directory, for sharded cases) per case; the
error each must produce is checked by tests/test_safetensors.c and
tests/test_model_config.c. Standard library only."""
import json
import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "malformed")
ST = os.path.join(ROOT, "safetensors")
CFG = os.path.join(ROOT, "config")


def raw(name, data):
    with open(os.path.join(ST, name), "wb") as f:
        f.write(data)


def with_header(header_text, data=b""):
    h = header_text.encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def st_file(path, entries, data):
    """entries: list of (name, dtype, shape, [begin, end]) kept in order, so
    that duplicates can be written (json.dumps of a dict could not)."""
    parts = ['"%s":{"dtype":"%s","shape":%s,"data_offsets":%s}' % (n, d, json.dumps(s), json.dumps(o))
             for n, d, s, o in entries]
    with open(path, "wb") as f:
        f.write(with_header("{" + ",".join(parts) + "}", data))


def safetensors_cases():
    os.makedirs(ST, exist_ok=True)
    p = lambda name: os.path.join(ST, name)
    raw("truncated.safetensors", b"\x10\x00\x00\x00\x00")
    raw("header_past_end.safetensors", struct.pack("<Q", 1000) + b'{"a":1}')
    raw("header_not_json.safetensors", with_header('{"w": {"dtype": "F32",'))
    raw("header_not_object.safetensors", with_header("[1, 2, 3]"))
    raw("trailing_garbage.safetensors", with_header('{} xx'))
    d16 = bytes(16)
    st_file(p("unknown_dtype.safetensors"), [("w", "Q4", [4], [0, 16])], d16)
    st_file(p("negative_dim.safetensors"), [("w", "F32", [-2, 2], [0, 16])], d16)
    st_file(p("fractional_dim.safetensors"), [("w", "F32", [1.5], [0, 16])], d16)
    st_file(p("too_many_dims.safetensors"), [("w", "U8", [1] * 9, [0, 1])], d16)
    st_file(p("offsets_past_end.safetensors"),
            [("model.layers.3.mlp.up_proj.weight", "F32", [16], [0, 64])], d16)
    st_file(p("begin_after_end.safetensors"), [("w", "F32", [0], [8, 4])], d16)
    st_file(p("offsets_vs_shape.safetensors"), [("w", "F32", [2, 2], [0, 8])], d16)
    st_file(p("shape_overflow.safetensors"),
            [("w", "F32", [4294967296, 4294967296, 4294967296], [0, 16])], d16)
    st_file(p("overlap.safetensors"), [("a", "F32", [2], [0, 8]), ("b", "F32", [2], [4, 12])], d16)
    st_file(p("overlap_around_empty.safetensors"),
            [("a", "F32", [2], [0, 8]), ("e", "F32", [0], [4, 4]), ("b", "F32", [2], [6, 14])], d16)
    st_file(p("duplicate.safetensors"), [("w", "F32", [2], [0, 8]), ("w", "F32", [2], [8, 16])], d16)
    st_file(p("bad_offsets_type.safetensors"), [("w", "F32", [2], "[0]")], d16)

    # Sharded: the index names a shard that does not exist.
    d = p("missing_shard")
    os.makedirs(d, exist_ok=True)
    st_file(os.path.join(d, "model-00001-of-00002.safetensors"), [("a", "F32", [2], [0, 8])], bytes(8))
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                            "b": "model-00002-of-00002.safetensors"}}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=1)
    # Sharded: the index names a tensor that its shard lacks.
    d = p("index_tensor_missing")
    os.makedirs(d, exist_ok=True)
    st_file(os.path.join(d, "model-00001-of-00001.safetensors"), [("a", "F32", [2], [0, 8])], bytes(8))
    index = {"weight_map": {"a": "model-00001-of-00001.safetensors",
                            "model.norm.weight": "model-00001-of-00001.safetensors"}}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=1)
    # Sharded: a shard name that escapes the model directory.
    d = p("shard_escapes")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {"a": "../truncated.safetensors"}}, f, indent=1)


BASE = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 100, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "tie_word_embeddings": True, "attention_bias": False, "bos_token_id": None, "eos_token_id": 5,
}


def cfg(name, **changes):
    c = dict(BASE)
    for k, v in changes.items():
        if v is ...:
            del c[k]
        else:
            c[k] = v
    with open(os.path.join(CFG, name), "w") as f:
        json.dump(c, f, indent=1)
        f.write("\n")


def config_cases():
    os.makedirs(CFG, exist_ok=True)
    cfg("unknown_arch.json", architectures=["MistralForCausalLM"], model_type="mistral")
    cfg("unknown_model_type.json", architectures=..., model_type="gemma")
    cfg("missing_hidden_size.json", hidden_size=...)
    cfg("wrong_type.json", num_hidden_layers="2")
    cfg("fractional_int.json", vocab_size=100.5)
    cfg("rope_yarn.json", rope_scaling={"rope_type": "yarn", "factor": 4.0})
    cfg("rope_params_dynamic.json", rope_theta=..., rope_parameters={"rope_theta": 1e6, "rope_type": "dynamic"})
    cfg("llama3_missing_factor.json", rope_scaling={"rope_type": "llama3", "low_freq_factor": 1.0,
                                                    "high_freq_factor": 4.0,
                                                    "original_max_position_embeddings": 64})
    cfg("attention_bias.json", attention_bias=True)
    cfg("heads_not_divisible.json", num_key_value_heads=3)
    cfg("zero_layers.json", num_hidden_layers=0)
    cfg("eos_wrong_type.json", eos_token_id=["2"])
    cfg("tie_wrong_type.json", tie_word_embeddings="yes")
    with open(os.path.join(CFG, "not_json.json"), "w") as f:
        f.write('{"hidden_size": 64,\n')
    with open(os.path.join(CFG, "not_object.json"), "w") as f:
        f.write("[1, 2]\n")


if __name__ == "__main__":
    safetensors_cases()
    config_cases()
    sys.exit(0)
