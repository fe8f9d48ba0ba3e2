#!/usr/bin/env python3
"""trace_comm.py — exposed communication from an fsdp-train --trace file.

The engine records a span only for the part of a collective that a hook waits for (the all-gather,
reduce-scatter or all-reduce wait); a collective that finished during compute leaves none. So the
exposed communication of a step is the sum of those spans inside its "step" span. Prints, per rank,
the mean step time and the mean exposed communication per step (steps after the first, which records
the hook order and prefetches nothing), and their ratio.
usage: trace_comm.py TRACE.json [--skip N (1)]"""
import json
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    skip = int(sys.argv[sys.argv.index("--skip") + 1]) if "--skip" in sys.argv else 1
    with open(path) as f:
        events = json.load(f)
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    comm_cats = {"all-gather", "reduce-scatter", "all-reduce"}
    per_rank = {}
    for e in events:
        if e.get("ph") not in ("B", "E"):
            continue
        per_rank.setdefault(e["pid"], []).append(e)
    rows = []
    for rank, evs in sorted(per_rank.items()):
        evs.sort(key=lambda e: e["ts"])
        steps, open_step, comm, open_comm = [], None, 0.0, {}
        for e in evs:
            if e.get("cat") == "step":
                if e["ph"] == "B":
                    open_step, comm = e["ts"], 0.0
                elif open_step is not None:
                    steps.append((e["ts"] - open_step, comm))
                    open_step = None
            elif e.get("cat") in comm_cats and open_step is not None:
                key = (e["name"], e["cat"], e.get("tid"))
                if e["ph"] == "B":
                    open_comm[key] = e["ts"]
                elif key in open_comm:
                    comm += e["ts"] - open_comm.pop(key)
        use = steps[skip:] if len(steps) > skip else steps
        if not use:
            continue
        st = sum(s for s, _ in use) / len(use) / 1e6
        cm = sum(c for _, c in use) / len(use) / 1e6
        rows.append((rank, len(use), st, cm))
    print("| rank | steps | mean step s | exposed comm s/step | exposed share |")
    print("|---|---|---|---|---|")
    for rank, n, st, cm in rows:
        print(f"| {rank} | {n} | {st:.3f} | {cm:.3f} | {100 * cm / st:.1f}% |")


if __name__ == "__main__":
    main()
