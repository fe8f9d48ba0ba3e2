"""pack_ref.py — data and the transformers reference for the packing test (tests/train/hf_roundtrip.sh pack).
  data DIR N SEED KIND  DIR/train.bin (llm.c 16-bit token file, vocab 257) of documents of uneven lengths
                        (1 to 3.5 sequences of 32), DIR/meta.json; KIND eot: every document starts with the
                        end-of-text token 256 and meta.json names it ("eot"); KIND mask: no end-of-text
                        token, DIR/train.mask marks every document's first token (FSDP_MASK_DOC) and the
                        loss flag on an uneven share of tokens, meta.json without "eot"
  llama DIR SEED        a small random LlamaForCausalLM (RoPE, grouped-query attention) saved by transformers
  ref MODEL DIR B T MODE  the step-1 loss and pre-clip gradient norm of the first global batch (file order)
                        in float64: every document (or piece of one) run alone through transformers from
                        position 0, the cross-entropy summed over the counted targets / their count.
                        MODE doc: sequence s is tokens [s*T, s*T + T], cut where a document starts; MODE pad:
                        the sequences are the documents themselves, each with the next document's first
                        token as its last target and cut into chunks of T+1 tokens sharing one token
  check M.jsonl LOSS NORM  the run's step-1 loss and grad_norm equal the reference to 1e-5 relative
  checkval M.jsonl LOSS    its step-1 val_loss equals LOSS to 1e-5 relative
The document boundaries here come from this file's own generator, not from fsdp.c's scan.
"""
import json, os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mask_ref import write, read, check  # noqa: E402

EOT = 256


def gen_docs(n, seed):
    """Documents (lists of token ids < 256) and their first-token indices, n tokens in all."""
    rng = np.random.default_rng(seed)
    starts, pos = [], 0
    while pos < n:
        starts.append(pos)
        pos += int(rng.integers(1, 112))  # 1..111 tokens: one-token documents, and ones over 3 sequences
    return rng, starts


def data(d, n, seed, kind):
    os.makedirs(d, exist_ok=True)
    rng, starts = gen_docs(n, seed)
    tok = rng.integers(0, 256, n).astype(np.uint16)
    meta = {"vocab": 257}
    if kind == "eot":
        tok[starts] = EOT
        meta["eot"] = EOT
    else:
        fl = (rng.random(n) < ((np.arange(n) // 16) * 5 % 8) / 8.0).astype(np.uint8)
        fl[starts] |= 2
        write(f"{d}/train.mask", 20241203, 1, fl)
    write(f"{d}/train.bin", 20240520, 1, tok)
    json.dump(meta, open(f"{d}/meta.json", "w"))
    json.dump(starts, open(f"{d}/starts.json", "w"))


def llama(d, seed):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=257, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
    m = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.2)  # larger than the default init: attention far from uniform
    m.save_pretrained(d, safe_serialization=True)


def pieces(d, B, T, mode):
    """[(start, n_tokens)]: each piece is run alone; inputs its first n-1 tokens, targets the last n-1."""
    tok = read(f"{d}/train.bin", np.uint16)
    N = len(tok)
    starts = json.load(open(f"{d}/starts.json"))
    out = []
    if mode == "doc":
        sset = set(starts)
        for s in range(B):
            a = s * T
            cut = [a] + [p for p in range(a + 1, a + T) if p in sset] + [a + T]
            for x, y in zip(cut[:-1], cut[1:]):
                out.append((x, y - x + 1))  # inputs [x, y), the target of y-1 is token y
    else:
        ends = starts[1:] + [N]
        for a, e in zip(starts, ends):
            k = (e - a) if e < N else (e - a - 1)  # targets: the next document's first token too
            j = 0
            while j * T < k:
                out.append((a + j * T, min(T, k - j * T) + 1))
                j += 1
            if len(out) >= B:
                break
        out = out[:B]
        assert len(out) == B, "the data hold fewer than B padded sequences"
    return out


def ref(model, d, B, T, mode):
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(model).double()
    tok = read(f"{d}/train.bin", np.uint16).astype(np.int64)
    fl = read(f"{d}/train.mask", np.uint8) if os.path.exists(f"{d}/train.mask") else None
    total = torch.zeros((), dtype=torch.float64)
    count = 0
    for a, n in pieces(d, B, T, mode):
        x = torch.tensor(tok[a:a + n - 1]).unsqueeze(0)
        y = torch.tensor(tok[a + 1:a + n])
        keep = torch.ones(n - 1, dtype=torch.bool) if fl is None else torch.tensor((fl[a + 1:a + n] & 1) > 0)
        logits = m(x).logits[0]
        ce = torch.nn.functional.cross_entropy(logits, y, reduction="none")
        total = total + (ce * keep).sum()
        count += int(keep.sum())
    loss = total / count
    loss.backward()
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in m.parameters() if p.grad is not None))
    print(f"{loss.item():.17g} {norm.item():.17g} {count}")


def checkval(jsonl, loss):
    rec = [json.loads(l) for l in open(jsonl) if l.startswith("{")]
    r = [x for x in rec if x.get("step") == 1 and "val_loss" in x][0]
    rel = abs(r["val_loss"] - float(loss)) / abs(float(loss))
    print(f"{jsonl}: val_loss {r['val_loss']:.9g} reference {float(loss):.9g} relative {rel:.2e}")
    sys.exit(0 if rel < 1e-5 else 1)


if __name__ == "__main__":
    c = sys.argv[1]
    if c == "data":
        data(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif c == "llama":
        llama(sys.argv[2], int(sys.argv[3]))
    elif c == "ref":
        ref(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    elif c == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4])
    elif c == "checkval":
        checkval(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(f"unknown command {c}")
