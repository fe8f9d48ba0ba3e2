#!/usr/bin/env python3
"""bpe_fixture.py — the `tokenizers` side of the BPE tests (tests/train/bpe_check.sh) and bench, run with
the test venv (.venv/bin/python, tools/test-deps.sh).

  train OUT.json TEXT... [--vocab N]   trains a GPT-2 style byte-level BPE (ByteLevel pre-tokenizer
                                       without prefix space, all 256 bytes, <|endoftext|>) on TEXT
  hard DIR                             writes DIR/hard.txt (valid UTF-8 hard cases) and
                                       DIR/invalid.bin (invalid UTF-8 byte sequences)
  ids TOKENIZER FILE...                checks FILE.ids (int32, written by bpe_tool --ids) against
                                       tokenizers' encode of FILE; exit 1 on any difference
  prepared TOKENIZER TRAIN.BIN FILE... checks a `prepare --tokenizer` train.bin made from FILE... with
                                       --val-fraction 0 and no --doc-sep: [eot] + ids of each file
  bad SRC.json DIR                     malformed copies of SRC.json under DIR and DIR/cases.txt
                                       ("file|text the error must contain|...")
  bench TOKENIZER FILE... [--reps N]   tokenizers' single-call encode speed in MB/s on the files
"""
import argparse
import copy
import json
import os
import struct
import sys
import time

import numpy as np


def cmd_train(a):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tr = trainers.BpeTrainer(vocab_size=a.vocab, special_tokens=["<|endoftext|>"], show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(a.text, tr)
    tok.save(a.out)
    print(f"trained {a.out}: vocabulary {tok.get_vocab_size()} on {len(a.text)} file(s)")


HARD = [
    "", "\n", "\n\n\n", "   ", "a  b   c    d", "  leading", "trailing   ", "\t\ttabs\tinside\t", " \t \n \t",
    "line\r\nwindows\r\n", "x\n\n\n\ny", "\n \n  \n   x",
    "123 4567 89012345 0.5 -3e10 1,000,000 ١٢٣ ½ ²", "it's I'm we've they'll he'd she's you're don't",
    "IT'S I'M WE'VE THEY'LL", "'s 't 're 've 'm 'll 'd ''s ' s", "rock'n'roll o'clock '' '''",
    "café naïve résumé Ångström façade Zürich ñandú", "e\u0301 combining a\u0308\u0304",
    "中文字符测试，日本語のテキスト、한국어 텍스트", "Ελληνικά Русский текст עברית العربية हिन्दी ไทย",
    "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇩🇪 ❤️", "mixed: abc123def 3rd 1st x2 2x", "symbols !!! ??? ... --- *** ### @@@ $$$ %%%",
    "quotes \"double\" 'single' `back` «guillemets» „low“", "paths /usr/bin/env C:\\\\Windows x_y-z.w",
    "nbsp\u00a0here ideographic\u3000space thin\u2009space em\u2003space", "line\u2028sep para\u2029sep",
    "zero\u200bwidth\u200djoiner", "<|endoftext|>", "before<|endoftext|>after", " <|endoftext|> ",
    "<|endoftext|><|endoftext|>", "<|endoftext", "tab\tthen\nnewline then  \n", "    indented code()",
    "math ∑∫√∞ ≤≥≠ → ⇒", "a" * 300, " " * 50 + "x", "\n" * 20, "ab" * 100 + " " + "!?" * 60,
]


def cmd_hard(a):
    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(a.dir, "hard.txt"), "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(HARD))
    inv = [b"\xff", b"\xfe\xfe", b"abc\x80def", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82(", b"\xf0\x9f\x98",
           b"\xc0\xaf overlong", b"\xed\xa0\x80 surrogate", b"\xf4\x90\x80\x80 too big", b" \xff \xfe\xff  x",
           b"caf\xe9 latin-1", b"\x00\x01\x02 controls \x7f"]
    with open(os.path.join(a.dir, "invalid.bin"), "wb") as f:
        f.write(b"\n".join(inv))
    print(f"wrote {len(HARD)} hard cases and {len(inv)} invalid sequences in {a.dir}")


def load(path):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(path)


def first_diff(x, y):
    n = min(len(x), len(y))
    d = next((i for i in range(n) if x[i] != y[i]), n)
    return d


def cmd_ids(a):
    tok = load(a.tokenizer)
    fails = 0
    for path in a.files:
        text = open(path, "rb").read().decode("utf-8")
        want = tok.encode(text).ids
        got = np.fromfile(path + ".ids", dtype="<i4").tolist()
        if got != want:
            d = first_diff(got, want)
            print(f"FAIL {path}: {len(got)} ids vs tokenizers' {len(want)}; first difference at id {d}: "
                  f"ours {got[d:d + 8]} theirs {want[d:d + 8]}")
            fails += 1
        else:
            print(f"ok {path}: {len(want)} ids equal")
    return 1 if fails else 0


def cmd_prepared(a):
    tok = load(a.tokenizer)
    eot = tok.token_to_id("<|endoftext|>")
    want = []
    for path in a.files:
        want += [eot] + tok.encode(open(path, "rb").read().decode("utf-8")).ids
    with open(a.train_bin, "rb") as f:
        hdr = struct.unpack("<256i", f.read(1024))
        got = np.frombuffer(f.read(), dtype="<u2").tolist()
    if hdr[2] != len(got) or got != want:
        d = first_diff(got, want)
        print(f"FAIL {a.train_bin}: {len(got)} tokens (header {hdr[2]}) vs {len(want)}; first difference at {d}")
        return 1
    print(f"ok {a.train_bin}: {len(got)} tokens equal to tokenizers' over {len(a.files)} files")
    return 0


def cmd_bad(a):
    src = json.load(open(a.src, encoding="utf-8"))
    os.makedirs(a.dir, exist_ok=True)
    cases = []

    def case(name, edit, expect):
        j = copy.deepcopy(src)
        edit(j)
        p = os.path.join(a.dir, name + ".json")
        with open(p, "w", encoding="utf-8") as f:
            json.dump(j, f)
        cases.append("|".join([p] + expect))

    def drop_byte(j):
        del j["model"]["vocab"]["Ġ"]
    case("no_byte", drop_byte, ["no_byte.json", "lacks the token of byte 0x20"])
    case("wordpiece", lambda j: j["model"].update(type="WordPiece"), ["\"model\".\"type\"", "BPE"])
    case("dropout", lambda j: j["model"].update(dropout=0.1), ["\"dropout\""])
    case("prefix_space", lambda j: j["pre_tokenizer"].update(add_prefix_space=True), ["add_prefix_space"])
    case("normalizer", lambda j: j.update(normalizer={"type": "NFC"}), ["\"normalizer\""])
    case("no_pre", lambda j: j.update(pre_tokenizer=None), ["\"pre_tokenizer\""])
    case("big_id", lambda j: j["model"]["vocab"].update({"zzzq": 1 << 24}), ["\"zzzq\"", "0..16777215"])

    def bad_merge(j):
        j["model"]["merges"][3] = "Ġ"
    case("bad_merge", bad_merge, ["\"merges\"[3]", "not a pair"])

    def merge_unknown(j):
        m = j["model"]["merges"]
        m[5] = ["Ġ", "qqqqzzzz"] if isinstance(m[5], list) else "Ġ qqqqzzzz"
    case("merge_unknown", merge_unknown, ["\"merges\"[5]", "not in the vocabulary"])
    case("no_eot", lambda j: j.update(added_tokens=[]), ["<|endoftext|>"])
    def bad_second_added(j):  # the entry after a valid one lacks its id (fsdp_bpe_free crashed on it)
        j["added_tokens"] = j["added_tokens"][:1] + [{"content": "<|x|>", "special": True}]
    case("bad_added2", bad_second_added, ["\"added_tokens\"", "\"id\""])
    text = json.dumps(src)
    raw = {  # repeated keys, which json.dump cannot write: at the top, and in the vocabulary (a large object)
        "dup_top": ('{"dupkey": 1, "dupkey": 2, ' + text[1:], ["the key \"dupkey\" appears twice"]),
        "dup_vocab": (text.replace('"vocab": {', '"vocab": {"\\u0120": 7, ', 1), ["the key \"\u0120\" appears twice"]),
    }
    for name, (body, expect) in raw.items():
        assert body != text
        p = os.path.join(a.dir, name + ".json")
        with open(p, "w", encoding="utf-8") as f:
            f.write(body)
        cases.append("|".join([p, name + ".json"] + expect))
    with open(os.path.join(a.dir, "truncated.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(src)[:5000])
    cases.append(os.path.join(a.dir, "truncated.json") + "|truncated.json|JSON")
    with open(os.path.join(a.dir, "cases.txt"), "w") as f:
        f.write("\n".join(cases) + "\n")
    print(f"{len(cases)} malformed tokenizers in {a.dir}")
    return 0


def cmd_bench(a):
    tok = load(a.tokenizer)
    texts = [open(p, "rb").read().decode("utf-8") for p in a.files]
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    best = None
    for _ in range(a.reps):
        t0 = time.perf_counter()
        for t in texts:
            tok.encode(t)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    print(f"tokenizers {__import__('tokenizers').__version__}: {nbytes / 1e6:.2f} MB in {best:.3f} s = "
          f"{nbytes / 1e6 / best:.2f} MB/s (best of {a.reps}; RAYON_NUM_THREADS={os.environ.get('RAYON_NUM_THREADS', 'unset')})")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("out")
    t.add_argument("text", nargs="+")
    t.add_argument("--vocab", type=int, default=2000)
    h = sub.add_parser("hard")
    h.add_argument("dir")
    i = sub.add_parser("ids")
    i.add_argument("tokenizer")
    i.add_argument("files", nargs="+")
    r = sub.add_parser("prepared")
    r.add_argument("tokenizer")
    r.add_argument("train_bin")
    r.add_argument("files", nargs="+")
    b = sub.add_parser("bad")
    b.add_argument("src")
    b.add_argument("dir")
    c = sub.add_parser("bench")
    c.add_argument("tokenizer")
    c.add_argument("files", nargs="+")
    c.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    return {"train": cmd_train, "hard": cmd_hard, "ids": cmd_ids, "prepared": cmd_prepared, "bad": cmd_bad,
            "bench": cmd_bench}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
