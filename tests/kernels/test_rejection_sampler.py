"""The rejection sampler: the Triton kernel equals the torch reference on the same random
numbers, temperature 0 is exact match plus the bonus token, and the emitted tokens follow the
target's distribution whatever the draft distribution (chi-square over many draws)."""
from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from atom.kernels.triton.rejection_sampler import rejection_sample
from atom.runner.launched_step import accept_drafts
from atom.spec_decode.rejection import draw_randomness, rejection_sample_ref
from kernel_helpers import DEVICE, GPU


def _batch(counts: list[int], vocab: int, seed: int, device=DEVICE, with_q: bool = True):
    g = torch.Generator().manual_seed(seed)
    total = sum(counts)
    p = torch.softmax(torch.randn(total, vocab, generator=g) * 2, -1)
    q = torch.softmax(torch.randn(total, vocab, generator=g) * 2, -1) if with_q else None
    drafts = torch.multinomial(q if with_q else p, 1, generator=g).squeeze(1)
    uniforms = torch.rand(total, generator=g)
    noise = torch.empty(total, vocab).exponential_(generator=g)
    out = torch.randint(0, vocab, (total,), generator=g)
    starts = [sum(counts[:r]) for r in range(len(counts))]
    mv = lambda t: None if t is None else t.to(device)
    return [mv(t) for t in (p, q, drafts, uniforms, noise, out)] + [starts]


def _kernel(p, q, drafts, starts, counts, uniforms, noise, out):
    s = torch.tensor(starts, dtype=torch.int32, device=p.device)
    c = torch.tensor(counts, dtype=torch.int32, device=p.device)
    return rejection_sample(p, q, drafts, s, c, uniforms, noise, out.clone())


@pytest.mark.parametrize("with_q", [True, False], ids=["draft_probs", "one_hot_drafts"])
@pytest.mark.parametrize("vocab", [50, 1500], ids=["one_block", "several_blocks"])
def test_kernel_equals_the_reference_on_the_same_random_numbers(with_q, vocab):
    counts = [4, 1, 2, 4, 3, 4, 2]
    p, q, drafts, u, noise, out, starts = _batch(counts, vocab, seed=vocab, with_q=with_q)
    # Make some drafts stand: the target puts most of its mass on them at a few slots.
    p[[0, 1, 7, 8]] = 0.02 / vocab
    p[[0, 1, 7, 8], drafts[[0, 1, 7, 8]]] += 0.98
    ref = rejection_sample_ref(p.cpu(), None if q is None else q.cpu(), drafts.cpu(), starts,
                               counts, u.cpu(), noise.cpu(), out.cpu().clone())
    got = _kernel(p, q, drafts, starts, counts, u, noise, out)
    assert torch.equal(got.cpu(), ref)


def test_temperature_zero_is_exact_match_plus_the_bonus_token():
    """One-hot targets (greedy): draft j stands iff it is the target's argmax, the token after
    the run is the argmax there, whatever the draft distribution or the random numbers."""
    counts, vocab = [4, 4, 3, 1], 30
    p, q, drafts, u, noise, out, starts = _batch(counts, vocab, seed=3)
    greedy = torch.randint(0, vocab, (sum(counts),), generator=torch.Generator().manual_seed(9))
    greedy[[0, 1, 2, 4, 8]] = drafts.cpu()[[0, 1, 2, 4, 8]]  # full, partial and no agreement
    onehot = torch.nn.functional.one_hot(greedy, vocab).float().to(DEVICE)
    got = _kernel(onehot, q, drafts, starts, counts, u, noise, out).cpu()
    for start, m in zip(starts, counts):
        want = accept_drafts(greedy[start:start + m].tolist(), drafts[start:start + m - 1].tolist())
        assert accept_drafts(got[start:start + m].tolist(),
                             drafts[start:start + m - 1].tolist()) == want


def _emitted(p: torch.Tensor, q: torch.Tensor, n: int, seed: int) -> list[list[int]]:
    """n independent verify rows of 2 drafts drawn from q (every row the same p and q): the
    tokens each keeps, through the reference with randomness from `draw_randomness`."""
    g = torch.Generator().manual_seed(seed)
    counts = [3] * n
    P, Q = p.repeat(n, 1), q.repeat(n, 1)
    drafts = torch.multinomial(Q, 1, generator=g).squeeze(1)
    uniforms, noise = draw_randomness(counts, p.shape[1], [g] * n, torch.device("cpu"))
    out = torch.full((3 * n,), -1, dtype=torch.long)
    starts = list(range(0, 3 * n, 3))
    rejection_sample_ref(P, Q, drafts, starts, counts, uniforms, noise, out)
    return [accept_drafts(out[s:s + 3].tolist(), drafts[s:s + 2].tolist()) for s in starts]


def test_emitted_tokens_follow_the_target_distribution_not_the_drafts():
    """Vocabulary of 6, q far from p at every slot: the first kept token is distributed as p at
    slot 0 and, when the first draft stood, the second as p at slot 1 (this synthetic target
    does not condition on the prefix). Chi-square at the 0.1% level over 20,000 rows; the
    draft distribution fails the same test (so the test has power)."""
    p = torch.tensor([[0.40, 0.25, 0.15, 0.10, 0.06, 0.04],
                      [0.05, 0.05, 0.10, 0.20, 0.25, 0.35],
                      [0.30, 0.05, 0.30, 0.05, 0.25, 0.05]])
    q = torch.tensor([[0.02, 0.03, 0.05, 0.10, 0.30, 0.50],
                      [0.50, 0.30, 0.10, 0.05, 0.03, 0.02],
                      [1 / 6] * 6])
    n = 20_000
    kept = _emitted(p, q, n, seed=0)
    first = torch.bincount(torch.tensor([k[0] for k in kept]), minlength=6).double()
    assert chisquare(first.numpy(), (p[0] * n).double().numpy()).pvalue > 1e-3
    assert chisquare(first.numpy(), (q[0] * n).double().numpy()).pvalue < 1e-6
    after_accept = [k[1] for k in kept if len(k) >= 2]
    assert len(after_accept) > 2_000
    counts = torch.bincount(torch.tensor(after_accept), minlength=6).double()
    assert chisquare(counts.numpy(), (p[1] * len(after_accept)).double().numpy()).pvalue > 1e-3


def test_a_seeded_row_draws_the_same_tokens_in_any_batch():
    vocab = 40
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(3, vocab, generator=g), -1)
    q = torch.softmax(torch.randn(3, vocab, generator=g), -1)
    drafts = torch.tensor([1, 2, -1])

    def run(batch_rows: int) -> list[int]:
        gens = [torch.Generator().manual_seed(r + 100) for r in range(batch_rows)]
        gens[-1] = torch.Generator().manual_seed(42)  # the seeded request, last in its batch
        counts = [3] * batch_rows
        u, noise = draw_randomness(counts, vocab, gens, torch.device("cpu"))
        out = torch.zeros(3 * batch_rows, dtype=torch.long)
        rejection_sample_ref(p.repeat(batch_rows, 1), q.repeat(batch_rows, 1),
                             drafts.repeat(batch_rows), list(range(0, 3 * batch_rows, 3)),
                             counts, u, noise, out)
        return out[-3:].tolist()

    assert run(1) == run(4) == run(7)


@pytest.mark.parametrize("vocab", [129280])
@GPU[0]
@GPU[1]
def test_kernel_equals_the_reference_at_deepseek_vocab_on_the_gpu(vocab):
    counts = [4] * 8 + [2] * 8
    p, q, drafts, u, noise, out, starts = _batch(counts, vocab, seed=1)
    ref = rejection_sample_ref(p.cpu(), q.cpu(), drafts.cpu(), starts, counts, u.cpu(),
                               noise.cpu(), out.cpu().clone())
    assert torch.equal(_kernel(p, q, drafts, starts, counts, u, noise, out).cpu(), ref)
