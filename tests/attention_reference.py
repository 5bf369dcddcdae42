"""Plain implementations of attention and its residual signals written from the equations (docs/theory/attention.md
section 1, docs/theory/residuals.md), for the tests to compare with.

Everything is explicit: per-head loops, (T, T) weight matrices, no SDPA, no edge lists.
"""

import math

import torch
import torch.nn.functional as F


def split_qkv(module, x):
    """Q, K, V (B, T, C) from the module's c_attn weights (K = Q when symmetric; V alone, Q = K = None, for the
    "mean" kernel)."""
    y = x @ module.c_attn.weight.T + (module.c_attn.bias if module.c_attn.bias is not None else 0)
    C = x.shape[-1]
    if module.config.kernel == "mean":
        return None, None, y
    if module.config.symmetric:
        return y[..., :C], y[..., :C], y[..., C:]
    return y[..., :C], y[..., C : 2 * C], y[..., 2 * C :]


def heads_of(t, nh):
    """(B, T, C) -> list of nh tensors (B, T, hs)."""
    return list(t.chunk(nh, dim=-1))


def softmax_weights(q, k, mask):
    """softmax(q k^T / sqrt(d)) with entries where mask is False removed; q, k (B, T, d)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def linear_weights(q, k, mask):
    """phi(q_i).phi(k_j) normalised over the allowed j, phi = elu + 1."""
    w = ((F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1)) * mask
    return w / w.sum(-1, keepdim=True)


def multi_head(module, x, mask):
    """MH(X) and V(X), (B, T, C), for the module's kernel."""
    cfg = module.config
    q, k, v = split_qkv(module, x)
    if cfg.kernel == "mean":  # w_ij = 1 / |N(i)|
        weights = mask.to(v.dtype) / mask.sum(-1, keepdim=True)
        return torch.cat([weights @ vm for vm in heads_of(v, cfg.n_head)], -1), v
    out = []
    for qm, km, vm in zip(heads_of(q, cfg.n_head), heads_of(k, cfg.n_head), heads_of(v, cfg.n_head), strict=False):
        if cfg.kernel == "softmax":
            out.append(softmax_weights(qm, km, mask) @ vm)
        elif cfg.kernel == "linear":
            out.append(linear_weights(qm, km, mask) @ vm)
        else:  # diff: the head's channels split in halves (Q1 | Q2), (K1 | K2); V keeps the full head
            half = qm.shape[-1] // 2
            lam = (
                torch.exp(module.lambda_q1 @ module.lambda_k1)
                - torch.exp(module.lambda_q2 @ module.lambda_k2)
                + module.lambda_init
            )
            a = softmax_weights(qm[..., :half], km[..., :half], mask) - lam * softmax_weights(
                qm[..., half:], km[..., half:], mask
            )
            o = a @ vm
            o = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + 1e-5) * module.head_norm.weight
            out.append(o * (1 - module.lambda_init))
    return torch.cat(out, -1), v


def reject(a, v):
    """a - (<a, v> / <v, v>) v row by row."""
    return a - ((a * v).sum(-1, keepdim=True) / (v * v).sum(-1, keepdim=True)) * v


def attention_output(module, x, mask):
    """R W^o + b for every residual (docs/theory/residuals.md section 1)."""
    cfg = module.config
    mh, v = multi_head(module, x, mask)
    if cfg.residual in ("standard", "accumulated"):  # a lone layer has no earlier updates to add
        r = mh
    elif cfg.residual == "attentionx":
        r = v - cfg.gamma * mh
    elif cfg.residual == "concat":
        r = torch.cat([mh, v], -1)
    else:
        r = reject(mh, v)
    y = F.linear(r, module.c_proj.weight, module.c_proj.bias)
    if cfg.residual == "belief_star":
        per_head = torch.cat(
            [reject(h, vm) for h, vm in zip(heads_of(mh, cfg.n_head), heads_of(v, cfg.n_head), strict=False)], -1
        )
        y = y + F.linear(per_head, module.c_proj_s.weight, module.c_proj_s.bias)
    return y


def gat_output(module, x, mask):
    """GAT per node, by loops over the neighbours: alpha_ij = softmax_j LeakyReLU(c_dst.Wh_i + c_src.Wh_j)."""
    cfg = module.config
    wh = F.linear(x, module.c_attn.weight, module.c_attn.bias)
    B, T, C = x.shape
    out = torch.zeros_like(wh)
    hs = cfg.head_size
    for b in range(B):
        for m in range(cfg.n_head):
            h = wh[b, :, m * hs : (m + 1) * hs]
            for i in range(T):
                nbrs = [j for j in range(T) if mask[i, j]]
                e = torch.stack([F.leaky_relu(module.att_dst[m] @ h[i] + module.att_src[m] @ h[j], 0.2) for j in nbrs])
                alpha = e.softmax(0)
                out[b, i, m * hs : (m + 1) * hs] = sum(a * h[j] for a, j in zip(alpha, nbrs, strict=False))
    return F.linear(out, module.c_proj.weight, module.c_proj.bias)
