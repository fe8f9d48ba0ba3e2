#!/bin/sh
# trace_plot.sh PLOT TEST_TRACE DIR — script test of tools/plot (see trace_plot.cmake).
set -eu
plot=$1 test_trace=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir"
fail() { echo "trace_plot: FAIL: $*" >&2; exit 1; }
is_png() { # PNG signature and more than a blank canvas
  [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$1 is not a PNG"
  [ "$(wc -c < "$1")" -gt 10000 ] || fail "$1 is suspiciously small"
}
# metrics: 60 steps of a falling loss, with two eval lines
i=1
while [ $i -le 60 ]; do
  echo "{\"step\": $i, \"loss\": $(awk "BEGIN{print 3+8*exp(-$i/15)}"), \"lr\": 0.0003, \"grad_norm\": 1.5, \"tokens_per_s\": 1234.5, \"step_s\": 0.1}"
  [ $((i % 30)) -eq 0 ] && echo "{\"step\": $i, \"val_loss\": $(awk "BEGIN{print 3.2+8*exp(-$i/15)}")}"
  i=$((i + 1))
done > "$dir/metrics.jsonl"
"$plot" loss "$dir/metrics.jsonl" -o "$dir/loss.png" >/dev/null
is_png "$dir/loss.png"
"$test_trace" "$dir/trace.json" >/dev/null 2>&1 || fail "test_trace did not write a trace"
"$plot" memory "$dir/trace.json" --rank 3 -o "$dir/memory.png" >/dev/null
is_png "$dir/memory.png"
# bad input: a line that is not JSON, a trace without that rank, an unknown kind
printf '{"step": 1, "loss": 2}\nnot json\n' > "$dir/bad.jsonl"
if "$plot" loss "$dir/bad.jsonl" -o "$dir/bad.png" 2>/dev/null; then fail "accepted a malformed metrics file"; fi
if "$plot" memory "$dir/trace.json" --rank 7 -o "$dir/bad.png" 2>/dev/null; then fail "plotted a rank the trace lacks"; fi
if "$plot" nonsense "$dir/trace.json" 2>/dev/null; then fail "accepted an unknown kind"; fi
echo "trace_plot: OK"
