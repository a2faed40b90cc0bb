"""Rejection sampling of drafts with their draft distribution q, one program per row.

The rule and the tensor layout are atom/spec_decode/rejection.py's (its torch reference is the
oracle of this kernel, on the same uniforms and noise): walk the row's drafts while they stand
(u * q(x) < p(x)), then one pass over the vocabulary at the stopping position draws the token
from max(0, p - q) after a rejection or from p in the bonus slot, by the exponential race
argmax(score / E). The walk is a loop with an "accepting" flag (no break in Triton); the
vocabulary pass runs once per row whatever k is.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _rejection_kernel(p_ptr, q_ptr, draft_ptr, start_ptr, count_ptr, u_ptr, noise_ptr, out_ptr,
                      vocab, HAS_Q: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    start = tl.load(start_ptr + row)
    m = tl.load(count_ptr + row)
    stop = start + m - 1
    accepting = m * 0 + 1  # a tensor from the start: a loop-carried value keeps its type
    for j in range(0, m - 1):
        pos = start + j
        x = tl.load(draft_ptr + pos)
        px = tl.load(p_ptr + pos.to(tl.int64) * vocab + x)
        if HAS_Q:
            qx = tl.load(q_ptr + pos.to(tl.int64) * vocab + x)
        else:
            qx = 1.0
        ok = tl.where(tl.load(u_ptr + pos) * qx < px, 1, 0)
        kept = tl.where((accepting == 1) & (ok == 1), x, tl.load(out_ptr + pos))
        tl.store(out_ptr + pos, kept)
        stop = tl.where((accepting == 1) & (ok == 0), pos, stop)
        accepting = accepting * ok
    rejected = accepting == 0
    x_stop = tl.where(rejected, tl.load(draft_ptr + stop), -1)
    base = stop.to(tl.int64) * vocab
    best_r = tl.full([BLOCK], -1.0, tl.float32)
    best_r_i = tl.zeros([BLOCK], tl.int32)
    best_p = tl.full([BLOCK], -1.0, tl.float32)
    best_p_i = tl.zeros([BLOCK], tl.int32)
    top_r = tl.zeros([BLOCK], tl.float32)
    for v0 in range(0, vocab, BLOCK):
        i = v0 + tl.arange(0, BLOCK)
        inside = i < vocab
        p = tl.load(p_ptr + base + i, mask=inside, other=0.0)
        e = tl.load(noise_ptr + base + i, mask=inside, other=1.0)
        if HAS_Q:
            q = tl.load(q_ptr + base + i, mask=inside, other=0.0)
        else:
            q = tl.where(i == x_stop, 1.0, 0.0)
        r = tl.where(rejected, tl.maximum(p - q, 0.0), p)
        top_r = tl.maximum(top_r, r)
        sr = tl.where(inside, r / e, -1.0)
        sp = tl.where(inside, p / e, -1.0)
        take_r = sr > best_r
        best_r = tl.where(take_r, sr, best_r)
        best_r_i = tl.where(take_r, i, best_r_i)
        take_p = sp > best_p
        best_p = tl.where(take_p, sp, best_p)
        best_p_i = tl.where(take_p, i, best_p_i)
    mr = tl.max(best_r, 0)
    tok_r = tl.min(tl.where(best_r == mr, best_r_i, vocab), 0)
    mp = tl.max(best_p, 0)
    tok_p = tl.min(tl.where(best_p == mp, best_p_i, vocab), 0)
    # An all-zero residual happens only by rounding (p == q never rejects): p is then the law.
    tok = tl.where(tl.max(top_r, 0) > 0.0, tok_r, tok_p)
    tl.store(out_ptr + stop, tok.to(tl.int64))


def rejection_sample(target_probs: torch.Tensor, draft_probs: Optional[torch.Tensor],
                     draft_ids: torch.Tensor, starts: torch.Tensor, counts: torch.Tensor,
                     uniforms: torch.Tensor, noise: torch.Tensor,
                     out: torch.Tensor) -> torch.Tensor:
    """The reference's contract (spec_decode/rejection.py) with starts/counts as int32 device
    tensors; float32 probabilities and noise, contiguous [S, V]. Writes `out` (int64) in place."""
    vocab = target_probs.shape[1]
    q = draft_probs if draft_probs is not None else target_probs
    _rejection_kernel[(starts.shape[0],)](
        target_probs, q, draft_ids, starts, counts, uniforms, noise, out, vocab,
        HAS_Q=draft_probs is not None, BLOCK=min(BLOCK, triton.next_power_of_2(vocab)))
    return out
