#!/usr/bin/env python3
"""Writes tests/shard/adamw_torch.bin: a torch.optim.AdamW reference for test_adamw_torch.c.
Two tensors: "a" (1000 elements, weight decay 0.1) and "b" (24 elements, a no-decay group), 5 steps with
gradients of falling scale (1 .. 1e-4), lr 1e-3, betas (0.9, 0.95), eps 1e-8.
Layout (little-endian): int32 magic 0x41444d57, int32 n_a, int32 n_b, int32 steps, then float32:
a0[n_a] b0[n_b], per step ga[n_a] gb[n_b], then the final a[n_a] b[n_b].
Run with /usr/bin/python3 (python3-torch)."""
import os, struct
import numpy as np
import torch

torch.manual_seed(0)
n_a, n_b, steps = 1000, 24, 5
a0 = torch.randn(n_a) * 0.1
b0 = torch.randn(n_b) * 0.1
ga = [torch.randn(n_a) * 10.0 ** (-s) for s in range(steps)]
gb = [torch.randn(n_b) * 10.0 ** (-s) for s in range(steps)]
A, B = torch.nn.Parameter(a0.clone()), torch.nn.Parameter(b0.clone())
opt = torch.optim.AdamW([{"params": [A]}, {"params": [B], "weight_decay": 0.0}],
                        lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
for s in range(steps):
    A.grad, B.grad = ga[s].clone(), gb[s].clone()
    opt.step()
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "adamw_torch.bin")
with open(out, "wb") as f:
    f.write(struct.pack("<iiii", 0x41444D57, n_a, n_b, steps))
    for t in [a0, b0] + [x for s in range(steps) for x in (ga[s], gb[s])] + [A.detach(), B.detach()]:
        f.write(t.numpy().astype("<f4").tobytes())
print("wrote", out, "torch", torch.__version__)
