"""GPU sampler: greedy rows are argmax; random rows follow softmax(logits/T) truncated by
top-k/top-p, checked as a distribution over many seeded draws and as a hard support bound."""
import pytest
import torch

from atom.kernels.triton.sampling import sample
from kernel_helpers import DEVICE, GPU

V = 12


def _target(logits: torch.Tensor, t: float, k: int, p: float) -> torch.Tensor:
    """The truncated, renormalised distribution, computed the slow sorted way."""
    probs = torch.softmax(logits.double() / t, -1)
    order = probs.argsort(descending=True)
    sp = probs[order]
    before = sp.cumsum(0) - sp
    keep_sorted = (before < p) & (torch.arange(len(sp), device=sp.device) < (k if k > 0 else len(sp)))
    keep = torch.zeros_like(probs, dtype=torch.bool)
    keep[order[keep_sorted]] = True
    out = torch.where(keep, probs, 0.0)
    return out / out.sum()


def _draw(logits_row, n, t, k, p, dtype=torch.float32):
    logits = logits_row.to(dtype).expand(n, -1).contiguous()
    temps = torch.full((n,), t, device=DEVICE)
    top_k = torch.full((n,), k, dtype=torch.int32, device=DEVICE) if k is not None else None
    top_p = torch.full((n,), p, device=DEVICE) if p is not None else None
    seeds = torch.arange(n, device=DEVICE) * 7919 + 13
    return sample(logits, temps, top_k, top_p, seeds)


def test_greedy_rows_are_argmax_and_mixed_batches_work():
    logits = torch.randn(6, 50, device=DEVICE)
    temps = torch.tensor([0.0, 1.0, 0.0, 0.7, 0.0, 1.0], device=DEVICE)
    out = sample(logits, temps, torch.tensor([0, 1, 0, 0, 0, 0], device=DEVICE), None)
    am = logits.argmax(-1)
    assert torch.equal(out[temps == 0], am[temps == 0])
    assert out[1] == am[1], "top_k=1 is greedy"
    assert ((out >= 0) & (out < 50)).all()


def test_chunked_draws_equal_the_one_pass_draws():
    """Rows without top-k/top-p are drawn chunk by chunk (three chunks of this vocabulary) and
    picked across chunks; top_k=0/top_p=1 take the one-program-per-row path, whose first draw is
    the same race over the whole row and always accepted: the same tokens, greedy rows too."""
    from atom.kernels.triton.sampling import CHUNK

    torch.manual_seed(0)
    batch, vocab = 5, 2 * CHUNK + 300
    logits = 4 * torch.randn(batch, vocab, device=DEVICE)
    logits[1, CHUNK + 7] = logits[1, 2 * CHUNK + 1] = 100.0  # a tie across chunks: lowest index
    temps = torch.tensor([0.9, 0.0, 0.6, 1.0, 0.0], device=DEVICE)
    seeds = torch.tensor([3, 5, 7, 11, 13], device=DEVICE)
    chunked = sample(logits, temps, None, None, seeds)
    one_pass = sample(logits, temps, torch.zeros(batch, dtype=torch.int32, device=DEVICE),
                      torch.ones(batch, device=DEVICE), seeds)
    assert torch.equal(chunked, one_pass)
    assert chunked[1] == CHUNK + 7 and chunked[4] == logits[4].argmax()
    assert len(set(sample(logits, temps, None, None, seeds + s)[0].item() for s in range(8))) > 1


@pytest.mark.parametrize("t,k,p", [
    pytest.param(1.0, None, None, id="temperature"),
    pytest.param(1.3, 5, 0.8, id="top-k-and-top-p"),
    pytest.param(0.7, 4, None, id="top-k", marks=GPU),
    pytest.param(1.0, None, 0.6, id="top-p", marks=GPU),
])
def test_distribution_matches_truncated_softmax(t, k, p):
    """Interpreted draws cost ~30 ms each, so the CPU run is a coarse check (300 draws, 4 sigma);
    the GPU run takes 200k draws and holds each frequency to ±0.005."""
    torch.manual_seed(0)
    n = 300 if DEVICE.type == "cpu" else 200_000
    row = torch.randn(V, device=DEVICE) * 1.5
    draws = _draw(row, n, t, k if k is not None else 0, p if p is not None else 1.0)
    freq = torch.bincount(draws, minlength=V).double() / n
    target = _target(row, t, k or 0, p or 1.0)
    assert (freq[target == 0] == 0).all(), "drew a token outside the top-k/top-p set"
    assert (freq - target).abs().max() < (0.12 if n < 10_000 else 0.005)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("batch", [1, 256])
@pytest.mark.gpu
@pytest.mark.skipif(DEVICE.type != "cuda", reason="needs a CUDA GPU")
def test_real_vocab_support_and_greedy(batch, dtype):
    logits = (3 * torch.randn(batch, 151936, device=DEVICE)).to(dtype)
    temps = torch.full((batch,), 0.8, device=DEVICE)
    temps[::4] = 0
    top_k = torch.full((batch,), 50, dtype=torch.int32, device=DEVICE)
    top_p = torch.full((batch,), 0.9, device=DEVICE)
    out = sample(logits, temps, top_k, top_p)
    assert torch.equal(out[temps == 0], logits[temps == 0].float().argmax(-1))
    rank = (logits.float() > logits.float().gather(1, out[:, None])).sum(1)
    assert (rank < 50).all()


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE.type != "cuda", reason="needs a CUDA GPU")
def test_layer_sampler_reads_bf16_logits_as_their_fp32_copy_would():
    """atom.layers.sampler hands bf16 logits to the kernel without an fp32 copy: the same seeded
    draws as from the copy, token for token."""
    from atom.layers.sampler import SamplingBatch, sample as layer_sample

    logits = (3 * torch.randn(64, 128256, device=DEVICE)).to(torch.bfloat16)
    temps = torch.full((64,), 0.6, device=DEVICE)
    temps[::3] = 0

    def draw(x):
        gens = [torch.Generator(device=DEVICE).manual_seed(i) for i in range(64)]
        return layer_sample(x, SamplingBatch(temps, None, None, gens, all_greedy=False))
    assert torch.equal(draw(logits), draw(logits.float()))
