"""The MTP layer's logits, as the engine's drafter computes them inside a step, against the
formula computed with transformers' own DeepSeek-V3 parts.

Oracle: the target's final hidden states from transformers' DeepseekV3Model; the next-n
layer's decoder block is transformers' DeepseekV3DecoderLayer holding the checkpoint's
`model.layers.{N}.*` tensors (loaded by from_pretrained with num_hidden_layers = N + 1); enorm,
hnorm, eh_proj and shared_head are the formula in plain torch on the checkpoint's tensors:
y = block(eh_proj(cat(enorm(embed(t_{i+1})), hnorm(h_i)))), logits = head(norm(y)). Depth 2
appends one position (the first draft, with y as its hidden state) and runs the block causally
over both depths' inputs, which is what the drafter's second pass reads from its KV cache.
"""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from tests.engine.checkpoints import add_mtp_layer, local_engine, make_checkpoint


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


@pytest.fixture(scope="module", params=["deepseek_v3_q_lora", "deepseek_v3_q_full"])
def ckpt(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"mtp_oracle_{request.param}")
    return add_mtp_layer(make_checkpoint(request.param, root))


def _oracle(ckpt, tmp_path, prompt: list[int],
            depth2_token_of) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits at every prompt position [T, V], depth-2 logits at position T [V]) from the
    formula; depth2_token_of(first logits) names the token the depth-2 input embeds."""
    from transformers import AutoModelForCausalLM

    cfg = json.loads((ckpt / "config.json").read_text())
    n, eps = cfg["num_hidden_layers"], cfg["rms_norm_eps"]
    wide = tmp_path / "with_block"
    shutil.copytree(ckpt, wide)
    (wide / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": n + 1}))
    target = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    block_model = AutoModelForCausalLM.from_pretrained(wide, dtype=torch.float32).eval()
    block = block_model.model.layers[n]
    t = load_file(str(ckpt / "model.safetensors"))
    w = lambda name: t[f"model.layers.{n}.{name}"].float()  # noqa: E731
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = target(ids)
        h = target.model(ids).last_hidden_state[0]
        nxt = prompt[1:] + [int(out.logits[0, -1].argmax())]
        emb = target.model.embed_tokens(torch.tensor(nxt))

        def run_block(x: torch.Tensor) -> torch.Tensor:
            T = x.shape[0]
            pos = torch.arange(T).unsqueeze(0)
            mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
            pe = block_model.model.rotary_emb(x[None], pos)
            return block(x[None], attention_mask=mask, position_ids=pos,
                         position_embeddings=pe)[0]

        def logits(y: torch.Tensor) -> torch.Tensor:
            return _rms(y, w("shared_head.norm.weight"), eps) @ w("shared_head.head.weight").T

        def project(e: torch.Tensor, hid: torch.Tensor) -> torch.Tensor:
            cat = torch.cat([_rms(e, w("enorm.weight"), eps),
                             _rms(hid, w("hnorm.weight"), eps)], -1)
            return cat @ w("eh_proj.weight").T

        x = project(emb, h)
        y = run_block(x)
        first = logits(y)
        d0 = depth2_token_of(first[-1])
        x2 = project(target.model.embed_tokens(torch.tensor([d0])), y[-1:])
        second = logits(run_block(torch.cat([x, x2]))[-1])
    return first, second


@pytest.mark.parametrize("prompt_len,chunk", [(1, None), (9, None), (21, None), (21, 8)],
                         ids=["1", "9", "21", "21_in_chunks_of_8"])
def test_the_drafters_logits_are_the_formulas_at_both_depths(ckpt, tmp_path, prompt_len, chunk):
    """Prefill of one prompt (block size 4, so the layer's KV spans several pages; in chunks,
    whose last positions read the prompt's next token): the first depth at every prompt
    position, then the second depth at the position after the prompt."""
    prompt = torch.randint(3, 256, (prompt_len,), generator=torch.Generator().manual_seed(
        prompt_len)).tolist()
    chunked = [f"scheduler.max_num_batched_tokens={chunk}"] if chunk else []
    engine = local_engine(ckpt, "kv_cache.block_size=4", "specdecode=mtp",
                          "specdecode.num_speculative_tokens=2", *chunked)
    layer = engine.core.executor.runner.drafter.layer
    seen: list[torch.Tensor] = []
    run = layer.draft_hidden
    layer.draft_hidden = lambda *a: seen.append(run(*a)) or seen[-1]
    from atom import SamplingParams

    engine.generate([prompt], SamplingParams(temperature=0, max_tokens=1, ignore_eos=True))
    assert len(seen) == (-(-prompt_len // chunk) if chunk else 1) + 1
    with torch.no_grad():
        got_first = layer.compute_logits(torch.cat(seen[:-1]))
        got_second = layer.compute_logits(seen[-1])[0]
    want_first, want_second = _oracle(ckpt, tmp_path, prompt, lambda lg: int(lg.argmax()))
    torch.testing.assert_close(got_first, want_first, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_second, want_second, rtol=1e-4, atol=1e-4)
