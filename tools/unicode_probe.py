#!/usr/bin/env python3
"""unicode_probe.py — how the `tokenizers` library's pre-tokenizers class every Unicode code point (not
the surrogates), one line each, "HEX Cd": C is L when GPT-2's ByteLevel pattern joins it to a letter
(\\p{L}), N when it joins it to a digit (\\p{N}), O when it joins it to '!' ([^\\s\\p{L}\\p{N}]), S otherwise
(white space); d when the Digits pre-tokenizer joins it to a digit (Rust's char::is_numeric), else '-'.
`bpe_tool --classes` writes the same from fsdp.c's tables (tests/train/unicode_classes.sh compares them);
tools/gen_unicode_tables.py names the Unicode versions this found. About 10 s.
usage: unicode_probe.py OUT [--version]   (--version: print tokenizers' version first, on stderr)"""
import sys

from tokenizers import __version__, pre_tokenizers


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if "--version" in sys.argv[2:]:
        print(f"tokenizers {__version__}", file=sys.stderr)
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    dg = pre_tokenizers.Digits(individual_digits=False)

    def one_piece(pt, s):
        return len(pt.pre_tokenize_str(s)) == 1

    with open(sys.argv[1], "w") as f:
        for cp in range(0x110000):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            c = chr(cp)
            if one_piece(bl, "a" + c):
                k = "L"
            elif one_piece(bl, "1" + c):
                k = "N"
            elif one_piece(bl, "!" + c):
                k = "O"
            else:
                k = "S"
            f.write(f"{cp:X} {k}{'d' if one_piece(dg, '1' + c) else '-'}\n")


if __name__ == "__main__":
    main()
