"""chat_ref.py — `fsdp-train prepare --jsonl` against transformers' apply_chat_template.

usage: chat_ref.py FSDP_TRAIN TOKENIZER_JSON chatml|llama3 WORKDIR

Random chat and prompt/completion rows (white space at the ends and inside, tabs, CRLF-free newlines,
NFC-composable marks, Hangul jamo, CJK, emoji, no-break and ideographic spaces, empty contents, the
format's own special tokens inside a content) are prepared with the real tokenizer, and every row's ids
must equal apply_chat_template(tokenize=True) under the model family's official template, and its
FSDP_MASK_LOSS bits the assistant_masks of the same template with {% generation %} around each assistant
content and its end-of-turn token (return_assistant_tokens_mask); FSDP_MASK_DOC on every row's first
token only. Rows go to val.bin by --val-fraction's rule (row i when floor((i+1) f) > floor(i f)).
"""
import json
import math
import os
import random
import subprocess
import sys

import numpy as np
from transformers import PreTrainedTokenizerFast

BIN, TOK, FMT, WORK = sys.argv[1:5]

# The official templates (SmolLM2-Instruct's ChatML, Meta-Llama-3-Instruct's), and the same renderings
# with generation tags: assistant_masks needs them, and the rendered strings must equal the official ones.
OFFICIAL = {
    "chatml": "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}",
}
TAGGED = {
    "chatml": "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>' }}"
    "{% endgeneration %}{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}{{ '\\n' }}{% endfor %}",
    "llama3": "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}"
    "{% endgeneration %}{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}",
}
SPECIAL = {"chatml": ["<|im_end|>", "<|im_start|>"], "llama3": ["<|eot_id|>", "<|start_header_id|>"]}

tok = PreTrainedTokenizerFast(tokenizer_file=TOK)
if FMT == "llama3":
    tok.bos_token = "<|begin_of_text|>"

rng = random.Random(20241203)
PIECES = ["hello", " world", "Hello", "  ", " ", "\n", "\n\n", "\t", "x", "42", "3.14", "don't", "e\u0301",
          "\u1100\u1161\u11a8", "\u4e2d\u6587", "\U0001f600", "\u00a0", "\u3000", "caf\u00e9", "\u00a0x",
          " (a, b)", "::", "é\n", "   \n  ", "Zürich", "\u2028", "def f():\n    return 1"]


def content():
    if rng.random() < 0.08:
        return ""
    if rng.random() < 0.05:
        return rng.choice(["  ", "\n", " \u3000 "])
    s = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12)))
    if rng.random() < 0.04:
        s += rng.choice(SPECIAL[FMT]) + "tail"
    return s


def row():
    if rng.random() < 0.3:
        return {"prompt": content(), "completion": content()}
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": content()})
    for _ in range(rng.randint(1, 3)):
        msgs.append({"role": "user", "content": content()})
        msgs.append({"role": "assistant", "content": content()})
    if rng.random() < 0.2:
        msgs.append({"role": "user", "content": content()})
    return {"messages": msgs, "id": rng.randint(0, 99)}  # other keys of a row are ignored


def messages(r):
    if "messages" in r:
        return r["messages"]
    return [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["completion"]}]


rows = [row() for _ in range(300)]
fails = []
refs = []
for i, r in enumerate(rows):
    m = messages(r)
    # With a system turn first (ChatML) the official template adds nothing: the strings must be equal.
    if FMT == "llama3" or m[0]["role"] == "system":
        a = tok.apply_chat_template(m, chat_template=OFFICIAL[FMT], tokenize=False)
        b = tok.apply_chat_template(m, chat_template=TAGGED[FMT], tokenize=False)
        if a != b:
            fails.append(f"row {i}: the tagged template renders otherwise than the official one")
    out = tok.apply_chat_template(m, chat_template=TAGGED[FMT], tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)
    ids = list(out["input_ids"])
    if ids != tok(tok.apply_chat_template(m, chat_template=TAGGED[FMT], tokenize=False),
                  add_special_tokens=False)["input_ids"]:
        fails.append(f"row {i}: apply_chat_template's ids are not the encoding of its text")
    mask = list(out["assistant_masks"])
    refs.append((ids, [(1 if k else 0) | (2 if j == 0 else 0) for j, k in enumerate(mask)]))

os.makedirs(WORK, exist_ok=True)
jsonl = os.path.join(WORK, f"rows_{FMT}.jsonl")
with open(jsonl, "w", encoding="utf-8") as f:
    for i, r in enumerate(rows):
        f.write(json.dumps(r, ensure_ascii=(i % 2 == 0)) + "\n")  # \u escapes and raw UTF-8 alike
        if i % 50 == 7:
            f.write("   \n")  # blank lines are skipped


def read_bin(path, mask=False):
    h = np.fromfile(path, dtype="<i4", count=256)
    if mask:
        assert h[0] == 20241203 and h[1] == 1, (path, h[:3])
        return np.fromfile(path, dtype=np.uint8, offset=1024).tolist()
    dt = {20240520: "<u2", 20240801: "<u4"}[int(h[0])]
    d = np.fromfile(path, dtype=dt, offset=1024)
    assert len(d) == h[2], path
    return d.tolist()


for frac in (0.0, 0.25):
    out = os.path.join(WORK, f"prep_{FMT}_{frac}")
    p = subprocess.run([BIN, "prepare", "--jsonl", jsonl, "--tokenizer", TOK, "--chat-format", FMT, "--out", out,
                        "--val-fraction", str(frac)], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: prepare --val-fraction {frac}: {p.stderr}")
    want = {"train": ([], []), "val": ([], [])}
    for i, (ids, fl) in enumerate(refs):
        part = "val" if math.floor((i + 1) * frac) > math.floor(i * frac) else "train"
        want[part][0].extend(ids)
        want[part][1].extend(fl)
    for part in ("train", "val"):
        got_ids = read_bin(os.path.join(out, f"{part}.bin"))
        got_fl = read_bin(os.path.join(out, f"{part}.mask"), mask=True)
        if got_ids != want[part][0]:
            k = next((j for j, (a, b) in enumerate(zip(got_ids, want[part][0])) if a != b),
                     min(len(got_ids), len(want[part][0])))
            fails.append(f"{frac} {part}.bin: ids differ from apply_chat_template's at {k} "
                         f"(got {got_ids[k:k + 6]}, want {want[part][0][k:k + 6]}; lengths {len(got_ids)}, "
                         f"{len(want[part][0])})")
        elif got_fl != want[part][1]:
            k = next(j for j, (a, b) in enumerate(zip(got_fl, want[part][1])) if a != b)
            fails.append(f"{frac} {part}.mask: flags differ from assistant_masks at {k} (got {got_fl[k:k + 6]}, "
                         f"want {want[part][1][k:k + 6]}, ids {got_ids[k:k + 6]})")
    meta = json.load(open(os.path.join(out, "meta.json")))
    n_loss = sum(f & 1 for _, fl in refs for f in fl)
    if meta.get("chat_format") != FMT or meta.get("documents") != len(rows) or meta.get("loss_tokens") != n_loss:
        fails.append(f"meta.json: {meta}")
    if frac == 0.25 and not want["val"][0]:
        fails.append("no val rows at --val-fraction 0.25")
n_tokens = sum(len(i) for i, _ in refs)
n_loss = sum(f & 1 for _, fl in refs for f in fl)
for f in fails:
    print("FAIL:", f, file=sys.stderr)
print(f"{FMT}: {len(rows)} rows, {n_tokens} tokens ({n_loss} loss targets) equal to apply_chat_template "
      f"and assistant_masks: {'no' if fails else 'yes'}")
sys.exit(1 if fails else 0)
