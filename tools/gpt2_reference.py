#!/usr/bin/env python3
"""gpt2_reference.py — the PyTorch reference for fsdp.c's GPT-2 model: builds the same model from a
config and seed and writes a small binary fixture (weights, batch, logits, loss, every gradient, the
losses of a few AdamW steps) that tests/model/mpi_gpt_fixture.c compares against.

Usage (Debian's python3-torch is enough):
    /usr/bin/python3 tools/gpt2_reference.py --out tests/model/gpt2_tiny.bin
Defaults are the committed tiny config (L=2, C=64, NH=4, V=300 padded to 320, T=32, B=4).

Precision: weights are drawn in float32 and rounded to bfloat16 values (stored losslessly as bf16,
which halves the file and makes the mixed-precision parameter cast exact at step 0). Every reference
quantity (logits, loss, gradients, the AdamW run) is computed in float64 from those weights and stored
as float32 (logits, gradients) or float64 (losses, norms). The script also runs the same steps in
float32 and prints the fp32-vs-fp64 gap: the noise floor a correct fp32 implementation sits in.
Because the weights are bf16 values and the step-0 quantities are float64 from them, those records
are also the exact reference of fsdp.c's mixed mode on its f32-compute GEMM path (bf16 parameters
widened exactly, fp32 activations and GEMMs): tests/model/mpi_gpt_fixture.c holds that path to fp32's
tolerances at step 0, while the bf16-GEMM path (activations rounded to bf16) gets wider ones.

File layout (little endian; tests/model/fixture.h is the reader and checks all of it):
    header, 256 bytes = 64 int32 slots:
      [0] magic 0x32545047 ("GPT2")  [1] version 1  [2] header bytes (256)  [3] record count
      [4] L  [5] C  [6] NH  [7] V  [8] Vp  [9] T_max  [10] B  [11] T  [12] AdamW steps  [13] seed
      [16..22] float32: lr, beta1, beta2, eps, weight_decay, grad_clip, layernorm eps
      others 0 (reserved)
    records, back to back: 64-byte record header then the data
      char name[32] (NUL padded), int32 dtype (0 f32, 1 i32, 2 f64, 3 bf16), int32 ndim,
      int32 shape[4] (unused dims 1), uint64 data bytes (= product of shape * dtype size)
    Records: tokens, targets (B,T) i32; "w.<unit>.<tensor>" bf16 weights; logits (B,T,Vp) f32;
    loss (1) f64; "g.<unit>.<tensor>" f32 gradients of the loss; losses (steps) f64, the loss before
    each AdamW step on the same batch; norms (steps) f64, the pre-clip gradient norm of each step.

Units and tensor names are the C model's (src/model/gpt.c): unit "root" holds wte (Vp,C), wpe
(T_max,C), lnf_w, lnf_b (C); unit "h<l>" holds ln1_w, ln1_b (C), qkv_w (3C,C), qkv_b (3C),
attproj_w (C,C), attproj_b (C), ln2_w, ln2_b (C), fc_w (4C,C), fc_b (4C), fcproj_w (C,4C),
fcproj_b (C). Linear weights are (out, in): y = x W^T + b. The LM head is wte (tied). Padded vocab
rows (V..Vp-1) are ordinary random rows: their logits exist but never enter the loss.
"""
import argparse
import math
import struct
import sys

import torch
import torch.nn.functional as F

MAGIC = 0x32545047
VERSION = 1
HEADER_BYTES = 256
DT_F32, DT_I32, DT_F64, DT_BF16 = 0, 1, 2, 3

BLOCK_TENSORS = ["ln1_w", "ln1_b", "qkv_w", "qkv_b", "attproj_w", "attproj_b",
                 "ln2_w", "ln2_b", "fc_w", "fc_b", "fcproj_w", "fcproj_b"]
ROOT_TENSORS = ["wte", "wpe", "lnf_w", "lnf_b"]


def param_shapes(cfg):
    """Ordered (name, shape) of every parameter, the C model's names."""
    C, L = cfg.C, cfg.L
    out = [("root.wte", (cfg.Vp, C)), ("root.wpe", (cfg.T_max, C)),
           ("root.lnf_w", (C,)), ("root.lnf_b", (C,))]
    for l in range(L):
        h = f"h{l}."
        out += [(h + "ln1_w", (C,)), (h + "ln1_b", (C,)), (h + "qkv_w", (3 * C, C)), (h + "qkv_b", (3 * C,)),
                (h + "attproj_w", (C, C)), (h + "attproj_b", (C,)), (h + "ln2_w", (C,)), (h + "ln2_b", (C,)),
                (h + "fc_w", (4 * C, C)), (h + "fc_b", (4 * C,)), (h + "fcproj_w", (C, 4 * C)),
                (h + "fcproj_b", (C,))]
    return out


def no_decay(name):
    """Biases and LayerNorm weights get no weight decay (the C model's no_decay flags)."""
    t = name.split(".", 1)[1]
    return t.endswith("_b") or t.startswith("ln")


def init_params(cfg):
    """GPT-2 init (normal 0.02, residual projections 0.02/sqrt(2L), LN ones, biases zero), rounded
    to bf16 values so the fixture can store them exactly in 2 bytes. Biases and LN parameters get a
    small random perturbation so their gradients are not trivially tested at zero/one."""
    g = torch.Generator().manual_seed(cfg.seed)
    params = {}
    for name, shape in param_shapes(cfg):
        t = name.split(".", 1)[1]
        if t.endswith("_w") and t.startswith("ln"):
            p = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif t.endswith("_b"):
            p = 0.02 * torch.randn(shape, generator=g)
        else:
            std = 0.02 / math.sqrt(2 * cfg.L) if t in ("attproj_w", "fcproj_w") else 0.02
            p = std * torch.randn(shape, generator=g)
        params[name] = p.to(torch.bfloat16)
    return params


def layernorm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def forward(cfg, P, tokens, targets):
    """logits (B,T,Vp) and mean cross-entropy over the first V logit columns."""
    B, T = tokens.shape
    C, NH = cfg.C, cfg.NH
    x = P["root.wte"][tokens] + P["root.wpe"][:T].unsqueeze(0)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(cfg.L):
        h = lambda n: P[f"h{l}.{n}"]
        a = layernorm(x, h("ln1_w"), h("ln1_b"), cfg.ln_eps)
        qkv = a @ h("qkv_w").t() + h("qkv_b")  # (B,T,3C): q | k | v, heads contiguous within each
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(B, T, NH, C // NH).transpose(1, 2)
        k = k.view(B, T, NH, C // NH).transpose(1, 2)
        v = v.view(B, T, NH, C // NH).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ h("attproj_w").t() + h("attproj_b")
        m = layernorm(x, h("ln2_w"), h("ln2_b"), cfg.ln_eps)
        m = F.gelu(m @ h("fc_w").t() + h("fc_b"), approximate="tanh")
        x = x + m @ h("fcproj_w").t() + h("fcproj_b")
    x = layernorm(x, P["root.lnf_w"], P["root.lnf_b"], cfg.ln_eps)
    logits = x @ P["root.wte"].t()  # tied LM head over all Vp rows
    loss = F.cross_entropy(logits[..., :cfg.V].reshape(B * T, cfg.V), targets.reshape(-1))
    return logits, loss


def train(cfg, params_bf16, tokens, targets, dtype):
    """Returns (logits, loss, grads at the initial weights, [loss per step], [pre-clip norm per
    step]) computed in `dtype`, with torch's AdamW and clip_grad_norm_."""
    P = {n: p.to(dtype).clone().requires_grad_(True) for n, p in params_bf16.items()}
    decay = [p for n, p in P.items() if not no_decay(n)]
    nodecay = [p for n, p in P.items() if no_decay(n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    losses, norms = [], []
    first = None
    for step in range(cfg.steps):
        opt.zero_grad(set_to_none=True)
        logits, loss = forward(cfg, P, tokens, targets)
        loss.backward()
        if step == 0:
            first = (logits.detach().clone(), loss.item(),
                     {n: p.grad.detach().clone() for n, p in P.items()})
        norm = torch.nn.utils.clip_grad_norm_(list(P.values()), cfg.grad_clip)
        losses.append(loss.item())
        norms.append(float(norm))
        opt.step()
    return first[0], first[1], first[2], losses, norms


def record(name, dtype, tensor):
    """Bytes of one record: 64-byte header then the data."""
    shape = list(tensor.shape) if tensor.dim() > 0 else [1]
    assert 1 <= len(shape) <= 4 and len(name) < 32
    if dtype == DT_F32:
        data = tensor.to(torch.float32).contiguous().numpy().tobytes()
    elif dtype == DT_F64:
        data = tensor.to(torch.float64).contiguous().numpy().tobytes()
    elif dtype == DT_I32:
        data = tensor.to(torch.int32).contiguous().numpy().tobytes()
    else:  # bf16: raw bits through int16 (numpy has no bfloat16)
        data = tensor.to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
    hdr = struct.pack("<32sii4iQ", name.encode(), dtype, len(shape), *(shape + [1] * (4 - len(shape))),
                      len(data))
    assert len(hdr) == 64
    return hdr + data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--L", type=int, default=2)
    ap.add_argument("--C", type=int, default=64)
    ap.add_argument("--NH", type=int, default=4)
    ap.add_argument("--V", type=int, default=300)
    ap.add_argument("--Vp", type=int, default=320)
    ap.add_argument("--T_max", type=int, default=32)
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--T", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight_decay", type=float, default=0.1)
    ap.add_argument("--grad_clip", type=float, default=1.0)
    ap.add_argument("--ln_eps", type=float, default=1e-5)
    cfg = ap.parse_args()
    if cfg.C % cfg.NH or cfg.Vp < cfg.V or cfg.T > cfg.T_max:
        sys.exit("gpt2_reference.py: need C % NH == 0, Vp >= V, T <= T_max")
    torch.set_num_threads(1)  # deterministic reductions

    params = init_params(cfg)
    g = torch.Generator().manual_seed(cfg.seed + 1)
    seq = torch.randint(0, cfg.V, (cfg.B, cfg.T + 1), generator=g)
    tokens, targets = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()

    logits, loss, grads, losses, norms = train(cfg, params, tokens, targets, torch.float64)
    _, loss32, grads32, losses32, _ = train(cfg, params, tokens, targets, torch.float32)

    # The fp32 noise floor, for the test's tolerances.
    print(f"loss {loss:.10f} (fp32 run: rel diff {abs(loss32 - loss) / loss:.2e})")
    worst = max((grads32[n].double() - grads[n]).abs().max().item() / grads[n].abs().max().item()
                for n in grads)
    print(f"fp32 vs fp64 gradients: worst per-tensor max|diff|/max|ref| = {worst:.2e}")
    for i, (a, b, nrm) in enumerate(zip(losses, losses32, norms)):
        print(f"step {i}: loss {a:.8f}  norm {nrm:.5f}  fp32 rel diff {abs(a - b) / a:.2e}")

    recs = [record("tokens", DT_I32, tokens), record("targets", DT_I32, targets)]
    for name, _ in param_shapes(cfg):
        recs.append(record("w." + name, DT_BF16, params[name]))
    recs.append(record("logits", DT_F32, logits))
    recs.append(record("loss", DT_F64, torch.tensor([loss], dtype=torch.float64)))
    for name, _ in param_shapes(cfg):
        recs.append(record("g." + name, DT_F32, grads[name]))
    recs.append(record("losses", DT_F64, torch.tensor(losses, dtype=torch.float64)))
    recs.append(record("norms", DT_F64, torch.tensor(norms, dtype=torch.float64)))

    ints = [MAGIC, VERSION, HEADER_BYTES, len(recs), cfg.L, cfg.C, cfg.NH, cfg.V, cfg.Vp, cfg.T_max,
            cfg.B, cfg.T, cfg.steps, cfg.seed, 0, 0]
    floats = [cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.grad_clip, cfg.ln_eps]
    header = struct.pack("<16i7f", *ints, *floats)
    header += b"\0" * (HEADER_BYTES - len(header))
    blob = header + b"".join(recs)
    with open(cfg.out, "wb") as f:
        f.write(blob)
    print(f"wrote {cfg.out}: {len(blob)} bytes, {len(recs)} records")


if __name__ == "__main__":
    main()
