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
  random DIR [--seed S]                the pre-tokenizers of GPT-2, Llama 3, Qwen2 (with NFC) and SmolLM:
                                       for each, DIR/NAME.json, a BPE that tokenizers trains with that
                                       normalizer and pre-tokenizer (plus special and added tokens; Llama 3's
                                       with ignore_merges) on random text, and DIR/NAME_K.txt, random texts
                                       of letters (Unicode 15-17's new ones too), numbers, white space,
                                       contractions, marks to compose, special tokens; `ids` compares
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
        want = tok.encode(text, add_special_tokens=False).ids
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
    case("normalizer", lambda j: j.update(normalizer={"type": "NFKC"}), ["\"normalizer\"", "NFKC", "not implemented"])
    case("split_regex", lambda j: j.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": False},
        j["pre_tokenizer"]]}), ["\"pattern\"", "not implemented"])
    case("metaspace", lambda j: j.update(pre_tokenizer={"type": "Metaspace", "replacement": "_"}),
         ["\"Metaspace\"", "not implemented"])
    case("unknown_top", lambda j: j.update(extra_field=1), ["\"extra_field\"", "not implemented"])
    case("unknown_model", lambda j: j["model"].update(cache_capacity=5), ["\"cache_capacity\"", "not implemented"])
    case("truncation", lambda j: j.update(truncation={"max_length": 5}), ["\"truncation\"", "not implemented"])
    case("no_bytelevel", lambda j: j.update(pre_tokenizer={"type": "Digits", "individual_digits": True}),
         ["no ByteLevel"])
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


LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
SPECIALS = ["<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<|end|>",
            "<|reserved_special_token_1|>", "<|reserved_special_token_12|>", "<fim_prefix>"]
# pieces of random text: words in several scripts, Unicode 15 letters (Kawi U+11F04.., Cyrillic modifier
# letters U+1E030..) and numbers (Kawi digits U+11F50.., Kaktovik U+1D2C0..), Unicode 16 ones (Cyrillic
# TJE U+1C89, Garay letters U+10D4A.. and digits U+10D40.., outlined digits U+1CCF0..), Unicode 17's
# Tolong Siki digits U+11DE0.. (other to the ByteLevel pattern, numbers to Digits), Unicode 14 ones, digits,
# contractions in any case, white space of every kind, punctuation, emoji, decomposed letters and
# Hangul jamo (NFC composes them), compatibility characters NFC leaves or changes (U+0958, U+212B, U+FB2C)
PIECES = ["the", "The", "THE", "hello", "world", "don't", "I'M", "we'Ve", "they'LL", "'s", "'T", "'Re", "'d",
          "'x", "'", "''", "café", "naïve", "Zürich", "中文", "日本語", "한국어", "Ελλάδα", "Русский", "עברית",
          "العربية", "हिन्दी", "ไทย", "\U00011F04\U00011F05", "\U0001E030\U0001E031", "\U00011F50\U00011F51",
          "\U0001D2C0\U0001D2C1", "\u1c89\u1c8a", "\U00010D4A\U00010D4B", "\U00010D40\U00010D41", "\U0001CCF0\U0001CCF1",
          "\U00011DE0\U00011DE1", "\u0661\u0662", "½", "²", "Ⅷ", "0", "7", "42", "123", "2024", "31415926",
          "3.14", "1,000", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028",
          "\u2009", "\u0085", "\x0b", "!", "?!", "...", "(", ")", "{}", "--", "__", "$", "#", "@", "\"", "«»",
          "😀", "👍🏽", "👨\u200d👩", "🇩🇪", "e\u0301", "a\u0308\u0304", "o\u0323\u0302", "\u1100\u1161\u11a8",
          "\u1112\u1161", "\u0958", "\u212b", "\ufb2c", "A\u030a", "\u0041\u0328\u0301", "ſ", "'ſ", "K"]


def random_text(rng, n):
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.04:
            out.append(rng.choice(SPECIALS))
        elif r < 0.10:
            out.append("".join(chr(rng.randint(0x20, 0x7E)) for _ in range(rng.randint(1, 6))))
        else:
            out.append(rng.choice(PIECES))
    return "".join(out)


def cmd_random(a):
    import random
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    rng = random.Random(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    train_text = [random_text(rng, 200) for _ in range(300)]
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    kinds = {
        "gpt2": (None, pre_tokenizers.ByteLevel(add_prefix_space=False), False),
        "llama3": (None, pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), "isolated"), bl]), True),
        "qwen2": (normalizers.NFC(), pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2), "isolated"), bl]),
                  False),
        "smollm": (None, pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                  pre_tokenizers.ByteLevel(add_prefix_space=False)]), False),
    }
    for name, (norm, pre, ignore) in kinds.items():
        tok = Tokenizer(models.BPE())
        if norm is not None:
            tok.normalizer = norm
        tok.pre_tokenizer = pre
        tok.decoder = decoders.ByteLevel()
        tr = trainers.BpeTrainer(vocab_size=1500, special_tokens=SPECIALS[:6], show_progress=False,
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(train_text, tr)
        tok.add_special_tokens(SPECIALS[6:])
        path = os.path.join(a.dir, name + ".json")
        tok.save(path)
        if ignore:  # Llama 3's: a pre-token in the vocabulary is one id without merging
            j = json.load(open(path, encoding="utf-8"))
            j["model"]["ignore_merges"] = True
            with open(path, "w", encoding="utf-8") as f:
                json.dump(j, f, ensure_ascii=False)
        for k in range(a.texts):
            with open(os.path.join(a.dir, f"{name}_{k}.txt"), "w", encoding="utf-8", newline="") as f:
                f.write(random_text(rng, rng.randint(1, 400)))
    print(f"{len(kinds)} tokenizers and {a.texts} texts each in {a.dir}")
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
    r = sub.add_parser("random")
    r.add_argument("dir")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--texts", type=int, default=40)
    a = p.parse_args()
    return {"train": cmd_train, "hard": cmd_hard, "ids": cmd_ids, "prepared": cmd_prepared, "bad": cmd_bad,
            "bench": cmd_bench, "random": cmd_random}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
