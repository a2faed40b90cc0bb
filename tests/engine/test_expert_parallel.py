"""Expert parallelism on the CPU: two gloo ranks, attention tensor-parallel, each MoE layer's
experts split whole between the ranks (parallel.enable_expert_parallel with tp=2).

The oracle is the one-process engine: ep=2 must give its greedy tokens for every MoE family
(Qwen3-MoE from per-expert and from fused checkpoint tensors, DeepSeek-V3, GLM-4.5, MiniMax-M2),
on the torch experts loop and on the fused Triton kernel (interpreted).
A rank built as the worker builds it must hold only its experts, equal to the checkpoint's, and
spend no FLOP on a pair routed to the other rank's experts. Validation names the field before any
weight is read.
"""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
import torch

from tests.engine.checkpoints import local_engine, make_checkpoint
from tests.engine.rank_processes import greedy_tokens

FAMILIES = ["qwen3_moe", "deepseek_v3_q_lora", "glm4_moe", "minimax_m2"]


def _num_experts(path: Path) -> int:
    c = json.loads((path / "config.json").read_text())
    return c.get("num_experts") or c.get("n_routed_experts") or c["num_local_experts"]


def _fused_copy(src: Path, dst: Path) -> Path:
    """The same checkpoint with each layer's experts as two stacked tensors, the fused layout
    the loader routes (`experts.gate_up_proj` [E, 2I, H]: gate rows then up rows;
    `experts.down_proj` [E, H, I])."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(src / "model.safetensors"))
    out, experts = {}, {}
    for name, t in tensors.items():
        if ".experts." not in name:
            out[name] = t
            continue
        prefix, rest = name.split(".experts.")
        e, part, _ = rest.split(".")
        experts.setdefault(prefix, {}).setdefault(int(e), {})[part] = t
    for prefix, per in experts.items():
        order = sorted(per)
        out[f"{prefix}.experts.gate_up_proj"] = torch.stack(
            [torch.cat([per[e]["gate_proj"], per[e]["up_proj"]]) for e in order])
        out[f"{prefix}.experts.down_proj"] = torch.stack([per[e]["down_proj"] for e in order])
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "model.safetensors":
            (dst / f.name).write_bytes(f.read_bytes())
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ep")
    paths = {arch: make_checkpoint(arch, root) for arch in FAMILIES}
    paths["qwen3_moe_fused"] = _fused_copy(paths["qwen3_moe"], root / "qwen3_moe_fused")
    return paths


def _tokens(path: Path, tp: int, *extra: str, max_tokens: int = 7) -> list[list[int]]:
    return _greedy(local_engine(path, "kv_cache.num_blocks=32",
                                "scheduler.max_num_batched_tokens=32",
                                f"parallel.tensor_parallel_size={tp}", *extra), max_tokens)


def _greedy(engine, max_tokens: int = 7) -> list[list[int]]:
    """The engine's greedy tokens for three short prompts, then the engine shut down."""
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 256, (k,), generator=g).tolist() for k in (6, 8, 13)]
    return greedy_tokens(engine, prompts, max_tokens)


@pytest.mark.parametrize("arch", FAMILIES + ["qwen3_moe_fused"])
def test_ep2_gives_the_one_process_tokens(ckpts, arch, capfd):
    path = ckpts[arch]
    one = _tokens(path, 1)
    ep = _tokens(path, 2, "parallel.enable_expert_parallel=true")
    assert ep == one
    # The ranks' start-up lines: the engine's ranks did split the experts, whole.
    err = capfd.readouterr().err
    e = _num_experts(path)
    c = json.loads((path / "config.json").read_text())
    whole = [e // 2, 2 * (c.get("moe_intermediate_size") or c["intermediate_size"]),
             c["hidden_size"]]
    for rank in (0, 1):
        held = f"experts {rank * e // 2}..{(rank + 1) * e // 2 - 1} of {e} (w13 {whole}"
        assert f"expert parallel rank {rank} of 2: {held}" in err


def test_ep2_on_the_fused_triton_kernel_gives_the_one_process_tokens(ckpts, monkeypatch):
    """The fused-MoE Triton path (interpreted on the CPU in both ranks) skips the pairs of the
    other rank's experts and adds nothing for them: ep=2 on it gives the one-process tokens.
    Three tokens: the prompts' prefill step and two decode steps (every interpreted step costs
    the ranks about a second)."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter runs CPU tensors; on a GPU tests/kernels checks the kernel")
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read by each rank's process at its import
    one = _tokens(ckpts["qwen3_moe"], 1, max_tokens=3)
    ep = _tokens(ckpts["qwen3_moe"], 2, "parallel.enable_expert_parallel=true",
                 "runtime.kernels=triton", max_tokens=3)
    assert ep == one


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_ep2_on_two_gpus_gives_the_one_gpu_tokens(ckpts):
    """NCCL and the fused kernel on the GPU, fp32 so that no bf16 rounding of the two partial
    sums can flip a greedy tie."""
    import atom

    def tokens(*extra: str) -> list[list[int]]:
        return _greedy(atom.build_engine(atom.compose([
            "model=local", f"model.path={ckpts['qwen3_moe']}", "model.dtype=float32",
            "runtime.kernels=triton", "load.progress_bar=false", "kv_cache.num_blocks=64",
            *extra])))
    assert tokens("parallel.tensor_parallel_size=2", "parallel.enable_expert_parallel=true") \
        == tokens()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, path: str, out_dir: str) -> None:
    """One expert-parallel rank, built as an executor worker builds it: join the group, take
    the ParallelState of the process, build the runner. Saves what it holds, which expert
    tensors of the checkpoint the loader reads, and the FLOPs of an MoE layer whose pairs are
    all routed to rank 1's experts."""
    import torch.distributed as dist
    from torch.utils.flop_counter import FlopCounterMode

    import atom
    from safetensors import safe_open

    from atom.layers.moe import FusedMoE
    from atom.layers.parallel_state import ParallelState
    from atom.loader.weights import weight_skip
    from atom.loader.hf_config import load_hf_config
    from atom.runner_builder import build_runner

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    try:
        cfg = atom.compose(["model=local", f"model.path={path}", "runtime=cpu",
                            "load.progress_bar=false", "kv_cache.num_blocks=8",
                            "parallel.tensor_parallel_size=2",
                            "parallel.enable_expert_parallel=true"])
        runner = build_runner(cfg, load_hf_config(cfg),
                              ParallelState.of_process(cfg.parallel.enable_expert_parallel))
        skip = weight_skip(runner.model)
        with safe_open(f"{path}/model.safetensors", framework="pt") as f:
            read = sorted(n for n in f.keys() if ".experts." in n and not skip(n))
        layers = {n: m for n, m in runner.model.named_modules() if isinstance(m, FusedMoE)}
        held = {n: (m.first_expert, m.w13.detach().clone(), m.w2.detach().clone())
                for n, m in layers.items()}
        moe = next(iter(layers.values()))
        t, k = 5, 2
        x = torch.randn(t, moe.w13.shape[2], generator=torch.Generator().manual_seed(0))
        theirs = torch.arange(moe.num_experts // 2, moe.num_experts).repeat(t, 1)[:, :k]
        with FlopCounterMode(display=False) as flops:
            moe(x, torch.full((t, k), 0.5), theirs)
        torch.save({"held": held, "flops": flops.get_total_flops(), "read": read},
                   f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _run_two_ranks(path: Path, out_dir: Path, timeout_s: float = 180.0) -> list[dict]:
    import torch.multiprocessing as mp

    ctx = mp.start_processes(_rank, args=(_free_port(), str(path), str(out_dir)), nprocs=2,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=1.0):
            assert time.monotonic() < deadline, "the ranks did not finish"
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
    return [torch.load(out_dir / f"rank{r}.pt") for r in (0, 1)]


@pytest.mark.parametrize("layout", ["qwen3_moe", "qwen3_moe_fused"])
def test_each_rank_reads_and_holds_only_its_experts_and_computes_only_their_pairs(
        ckpts, layout, tmp_path):
    from safetensors.torch import load_file

    ranks = _run_two_ranks(ckpts[layout], tmp_path)
    ckpt = load_file(str(ckpts["qwen3_moe"] / "model.safetensors"))  # per-expert tensors
    cfg = json.loads((ckpts["qwen3_moe"] / "config.json").read_text())
    e, hidden, inter = _num_experts(ckpts["qwen3_moe"]), cfg["hidden_size"], \
        cfg["moe_intermediate_size"]
    for rank, got in enumerate(ranks):
        assert got["held"], "no MoE layer built"
        if layout == "qwen3_moe":  # per-expert tensors: another rank's are never read
            assert got["read"] == sorted(
                f"{name}.{first + j}.{p}.weight" for name, (first, _, _) in got["held"].items()
                for j in range(e // 2) for p in ("gate_proj", "up_proj", "down_proj"))
        else:  # one tensor holds every expert: read whole, the rank's slice kept
            assert got["read"] == sorted(f"{name}.{p}" for name in got["held"]
                                         for p in ("gate_up_proj", "down_proj"))
        for name, (first, w13, w2) in got["held"].items():
            assert first == rank * e // 2
            assert w13.shape == (e // 2, 2 * inter, hidden)  # half the experts, each whole
            assert w2.shape == (e // 2, hidden, inter)
            for j in range(e // 2):
                w = {p: ckpt[f"{name}.{first + j}.{p}.weight"]
                     for p in ("gate_proj", "up_proj", "down_proj")}
                assert torch.equal(w13[j], torch.cat([w["gate_proj"], w["up_proj"]]))
                assert torch.equal(w2[j], w["down_proj"])
    pairs = 5 * 2  # every (token, slot) pair routed to rank 1's experts
    assert ranks[0]["flops"] == 0
    assert ranks[1]["flops"] == pairs * (2 * 2 * inter * hidden + 2 * hidden * inter)


def _config_only(root: Path, **shape) -> Path:
    """A model folder with a config.json and no weights: validation reads nothing else."""
    import transformers

    from tests.engine.checkpoints import ALL_ARCHS, COMMON

    cls_name, extra = ALL_ARCHS["qwen3_moe"]
    root.mkdir()
    getattr(transformers, cls_name)(**{**COMMON, **extra, **shape},
                                    architectures=["Qwen3MoeForCausalLM"]).save_pretrained(root)
    return root


def _errors(*overrides: str) -> list[str]:
    import atom
    from atom.config.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        atom.compose(["runtime=cpu", *overrides])
    return [f"{x.field}: {x.rule}" for x in e.value.errors]


def test_experts_that_the_ranks_do_not_divide_are_refused_naming_the_field(tmp_path):
    path = _config_only(tmp_path / "six", num_experts=6)
    errs = _errors("model=local", f"model.path={path}", "parallel.tensor_parallel_size=4",
                   "parallel.enable_expert_parallel=true")
    assert errs == ["parallel.enable_expert_parallel: the 6 routed experts split over "
                    "tensor_parallel_size=4 ranks: it must divide them"]
    import atom

    atom.compose(["runtime=cpu", "model=local", f"model.path={path}",
                  "parallel.tensor_parallel_size=2", "parallel.enable_expert_parallel=true"])


def test_expert_parallel_on_a_dense_model_is_refused_with_every_other_broken_rule():
    errs = _errors("model=tiny_llama", "load=dummy", "parallel.tensor_parallel_size=3",
                   "parallel.enable_expert_parallel=true")
    assert "parallel.enable_expert_parallel: LlamaForCausalLM has no routed experts to split" \
        in errs
    assert any(x.startswith("parallel.tensor_parallel_size: must divide the number of "
                            "attention heads") for x in errs)


def test_expert_parallel_over_data_parallel_replicas_is_refused_before_weights(ckpts,
                                                                               monkeypatch):
    import atom
    from atom.config.errors import ConfigError
    from atom.model_engine import engine_core

    monkeypatch.setattr(engine_core.EngineCore, "__init__",
                        lambda *a, **k: pytest.fail("the core (and its weights) was built"))
    cfg = atom.compose(["model=local", f"model.path={ckpts['qwen3_moe']}", "runtime=cpu",
                        "parallel.data_parallel_size=2", "parallel.enable_expert_parallel=true"])
    with pytest.raises(ConfigError, match="parallel.enable_expert_parallel=True: experts split "
                                          "over one replica's tensor-parallel ranks"):
        atom.build_engine(cfg)


def test_a_gguf_header_gives_its_expert_count(tmp_path):
    """Validation reads a GGUF's experts from its header alone (no tensor in the file)."""
    import gguf

    from atom.config.model_facts import _shape_from_gguf

    path = tmp_path / "moe.gguf"
    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_expert_count(6)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    shape = _shape_from_gguf(path)
    assert (shape.architecture, shape.num_experts) == ("Qwen3MoeForCausalLM", 6)


@pytest.mark.parametrize("state", [dict(tp_size=2, tp_rank=0, ep_size=2, ep_rank=1),
                                   dict(tp_size=4, tp_rank=1, ep_size=2, ep_rank=1)])
def test_experts_split_over_the_tensor_parallel_ranks_or_not_at_all(state):
    from atom.layers.parallel_state import ParallelState

    with pytest.raises(ValueError, match="experts shard over the tp ranks"):
        ParallelState(**state)
    assert ParallelState(tp_size=4, tp_rank=3, ep_size=4, ep_rank=3).ep_rank == 3
