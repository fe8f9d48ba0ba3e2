#!/usr/bin/env python3
"""hf_fixture.py — the Hugging Face side of the round-trip tests (tests/train/hf_roundtrip.sh), run with
the test venv (.venv/bin/python, tools/test-deps.sh): transformers and safetensors from PyPI over
Debian's torch.

  make DIR --variant V[,V]  a small random GPT-2 saved by transformers (several variants: DIR_V each):
                              single   GPT2LMHeadModel, one model.safetensors, F32 ("transformer." names)
                              sharded  the same model split into shards + model.safetensors.index.json
                              bf16     the same model saved in bfloat16
                              bare     its GPT2Model (names without "transformer."), float16
                              lmhead   single F32 file written with safetensors, lm_head.weight stored,
                                       and the old attn.bias / attn.masked_bias buffers
                            Every parameter (biases and LayerNorms too) is random, so a wrong mapping
                            or transpose cannot pass.
  compare DIR LOGITS...     transformers loads DIR (fp32) and runs the fixed input that fsdp-train's
                            --logits files hold; exit 1 unless, for every file,
                            max|ours - theirs| <= TOL * max|theirs|
  generate DIR PROMPT N     AutoTokenizer + GPT2LMHeadModel from DIR: greedy N tokens after
                            <|endoftext|> + PROMPT, printed as fsdp-train sample prints them (the prompt,
                            the text, end-of-text as a "----" line)
  damage SRC OUT            damaged copies of SRC (a `single` folder) under OUT, and OUT/cases.txt:
                            one line per case, "folder|text the error must contain|..."
"""
import argparse
import json
import os
import shutil
import struct
import sys
import time

import numpy as np
import torch

SHAPE = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=257, n_positions=64)


def model(seed, vocab=None):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    shape = dict(SHAPE, vocab_size=vocab or SHAPE["vocab_size"])
    if os.environ.get("HF_FIXTURE_SHAPE"):  # L,C,NH,V,P for benches
        L, C, NH, V, P = (int(x) for x in os.environ["HF_FIXTURE_SHAPE"].split(","))
        shape = dict(n_layer=L, n_embd=C, n_head=NH, vocab_size=V, n_positions=P)
    cfg = GPT2Config(**shape, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    m = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.add_(torch.randn_like(p) * (0.1 if "ln" in name else 0.05))
    return m


def cmd_make(a):
    variants = a.variant.split(",")
    for v in variants:
        make_one(a.dir if len(variants) == 1 else f"{a.dir}_{v}", v, a.seed, a.tokenizer)


def make_one(d, variant, seed, tokenizer=None):
    """tokenizer: a tokenizer.json whose vocabulary the model takes, copied into the folder."""
    a = argparse.Namespace(dir=d, variant=variant, seed=seed)
    vocab = None
    if tokenizer:
        from tokenizers import Tokenizer
        vocab = Tokenizer.from_file(tokenizer).get_vocab_size()
    m = model(a.seed, vocab)
    if tokenizer:
        eot = Tokenizer.from_file(tokenizer).token_to_id("<|endoftext|>")
        m.config.bos_token_id = m.config.eos_token_id = eot
    os.makedirs(a.dir, exist_ok=True)
    if tokenizer:
        shutil.copy(tokenizer, os.path.join(a.dir, "tokenizer.json"))
    if a.variant == "single":
        m.save_pretrained(a.dir, safe_serialization=True)
    elif a.variant == "sharded":
        m.save_pretrained(a.dir, safe_serialization=True, max_shard_size="40KB")
        assert os.path.exists(os.path.join(a.dir, "model.safetensors.index.json"))
    elif a.variant == "bf16":
        m.to(torch.bfloat16).save_pretrained(a.dir, safe_serialization=True)
    elif a.variant == "bare":
        m.transformer.to(torch.float16).save_pretrained(a.dir, safe_serialization=True)
    elif a.variant != "lmhead":
        raise SystemExit(f"unknown variant {a.variant}")
    else:
        from safetensors.torch import save_file
        m.config.save_pretrained(a.dir)
        sd = {k: v.detach().clone().contiguous() for k, v in m.state_dict().items()
              if not k.endswith(".attn.bias") and not k.endswith(".attn.masked_bias")}
        sd["lm_head.weight"] = sd["transformer.wte.weight"].clone()
        # the attention-mask buffers older GPT-2 files carry (the published weights have them): ignored
        P = m.config.n_positions
        for l in range(m.config.n_layer):
            sd[f"transformer.h.{l}.attn.bias"] = torch.tril(torch.ones(P, P)).view(1, 1, P, P).contiguous()
            sd[f"transformer.h.{l}.attn.masked_bias"] = torch.tensor(-1e4)
        save_file(sd, os.path.join(a.dir, "model.safetensors"), metadata={"format": "pt"})
    print(f"made {a.dir} ({a.variant})")


def read_logits(path):
    with open(path, "rb") as f:
        data = f.read()
    B, T, V = struct.unpack("<3i", data[:12])
    toks = np.frombuffer(data, dtype="<i4", count=B * T, offset=12).reshape(B, T)
    logits = np.frombuffer(data, dtype="<f4", count=B * T * V, offset=12 + 4 * B * T).reshape(B, T, V)
    return toks, logits


def cmd_compare(a):
    from transformers import GPT2LMHeadModel
    m = GPT2LMHeadModel.from_pretrained(a.dir, torch_dtype=torch.float32).eval()
    fails = 0
    for path in a.logits:
        toks, ours = read_logits(path)
        with torch.no_grad():
            theirs = m(torch.from_numpy(toks.astype(np.int64))).logits.numpy()
        if theirs.shape != ours.shape:
            print(f"FAIL {a.dir}: logits shape {ours.shape} vs transformers' {theirs.shape}")
            fails += 1
            continue
        err = float(np.max(np.abs(ours.astype(np.float64) - theirs))) / float(np.max(np.abs(theirs)))
        ok = err <= a.tol
        fails += not ok
        print(f"{'ok' if ok else 'FAIL'} {a.dir} vs {path}: max|diff| / max|logit| = {err:.3g} (tol {a.tol:g})")
    return 1 if fails else 0


def generate_fix():
    """transformers' generate() asks whether the model is FSDP-managed by importing torch.distributed.fsdp,
    which Debian's torch 1.13 cannot import under Python 3.11 (a dataclass error): answer no directly."""
    import transformers.generation.utils as gu
    gu.is_fsdp_managed_module = lambda module: False


def cmd_generate(a):
    from transformers import AutoTokenizer, GPT2LMHeadModel
    generate_fix()
    tok = AutoTokenizer.from_pretrained(a.dir)
    m = GPT2LMHeadModel.from_pretrained(a.dir, torch_dtype=torch.float32).eval()
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    ids = [eot] + tok(a.prompt)["input_ids"]
    with torch.no_grad():
        out = m.generate(torch.tensor([ids]), max_new_tokens=a.n, do_sample=False, pad_token_id=eot,
                         eos_token_id=None, attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    text = a.prompt
    for t in out[0, len(ids):].tolist():
        text += "\n----\n" if t == eot else tok.decode([t])
    sys.stdout.write(text + "\n")
    return 0


def cmd_bench_generate(a):
    """transformers' greedy generate() (KV cache on) tokens/s on DIR, torch threads as given."""
    from transformers import GPT2LMHeadModel
    generate_fix()
    torch.set_num_threads(a.threads)
    m = GPT2LMHeadModel.from_pretrained(a.dir, torch_dtype=torch.float32).eval()
    ids = torch.tensor([[m.config.vocab_size - 1] * a.prompt])  # fsdp-train sample's start token
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        m.generate(ids, max_new_tokens=4, **kw)  # warm-up
        t0 = time.perf_counter()
        out = m.generate(ids, max_new_tokens=a.n, min_new_tokens=a.n, use_cache=not a.no_cache, **kw)
        dt = time.perf_counter() - t0
    n = out.shape[1] - ids.shape[1]
    print(f"transformers {__import__('transformers').__version__} generate (use_cache={not a.no_cache}, "
          f"{a.threads} thread(s)): {n} tokens in {dt:.3f} s = {n / dt:.1f} tokens/s")
    return 0


def st_read(path):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def st_write(path, header, body, hlen=None):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h) if hlen is None else hlen) + h + bytes(body))


def cmd_damage(a):
    src, out = a.src, a.out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    header, body = st_read(os.path.join(src, "model.safetensors"))
    size = os.path.getsize(os.path.join(src, "model.safetensors"))
    cases = []

    def case(name, expect, st=None, cfg=None, raw=None):
        d = os.path.join(out, name)
        os.makedirs(d)
        c = json.load(open(os.path.join(src, "config.json")))
        if cfg:
            c.update(cfg)
        json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=1)
        p = os.path.join(d, "model.safetensors")
        if raw is not None:
            open(p, "wb").write(raw)
        elif st is not None:
            st(p)
        else:
            shutil.copy(os.path.join(src, "model.safetensors"), p)
        cases.append("|".join([d] + expect))

    whole = open(os.path.join(src, "model.safetensors"), "rb").read()
    case("truncated", ["model.safetensors", "data_offsets", "truncated"], raw=whole[:size // 2])
    case("tiny", ["model.safetensors", "too short"], raw=whole[:5])
    hl = struct.unpack("<Q", whole[:8])[0]
    case("header_long", ["model.safetensors", "header length", "runs past the end"],
         raw=struct.pack("<Q", size) + whole[8:])
    key = "transformer.h.1.mlp.c_fc.weight"

    def past_end(p):
        h = json.loads(json.dumps(header))
        b, e = h[key]["data_offsets"]
        h[key]["data_offsets"] = [b + len(body), e + len(body)]
        st_write(p, h, body)
    case("offsets_past_end", ["model.safetensors", key, "data_offsets", "outside"], st=past_end)

    def overlap(p):
        h = json.loads(json.dumps(header))
        k2 = "transformer.h.0.attn.c_proj.weight"
        h[k2]["data_offsets"] = h["transformer.h.0.attn.c_attn.weight"]["data_offsets"][:]
        h[k2]["shape"] = h["transformer.h.0.attn.c_attn.weight"]["shape"][:]
        st_write(p, h, body)
    case("overlap", ["model.safetensors", "overlap", "transformer.h.0.attn.c_proj.weight"], st=overlap)

    def dtype_mismatch(p):
        h = json.loads(json.dumps(header))
        h[key]["dtype"] = "F16"
        st_write(p, h, body)
    case("dtype_mismatch", ["model.safetensors", key, "dtype F16"], st=dtype_mismatch)

    def int_dtype(p):
        h = json.loads(json.dumps(header))
        h["transformer.ln_f.bias"]["dtype"] = "I32"
        st_write(p, h, body)
    case("int_dtype", ["model.safetensors", "transformer.ln_f.bias", "I32"], st=int_dtype)

    def missing(p):
        h = json.loads(json.dumps(header))
        del h["transformer.h.0.ln_2.bias"]
        st_write(p, h, body)
    case("missing", ["model.safetensors", "transformer.h.0.ln_2.bias", "missing"], st=missing)

    def unknown(p):
        h = json.loads(json.dumps(header))
        h["transformer.h.7.ln_2.bias"] = h.pop("transformer.h.0.ln_2.bias")
        st_write(p, h, body)
    case("unknown_name", ["model.safetensors", "transformer.h.7.ln_2.bias", "not part of"], st=unknown)

    def not_json(p):
        st_write(p, {}, body, hlen=None)
        raw = bytearray(open(p, "rb").read())
        raw[8:10] = b"{["
        open(p, "wb").write(raw)
    case("header_not_json", ["model.safetensors", "JSON"], st=not_json)

    case("shape_vs_config", ["model.safetensors", "transformer.wpe.weight", "config.json", "[32, 32]"],
         cfg={"n_positions": 32, "n_ctx": 32})
    case("activation", ["config.json", "activation_function", "relu"], cfg={"activation_function": "relu"})
    case("n_inner", ["config.json", "n_inner"], cfg={"n_inner": 100})
    case("inverse_layer_idx", ["config.json", "scale_attn_by_inverse_layer_idx"],
         cfg={"scale_attn_by_inverse_layer_idx": True})
    case("epsilon", ["config.json", "layer_norm_epsilon"], cfg={"layer_norm_epsilon": 1e-6})
    case("model_type", ["config.json", "model_type"], cfg={"model_type": "llama"})
    case("missing_field", ["config.json", "n_layer"], cfg={"n_layer": "two"})
    case("vocab_too_small", ["config.json", "vocab_size", "whole number"], cfg={"vocab_size": 1})

    def lm_head_differs(p):
        h = json.loads(json.dumps(header))
        w = h["transformer.wte.weight"]
        b, e = w["data_offsets"]
        extra = bytearray(body[b:e])
        extra[0] ^= 0x40
        h["lm_head.weight"] = {"dtype": "F32", "shape": w["shape"], "data_offsets": [len(body), len(body) + len(extra)]}
        st_write(p, h, body + extra)
    case("lm_head_differs", ["model.safetensors", "lm_head.weight", "differs from wte"], st=lm_head_differs)

    # Non-finite weights (issue 28 item 3a): one NaN or Inf in one tensor, stored as F32, BF16 or F16;
    # the message names the tensor and the element's flat index in the file's tensor. c_attn is stored
    # transposed (Conv1D), so its elements are read with strides.
    def nonfinite(tname, dtype, idx, value):
        def write(p):
            h = json.loads(json.dumps(header))
            out, off = bytearray(), 0
            for k in sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0]):
                b, e = h[k]["data_offsets"]
                raw = bytes(body[b:e])
                if k == tname:
                    v = np.frombuffer(raw, np.float32).copy()
                    v.flat[idx] = value
                    if dtype == "BF16":
                        raw = (v.view(np.uint32) >> 16).astype(np.uint16).tobytes()
                    elif dtype == "F16":
                        raw = v.astype(np.float16).tobytes()
                    else:
                        raw = v.tobytes()
                    h[k]["dtype"] = dtype
                out += raw
                h[k]["data_offsets"] = [off, off + len(raw)]
                off += len(raw)
            st_write(p, h, out)
        return write
    for tname, dtype, idx, value, what in [
            ("transformer.h.0.attn.c_attn.weight", "F32", 1000, np.nan, "NaN"),
            ("transformer.h.1.mlp.c_proj.weight", "F32", 77, -np.inf, "-Inf"),
            ("transformer.wte.weight", "BF16", 300, np.nan, "NaN"),
            ("transformer.h.1.attn.c_attn.weight", "BF16", 5, np.inf, "+Inf"),
            ("transformer.ln_f.weight", "F16", 3, np.inf, "+Inf")]:
        case(f"nonfinite_{dtype.lower()}_{what.strip('+-').lower()}_{tname.split('.')[-2]}",
             ["model.safetensors", f'tensor "{tname}" element {idx} is {what}', "non-finite"],
             st=nonfinite(tname, dtype, idx, value))

    # config.json sizes far beyond the weights (issue 28 item 5): refused from the headers, naming the
    # field, before the model they describe is allocated (hf_roundtrip.sh also runs these under a
    # memory limit).
    case("huge_vocab", ["config.json does not fit the weights", '"vocab_size" 100000000', "transformer.wte.weight"],
         cfg={"vocab_size": 100000000})
    case("huge_width", ["config.json does not fit the weights", '"n_embd" 8192', "transformer.wte.weight"],
         cfg={"n_embd": 8192})
    case("huge_layers", ["model.safetensors", "is missing, though config.json implies it", '"n_layer" 1000 right?'],
         cfg={"n_layer": 1000})

    # Sharded folders whose index is wrong.
    d = os.path.join(out, "index_escape")
    os.makedirs(d)
    shutil.copy(os.path.join(src, "config.json"), d)
    json.dump({"metadata": {}, "weight_map": {k: "../model.safetensors" for k in header if k != "__metadata__"}},
              open(os.path.join(d, "model.safetensors.index.json"), "w"))
    cases.append(f"{d}|model.safetensors.index.json|weight_map|not a file name")
    d = os.path.join(out, "index_missing_file")
    os.makedirs(d)
    shutil.copy(os.path.join(src, "config.json"), d)
    json.dump({"metadata": {}, "weight_map": {k: "model-00001-of-00002.safetensors" for k in header
                                              if k != "__metadata__"}},
              open(os.path.join(d, "model.safetensors.index.json"), "w"))
    cases.append(f"{d}|model-00001-of-00002.safetensors")
    d = os.path.join(out, "empty")
    os.makedirs(d)
    shutil.copy(os.path.join(src, "config.json"), d)
    cases.append(f"{d}|neither model.safetensors nor model.safetensors.index.json")

    with open(os.path.join(out, "cases.txt"), "w") as f:
        f.write("\n".join(cases) + "\n")
    print(f"{len(cases)} damaged folders under {out}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--variant", default="single", help="single, sharded, bf16, bare, lmhead (comma-separated)")
    m.add_argument("--seed", type=int, default=1234)
    m.add_argument("--tokenizer", help="tokenizer.json: the model takes its vocabulary, the folder a copy")
    g = sub.add_parser("generate")
    g.add_argument("dir")
    g.add_argument("prompt")
    g.add_argument("n", type=int)
    c = sub.add_parser("compare")
    c.add_argument("dir")
    c.add_argument("logits", nargs="+")
    c.add_argument("--tol", type=float, default=1e-5)
    bg = sub.add_parser("bench-generate")
    bg.add_argument("dir")
    bg.add_argument("--n", type=int, default=256)
    bg.add_argument("--prompt", type=int, default=1)
    bg.add_argument("--threads", type=int, default=1)
    bg.add_argument("--no-cache", action="store_true")
    d = sub.add_parser("damage")
    d.add_argument("src")
    d.add_argument("out")
    a = p.parse_args()
    return {"make": cmd_make, "compare": cmd_compare, "damage": cmd_damage, "generate": cmd_generate,
            "bench-generate": cmd_bench_generate}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
