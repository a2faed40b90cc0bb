"""fp8 weights sharded over two ranks (worker processes on gloo, CPU) give the one-process
tokens: column shards by rows, row-parallel shards by input columns, block scales with them.

Formats whose activation scales do not depend on the shard: a static per-tensor scale, and
per-128-group scales with shards on group boundaries. (A dynamic per-token scale is each
rank's own amax over its input columns under row parallelism, as in every TP engine: not the
one-process rounding.) ModelOpt's checkpoint runs with an fp8 KV cache: each rank reads the same
per-layer scalar k_scale / v_scale for its share of the heads."""
from __future__ import annotations

import pytest
import torch

from atom import SamplingParams
from tests.engine.checkpoints import local_engine
from tests.quant.fp8_checkpoints import write_fp8_checkpoint

# 256-row q | k | v and gate | up parts: each rank's share is one whole 128-row block.
BLOCK_TP2 = dict(num_attention_heads=8, num_key_value_heads=8, intermediate_size=256)


@pytest.mark.parametrize("fmt,shape,kv", [("ct_tensor_static", {}, "bf16"),
                                          ("fp8_block", BLOCK_TP2, "bf16"),
                                          ("modelopt_tensor_static", {}, "fp8")])
def test_two_ranks_give_the_one_process_tokens(tmp_path, fmt, shape, kv):
    ckpt = write_fp8_checkpoint("qwen3", fmt, tmp_path, **shape)
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(3, 256, (k,), generator=g).tolist() for k in (5, 31, 70)]
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    common = ("kv_cache.num_blocks=64", "scheduler.max_num_batched_tokens=48",
              f"kv_cache.dtype={kv}")
    one = local_engine(ckpt.path, *common).generate(prompts, greedy)
    tp = local_engine(ckpt.path, *common, "parallel.tensor_parallel_size=2")
    try:
        two = tp.generate(prompts, greedy)
    finally:
        tp.shutdown()
    assert [o["token_ids"] for o in two] == [o["token_ids"] for o in one]
