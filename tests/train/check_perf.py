#!/usr/bin/env python3
"""check_perf.py — the trainer's speed fields in a --metrics file against an independent float64
count of the model's FLOPs from its shape (written here, not taken from the library): per token
6 x (the matmul weights a token passes, the LM head over the padded vocabulary) + attention (gpt2:
12 L T C, the full T x T square; llama: 12 L (NH hd) (T + 1) / 2, the causal average). Checks tflops =
count x batch x seq-len / step_s, mfu = tflops / (peak_gflops summed over ranks), tokens/s per rank,
the straggler = the rank with the least collective wait, by (longest - its) wait, and the skip count.
usage: check_perf.py METRICS.jsonl MANIFEST.json WORLD PEAK_TOTAL_GFLOPS|measured|off"""
import json
import sys


def count(cfg):
    fam = cfg.get("model", "gpt2")
    L, C, NH, T = cfg["layers"], cfg["width"], cfg["heads"], cfg["seq-len"]
    V = cfg["vocab"]
    Vp = (V + 127) // 128 * 128
    if fam == "gpt2":
        I = cfg["intermediate"] or 4 * C
        w = L * (C * 3 * C + C * C + C * I + I * C) + Vp * C
        return 6.0 * w + 12.0 * L * T * C
    hd = cfg["head-dim"] or C // NH
    NKV = cfg["kv-heads"] or NH
    I = cfg["intermediate"]
    w = L * (C * NH * hd + 2 * C * NKV * hd + NH * hd * C + 3 * C * I) + Vp * C
    return 6.0 * w + 12.0 * L * NH * hd * (T + 1) / 2.0


def main():
    metrics, manifest, world, peak = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    cfg = json.load(open(manifest))["config"]
    fpt = count(cfg)
    gp = cfg["gemm-peak"]
    bad = []
    if abs(gp["flops-per-token"] - fpt) > 1e-9 * fpt:
        bad.append(f"manifest flops-per-token {gp['flops-per-token']} != counted {fpt}")
    tokens = cfg["batch"] * cfg["seq-len"]
    skipped = 0
    lines = [json.loads(l) for l in open(metrics) if '"loss"' in l]
    if not lines:
        bad.append("no step lines")
    for m in lines:
        s = m["step"]
        want = fpt * tokens / m["step_s"] / 1e12
        # step_s is printed to 1 us: the check's tolerance is that rounding (and %.6g)
        tol = want * (0.5e-6 / m["step_s"] + 1e-5)
        if abs(m["tflops"] - want) > tol:
            bad.append(f"step {s}: tflops {m['tflops']} != {want}")
        if abs(m["tokens_per_s_per_rank"] * world - m["tokens_per_s"]) > 0.1 * world:
            bad.append(f"step {s}: tokens/s per rank {m['tokens_per_s_per_rank']} x {world} != {m['tokens_per_s']}")
        if peak == "off":
            if m["mfu"] != 0 or m["peak_gflops"] != 0:
                bad.append(f"step {s}: --peak-gflops -1 but mfu {m['mfu']} peak {m['peak_gflops']}")
        else:
            if peak != "measured" and abs(m["peak_gflops"] - float(peak)) > 1e-4 * float(peak):
                bad.append(f"step {s}: peak_gflops {m['peak_gflops']} != {peak}")
            if m["peak_gflops"] <= 0:
                bad.append(f"step {s}: peak_gflops {m['peak_gflops']}")
            else:
                mfu = m["tflops"] * 1e12 / (m["peak_gflops"] * 1e9)
                if abs(m["mfu"] - mfu) > 1e-4 * mfu + 1e-12:
                    bad.append(f"step {s}: mfu {m['mfu']} != {mfu}")
        w = m["comm_wait_s"]
        if len(w) != world:
            bad.append(f"step {s}: {len(w)} wait times for {world} ranks")
        elif world > 1:
            lo = min(range(world), key=lambda k: (w[k], k))
            if m["straggler_rank"] != lo or abs(m["straggler_s"] - (max(w) - w[lo])) > 2e-6:
                bad.append(f"step {s}: straggler {m['straggler_rank']} +{m['straggler_s']} for waits {w}")
        skipped += m["skipped"]
        if m["skipped_total"] != skipped:
            bad.append(f"step {s}: skipped_total {m['skipped_total']} != {skipped}")
        if not 0 <= m["mem_pct"] <= 100 or m["peak_rss_bytes"] < m["peak_mem_bytes"]:
            bad.append(f"step {s}: memory fields {m['mem_pct']} {m['peak_rss_bytes']} {m['peak_mem_bytes']}")
    for b in bad:
        print("FAIL:", b)
    print(f"{len(lines)} steps checked, flops/token {fpt:.6g}, {skipped} skipped")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
