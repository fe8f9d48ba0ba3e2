#!/bin/sh
# bench/link_timeline.py on a made-up step: 2 hosts at 100 MB/s each, step 2 lasts 2 s, the links are
# full except for 0.5 s inside "forward root" (after its block "forward h0" ended) and 0.5 s inside
# "optimizer root". The tool must line the samples up through clock_origin_s (1000 s), report 50% link
# use, ~1.0 s idle, and put the idle time in those two spans; a trace without clock_origin_s must fail.
set -eu
TOOL=$1 WORK=$2
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
python3 - <<'PY'
import json
ev = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "rank 0", "clock_origin_s": 1000.0}}]
def span(name, cat, a, b):
    ev.append({"name": name, "cat": cat, "ph": "B", "ts": a * 1e6, "pid": 0, "tid": 0})
    ev.append({"name": name, "cat": cat, "ph": "E", "ts": b * 1e6, "pid": 0, "tid": 0})
span("step 1", "step", 0.0, 1.0)
span("step 2", "step", 1.0, 3.0)
span("forward root", "forward", 1.0, 2.0)
span("forward h0", "forward", 1.0, 1.5)
span("optimizer root", "optimizer", 2.0, 3.0)
ev.sort(key=lambda e: e.get("ts", -1))
json.dump({"traceEvents": ev}, open("trace.json", "w"))
json.dump({"traceEvents": ev[1:]}, open("old.json", "w"))
rate, b, lines = 100e6, 0.0, []
for k in range(401):  # 0 .. 4 s on the trace's clock, every 10 ms
    t = k * 0.01
    idle = 1.5 <= t < 2.0 or 2.5 <= t < 3.0
    lines.append(f"{1000.0 + t:.6f} {int(b)} {int(b)}")
    if not idle:
        b += rate * 0.01
open("samples.txt", "w").write("\n".join(lines) + "\n")
PY
python3 "$TOOL" trace.json samples.txt 100000000 0.1 >out.txt
cat out.txt
python3 - <<'PY'
rows = [l for l in open("out.txt") if l.startswith("| step 2 ")]
assert len(rows) == 1, rows
c = [x.strip() for x in rows[0].strip().strip("|").split("|")]
assert c[1] == "2.00", c
assert c[2] in ("49%", "50%", "51%"), c
assert 0.8 <= float(c[3]) <= 1.1, c
assert "forward root 0." in c[4] and "optimizer root 0." in c[4], c
assert "forward h0" not in c[4], c
print("link_timeline: ok")
PY
if python3 "$TOOL" old.json samples.txt 100000000 >old.txt 2>&1; then
    echo "link_timeline: a trace without clock_origin_s was accepted" >&2
    exit 1
fi
grep -q "clock_origin_s" old.txt
echo "link_timeline: refuses a trace without clock_origin_s: ok"
