"""mask_ref.py — data and the PyTorch reference for the loss-mask test (tests/train/hf_roundtrip.sh mask).
  data DIR N SEED      DIR/train.bin, DIR/val.bin (llm.c 16-bit token files, vocab 257), DIR/train.mask
                       and DIR/val.mask with the loss flag on an uneven share of tokens (dense in some
                       sequences, sparse or absent in others), DIR/meta.json
  ref MODEL DIR B T    prints the step-1 loss and pre-clip gradient norm of the first global batch with
                       transformers' GPT2LMHeadModel in float64: sum of the cross-entropy over the targets
                       whose token has the loss flag / their count over the whole batch
  check M.jsonl LOSS NORM   the run's step-1 loss and grad_norm equal the reference to 1e-5 relative
"""
import json, sys
import numpy as np


def write(path, magic, version, arr):
    hdr = np.zeros(256, dtype=np.int32)
    hdr[:3] = [magic, version, len(arr)]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(arr.tobytes())


def read(path, dtype):
    b = open(path, "rb").read()
    return np.frombuffer(b[1024:], dtype=dtype)


def data(d, n, seed):
    import os
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name in ("train", "val"):
        tok = rng.integers(0, 257, n).astype(np.uint16)
        # the share of counted targets changes every 32 tokens: 0, 5%, ..., 95% (uneven per sequence)
        share = ((np.arange(n) // 32) * 7 % 20) / 20.0
        fl = (rng.random(n) < share).astype(np.uint8)
        write(f"{d}/{name}.bin", 20240520, 1, tok)
        write(f"{d}/{name}.mask", 20241203, 1, fl)
    json.dump({"vocab": 257}, open(f"{d}/meta.json", "w"))


def ref(model, d, B, T):
    import torch
    from transformers import GPT2LMHeadModel
    m = GPT2LMHeadModel.from_pretrained(model).double()
    tok = read(f"{d}/train.bin", np.uint16).astype(np.int64)
    fl = read(f"{d}/train.mask", np.uint8)
    x = torch.tensor(tok[: B * T].reshape(B, T))
    y = torch.tensor(tok[1 : B * T + 1].reshape(B, T))
    keep = torch.tensor((fl[1 : B * T + 1] & 1).reshape(B, T).astype(bool))
    logits = m(x).logits
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
    count = int(keep.sum())
    loss = (ce * keep.reshape(-1)).sum() / count
    loss.backward()
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in m.parameters() if p.grad is not None))
    print(f"{loss.item():.17g} {norm.item():.17g} {count}")


def check(jsonl, loss, norm):
    rec = [json.loads(l) for l in open(jsonl) if l.startswith("{")]
    r = [x for x in rec if x.get("step") == 1][0]
    ok = True
    for k, want in (("loss", float(loss)), ("grad_norm", float(norm))):
        rel = abs(r[k] - want) / abs(want)
        print(f"{jsonl}: {k} {r[k]:.9g} reference {want:.9g} relative {rel:.2e}")
        ok = ok and rel < 1e-5
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    c = sys.argv[1]
    if c == "data":
        data(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif c == "ref":
        ref(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif c == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(f"unknown command {c}")
