#!/usr/bin/env python3
"""rope_reference.py — transformers' rotary position embedding as the reference for fsdp.c's RoPE kernels
(src/kernels/llama_ops.c): for a few head sizes, thetas and rope_scaling settings (default and llama3) it
builds LlamaRotaryEmbedding from a LlamaConfig (inv_freq through ROPE_INIT_FUNCTIONS, as the model does),
rotates random q rows at chosen positions with apply_rotary_pos_emb, all in float32, and prints a text
fixture that tests/kernels/test_llama_ops.c reads.

Usage (the repository's venv: transformers 4.46 + torch):
    .venv/bin/python tools/rope_reference.py > tests/kernels/rope_fixture.txt

Format, one record per case (floats printed with 9 significant digits: they round-trip float32):
    case HD THETA TYPE FACTOR LOW HIGH ORIG NTOK NHEADS     TYPE 0 default, 1 llama3
    inv_freq HD/2 floats     (the module's inv_freq buffer)
    pos NTOK ints
    x NTOK*NHEADS*HD floats  ([token][head][element])
    y the same shape         (apply_rotary_pos_emb of x)
    end
"""
import sys

import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

CASES = [
    # hd, theta, rope_scaling (None or llama3 dict), positions
    (64, 100000.0, None, [0, 1, 2, 3, 17, 255, 1023, 2047]),  # SmolLM2
    (64, 10000.0, None, [0, 5, 100, 4096, 8191]),
    (128, 1000000.0, None, [0, 1, 31, 32767, 40000]),  # Qwen2.5 / Qwen3
    (128, 500000.0, {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192}, [0, 1, 2, 1000, 8191, 9000, 65535, 131071]),
    (64, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192}, [0, 3, 777, 8192, 20000]),
    (32, 10000.0, {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
                   "original_max_position_embeddings": 64}, [0, 1, 7, 63, 64, 500]),
]
NHEADS = 2


def fmt(values):
    return " ".join("%.9g" % v for v in values)


def main():
    torch.manual_seed(1234)
    out = sys.stdout
    out.write("# transformers %s, torch %s: .venv/bin/python tools/rope_reference.py > "
              "tests/kernels/rope_fixture.txt\n" % (__import__("transformers").__version__, torch.__version__))
    for hd, theta, scaling, pos in CASES:
        cfg = LlamaConfig(hidden_size=hd * NHEADS, num_attention_heads=NHEADS, num_key_value_heads=NHEADS,
                          head_dim=hd, rope_theta=theta, rope_scaling=scaling, max_position_embeddings=131072)
        rope = LlamaRotaryEmbedding(config=cfg)
        kind = "default" if scaling is None else scaling["rope_type"]
        inv_ref, _ = ROPE_INIT_FUNCTIONS[kind](cfg, torch.device("cpu"))
        assert torch.equal(inv_ref, rope.inv_freq), "module inv_freq differs from ROPE_INIT_FUNCTIONS"
        T = len(pos)
        x = torch.randn(1, NHEADS, T, hd, dtype=torch.float32)
        position_ids = torch.tensor([pos], dtype=torch.int64)
        cos, sin = rope(x, position_ids)
        y, _ = apply_rotary_pos_emb(x, x, cos, sin)
        typ = 0 if scaling is None else 1
        sc = scaling or {"factor": 0.0, "low_freq_factor": 0.0, "high_freq_factor": 0.0,
                         "original_max_position_embeddings": 0}
        out.write("case %d %.17g %d %.9g %.9g %.9g %d %d %d\n" % (
            hd, theta, typ, sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"],
            sc["original_max_position_embeddings"], T, NHEADS))
        out.write("inv_freq %s\n" % fmt(rope.inv_freq.tolist()))
        out.write("pos %s\n" % " ".join(str(p) for p in pos))
        # [1, heads, T, hd] -> [T, heads, hd]
        out.write("x %s\n" % fmt(x[0].transpose(0, 1).reshape(-1).tolist()))
        out.write("y %s\n" % fmt(y[0].transpose(0, 1).reshape(-1).tolist()))
        out.write("end\n")


if __name__ == "__main__":
    main()
