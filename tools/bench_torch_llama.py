#!/usr/bin/env python3
"""bench_torch_llama.py — times training steps (forward, backward, grad clip, AdamW) of transformers'
LlamaForCausalLM / Qwen2ForCausalLM on this CPU, for comparison with `fsdp-train --model llama` on the
same shape and batch (bench/bench_llama.sh runs both side by side). Random weights, random tokens.

Usage: PYTHON tools/bench_torch_llama.py --arch llama|qwen2 --L 30 --C 576 --NH 9 --NKV 3 --I 1536
       --V 49152 [--tie] [--T 256 --B 4 --steps 3 --threads N --mode fp32|bf16] [--lora-rank R]
       [--json PATH]
PYTHON: a virtual environment with PyPI's torch 2.x and transformers (not the repository's .venv;
tools/bench-deps.sh makes one). --lora-rank R: PEFT's LoRA (alpha 2R, dropout 0) on q, k, v, o, gate, up
and down, the base frozen (bf16 mode: the base held in bf16 under bf16 autocast, the adapters in fp32
as PEFT keeps them), AdamW on the adapters only: what `fsdp-train --lora-rank R` trains.
"""
import argparse
import json
import resource
import time

import torch


def build_model(a):
    """A random transformers model of the shape in a (--arch, --L, --C, --NH, --NKV, --I, --V, --T, --tie)."""
    import transformers
    kw = dict(hidden_size=a.C, intermediate_size=a.I, num_hidden_layers=a.L, num_attention_heads=a.NH,
              num_key_value_heads=a.NKV, vocab_size=a.V, max_position_embeddings=max(a.T, 2048),
              tie_word_embeddings=a.tie, attn_implementation="sdpa")
    if a.arch == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw, head_dim=a.C // a.NH))
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**kw))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="llama", choices=["llama", "qwen2"])
    for k, v in dict(L=30, C=576, NH=9, NKV=3, I=1536, V=49152, T=256, B=4, steps=3, threads=0).items():
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--tie", action="store_true")
    ap.add_argument("--mode", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    import transformers
    m = build_model(a)
    if a.lora_rank:
        import peft
        if a.mode == "bf16":
            m = m.to(torch.bfloat16)
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        m = peft.get_peft_model(m, peft.LoraConfig(r=a.lora_rank, lora_alpha=2 * a.lora_rank, lora_dropout=0.0,
                                                   target_modules=targets, bias="none"))
    m.train()
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=False)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, a.V, (a.B, a.T), generator=g)
    times = []
    for s in range(a.steps + 1):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.mode == "bf16"):
            loss = m(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if s > 0:  # the first step warms up
            times.append(time.perf_counter() - t0)
    n = sum(p.numel() for p in m.parameters())
    n_train = sum(p.numel() for p in params)
    tps = a.B * a.T / (sum(times) / len(times))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = dict(torch=torch.__version__, transformers=transformers.__version__, arch=a.arch, mode=a.mode,
               params=n, trainable=n_train, lora_rank=a.lora_rank, threads=torch.get_num_threads(), tokens_per_s=tps, step_s=times, peak_rss=rss)
    print(json.dumps(out))
    if a.json:
        json.dump(out, open(a.json, "w"))


if __name__ == "__main__":
    main()
