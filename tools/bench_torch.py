#!/usr/bin/env python3
"""bench_torch.py — times one GPT-2 training step (forward, backward, grad clip, AdamW) in PyTorch on
this CPU, for comparison with bench/bench_train_step.c: same model (GPT-2-124M shape, padded vocab,
tied LM head, GELU tanh) and batch, fp32 and bf16 autocast, reported in tokens/s.

Usage: PYTHON tools/bench_torch.py [--L 12 --C 768 --NH 12 --V 50257 --T 64 --B 4]
       [--steps 3] [--threads N] [--modes fp32,bf16] [--max-step-s S] [--json PATH]
Runs with any PyTorch build (Debian's python3-torch under /usr/bin/python3, or PyPI's in a virtual
environment); --json writes the figures for bench/run_benchmarks.sh, which takes the best build.
--max-step-s S: a mode whose warm-up step took longer than S seconds is not timed further; its warm-up
step is reported as its one measurement (flagged "warmup_only"): Debian's fp32 step takes minutes where
its torch links the reference BLAS.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.attproj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.NH))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).float().softmax(dim=-1).to(v.dtype)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.attproj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, Vp, T_max):
        super().__init__()
        self.V = V
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(T_max, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, tok, tgt):
        T = tok.shape[1]
        x = self.wte(tok) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.lnf(x), self.wte.weight)  # tied LM head
        return F.cross_entropy(logits[..., :self.V].float().reshape(-1, self.V), tgt.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--L", type=int, default=12)
    ap.add_argument("--C", type=int, default=768)
    ap.add_argument("--NH", type=int, default=12)
    ap.add_argument("--V", type=int, default=50257)
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    ap.add_argument("--threads", type=int, default=0, help="0: every core this process may use")
    ap.add_argument("--modes", default="fp32,bf16")
    ap.add_argument("--json", help="write the figures here as JSON")
    ap.add_argument("--max-step-s", type=float, default=0.0,
                    help="a warm-up step longer than this is the mode's only measurement (0: no limit)")
    a = ap.parse_args()
    # Debian's torch starts with 1 thread; use the cores we are allowed (cgroup/affinity aware).
    torch.set_num_threads(a.threads if a.threads > 0 else len(os.sched_getaffinity(0)))
    Vp = (a.V + 127) // 128 * 128
    torch.manual_seed(0)
    model = GPT(a.L, a.C, a.NH, a.V, Vp, max(a.T, 1024))
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    tok = torch.randint(0, a.V, (a.B, a.T))
    tgt = torch.randint(0, a.V, (a.B, a.T))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"mkldnn {torch.backends.mkldnn.is_available()}; L={a.L} C={a.C} NH={a.NH} V={a.V} (Vp={Vp}) "
          f"T={a.T} B={a.B}, {nparams / 1e6:.1f}M params")
    result = {"torch": torch.__version__, "threads": torch.get_num_threads(), "L": a.L, "C": a.C, "NH": a.NH,
              "V": a.V, "T": a.T, "B": a.B, "params": nparams, "modes": {}}
    for mode in a.modes.split(","):
        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=(mode == "bf16")):
                loss = model(tok, tgt)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return loss.item()
        t0 = time.perf_counter()
        step()  # warm-up: allocations, oneDNN primitive creation
        warm = time.perf_counter() - t0
        warmup_only = a.max_step_s > 0 and warm > a.max_step_s
        times = [warm] if warmup_only else []
        for _ in range(0 if warmup_only else a.steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        best, mean = min(times), sum(times) / len(times)
        print(f"{mode}: step {mean * 1e3:.0f} ms mean, {best * 1e3:.0f} ms best over {len(times)}"
              f"{' (the warm-up step only: longer than --max-step-s)' if warmup_only else ''}; "
              f"{a.B * a.T / mean:.0f} tokens/s mean, {a.B * a.T / best:.0f} tokens/s best", flush=True)
        result["modes"][mode] = {"step_mean_s": mean, "step_best_s": best, "steps": len(times),
                                 "warmup_only": warmup_only,
                                 "tokens_per_s_mean": a.B * a.T / mean, "tokens_per_s_best": a.B * a.T / best}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
