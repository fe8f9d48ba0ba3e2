#!/usr/bin/env python3
"""check_report.py — checks an fsdp-train --report file: master, optim, grad_shard, param_full and
main_grad and other predicted == measured to the byte, activation within 5%, every category present; with
--plan FILE also that a `--plan --report` file predicts exactly what the run predicted; with
--exact-only only the categories the plan claims exact whatever else the run does (a run whose sample's
key/value cache and GEMMs, not in the training plan, add to activation and other: other at least the
prediction).
usage: check_report.py RUN.json [--plan PLAN.json] [--world N] [--exact-only]   (exit 1 on failure)"""
import json
import sys

CATS = ["master", "optim", "grad_shard", "param_full", "main_grad", "activation", "comm", "other"]
EXACT = ["master", "optim", "grad_shard", "param_full", "main_grad"]


def fail(msg):
    print("check_report: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def load(path):
    with open(path) as f:
        return json.load(f)  # invalid JSON raises: non-zero exit


def main():
    args = sys.argv[1:]
    if not args:
        fail(__doc__)
    run, plan, world, exact_only = load(args[0]), None, None, False
    i = 1
    while i < len(args):
        if args[i] == "--exact-only":
            exact_only = True
            i += 1
            continue
        if args[i] == "--plan":
            plan = load(args[i + 1])
        elif args[i] == "--world":
            world = int(args[i + 1])
        else:
            fail("unknown argument " + args[i])
        i += 2
    pred, meas = run.get("predicted"), run.get("measured")
    if not isinstance(pred, dict) or not isinstance(meas, dict):
        fail("%s lacks predicted/measured objects" % args[0])
    for c in CATS + ["total"]:
        for d, name in ((pred, "predicted"), (meas, "measured")):
            if not isinstance(d.get(c), int) or d[c] < 0:
                fail("%s %s: %r is not a byte count" % (name, c, d.get(c)))
    for c in EXACT:
        if pred[c] != meas[c]:
            fail("%s: predicted %d != measured %d" % (c, pred[c], meas[c]))
        if pred[c] <= 0:
            fail("%s: predicted %d, expected > 0" % (c, pred[c]))
    a, m = pred["activation"], meas["activation"]
    if not exact_only and (a <= 0 or abs(m - a) > 0.05 * a):
        fail("activation: predicted %d, measured %d (more than 5%% apart)" % (a, m))
    # other (the GEMM workspace, oneDNN's scratchpad included, and the loaders' buffers) is exact for the
    # training steps; sampling's GEMMs (other row counts) may add to it, hence a lower bound with --exact-only
    if not exact_only and meas["other"] != pred["other"]:
        fail("other: predicted %d != measured %d" % (pred["other"], meas["other"]))
    if exact_only and meas["other"] < pred["other"]:
        fail("other: measured %d below the predicted %d" % (meas["other"], pred["other"]))
    if world is not None and run.get("world") != world:
        fail("world %r, want %d" % (run.get("world"), world))
    if plan is not None:
        if "measured" in plan:
            fail("the --plan report has a measured section")
        for c in CATS + ["total"]:
            if plan["predicted"][c] != pred[c]:
                fail("--plan predicts %s %d, the run predicted %d" % (c, plan["predicted"][c], pred[c]))
        for k in ("world", "strategy", "main_grad", "accum", "n_micro", "n_params", "zero_ref_bytes"):
            if plan.get(k) != run.get(k):
                fail("--plan %s %r, the run %r" % (k, plan.get(k), run.get(k)))
    print("check_report: OK: %s (world %s, %s, %s, %s)" % (args[0], run.get("world"), run.get("strategy"),
                                                          run.get("main_grad"), run.get("accum")))


main()
