#!/usr/bin/env python3
"""link_timeline.py — when the links between namespace hosts carry bytes during a training step, and
when they idle, beside what rank 0 computes at that moment (bench/hosts_timeline.sh runs it).

usage: link_timeline.py TRACE.json SAMPLES.txt RATE_BYTES_PER_S [BIN_S (0.1)]

TRACE.json: fsdp-train --trace (rank 0's file, every rank's events); its process_name metadata gives
each rank's CLOCK_MONOTONIC origin (clock_origin_s). SAMPLES.txt: lines "T B1 B2 ... BN", T seconds of
CLOCK_MONOTONIC, Bi the bytes host i's link has delivered into host i so far (the root-side veth's
tx counter). Capacity: N hosts x RATE (every host's inbound link full).

Per step after the first: its time, the link's mean use, the seconds a link bin (BIN_S) was below 10%
of capacity ("idle"), and which of rank 0's spans those idle bins fall in (forward/backward of a
unit, optimizer, waits), summed; then the use per bin of the last step."""
import bisect
import json
import sys


def spans_of(events, pid):
    open_, out = {}, []
    for e in events:
        if e.get("pid") != pid or e.get("ph") not in ("B", "E"):
            continue
        key = (e.get("tid"), e.get("cat"), e.get("name"))
        if e["ph"] == "B":
            open_.setdefault(key, []).append(e["ts"])
        elif open_.get(key):
            out.append((open_[key].pop() / 1e6, e["ts"] / 1e6, e.get("cat"), e.get("name")))
    return out


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    trace, samples, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
    bin_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.1
    doc = json.load(open(trace))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    origin = None
    for e in events:
        if e.get("ph") == "M" and e.get("pid") == 0 and "clock_origin_s" in e.get("args", {}):
            origin = e["args"]["clock_origin_s"]
    if origin is None:
        sys.exit("link_timeline: the trace has no clock_origin_s for rank 0 (a trace from an older build?)")
    rows = [list(map(float, l.split())) for l in open(samples) if l.strip()]
    if len(rows) < 2:
        sys.exit("link_timeline: fewer than two samples")
    t = [r[0] - origin for r in rows]  # on rank 0's trace clock
    tot = [sum(r[1:]) for r in rows]
    cap = rate * (len(rows[0]) - 1)

    def use(a, b):  # fraction of capacity used in [a, b)
        i, j = bisect.bisect_left(t, a), min(bisect.bisect_left(t, b), len(t) - 1)
        return 0.0 if j <= i else (tot[j] - tot[i]) / (t[j] - t[i]) / cap

    sp = spans_of(events, 0)
    steps = sorted(s for s in sp if s[2] == "step")
    inner = [s for s in sp if s[2] != "step"]
    print(f"# link capacity {cap / 1e6:.0f} MB/s into {len(rows[0]) - 1} hosts; bins of {bin_s * 1e3:.0f} ms;"
          " idle: a bin under 10% of capacity")
    print("| step | s | link use | link idle s | idle during (rank 0's innermost span, s) |")
    print("|---|---|---|---|---|")
    for k, (s0, s1, _, name) in enumerate(steps):
        if k == 0 or s1 > t[-1]:
            continue  # the first step records the order (no prefetch); unsampled steps
        idle, where = 0.0, {}
        nb = int((s1 - s0) / bin_s)
        for b in range(nb):
            a = s0 + b * bin_s
            if use(a, a + bin_s) >= 0.1:
                continue
            idle += bin_s
            mid = a + bin_s / 2
            inside = [s for s in inner if s[0] <= mid < s[1]]
            label = min(inside, key=lambda s: s[1] - s[0])[3] if inside else "(between spans)"
            where[label] = where.get(label, 0.0) + bin_s
        top = ", ".join(f"{n} {v:.1f}" for n, v in sorted(where.items(), key=lambda x: -x[1])[:5])
        print(f"| {name} | {s1 - s0:.2f} | {use(s0, s1) * 100:.0f}% | {idle:.1f} | {top} |")
    sampled = [s for s in steps if s[1] <= t[-1]]
    if not sampled:
        sys.exit("link_timeline: no step of the trace ends inside the samples")
    last = sampled[-1]
    n = int((last[1] - last[0]) / bin_s) + 1
    print(f"\n{last[3]}: link use per bin (%): " +
          " ".join(f"{use(last[0] + b * bin_s, last[0] + (b + 1) * bin_s) * 100:.0f}" for b in range(n)))


if __name__ == "__main__":
    main()
