#!/usr/bin/env python3
"""gguf_vocab.py — the real tokenizers that llama.cpp ships as vocab-only GGUF files (in llama-cpp-python's
source distribution, vendor/llama.cpp/models/ggml-vocab-NAME.gguf, with test strings NAME.gguf.inp and the
ids the original Hugging Face tokenizer gave them, NAME.gguf.out) as the tests of fsdp.c's tokenizer use
them (tests/train/bpe_real.sh). Reads a GGUF with llama.cpp's own reader (its gguf-py folder, next to the
models in the same source distribution).

  json GGUF OUT.json       writes the tokenizer.json that the model's Hugging Face folder has, rebuilt
                           from the GGUF: its vocabulary, merges and special tokens, and the normalizer
                           and pre-tokenizer that tokenizer.ggml.pre names (gpt-2, llama-bpe: Llama 3,
                           qwen2, starcoder and refact: SmolLM's Digits + ByteLevel); other names refused
  cases GGUF DIR           writes DIR/NNN.txt (each test string of GGUF.inp) and DIR/NNN.want (its ids
                           from GGUF.out, one per line)
  check DIR                compares DIR/NNN.txt.ids (int32, bpe_tool --ids) with DIR/NNN.want; exit 1 on
                           any difference
usage: PYTHONPATH=.../vendor/llama.cpp/gguf-py python gguf_vocab.py CMD ...
"""
import glob
import json
import os
import re
import sys

import numpy as np

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


def split(pattern):
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


# tokenizer.ggml.pre -> (normalizer, pre_tokenizer, ignore_merges), as the models' tokenizer.json have them
PRE = {
    "gpt-2": (None, byte_level(True), False),
    "llama-bpe": (None, {"type": "Sequence", "pretokenizers": [split(LLAMA3), byte_level(False)]}, True),
    "qwen2": ({"type": "NFC"}, {"type": "Sequence", "pretokenizers": [split(QWEN2), byte_level(False)]}, False),
    "starcoder": (None, {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                               byte_level(True)]}, False),
}
PRE["refact"] = PRE["starcoder"]


def field(r, name):
    f = r.fields[name]
    return [f.parts[i] for i in f.data]


def cmd_json(gguf, out):
    from gguf.gguf_reader import GGUFReader
    r = GGUFReader(gguf)
    pre = bytes(field(r, "tokenizer.ggml.pre")[0]).decode()
    if pre not in PRE:
        sys.exit(f"{gguf}: tokenizer.ggml.pre {pre!r} is not one of {sorted(PRE)}")
    toks = [bytes(p).decode("utf-8") for p in field(r, "tokenizer.ggml.tokens")]
    types = [int(p[0]) for p in field(r, "tokenizer.ggml.token_type")]
    merges = [bytes(p).decode("utf-8") for p in field(r, "tokenizer.ggml.merges")]
    vocab, added = {}, []
    for i, (t, ty) in enumerate(zip(toks, types)):
        if ty == 1:  # normal
            vocab[t] = i
        elif ty in (3, 4):  # control, user-defined: added tokens (llama.cpp pads Qwen2 with [PADn])
            if ty == 4 and re.fullmatch(r"\[PAD\d+\]", t):
                continue
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": ty == 3})
        else:
            sys.exit(f"{gguf}: token {i} {t!r} has type {ty}, not handled")
    norm, pretok, ignore = PRE[pre]
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": norm,
         "pre_tokenizer": pretok, "post_processor": None,
         "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                   "ignore_merges": ignore, "vocab": vocab, "merges": merges}}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    print(f"{out}: {pre}, {len(vocab)} tokens, {len(merges)} merges, {len(added)} added tokens")


def cmd_cases(gguf, d):
    os.makedirs(d, exist_ok=True)
    inp = open(gguf + ".inp", encoding="utf-8", newline="").read().split("\n__ggml_vocab_test__\n")
    out = open(gguf + ".out", encoding="utf-8").read().split("\n")
    inp = inp[:-1] if inp and inp[-1] == "" else inp  # the file ends with a separator
    if len(out) < len(inp):
        sys.exit(f"{gguf}: {len(inp)} test strings but {len(out)} id lines")
    for k, text in enumerate(inp):
        with open(os.path.join(d, f"{k:03d}.txt"), "w", encoding="utf-8", newline="") as f:
            f.write(text)
        with open(os.path.join(d, f"{k:03d}.want"), "w") as f:
            f.write("\n".join(out[k].split()) + "\n")
    print(f"{d}: {len(inp)} cases")


def cmd_check(d):
    fails = n = 0
    for want_path in sorted(glob.glob(os.path.join(d, "*.want"))):
        base = want_path[:-5]
        want = [int(x) for x in open(want_path).read().split()]
        got = np.fromfile(base + ".txt.ids", dtype="<i4").tolist()
        n += 1
        if got != want:
            fails += 1
            text = open(base + ".txt", encoding="utf-8").read()
            print(f"FAIL {base}.txt {text[:60]!r}: ours {got[:20]} want {want[:20]}")
    print(f"{d}: {n - fails} of {n} cases equal")
    return 1 if fails or n == 0 else 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "json":
        return cmd_json(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 4 and sys.argv[1] == "cases":
        return cmd_cases(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        return cmd_check(sys.argv[2])
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main() or 0)
