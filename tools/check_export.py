#!/usr/bin/env python3
"""check_export.py — checks an `fsdp-train export` file with PyTorch: reads the .safetensors (parsed
here: 8-byte little-endian header length, JSON header, raw data) and config.json, runs GPT-2's
forward in float64 with the usual GPT-2 conventions (Conv1D weights stored [in, out], tanh GELU,
LayerNorm eps 1e-5, LM head tied to wte), and compares the logits with the C model's logits on the
same input, written by `fsdp-train export --logits FILE` ({int32 B, T, V; int32 tokens[B*T];
float32 logits[B*T][V]}). Exit status 0 only if every tensor GPT-2 needs is there with its GPT-2
shape and the logits agree.

Usage: /usr/bin/python3 tools/check_export.py MODEL.safetensors LOGITS_FILE
"""
import json
import math
import os
import struct
import sys

import torch


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        assert d["dtype"] == "F32", (name, d["dtype"])
        a, b = d["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + a:base + b]), dtype=torch.float32)
        out[name] = t.reshape(d["shape"]).double()
    return out


def gpt2_logits(w, cfg, tokens):
    L, C, NH = cfg["n_layer"], cfg["n_embd"], cfg["n_head"]
    eps = cfg["layer_norm_epsilon"]
    B, T = tokens.shape
    x = w["wte.weight"][tokens] + w["wpe.weight"][:T][None]
    ln = lambda v, p: torch.nn.functional.layer_norm(v, (C,), w[p + ".weight"], w[p + ".bias"], eps)
    gelu = lambda v: 0.5 * v * (1 + torch.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = f"h.{l}."
        h = ln(x, p + "ln_1")
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: [in, out]
        q, k, v = qkv.split(C, dim=-1)
        hd = C // NH
        q, k, v = (t.view(B, T, NH, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = ln(x, p + "ln_2")
        h = gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = ln(x, "ln_f")
    return x @ w["wte.weight"].T


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    model, logits_path = sys.argv[1], sys.argv[2]
    w = load_safetensors(model)
    with open(os.path.join(os.path.dirname(os.path.abspath(model)), "config.json")) as f:
        cfg = json.load(f)
    L, C, V, P = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    want = {"wte.weight": [V, C], "wpe.weight": [P, C], "ln_f.weight": [C], "ln_f.bias": [C]}
    for l in range(L):
        p = f"h.{l}."
        want.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C], p + "ln_2.weight": [C], p + "ln_2.bias": [C],
                     p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
                     p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
                     p + "mlp.c_fc.weight": [C, 4 * C], p + "mlp.c_fc.bias": [4 * C],
                     p + "mlp.c_proj.weight": [4 * C, C], p + "mlp.c_proj.bias": [C]})
    bad = [n for n in want if n not in w or list(w[n].shape) != want[n]]
    extra = [n for n in w if n not in want]
    if bad or extra:
        print(f"FAIL: tensors missing or misshapen: {bad}; unexpected: {extra}", file=sys.stderr)
        return 1
    with open(logits_path, "rb") as f:
        B, T, Vl = struct.unpack("<3i", f.read(12))
        tokens = torch.tensor(struct.unpack(f"<{B * T}i", f.read(4 * B * T)), dtype=torch.long).view(B, T)
        ref = torch.frombuffer(bytearray(f.read(4 * B * T * Vl)), dtype=torch.float32).view(B, T, Vl).double()
    assert Vl == V, (Vl, V)
    got = gpt2_logits(w, cfg, tokens)
    err = (got - ref).abs().max().item()
    scale = ref.abs().max().item()
    print(f"{len(w)} tensors; logits [{B}, {T}, {V}]: max |PyTorch - C| = {err:.3e} (max |logit| {scale:.3f})")
    if not err <= 1e-4 + 1e-4 * scale:
        print("FAIL: logits differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
