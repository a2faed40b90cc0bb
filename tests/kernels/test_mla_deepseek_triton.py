"""DeepSeek-V3 on the triton kernel backend (MLA decode, prefill and rope-store kernels; on a
CPU through the interpreter) against transformers' modeling_deepseek_v3 on a tiny random
checkpoint: greedy tokens and every decoded token's log-probability, over steps that mix decodes
(absorbed path) with prefill chunks over cached prefixes (up-projected path)."""
from __future__ import annotations

import pytest
import torch

from tests.engine.checkpoints import make_checkpoint
from tests.engine.test_oracle_deepseek import _engine, _hf_greedy, _prompts, _run

MAX_NEW = 6


def test_greedy_tokens_and_logprobs_match_transformers(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("the CPU engine (fp32, interpreted); the GPU path is the test below")
    from transformers import AutoModelForCausalLM

    path = make_checkpoint("deepseek_v3_q_lora", tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = _prompts(lengths=(3, 17, 40, 90))  # 90 > the 64-token chunk: a cached prefix
    expected, expected_lp = _hf_greedy(hf, prompts, MAX_NEW)
    got, got_lp = _run(_engine(path, "runtime.kernels=triton"), prompts, MAX_NEW)
    assert got == expected
    for ours, ref in zip(got_lp, expected_lp):
        assert ours == pytest.approx(ref, abs=1e-4)


@pytest.mark.gpu
def test_eager_gpu_engine_matches_transformers(tmp_path):
    """The GPU engine on the triton backend in fp32, eager: the MoE layer's expert loop reads
    its counts on the host (no CUDA graph until a fused-MoE kernel lands)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import atom
    from transformers import AutoModelForCausalLM

    path = make_checkpoint("deepseek_v3_q_lora", tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = _prompts(lengths=(3, 17, 40, 90))
    expected, expected_lp = _hf_greedy(hf, prompts, MAX_NEW)
    engine = atom.build_engine(atom.compose(
        ["model=local", f"model.path={path}", "load.progress_bar=false", "model.dtype=float32",
         "runtime.kernels=triton", "runtime.enforce_eager=true", "kv_cache.num_blocks=64",
         "scheduler.max_num_batched_tokens=64", "kv_cache.block_size=16"]))
    got, got_lp = _run(engine, prompts, MAX_NEW)
    assert got == expected
    for ours, ref in zip(got_lp, expected_lp):
        assert ours == pytest.approx(ref, abs=1e-3)


def test_verify_steps_on_triton_keep_greedy_output(tmp_path):
    """Multi-token steps (each decoding sequence feeds its last token and 3 drafts) take the
    absorbed path with several causal queries a sequence: the greedy output is the
    one-token-per-step output of the torch reference."""
    if torch.cuda.is_available():
        pytest.skip("the CPU engine (fp32, interpreted)")
    from atom import SamplingParams
    from tests.engine.test_multi_token_steps import MAX_TOKENS, SYNC, _run_with_drafts

    path = make_checkpoint("deepseek_v3_q_lora", tmp_path)
    prompts = _prompts(lengths=(6, 13, 9))
    greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    reference = [o["token_ids"] for o in _engine(path).generate(prompts, greedy)]
    engine = _engine(path, "runtime.kernels=triton", "kv_cache.block_size=4", *SYNC)
    # one right draft, then two wrong ones: every step accepts one and rejects the rest
    guess = lambda out, ref: ref[len(out):len(out) + 1] + [  # noqa: E731
        (t + 1) % 256 for t in ref[len(out) + 1:len(out) + 3]]
    tokens, _ = _run_with_drafts(engine, prompts, reference, guess)
    assert tokens == reference


@pytest.mark.gpu
def test_fp8_latent_cache_matches_the_torch_reference(tmp_path):
    """kv_cache=fp8 on the GPU engine (fp32 activations, eager): the triton kernels quantise,
    store and read the e4m3 latents as the torch reference does (the same greedy tokens). Not
    on the CPU: the interpreter's f32 → e4m3 conversion drops mantissa carries (32 can come out
    as 16), so its caches differ from the reference's and a near-tie flips a token."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import atom

    path = make_checkpoint("deepseek_v3_q_lora", tmp_path)
    prompts = _prompts(lengths=(3, 17, 40, 90))

    def run(kernels: str):
        return _run(atom.build_engine(atom.compose(
            ["model=local", f"model.path={path}", "load.progress_bar=false", "model.dtype=float32",
             "kv_cache=fp8", f"runtime.kernels={kernels}", "runtime.enforce_eager=true",
             "kv_cache.num_blocks=64", "scheduler.max_num_batched_tokens=64",
             "kv_cache.block_size=16"])), prompts, MAX_NEW)

    (want, want_lp), (got, got_lp) = run("torch"), run("triton")
    assert got == want
    for ours, ref in zip(got_lp, want_lp):
        assert ours == pytest.approx(ref, abs=1e-3)
