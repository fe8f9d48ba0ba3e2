#!/usr/bin/env python3
"""bench_fsdp2_llama.py — times training steps (forward, backward, grad clip, AdamW) of transformers'
LlamaForCausalLM / Qwen2ForCausalLM sharded with PyTorch FSDP2 (`fully_shard` on each decoder layer and
on the root) over WORLD processes on this CPU (gloo backend), for comparison with fsdp.c's
`fsdp-train --model llama` at the same number of ranks (bench/bench_llama.sh runs both side by side).
Random weights, random tokens; each rank runs its own batch of B x T tokens, as fsdp.c's --batch does.
Prints one JSON line: total tokens/s over all ranks (steps after the first), peak RSS of each rank.

Usage: PYTHON tools/bench_fsdp2_llama.py --arch llama|qwen2 --L 30 --C 576 --NH 9 --NKV 3 --I 1536
       --V 49152 [--tie] [--T 256 --B 4 --steps 3 --world 2 --threads 1 --mode fp32|bf16] [--json PATH]
--mode bf16: MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), fp32 sharded parameters.
PYTHON: a virtual environment with PyPI's torch 2.x (2.6 or later for torch.distributed.fsdp.fully_shard;
torch.distributed._composable.fsdp before) and transformers (not the repository's .venv).
"""
import argparse
import json
import os
import resource
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench_torch_llama import build_model  # tools/, beside this script


def fsdp2_api():
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    return fully_shard, MixedPrecisionPolicy


def worker(rank, a, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    import transformers
    fully_shard, MixedPrecisionPolicy = fsdp2_api()
    torch.manual_seed(0)  # same initial weights on every rank before sharding
    m = build_model(a)
    n = sum(p.numel() for p in m.parameters())
    mp_kw = {}
    if a.mode == "bf16":
        mp_kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in m.model.layers:
        fully_shard(layer, **mp_kw)
    fully_shard(m, **mp_kw)  # the root: embeddings (tied to the LM head), final norm
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.1, fused=False)
    g = torch.Generator().manual_seed(1 + rank)
    x = torch.randint(0, a.V, (a.B, a.T), generator=g)
    times = []
    for s in range(a.steps + 1):
        dist.barrier()
        t0 = time.perf_counter()
        loss = m(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.barrier()
        if s > 0:  # the first step warms up
            times.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    all_rss = [None] * a.world
    dist.all_gather_object(all_rss, rss)
    if rank == 0:
        tps = a.world * a.B * a.T / (sum(times) / len(times))
        out = dict(torch=torch.__version__, transformers=transformers.__version__, arch=a.arch, mode=a.mode,
                   params=n, world=a.world, threads=torch.get_num_threads(), tokens_per_s=tps, step_s=times,
                   peak_rss=all_rss, loss=float(loss.detach()))
        print(json.dumps(out), flush=True)
        if a.json:
            json.dump(out, open(a.json, "w"))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="llama", choices=["llama", "qwen2"])
    for k, v in dict(L=30, C=576, NH=9, NKV=3, I=1536, V=49152, T=256, B=4, steps=3, world=2, threads=1).items():
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--tie", action="store_true")
    ap.add_argument("--mode", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.world < 1 or a.threads < 1 or a.steps < 1:
        ap.error("--world, --threads and --steps must be at least 1")
    with socket.socket() as s:  # a free port on the loopback for the gloo rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a, port), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
