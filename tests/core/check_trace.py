#!/usr/bin/env python3
"""check_trace.py — validates a Chrome-trace file written by fsdp.c: loads as JSON, every "B" has its
"E" (same name, per pid/tid, stack order), counters carry all eight memory categories with
non-negative bytes, and the expected ranks (pids) and event names are present.
usage: check_trace.py FILE [--ranks N] [--expect NAME ...]  (exit 1 with a message on failure)"""
import json
import sys

CATS = ["master", "optim", "grad_shard", "param_full", "main_grad", "activation", "comm", "other"]


def fail(msg):
    print("check_trace: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    args = sys.argv[1:]
    if not args:
        fail("usage: check_trace.py FILE [--ranks N] [--expect NAME ...]")
    path, ranks, expect = args[0], None, []
    i = 1
    while i < len(args):
        if args[i] == "--ranks":
            ranks = int(args[i + 1])
            i += 2
        elif args[i] == "--expect":
            expect.append(args[i + 1])
            i += 2
        else:
            fail("unknown argument " + args[i])
    with open(path) as f:
        doc = json.load(f)  # raises (non-zero exit) on invalid JSON
    ev = doc.get("traceEvents")
    if not isinstance(ev, list) or not ev:
        fail("no traceEvents list")
    stacks, names, pids, counters = {}, set(), set(), 0
    for e in ev:
        ph = e.get("ph")
        if ph in ("B", "E"):
            for k in ("name", "ts", "pid", "tid"):
                if k not in e:
                    fail("event without %s: %r" % (k, e))
            key = (e["pid"], e["tid"])
            st = stacks.setdefault(key, [])
            if ph == "B":
                st.append(e)
                names.add(e["name"])
                pids.add(e["pid"])
            else:
                if not st or st[-1]["name"] != e["name"]:
                    fail("E %r does not close the open event %r" % (e["name"], st[-1]["name"] if st else None))
                if e["ts"] < st[-1]["ts"]:
                    fail("E before its B: %r" % e)
                st.pop()
        elif ph == "C":
            counters += 1
            a = e.get("args", {})
            if sorted(a) != sorted(CATS):
                fail("counter categories %r" % sorted(a))
            if any((not isinstance(v, int)) or v < 0 for v in a.values()):
                fail("counter values %r" % a)
            pids.add(e["pid"])
        elif ph != "M":
            fail("unexpected phase %r" % ph)
    for key, st in stacks.items():
        if st:
            fail("unclosed events on pid/tid %r: %r" % (key, [x["name"] for x in st]))
    if counters == 0:
        fail("no memory counter events")
    if ranks is not None and pids != set(range(ranks)):
        fail("pids %r, want 0..%d" % (sorted(pids), ranks - 1))
    for n in expect:
        if n not in names:
            fail("no event named %r (have %d names, e.g. %r)" % (n, len(names), sorted(names)[:8]))
    print("check_trace: OK: %d events, %d counters, pids %r" % (len(ev), counters, sorted(pids)))


main()
