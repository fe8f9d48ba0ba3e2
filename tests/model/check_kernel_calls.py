#!/usr/bin/env python3
"""check_kernel_calls.py — every kernel a model runs goes through its context (issue 35, item 3).

The models (src/model/**.c) must call the kernels of the kernels table (the entries of `struct
fsdp_kernels` in src/kernels/kernels.h) through the decoder's context, FSDP_K / FSDP_KC, so that the
row of the engine's device runs them on its stream; a direct call fsdp_<entry>(...) would run the CPU
kernel on any device. The entry names are read from the header, so a new entry is checked at once. The
kernel-name variants the row folds in (fsdp_encoder_forward is fsdp_encoder_forward_pos with no
positions, fsdp_attention_forward the _doc form without ids, ...) count as their entry's kernel.
Exit 1 with one line per direct call. --selftest plants a direct call in a copy and must find it."""
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the plain forms the row's entries cover (same kernels, fewer arguments)
FOLDED = {"encoder_forward_pos": ["encoder_forward"], "encoder_backward_pos": ["encoder_backward"],
          "attention_forward_doc": ["attention_forward"], "softmax_crossentropy_count": ["softmax_crossentropy"]}


def entries(header):
    text = open(header).read()
    body = text[text.index("struct fsdp_kernels {"):]
    body = body[:body.index("};")]
    names = re.findall(r"fsdp_status \(\*(\w+)\)\(const fsdp_kctx \*x", body)
    if len(names) < 20:
        raise SystemExit("check_kernel_calls: found only %d entries in %s" % (len(names), header))
    out = set()
    for n in names:
        out.add(n)
        out.update(FOLDED.get(n, []))
    return out


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def check(model_root, names):
    pat = re.compile(r"\bfsdp_(%s)\s*\(" % "|".join(sorted(names, key=len, reverse=True)))
    bad = []
    for dirpath, _, files in os.walk(model_root):
        for f in sorted(files):
            if not f.endswith(".c"):
                continue
            path = os.path.join(dirpath, f)
            src = strip_comments(open(path).read())
            for i, line in enumerate(src.split("\n"), 1):
                for m in pat.finditer(line):
                    bad.append("%s:%d: fsdp_%s(...) called directly; call it through the context "
                               "(FSDP_K(d, %s, ...))" % (os.path.relpath(path, ROOT), i, m.group(1),
                                                          m.group(1)))
    return bad


def main():
    names = entries(os.path.join(ROOT, "src/kernels/kernels.h"))
    if "--selftest" in sys.argv:
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "m.c"), "w").write(
                "/* fsdp_matmul_forward( in a comment is fine */\n"
                "static int f(void) { return FSDP_K(d, matmul_forward, 0); }\n"
                "static int g(void) { return fsdp_rmsnorm_backward_scratch_bytes(1, 2); }\n")
            if check(d, names):
                raise SystemExit("selftest: a clean file was reported")
            open(os.path.join(d, "n.c"), "w").write("int h(void) { return fsdp_attention_forward(0); }\n")
            if len(check(d, names)) != 1:
                raise SystemExit("selftest: a direct call was not reported")
        print("selftest: ok (%d kernel names)" % len(names))
        return 0
    bad = check(os.path.join(ROOT, "src/model"), names)
    for b in bad:
        print(b)
    print("%d direct kernel calls in src/model (%d kernel names checked)" % (len(bad), len(names)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
