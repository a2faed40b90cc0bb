"""Token sampling on the GPU without sorting the vocabulary.

Greedy rows take an argmax. Random rows use the Gumbel-max trick (argmax of logit/T + Gumbel noise
is an exact draw from softmax(logit/T)), one pass over the row. Top-k and top-p use rejection
against a rising pivot instead of a sort: draw a token x among those above the pivot; x belongs
to the top-k/top-p set iff fewer than k tokens, carrying less than top_p of the mass, are strictly
more likely than x; if not, every token at or below x is outside the set too, so x becomes the
pivot and we draw again. Accepted draws are exact samples of the renormalised truncated
distribution, and the expected number of rounds grows only logarithmically with the vocabulary.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_ROUNDS = 64


@triton.jit
def _row_max(row_ptr, vocab, BLOCK: tl.constexpr):
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    best_i = tl.zeros([BLOCK], tl.int32)
    for start in range(0, vocab, BLOCK):
        i = start + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + i, mask=i < vocab, other=float("-inf")).to(tl.float32)
        take = x > best
        best = tl.where(take, x, best)
        best_i = tl.where(take, i, best_i)
    m = tl.max(best, 0)
    idx = tl.min(tl.where(best == m, best_i, vocab), 0)
    return m, idx


@triton.jit
def _gumbel_draw(row_ptr, vocab, pivot, inv_t, seed, salt, BLOCK: tl.constexpr):
    seed_h = seed.to(tl.uint32) * 0x27D4EB2F
    seed_h ^= seed_h >> 15
    seed_h *= 0x165667B1
    seed_h ^= seed_h >> 13
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    best_i = tl.zeros([BLOCK], tl.int32)
    for start in range(0, vocab, BLOCK):
        i = start + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + i, mask=i < vocab, other=float("-inf")).to(tl.float32)
        # Counter-based uniforms in (0, 1): the murmur3 finaliser over (hashed seed, offset),
        # a tenth of Philox's integer work and plenty for drawing tokens.
        h = (salt + i).to(tl.uint32) * 0x9E3779B1 ^ seed_h
        h ^= h >> 16
        h *= 0x85EBCA6B
        h ^= h >> 13
        h *= 0xC2B2AE35
        h ^= h >> 16
        u = (h >> 8).to(tl.float32) * (1.0 / 16777216.0) + (0.5 / 16777216.0)
        score = x * inv_t - tl.log(-tl.log(u))
        score = tl.where(x > pivot, score, float("-inf"))
        take = score > best
        best = tl.where(take, score, best)
        best_i = tl.where(take, i, best_i)
    m = tl.max(best, 0)
    return tl.min(tl.where(best == m, best_i, vocab), 0)


@triton.jit
def _mass_above(row_ptr, vocab, thresh, row_max, inv_t, BLOCK: tl.constexpr):
    """(count, softmax mass numerator) of tokens strictly above `thresh`."""
    cnt = tl.zeros([BLOCK], tl.int32)
    mass = tl.zeros([BLOCK], tl.float32)
    for start in range(0, vocab, BLOCK):
        i = start + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + i, mask=i < vocab, other=float("-inf")).to(tl.float32)
        above = x > thresh
        cnt += above.to(tl.int32)
        mass += tl.where(above, tl.exp((x - row_max) * inv_t), 0.0)
    return tl.sum(cnt, 0), tl.sum(mass, 0)


@triton.jit
def _sample_kernel(logits_ptr, out_ptr, temp_ptr, top_k_ptr, top_p_ptr, seed_ptr, logits_stride,
                   vocab, FILTER: tl.constexpr, MAX_ROUNDS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    row_ptr = logits_ptr + row.to(tl.int64) * logits_stride
    t = tl.load(temp_ptr + row)
    row_max, arg = _row_max(row_ptr, vocab, BLOCK)
    choice = arg
    if t > 0.0:
        inv_t = 1.0 / t
        seed = tl.load(seed_ptr + row)
        if FILTER:
            k = tl.load(top_k_ptr + row)
            k = tl.where(k <= 0, vocab, k)
            top_p = tl.load(top_p_ptr + row)
            _, z = _mass_above(row_ptr, vocab, float("-inf"), row_max, inv_t, BLOCK)
            pivot = float("-inf")
            rounds = 0
            done = False
            while (not done) and (rounds < MAX_ROUNDS):
                cand = _gumbel_draw(row_ptr, vocab, pivot, inv_t, seed, rounds * vocab, BLOCK)
                x = tl.load(row_ptr + cand).to(tl.float32)
                cnt, mass = _mass_above(row_ptr, vocab, x, row_max, inv_t, BLOCK)
                if (cnt < k) and (mass < top_p * z):
                    choice = cand
                    done = True
                else:
                    pivot = x
                rounds += 1
            # Out of rounds (only for pathological ties): the most likely token is always in the set.
        else:
            choice = _gumbel_draw(row_ptr, vocab, float("-inf"), inv_t, seed, 0, BLOCK)
    tl.store(out_ptr + row, choice.to(tl.int64))


def sample(logits: torch.Tensor, temperatures: torch.Tensor, top_k: torch.Tensor | None = None,
           top_p: torch.Tensor | None = None, seeds: torch.Tensor | None = None) -> torch.Tensor:
    """logits [B, V]; temperatures [B] (≤0 = greedy); top_k [B] int (≤0 = off); top_p [B] (1 = off);
    seeds [B] int (a fresh draw per step; random on the device when None) → token ids [B] int64."""
    batch, vocab = logits.shape
    assert logits.stride(-1) == 1
    dev = logits.device
    out = torch.empty(batch, dtype=torch.int64, device=dev)
    if batch == 0:
        return out
    filt = top_k is not None or top_p is not None
    if top_k is None:
        top_k = torch.zeros(batch, dtype=torch.int32, device=dev)
    if top_p is None:
        top_p = torch.ones(batch, dtype=torch.float32, device=dev)
    if seeds is None:
        seeds = torch.randint(0, 2**31 - 1, (batch,), dtype=torch.int64, device=dev)
    _sample_kernel[(batch,)](
        logits, out, temperatures.float(), top_k.to(torch.int32), top_p.float(), seeds,
        logits.stride(0), vocab, FILTER=filt, MAX_ROUNDS=MAX_ROUNDS,
        BLOCK=min(2048, triton.next_power_of_2(vocab)), num_warps=8)
    return out


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The all-greedy batch: one argmax kernel, no per-row parameters read."""
    return torch.argmax(logits, dim=-1)
