"""parallel.executor=ray on the CPU: two ranks as Ray actors (gloo) against one process.

No Ray cluster runs here, so each engine starts a local one (two CPUs, no dashboard) and its
shutdown ends it: every process the engine started — Ray's own and the ranks' actors — must be
gone afterwards. The ranks are the multiproc executor's worker loop, so tp=2 must give tp=1's
greedy tokens, and a rank whose actor is killed mid-request must fail the engine at once.
"""
from __future__ import annotations

import time

import importlib.util

import pytest
import torch

from atom import SamplingParams
from tests.engine.checkpoints import make_checkpoint
from tests.engine.rank_processes import descendants, killed_rank_fails_fast, tp_engine, tp_prompts

@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("qwen3", tmp_path_factory.mktemp("ray"))


@pytest.fixture
def ray_api():
    """Ray itself, imported here so that a GPU host without it (its image has none) still
    collects the GPU test below; the CPU tests need it (it is in the test extra: CI has it)."""
    import ray

    return ray


def _none_left(before: set[int], timeout_s: float = 20.0) -> set[int]:
    """The processes started since `before` that outlive `timeout_s` (none, once shut down)."""
    deadline = time.monotonic() + timeout_s
    while (left := descendants() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_each_rank_sees_its_nodes_gpus_and_takes_its_own():
    """Ray gives rank r the GPU places[r].gpus[0]; the rank sees its node's ranks' GPUs in rank
    order and takes cuda:<its place among them> (worker._join_group), which must be that GPU."""
    from atom.executor.ray_executor import Placement, node_layout

    places = [Placement("10.0.0.1", 1, 0, ["3"]), Placement("10.0.0.1", 2, 0, ["1"]),
              Placement("10.0.0.2", 3, 0, ["0"]), Placement("10.0.0.2", 4, 0, ["5"])]
    layout = node_layout(places, gpu=True)
    for rank, (local, visible) in enumerate(layout):
        assert visible.split(",")[local.index(rank)] == places[rank].gpus[0]
        assert all(places[r].ip == places[rank].ip for r in local)
    assert [v for _, v in layout] == ["3,1", "3,1", "0,5", "0,5"]
    assert node_layout(places, gpu=False)[2] == ([2, 3], None)


def test_two_ray_ranks_give_the_one_process_tokens_and_leave_no_process(ckpt, ray_api):
    from atom.executor.ray_executor import RayExecutor

    greedy = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    one = tp_engine(ckpt, 1).generate(tp_prompts(), greedy)
    before = descendants()
    engine = tp_engine(ckpt, 2, "parallel.executor=ray")
    try:
        ex = engine.core.executor
        assert isinstance(ex, RayExecutor) and len(set(ex.pids)) == 2
        assert set(ex.pids) <= descendants()  # the local cluster's actors, under this process
        two = engine.generate(tp_prompts(), greedy)
        assert [o["token_ids"] for o in two] == [o["token_ids"] for o in one]
        s = engine.stats()
        assert s.kv_blocks_free == s.kv_blocks_total
    finally:
        engine.shutdown()
    assert not ray_api.is_initialized()
    assert not _none_left(before), "a Ray or rank process outlived the engine's shutdown"


def test_a_killed_rank_actor_fails_the_engine_at_once_and_leaves_no_process(ckpt, ray_api):
    before = descendants()
    engine = tp_engine(ckpt, 2, "parallel.executor=ray")
    try:
        killed_rank_fails_fast(engine, lambda: engine.core.executor.pids[1])
    finally:
        engine.shutdown()
    assert not _none_left(before)


def test_a_program_that_runs_ray_keeps_it_and_loses_only_the_ranks(ckpt, ray_api):
    """A caller that already called ray.init (a job on a cluster) keeps its Ray: the engine
    places its ranks there and, shut down, kills their actors and frees their placement group,
    leaving the cluster as it found it."""
    from ray.util import placement_group_table

    ray_api.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    try:
        engine = tp_engine(ckpt, 2, "parallel.executor=ray")
        try:
            pids = set(engine.core.executor.pids)
            assert engine.generate(tp_prompts()[:1], SamplingParams(max_tokens=2))[0]["token_ids"]
        finally:
            engine.shutdown()
        assert ray_api.is_initialized()
        assert all(g["state"] == "REMOVED" for g in placement_group_table().values())

        def released() -> bool:  # Ray frees a removed group's CPUs and kills actors a beat later
            return not pids & descendants() and ray_api.available_resources().get("CPU") == 2

        deadline = time.monotonic() + 20
        while not released() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pids & descendants(), "a rank's actor outlived the engine"
        assert ray_api.available_resources().get("CPU") == 2, ray_api.available_resources()
    finally:
        ray_api.shutdown()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
def test_two_ray_ranks_on_two_gpus_give_the_one_gpu_tokens(ckpt):
    """NCCL between two actors that each see only their own GPU (Ray's CUDA_VISIBLE_DEVICES),
    fp32 so that no bf16 rounding of the partial sums can flip a greedy tie."""
    import atom

    from atom.executor.ray_executor import RayExecutor

    def engine(*extra: str):
        return atom.build_engine(atom.compose([
            "model=local", f"model.path={ckpt}", "model.dtype=float32", "load.progress_bar=false",
            "kv_cache.num_blocks=64", *extra]))

    greedy = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    one = engine().generate(tp_prompts(), greedy)
    before = descendants()
    two = engine("parallel.tensor_parallel_size=2", "parallel.executor=ray")
    try:
        assert isinstance(two.core.executor, RayExecutor)
        assert two.core.executor.device_type == "cuda"
        out = two.generate(tp_prompts(), greedy)
    finally:
        two.shutdown()
    assert [o["token_ids"] for o in out] == [o["token_ids"] for o in one]
    assert not _none_left(before)
