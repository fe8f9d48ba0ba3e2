#!/usr/bin/env python3
"""llama_reference.py — the PyTorch reference for fsdp.c's Llama family (src/model/llama/), run with the
test venv (.venv/bin/python: transformers 4.46 over Debian's torch).

  fixture OUTDIR [--variant V,...]   for each variant, OUTDIR/V.bin: a small random model's weights in
        the C model's fused names, a batch (with ignored targets), the logits, the loss, every
        parameter gradient and 10 steps of torch.optim.AdamW with clip_grad_norm_ (read by
        tests/model/llama_ref.c); and OUTDIR/V_f32, OUTDIR/V_bf16, OUTDIR/V_sharded: the same model as a
        Hugging Face folder (F32 single file, BF16, F32 in shards with model.safetensors.index.json);
        for a LoRA variant OUTDIR/V_f32 (the base) and OUTDIR/V_adapter (PEFT's save_pretrained).
  compare DIR LOGITS [--tol T] [--adapter ADIR]
        loads DIR (transformers, or the Qwen3 reference below) in float64, with ADIR's PEFT adapter on
        it (PeftModel.from_pretrained), runs the fixed batch fsdp-train's --logits files hold, exit 1
        unless max|ours - theirs| <= T * max|theirs|.
  generate DIR N [--prompt IDS]      greedy generate() of N tokens after the prompt token ids, printed
        as one line of ids.
  generate DIR N --text PROMPT       the same after AutoTokenizer's ids of [end of text] + PROMPT, printed
        as text the way `fsdp-train sample` prints it (PROMPT, then each token's text, the end-of-text
        token as "\n----\n"), for a byte-exact comparison with `sample --temperature 0`.
  textmodel DIR --variant V --tokenizer TOK.json
        the variant's random model as a Hugging Face folder (F32) with a tokenizer: TOK.json (a
        byte-level BPE, tools/bpe_fixture.py train) saved by PreTrainedTokenizerFast.save_pretrained
        (tokenizer.json, tokenizer_config.json, special_tokens_map.json), <|endoftext|> as bos and eos.

Variants (tiny shapes, every parameter random; weights are bf16 values, so F32 and BF16 files hold
the same model and mixed precision's parameter cast is exact):
  llama    LlamaForCausalLM, GQA (4 heads, 2 KV heads), untied head, llama3 rope_scaling, theta 5e5
  qwen2    Qwen2ForCausalLM, q/k/v biases, tied head, eps 1e-6
  qwen3    Qwen3ForCausalLM: per-head q/k RMSNorm before RoPE, head_dim 24 != hidden/heads, tied
  smollm   LlamaForCausalLM shaped like SmolLM2 (3 heads, 1 KV head, tied head)
  mistral  MistralForCausalLM, sliding_window null, 1 KV head, untied

Reference precision: every quantity is computed in float64 from the bf16-valued weights, by
transformers' own model classes (model.double()) for llama, qwen2, smollm and mistral. transformers 4.46
has no Qwen3, so qwen3 runs through RefLlama below: a plain PyTorch transcription of the architecture
(transformers' LlamaModel / Qwen2Model: RMSNorm, rotate-half RoPE, repeat_kv GQA, SwiGLU) with Qwen3's
q_norm/k_norm (an RMSNorm over each head's head_dim, applied to q and k after the projection and
before RoPE, as transformers' later Qwen3Attention does). RefLlama is checked against transformers on
the four other variants in every run (logits and gradients, float64; the tool exits 1 on a mismatch
above 1e-10), so qwen3 differs from a checked reference only by the q/k norm.

Fixture file: the record format of tools/gpt2_reference.py (tests/model/fixture.h reads it; the header
slots L, C, NH, V, Vp, T_max, B, T, steps, seed, lr, beta1, beta2, eps, weight_decay, grad_clip mean
the same), plus records "config" i32 [n_kv_head, head_dim, intermediate, tie, qkv_bias, qk_norm,
rope_scaling, rope_original_max_pos] and "configf" f64 [norm_eps, rope_theta, rope_factor,
rope_low_freq_factor, rope_high_freq_factor]. "logits" is (B, T, V): the real vocabulary's columns.
Gradients of the padded embedding rows (V..Vp) are 0.
"""
import argparse
import fnmatch
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

MAGIC, VERSION, HEADER_BYTES = 0x32545047, 1, 256
DT_F32, DT_I32, DT_F64, DT_BF16 = 0, 1, 2, 3
IGNORE = -100

BASE = dict(L=2, C=64, NH=4, NKV=2, hd=16, I=96, V=300, Vp=320, T_max=64, tie=0, bias=0, qknorm=0,
            eps=1e-5, theta=10000.0, scaling=None, freeze="", lora=None)
LORA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA_C = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "gate_proj": "gate", "up_proj": "up",
          "down_proj": "down"}
VARIANTS = {
    "llama": dict(arch="LlamaForCausalLM", theta=500000.0,
                  scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                               original_max_position_embeddings=16)),
    "qwen2": dict(arch="Qwen2ForCausalLM", bias=1, tie=1, eps=1e-6, theta=1000000.0),
    "qwen3": dict(arch="Qwen3ForCausalLM", qknorm=1, hd=24, tie=1, eps=1e-6, theta=1000000.0),
    "smollm": dict(arch="LlamaForCausalLM", C=48, NH=3, NKV=1, I=128, tie=1, theta=100000.0),
    "mistral": dict(arch="MistralForCausalLM", NKV=1),
    # llama with frozen parameters (requires_grad=False), named as fsdp_engine_config.freeze names
    # them (globs over the C model's unit.tensor): all of h0, the embedding, h1's fused q/k/v and every
    # post-attention norm; the LM head, the final norm and the rest of h1 train.
    "llama_frozen": dict(arch="LlamaForCausalLM", theta=500000.0,
                         scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                      high_freq_factor=4.0, original_max_position_embeddings=16),
                         freeze="h0.*,root.embed_tokens,h1.qkv_w,h*.post_attn_layernorm"),
    # LoRA through PEFT (LoraConfig on transformers' model; the base frozen as PEFT freezes it): rank 4,
    # alpha 8 on every projection of llama; on q, v, up and down of qwen2 (biases, tied head)
    "llama_lora": dict(arch="LlamaForCausalLM", theta=500000.0,
                       scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                    original_max_position_embeddings=16),
                       lora=dict(r=4, alpha=8.0, targets=LORA_MODULES)),
    "qwen2_lora": dict(arch="Qwen2ForCausalLM", bias=1, tie=1, eps=1e-6, theta=1000000.0,
                       lora=dict(r=3, alpha=5.0, targets=["q_proj", "v_proj", "up_proj", "down_proj"])),
}
B, T, STEPS, SEED = 4, 32, 10, 1234
OPT = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0)


def shape(variant):
    s = dict(BASE)
    s.update(VARIANTS[variant])
    s["variant"] = variant
    return argparse.Namespace(**s)


def hf_config_dict(s):
    """config.json fields of the variant (what transformers' save_pretrained writes, in substance)."""
    mt = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
          "MistralForCausalLM": "mistral"}[s.arch]
    d = dict(architectures=[s.arch], model_type=mt, hidden_size=s.C, intermediate_size=s.I,
             num_hidden_layers=s.L, num_attention_heads=s.NH, num_key_value_heads=s.NKV,
             vocab_size=s.V, max_position_embeddings=s.T_max, rms_norm_eps=s.eps, rope_theta=s.theta,
             rope_scaling=s.scaling, tie_word_embeddings=bool(s.tie), hidden_act="silu",
             attention_dropout=0.0, initializer_range=0.02)
    if mt != "qwen2":
        d["head_dim"] = s.hd
    if mt in ("llama", "qwen3"):
        d["attention_bias"] = False
    if mt == "llama":
        d["mlp_bias"] = False
    if mt == "mistral":
        d["sliding_window"] = None
    if mt in ("qwen2", "qwen3"):
        d["use_sliding_window"] = False
    return d


def hf_names(s):
    """(name, shape) of every Hugging Face parameter (tied lm_head left out)."""
    out = [("model.embed_tokens.weight", (s.V, s.C))]
    A, KV = s.NH * s.hd, s.NKV * s.hd
    for l in range(s.L):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (s.C,)), (p + "self_attn.q_proj.weight", (A, s.C)),
                (p + "self_attn.k_proj.weight", (KV, s.C)), (p + "self_attn.v_proj.weight", (KV, s.C))]
        if s.bias:
            out += [(p + "self_attn.q_proj.bias", (A,)), (p + "self_attn.k_proj.bias", (KV,)),
                    (p + "self_attn.v_proj.bias", (KV,))]
        if s.qknorm:
            out += [(p + "self_attn.q_norm.weight", (s.hd,)), (p + "self_attn.k_norm.weight", (s.hd,))]
        out += [(p + "self_attn.o_proj.weight", (s.C, A)), (p + "post_attention_layernorm.weight", (s.C,)),
                (p + "mlp.gate_proj.weight", (s.I, s.C)), (p + "mlp.up_proj.weight", (s.I, s.C)),
                (p + "mlp.down_proj.weight", (s.C, s.I))]
    out.append(("model.norm.weight", (s.C,)))
    if not s.tie:
        out.append(("lm_head.weight", (s.V, s.C)))
    return out


def init_weights(s):
    """Random bf16-valued weights by HF name: linear 0.05 normal, norms 1 + 0.1 normal, biases 0.05
    normal (all random, so no mapping error can hide), plus the C model's padded embedding rows."""
    g = torch.Generator().manual_seed(SEED)
    W = {}
    for n, shp in hf_names(s):
        if n.endswith("norm.weight") or n.endswith("layernorm.weight"):
            w = 1.0 + 0.1 * torch.randn(shp, generator=g)
        else:
            w = 0.05 * torch.randn(shp, generator=g)
        W[n] = w.to(torch.bfloat16)
    pad = (0.05 * torch.randn((s.Vp - s.V, s.C), generator=g)).to(torch.bfloat16)
    if s.lora:  # adapters, B nonzero too (PEFT starts it at zero, which would leave A's gradient zero)
        A, KV = s.NH * s.hd, s.NKV * s.hd
        io = {"q_proj": (s.C, A), "k_proj": (s.C, KV), "v_proj": (s.C, KV), "o_proj": (A, s.C),
              "gate_proj": (s.C, s.I), "up_proj": (s.C, s.I), "down_proj": (s.I, s.C)}
        for l in range(s.L):
            for m in s.lora["targets"]:
                mod = ("self_attn." if m in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp.") + m
                fi, fo = io[m]
                r = s.lora["r"]
                W[f"model.layers.{l}.{mod}.lora_A.weight"] = (0.1 * torch.randn((r, fi), generator=g)).to(torch.bfloat16)
                W[f"model.layers.{l}.{mod}.lora_B.weight"] = (0.1 * torch.randn((fo, r), generator=g)).to(torch.bfloat16)
    return W, pad


# ---------------------------------------------------------------- the plain PyTorch reference

def rope_inv_freq(s, dtype):
    inv = 1.0 / (s.theta ** (torch.arange(0, s.hd, 2, dtype=torch.int64).float() / s.hd))
    if s.scaling and s.scaling.get("rope_type") == "llama3":  # transformers' _compute_llama3_parameters
        f, lo, hi = s.scaling["factor"], s.scaling["low_freq_factor"], s.scaling["high_freq_factor"]
        om = s.scaling["original_max_position_embeddings"]
        low_wl, high_wl = om / lo, om / hi
        wl = 2 * math.pi / inv
        inv_l = torch.where(wl > low_wl, inv / f, inv)
        sm = (om / wl - lo) / (hi - lo)
        smoothed = (1 - sm) * inv_l / f + sm * inv_l
        is_med = ~(wl < high_wl) * ~(wl > low_wl)
        inv = torch.where(is_med, smoothed, inv_l)
    return inv.to(dtype)


def rmsnorm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def ref_forward(s, P, tokens, pos=None):
    """RefLlama: logits (B, T, V) of the family's architecture from HF-named parameters P."""
    Bb, Tt = tokens.shape
    dt = P["model.embed_tokens.weight"].dtype
    if pos is None:
        pos = torch.arange(Tt).unsqueeze(0).expand(Bb, Tt)
    inv = rope_inv_freq(s, torch.float32)
    ang = pos[..., None].float() * inv  # fp32, as transformers' rotary embedding
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos().to(dt)[:, None], emb.sin().to(dt)[:, None]
    x = P["model.embed_tokens.weight"][tokens]
    mask = torch.ones(Tt, Tt, dtype=torch.bool).tril()
    g = s.NH // s.NKV
    for l in range(s.L):
        p = lambda n: P[f"model.layers.{l}.{n}"]
        h = rmsnorm(x, p("input_layernorm.weight"), s.eps)
        q = h @ p("self_attn.q_proj.weight").t()
        k = h @ p("self_attn.k_proj.weight").t()
        v = h @ p("self_attn.v_proj.weight").t()
        if s.bias:
            q, k, v = q + p("self_attn.q_proj.bias"), k + p("self_attn.k_proj.bias"), v + p("self_attn.v_proj.bias")
        q = q.view(Bb, Tt, s.NH, s.hd)
        k = k.view(Bb, Tt, s.NKV, s.hd)
        if s.qknorm:
            q = rmsnorm(q, p("self_attn.q_norm.weight"), s.eps)
            k = rmsnorm(k, p("self_attn.k_norm.weight"), s.eps)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(Bb, Tt, s.NKV, s.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(s.hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bb, Tt, s.NH * s.hd)
        x = x + y @ p("self_attn.o_proj.weight").t()
        h = rmsnorm(x, p("post_attention_layernorm.weight"), s.eps)
        x = x + (F.silu(h @ p("mlp.gate_proj.weight").t()) * (h @ p("mlp.up_proj.weight").t())) @ \
            p("mlp.down_proj.weight").t()
    x = rmsnorm(x, P["model.norm.weight"], s.eps)
    head = P["model.embed_tokens.weight"] if s.tie else P["lm_head.weight"]
    return x @ head.t()


# ---------------------------------------------------------------- transformers

def _rmsnorm_in_input_dtype(self, x):
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


_softmax = F.softmax


def _softmax_keep_f64(x, dim=None, _stacklevel=3, dtype=None):
    if x.dtype == torch.float64 and dtype == torch.float32:
        dtype = torch.float64
    return _softmax(x, dim=dim, _stacklevel=_stacklevel, dtype=dtype)


def patch_float64():
    """transformers computes RMSNorm and the eager attention's softmax in float32 whatever the model's
    dtype (torch 1.13 has no sdpa); for a float64 reference the RMSNorm forward is replaced by the same
    formula in the input's dtype and a float32 softmax of float64 scores stays float64."""
    torch.nn.functional.softmax = _softmax_keep_f64
    from transformers.models.llama import modeling_llama
    from transformers.models.mistral import modeling_mistral
    from transformers.models.qwen2 import modeling_qwen2
    for cls in (modeling_llama.LlamaRMSNorm, modeling_qwen2.Qwen2RMSNorm, modeling_mistral.MistralRMSNorm):
        cls.forward = _rmsnorm_in_input_dtype


def hf_model(s, W, dtype):
    """transformers' model of the variant with weights W (None for qwen3: not in transformers 4.46)."""
    if s.qknorm:
        return None
    import transformers
    cd = hf_config_dict(s)
    arch = cd.pop("architectures")[0]
    cls_cfg = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
               "mistral": transformers.MistralConfig}[cd.pop("model_type")]
    if dtype == torch.float64:
        patch_float64()
    cfg = cls_cfg(**cd, attn_implementation="eager")
    m = getattr(transformers, arch)(cfg).eval().to(dtype)
    sd = {n: w.to(dtype) for n, w in W.items()}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    missing = [n for n in missing if not (s.tie and n == "lm_head.weight")]
    if missing or unexpected:
        sys.exit(f"llama_reference.py: state dict mismatch: missing {missing}, unexpected {unexpected}")
    if s.tie:
        assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    return m


def c_name(s, hf):
    """The C model's unit.tensor name that HF tensor hf is (part of): fused() below."""
    if hf == "model.embed_tokens.weight":
        return "root.embed_tokens"
    if hf == "model.norm.weight":
        return "root.norm"
    if hf == "lm_head.weight":
        return "root.lm_head"
    parts = hf.split(".")
    h, rest = f"h{parts[2]}.", ".".join(parts[3:])
    if ".lora_" in rest:  # model.layers.L.self_attn.q_proj.lora_A.weight -> hL.lora_a_q
        return h + ("lora_a_" if ".lora_A." in rest else "lora_b_") + LORA_C[parts[4]]
    table = {"input_layernorm.weight": "input_layernorm", "post_attention_layernorm.weight": "post_attn_layernorm",
             "self_attn.o_proj.weight": "o_w", "mlp.down_proj.weight": "down_w",
             "self_attn.q_norm.weight": "q_norm", "self_attn.k_norm.weight": "k_norm"}
    if rest in table:
        return h + table[rest]
    if rest.startswith("self_attn.") and rest.endswith(".weight"):
        return h + "qkv_w"
    if rest.startswith("self_attn.") and rest.endswith(".bias"):
        return h + "qkv_b"
    if rest.startswith("mlp."):
        return h + "gate_up_w"
    raise ValueError(f"no C name for {hf}")


def frozen(s, hf):
    """Whether s.freeze (comma-separated fnmatch globs over the C names) freezes HF tensor hf; with
    LoRA, every tensor but the adapters."""
    if s.lora:
        return ".lora_" not in hf
    return any(fnmatch.fnmatchcase(c_name(s, hf), g) for g in s.freeze.split(",") if g)


class Runner:
    """Forward (logits over the real vocabulary) and the trainable parameters by HF name, in dtype:
    transformers' model where it has the variant, RefLlama otherwise."""

    def __init__(self, s, W, dtype, use_ref=False):
        self.s = s
        base = {n: w for n, w in W.items() if ".lora_" not in n}
        self.m = None if use_ref else hf_model(s, base, dtype)
        if self.m is not None and s.lora:  # PEFT's LoRA on transformers' model, our adapter values
            from peft import LoraConfig, get_peft_model
            cfg = LoraConfig(r=s.lora["r"], lora_alpha=s.lora["alpha"], target_modules=s.lora["targets"],
                             lora_dropout=0.0, bias="none")
            self.m = get_peft_model(self.m, cfg).to(dtype)
            P = {n.replace("base_model.model.", "", 1).replace(".default", ""): p
                 for n, p in self.m.named_parameters()}
            with torch.no_grad():
                for n, w in W.items():
                    if ".lora_" in n:
                        P[n].copy_(w.to(dtype))
            self.P = P
        elif self.m is not None:
            self.P = dict(self.m.named_parameters())  # the tied head appears once, as embed_tokens
        else:
            self.P = {n: w.to(dtype).clone().requires_grad_(True) for n, w in W.items()}
        for n, p in self.P.items():  # frozen: no gradient, no AdamW update, not in the clipped norm
            p.requires_grad_(not frozen(s, n))
        self.train = {n: p for n, p in self.P.items() if p.requires_grad}  # what AdamW updates

    def logits(self, tokens):
        if self.m is not None:
            return self.m(input_ids=tokens, use_cache=False).logits
        return ref_forward(self.s, self.P, tokens)


def loss_of(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE)


def train(s, W, tokens, targets, dtype, use_ref=False):
    """(logits, loss, grads at the initial weights, loss per step, pre-clip norm per step)."""
    r = Runner(s, W, dtype, use_ref)
    P = r.train
    decay = [p for n, p in P.items() if p.dim() > 1]
    nodecay = [p for n, p in P.items() if p.dim() == 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPT["weight_decay"]},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"])
    losses, norms, first = [], [], None
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        logits = r.logits(tokens)
        loss = loss_of(logits, targets)
        loss.backward()
        if step == 0:
            first = (logits.detach().clone(), loss.item(), {n: p.grad.detach().clone() for n, p in P.items()})
        norm = torch.nn.utils.clip_grad_norm_(list(P.values()), OPT["grad_clip"])
        losses.append(loss.item())
        norms.append(float(norm))
        opt.step()
    return first[0], first[1], first[2], losses, norms


def batch(s):
    g = torch.Generator().manual_seed(SEED + 1)
    seq = torch.randint(0, s.V, (B, T + 1), generator=g)
    tokens, targets = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    targets[0, :5] = IGNORE  # a masked prompt
    targets[2, 7] = IGNORE
    targets[3, T - 1] = IGNORE
    return tokens, targets


def fused(s, Wd, pad_rows):
    """HF-named tensors -> the C model's (unit.tensor) names, rows fused as the C model holds them.
    pad_rows: the padded embedding rows (V..Vp) to append (zeros for gradients)."""
    out = {}
    emb = Wd["model.embed_tokens.weight"]
    out["root.embed_tokens"] = torch.cat([emb, pad_rows.to(emb.dtype)])
    out["root.norm"] = Wd["model.norm.weight"]
    if not s.tie:
        out["root.lm_head"] = torch.cat([Wd["lm_head.weight"], pad_rows.to(emb.dtype)])
    for l in range(s.L):
        p, h = f"model.layers.{l}.", f"h{l}."
        a = lambda n: Wd[p + n]
        out[h + "input_layernorm"] = a("input_layernorm.weight")
        out[h + "qkv_w"] = torch.cat([a("self_attn.q_proj.weight"), a("self_attn.k_proj.weight"),
                                      a("self_attn.v_proj.weight")])
        if s.bias:
            out[h + "qkv_b"] = torch.cat([a("self_attn.q_proj.bias"), a("self_attn.k_proj.bias"),
                                          a("self_attn.v_proj.bias")])
        if s.qknorm:
            out[h + "q_norm"] = a("self_attn.q_norm.weight")
            out[h + "k_norm"] = a("self_attn.k_norm.weight")
        out[h + "o_w"] = a("self_attn.o_proj.weight")
        out[h + "post_attn_layernorm"] = a("post_attention_layernorm.weight")
        out[h + "gate_up_w"] = torch.cat([a("mlp.gate_proj.weight"), a("mlp.up_proj.weight")])
        out[h + "down_w"] = a("mlp.down_proj.weight")
    return out


def record(name, dtype, tensor):
    shp = list(tensor.shape) if tensor.dim() > 0 else [1]
    assert 1 <= len(shp) <= 4 and len(name) < 32, name
    if dtype == DT_F32:
        data = tensor.to(torch.float32).contiguous().numpy().tobytes()
    elif dtype == DT_F64:
        data = tensor.to(torch.float64).contiguous().numpy().tobytes()
    elif dtype == DT_I32:
        data = tensor.to(torch.int32).contiguous().numpy().tobytes()
    else:
        data = tensor.to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
    hdr = struct.pack("<32sii4iQ", name.encode(), dtype, len(shp), *(shp + [1] * (4 - len(shp))), len(data))
    return hdr + data


def rel(a, b):
    return (a.double() - b.double()).abs().max().item() / max(b.double().abs().max().item(), 1e-300)


def save_hf(s, W, d, dtype, shard_kb=None):
    """W as a Hugging Face folder: transformers' save_pretrained where it has the variant; for qwen3
    safetensors files (and the index when sharded) in the same layout, written by hand."""
    os.makedirs(d, exist_ok=True)
    m = hf_model(s, W, torch.float32)
    if m is not None:
        m.to(dtype)
        kw = dict(max_shard_size=f"{shard_kb}KB") if shard_kb else {}
        m.save_pretrained(d, safe_serialization=True, **kw)
        return
    from safetensors.torch import save_file
    cd = hf_config_dict(s)
    cd["torch_dtype"] = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cd, f, indent=2)
    tensors = {n: w.to(dtype).contiguous() for n, w in W.items()}
    if not shard_kb:
        save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        return
    shards, cur, size = [], {}, 0
    for n, t in tensors.items():
        b = t.numel() * t.element_size()
        if cur and size + b > shard_kb * 1000:
            shards.append(cur)
            cur, size = {}, 0
        cur[n] = t
        size += b
    shards.append(cur)
    wmap = {}
    for i, sh in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(sh, os.path.join(d, fn), metadata={"format": "pt"})
        wmap.update({n: fn for n in sh})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2)


GPT2_LORA = dict(r=4, alpha=8.0, targets=["c_attn", "c_proj", "c_fc"])  # c_proj: attn's and mlp's


def gpt2_lora_fixture(outdir, hf=False):
    """GPT-2 (transformers' GPT2LMHeadModel, Conv1D weights) with PEFT's LoRA on c_attn, attn.c_proj,
    mlp.c_fc and mlp.c_proj (fan_in_fan_out), in float64: the fixture of variant gpt2_lora in the C
    model's names (qkv_w = c_attn.weight transposed, ...; lora_a_c_attn, lora_b_c_attn, ...)."""
    import transformers
    from peft import LoraConfig, get_peft_model
    L, C, NH, V, Vp, TM, r = 2, 64, 4, 300, 320, 64, GPT2_LORA["r"]
    g = torch.Generator().manual_seed(SEED + 7)
    rnd = lambda *shp, sd=0.05: (sd * torch.randn(shp, generator=g)).to(torch.bfloat16)
    one = lambda n: (1.0 + 0.1 * torch.randn((n,), generator=g)).to(torch.bfloat16)
    W = {"transformer.wte.weight": rnd(V, C), "transformer.wpe.weight": rnd(TM, C),
         "transformer.ln_f.weight": one(C), "transformer.ln_f.bias": rnd(C)}
    io = {"attn.c_attn": (C, 3 * C), "attn.c_proj": (C, C), "mlp.c_fc": (C, 4 * C), "mlp.c_proj": (4 * C, C)}
    for l in range(L):
        p = f"transformer.h.{l}."
        W[p + "ln_1.weight"], W[p + "ln_1.bias"] = one(C), rnd(C)
        W[p + "ln_2.weight"], W[p + "ln_2.bias"] = one(C), rnd(C)
        for m, (fi, fo) in io.items():
            W[p + m + ".weight"], W[p + m + ".bias"] = rnd(fi, fo), rnd(fo)  # Conv1D: (in, out)
    pad = rnd(Vp - V, C)
    A = {f"transformer.h.{l}.{m}": (rnd(r, io[m][0], sd=0.1), rnd(io[m][1], r, sd=0.1)) for l in range(L) for m in io}
    tokens, targets = batch(argparse.Namespace(V=V))

    def base(dtype):
        """transformers' GPT-2 with the weights W."""
        if dtype == torch.float64:
            patch_float64()
        cfg = transformers.GPT2Config(n_layer=L, n_embd=C, n_head=NH, vocab_size=V, n_positions=TM,
                                      activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0, layer_norm_epsilon=1e-5, attn_implementation="eager")
        m = transformers.GPT2LMHeadModel(cfg).eval().to(dtype)
        miss, unexp = m.load_state_dict({n: w.to(dtype) for n, w in W.items()}, strict=False)
        assert not [n for n in miss if n not in ("lm_head.weight",) and not n.endswith(".attn.bias")] and not unexp
        return m

    def build(dtype):
        """(the base model, PEFT's model on it with our adapter values, its parameters by name)."""
        m = base(dtype)
        lc = LoraConfig(r=r, lora_alpha=GPT2_LORA["alpha"], target_modules=GPT2_LORA["targets"], lora_dropout=0.0,
                        fan_in_fan_out=True, bias="none")
        pm = get_peft_model(m, lc).to(dtype)
        P = {n.replace("base_model.model.", "", 1).replace(".default", ""): p for n, p in pm.named_parameters()}
        with torch.no_grad():
            for mod, (a, b) in A.items():
                P[mod + ".lora_A.weight"].copy_(a.to(dtype))
                P[mod + ".lora_B.weight"].copy_(b.to(dtype))
        return m, pm, P

    def run(dtype):
        _, pm, P = build(dtype)
        T_ = {n: p for n, p in P.items() if p.requires_grad}
        assert set(T_) == {f"{mod}.lora_{x}.weight" for mod in A for x in "AB"}, sorted(T_)
        opt = torch.optim.AdamW([{"params": [p for p in T_.values() if p.dim() > 1], "weight_decay": OPT["weight_decay"]}],
                                lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"])
        losses, norms, first = [], [], None
        for step in range(STEPS):
            opt.zero_grad(set_to_none=True)
            logits = pm(input_ids=tokens, use_cache=False).logits
            loss = loss_of(logits, targets)
            loss.backward()
            if step == 0:
                first = (logits.detach().clone(), loss.item(), {n: p.grad.detach().clone() for n, p in T_.items()})
            norms.append(float(torch.nn.utils.clip_grad_norm_(list(T_.values()), OPT["grad_clip"])))
            losses.append(loss.item())
            opt.step()
        return first, losses, norms

    (logits, loss, grads), losses, norms = run(torch.float64)
    (_, loss32, _), losses32, _ = run(torch.float32)
    print(f"gpt2_lora: loss {loss:.10f} (fp32 rel diff {abs(loss32 - loss) / loss:.2e}); step losses fp32 rel "
          f"diff {max(abs(x - y) / x for x, y in zip(losses, losses32)):.2e}")
    cn = {"attn.c_attn": "c_attn", "attn.c_proj": "attn_proj", "mlp.c_fc": "c_fc", "mlp.c_proj": "mlp_proj"}
    ours = {"qkv_w": "attn.c_attn", "attproj_w": "attn.c_proj", "fc_w": "mlp.c_fc", "fcproj_w": "mlp.c_proj"}
    fw = {"root.wte": torch.cat([W["transformer.wte.weight"], pad]), "root.wpe": W["transformer.wpe.weight"],
          "root.lnf_w": W["transformer.ln_f.weight"], "root.lnf_b": W["transformer.ln_f.bias"]}
    for l in range(L):
        p, h = f"transformer.h.{l}.", f"h{l}."
        fw[h + "ln1_w"], fw[h + "ln1_b"] = W[p + "ln_1.weight"], W[p + "ln_1.bias"]
        fw[h + "ln2_w"], fw[h + "ln2_b"] = W[p + "ln_2.weight"], W[p + "ln_2.bias"]
        for c, m in ours.items():
            fw[h + c] = W[p + m + ".weight"].t().contiguous()
            fw[h + c[:-1] + "b"] = W[p + m + ".bias"]
        for m in io:
            fw[h + "lora_a_" + cn[m]], fw[h + "lora_b_" + cn[m]] = A[p + m]
    recs = [record("tokens", DT_I32, tokens), record("targets", DT_I32, targets)]
    recs += [record("w." + n, DT_BF16, t) for n, t in fw.items()]
    recs.append(record("logits", DT_F32, logits))
    recs.append(record("loss", DT_F64, torch.tensor([loss], dtype=torch.float64)))
    for n, gr in grads.items():  # transformer.h.L.attn.c_attn.lora_A.weight -> hL.lora_a_c_attn
        parts = n.split(".")
        recs.append(record(f"g.h{parts[2]}.lora_{parts[5][-1].lower()}_{cn[parts[3] + '.' + parts[4]]}", DT_F32, gr))
    recs.append(record("gpt2", DT_I32, torch.tensor([1], dtype=torch.int32)))
    bits = sum(1 << b for b in (7, 8, 9, 10))  # FSDP_LORA_C_ATTN .. _MLP_PROJ
    recs.append(record("lora", DT_I32, torch.tensor([r, bits], dtype=torch.int32)))
    recs.append(record("loraf", DT_F64, torch.tensor([GPT2_LORA["alpha"]], dtype=torch.float64)))
    recs.append(record("losses", DT_F64, torch.tensor(losses, dtype=torch.float64)))
    recs.append(record("norms", DT_F64, torch.tensor(norms, dtype=torch.float64)))
    ints = [MAGIC, VERSION, HEADER_BYTES, len(recs), L, C, NH, V, Vp, TM, B, T, STEPS, SEED, 0, 0]
    floats = [OPT["lr"], OPT["beta1"], OPT["beta2"], OPT["eps"], OPT["weight_decay"], OPT["grad_clip"], 1e-5]
    header = struct.pack("<16i7f", *ints, *floats)
    with open(os.path.join(outdir, "gpt2_lora.bin"), "wb") as f:
        f.write(header + b"\0" * (HEADER_BYTES - len(header)) + b"".join(recs))
    if hf:  # the base as transformers saves it, and the adapters as PEFT does
        base(torch.float32).save_pretrained(os.path.join(outdir, "gpt2_lora_f32"), safe_serialization=True)
        build(torch.float32)[1].save_pretrained(os.path.join(outdir, "gpt2_lora_adapter"))


def cmd_fixture(a):
    torch.set_num_threads(1)
    os.makedirs(a.outdir, exist_ok=True)
    bad = 0
    for v in a.variant.split(","):
        if v == "gpt2_lora":
            gpt2_lora_fixture(a.outdir, a.hf)
            continue
        s = shape(v)
        W, pad = init_weights(s)
        tokens, targets = batch(s)
        logits, loss, grads, losses, norms = train(s, W, tokens, targets, torch.float64)
        _, loss32, grads32, losses32, _ = train(s, W, tokens, targets, torch.float32)
        if not s.qknorm and not s.lora:  # RefLlama against transformers, float64 (PEFT: no RefLlama)
            rl, rloss, rgrads, rlosses, _ = train(s, W, tokens, targets, torch.float64, use_ref=True)
            e = max([rel(rl, logits)] + [rel(rgrads[n], grads[n]) for n in grads] +
                    [abs(x - y) / y for x, y in zip(rlosses, losses)])
            print(f"{v}: RefLlama vs transformers (float64): worst rel diff {e:.2e}")
            if e > 1e-10:
                print(f"{v}: RefLlama disagrees with transformers", file=sys.stderr)
                bad = 1
        worst = max(rel(grads32[n], grads[n]) for n in grads)
        print(f"{v}: loss {loss:.10f} (fp32 rel diff {abs(loss32 - loss) / loss:.2e}); fp32 vs fp64 "
              f"gradients {worst:.2e}; step losses fp32 rel diff "
              f"{max(abs(x - y) / x for x, y in zip(losses, losses32)):.2e}")
        zero = torch.zeros(s.Vp - s.V, s.C, dtype=torch.float64)
        fw = fused(s, W, pad)
        fw.update({c_name(s, n): w for n, w in W.items() if ".lora_" in n})
        # gradients of the trainable tensors only (a frozen one has none: filled in to fuse, then dropped)
        base = [n for n in W if ".lora_" not in n]
        fg = fused(s, {n: grads[n] if n in grads else torch.zeros_like(W[n], dtype=torch.float64) for n in base},
                   zero)
        fg = {n: g for n, g in fg.items()
              if not s.lora and not any(fnmatch.fnmatchcase(n, p) for p in s.freeze.split(",") if p)}
        fg.update({c_name(s, n): g for n, g in grads.items() if ".lora_" in n})
        recs = [record("tokens", DT_I32, tokens), record("targets", DT_I32, targets)]
        recs += [record("w." + n, DT_BF16, t) for n, t in fw.items()]
        recs.append(record("logits", DT_F32, logits))
        recs.append(record("loss", DT_F64, torch.tensor([loss], dtype=torch.float64)))
        recs += [record("g." + n, DT_F32, t) for n, t in fg.items()]
        if s.lora:  # rank, targets (FSDP_LORA_* bits), alpha
            bits = sum(1 << LORA_MODULES.index(m) for m in s.lora["targets"])
            recs.append(record("lora", DT_I32, torch.tensor([s.lora["r"], bits], dtype=torch.int32)))
            recs.append(record("loraf", DT_F64, torch.tensor([s.lora["alpha"]], dtype=torch.float64)))
        if s.freeze:  # the C side freezes by the same globs (fsdp_engine_config.freeze)
            recs.append(record("freeze", DT_I32, torch.tensor(list(s.freeze.encode()), dtype=torch.int32)))
        recs.append(record("losses", DT_F64, torch.tensor(losses, dtype=torch.float64)))
        recs.append(record("norms", DT_F64, torch.tensor(norms, dtype=torch.float64)))
        sc = s.scaling or {}
        recs.append(record("config", DT_I32, torch.tensor(
            [s.NKV, s.hd, s.I, s.tie, s.bias, s.qknorm, 1 if sc else 0,
             sc.get("original_max_position_embeddings", 0)], dtype=torch.int32)))
        recs.append(record("configf", DT_F64, torch.tensor(
            [s.eps, s.theta, sc.get("factor", 0.0), sc.get("low_freq_factor", 0.0), sc.get("high_freq_factor", 0.0)],
            dtype=torch.float64)))
        ints = [MAGIC, VERSION, HEADER_BYTES, len(recs), s.L, s.C, s.NH, s.V, s.Vp, s.T_max, B, T, STEPS, SEED,
                0, 0]
        floats = [OPT["lr"], OPT["beta1"], OPT["beta2"], OPT["eps"], OPT["weight_decay"], OPT["grad_clip"], s.eps]
        header = struct.pack("<16i7f", *ints, *floats)
        header += b"\0" * (HEADER_BYTES - len(header))
        with open(os.path.join(a.outdir, v + ".bin"), "wb") as f:
            f.write(header + b"".join(recs))
        if a.hf and s.lora:  # the base as a folder (adapters are no part of it), the adapters as PEFT's
            save_hf(s, {n: w for n, w in W.items() if ".lora_" not in n}, os.path.join(a.outdir, v + "_f32"),
                    torch.float32)
            Runner(s, W, torch.float32).m.save_pretrained(os.path.join(a.outdir, v + "_adapter"))
        elif a.hf:
            save_hf(s, W, os.path.join(a.outdir, v + "_f32"), torch.float32)
            save_hf(s, W, os.path.join(a.outdir, v + "_bf16"), torch.bfloat16)
            save_hf(s, W, os.path.join(a.outdir, v + "_sharded"), torch.float32, shard_kb=40)
            with open(os.path.join(a.outdir, v + "_batch.json"), "w") as f:
                json.dump({"tokens": tokens.tolist()}, f)
    return bad


def load_dir(d, dtype=torch.float64, adapter=None):
    """A folder as (shape, runner): transformers' AutoModelForCausalLM, or RefLlama for qwen3; adapter:
    a PEFT adapter folder PeftModel.from_pretrained puts on it."""
    with open(os.path.join(d, "config.json")) as f:
        cd = json.load(f)
    if cd.get("model_type") == "qwen3":
        from safetensors.torch import load_file
        s = argparse.Namespace(L=cd["num_hidden_layers"], C=cd["hidden_size"], NH=cd["num_attention_heads"],
                               NKV=cd["num_key_value_heads"], hd=cd["head_dim"], I=cd["intermediate_size"],
                               V=cd["vocab_size"], tie=int(cd.get("tie_word_embeddings", False)), bias=0, qknorm=1,
                               eps=cd["rms_norm_eps"], theta=cd["rope_theta"], scaling=cd.get("rope_scaling"))
        P = {}
        idx = os.path.join(d, "model.safetensors.index.json")
        files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
        for fn in files:
            P.update(load_file(os.path.join(d, fn)))
        P = {n: t.to(dtype) for n, t in P.items() if not (s.tie and n == "lm_head.weight")}
        return lambda tok: ref_forward(s, P, tok)
    from transformers import AutoModelForCausalLM
    if dtype == torch.float64:
        patch_float64()
    m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager").eval()
    if adapter:
        from peft import PeftModel
        m = PeftModel.from_pretrained(m, adapter).eval()
    m = m.to(dtype)
    return lambda tok: m(input_ids=tok, use_cache=False).logits


def cmd_compare(a):
    """LOGITS: fsdp-train's --logits file (int32 B, T, V then int32 tokens [B*T], float32 logits [B*T*V])."""
    torch.set_num_threads(1)
    run = load_dir(a.dir, adapter=a.adapter)
    raw = open(a.logits, "rb").read()
    Bb, Tt, V = struct.unpack_from("<3i", raw, 0)
    tok = torch.tensor(struct.unpack_from(f"<{Bb * Tt}i", raw, 12), dtype=torch.int64).view(Bb, Tt)
    ours = torch.frombuffer(bytearray(raw[12 + 4 * Bb * Tt:]), dtype=torch.float32).view(Bb, Tt, V)
    with torch.no_grad():
        theirs = run(tok)[..., :V]
    e = rel(ours, theirs)
    print(f"{a.dir}: logits max|diff|/max|ref| = {e:.3g} (tol {a.tol})")
    return 0 if e <= a.tol else 1


def generate_fix():
    """transformers' generate() asks whether the model is FSDP-managed by importing torch.distributed.fsdp,
    which Debian's torch 1.13 cannot import under Python 3.11 (a dataclass error): answer no directly."""
    import transformers.generation.utils as gu
    gu.is_fsdp_managed_module = lambda module: False


def eot_id(tok):
    for t in ("<|endoftext|>", "<|end_of_text|>"):  # fsdp_bpe_eot's choice
        i = tok.convert_tokens_to_ids(t)
        if i is not None and i != tok.unk_token_id:
            return i
    raise SystemExit("the tokenizer has no end-of-text token")


def cmd_generate(a):
    torch.set_num_threads(1)
    with open(os.path.join(a.dir, "config.json")) as f:
        cd = json.load(f)
    tok = None
    if a.text is not None:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(a.dir)
        eot = eot_id(tok)
        prompt = [eot] + tok(a.text, add_special_tokens=False)["input_ids"]
    else:
        prompt = [int(x) for x in a.prompt.split(",")]
    if cd.get("model_type") == "qwen3":  # greedy with the reference's full forward
        run = load_dir(a.dir, torch.float32)
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(a.n):
                ids.append(int(run(torch.tensor([ids]))[0, -1, :cd["vocab_size"]].argmax()))
        new = ids[len(prompt):]
    else:
        from transformers import AutoModelForCausalLM
        generate_fix()
        m = AutoModelForCausalLM.from_pretrained(a.dir, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            out = m.generate(torch.tensor([prompt]), max_new_tokens=a.n, min_new_tokens=a.n, do_sample=False,
                             pad_token_id=0, eos_token_id=None, attention_mask=torch.ones(1, len(prompt),
                                                                                           dtype=torch.long))
        new = [int(i) for i in out[0, len(prompt):]]
    if tok is None:
        print(" ".join(str(i) for i in new))
        return 0
    # Each token's bytes (byte-level BPE: the vocabulary's characters mapped back to bytes; an added
    # token: its text), so a token holding part of a UTF-8 character prints as fsdp-train prints it.
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode
    unbyte = {c: b for b, c in bytes_to_unicode().items()}
    added = {i: t.content for i, t in tok.added_tokens_decoder.items()}
    text = a.text.encode()
    for t in new:
        if t == eot:
            text += b"\n----\n"
        elif t in added:
            text += added[t].encode()
        else:
            text += bytes(unbyte[c] for c in tok.convert_ids_to_tokens(t))
    sys.stdout.buffer.write(text + b"\n")
    return 0


def cmd_textmodel(a):
    """A variant's random model with a real tokenizer, as transformers saves both."""
    from transformers import PreTrainedTokenizerFast
    torch.set_num_threads(1)
    s = shape(a.variant)
    tok = PreTrainedTokenizerFast(tokenizer_file=a.tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    if len(tok) > s.V:
        raise SystemExit(f"{a.tokenizer}: {len(tok)} tokens, more than the model's {s.V}")
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    W, _ = init_weights(s)
    m = hf_model(s, W, torch.float32)
    m.config.bos_token_id = m.config.eos_token_id = eot
    m.generation_config.bos_token_id = m.generation_config.eos_token_id = eot
    os.makedirs(a.dir, exist_ok=True)
    m.save_pretrained(a.dir, safe_serialization=True)
    tok.save_pretrained(a.dir)
    print(f"{a.dir}: {a.variant} model, vocabulary {s.V}, tokenizer of {len(tok)} tokens (end of text {eot})")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("fixture")
    p.add_argument("outdir")
    p.add_argument("--variant", default=",".join(list(VARIANTS) + ["gpt2_lora"]))
    p.add_argument("--hf", action="store_true", help="also the Hugging Face folders")
    p = sub.add_parser("compare")
    p.add_argument("dir")
    p.add_argument("logits")
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--adapter", default=None, help="a PEFT adapter folder on DIR (PeftModel.from_pretrained)")
    p = sub.add_parser("generate")
    p.add_argument("dir")
    p.add_argument("n", type=int)
    p.add_argument("--prompt", default="1,2,3")
    p.add_argument("--text", default=None)
    p = sub.add_parser("textmodel")
    p.add_argument("dir")
    p.add_argument("--variant", required=True, choices=[v for v in VARIANTS if v != "qwen3"])
    p.add_argument("--tokenizer", required=True)
    a = ap.parse_args()
    sys.exit({"fixture": cmd_fixture, "compare": cmd_compare, "generate": cmd_generate,
              "textmodel": cmd_textmodel}[a.cmd](a))


if __name__ == "__main__":
    main()
