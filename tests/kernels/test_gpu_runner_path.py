"""The runner's GPU path: triton backend end to end, CUDA-graph helpers, capture traces,
detailed annotation and the offline profiling example."""
import gzip
import json

import pytest
import torch

from atom.runner.annotation import attention_terms, forward_label
from atom.runner.cuda_graphs import capture_sizes, graphs_enabled

PROMPTS = [[1, 2, 3, 4] * 5, [5, 6, 7], list(range(10, 50))]


def _greedy(model: str, *overrides: str) -> list[list[int]]:
    from atom.config.compose import compose
    from atom.llm_engine import LLMEngine
    from atom.sampling_params import SamplingParams

    cfg = compose([f"model={model}", "load=dummy", "kv_cache.num_blocks=64", *overrides])
    eng = LLMEngine.from_config(cfg)
    outs = eng.generate(PROMPTS, SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))
    return [o["token_ids"] for o in outs]


@pytest.mark.parametrize("model", ["tiny_qwen3", "tiny_llama"])
def test_triton_backend_generates_what_torch_does(model):
    """fp32 on CPU (interpreted) must agree token for token; on the GPU (bf16) see gpu_bench."""
    if torch.cuda.is_available():
        pytest.skip("bf16 on the GPU: ties are analysed by benchmarks/gpu_bench.py greedy_equal")
    assert _greedy(model, "runtime.kernels=triton") == _greedy(model, "runtime.kernels=torch")


def test_attention_terms_and_labels():
    assert attention_terms([3, 1], [10, 7]) == (10, 37, 17)
    assert forward_label([1, 1], [5, 9], False) == "decode[bs=2 tok=2]"
    assert forward_label([4, 1], [4, 9], True) == "prefill[bs=2 tok=5 sqsq=17 sqsk=25 sk=13]"


def test_capture_sizes_cover_max_num_seqs():
    assert capture_sizes([1, 2, 4, 8, 16], 512) == [1, 2, 4, 8, 16]
    assert capture_sizes([1, 2, 4, 8, 16], 6) == [1, 2, 4, 6]
    assert capture_sizes([1, 2, 4], 4) == [1, 2, 4]


def test_graphs_only_where_they_can_run():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert graphs_enabled(False, 3, cuda, "triton")
    assert not graphs_enabled(True, 3, cuda, "triton")  # enforce_eager
    assert not graphs_enabled(False, 0, cuda, "triton")  # level 0
    assert not graphs_enabled(False, 3, cpu, "triton")
    assert not graphs_enabled(False, 3, cuda, "torch")  # the reference loops on host lists


def test_profile_offline_writes_a_trace(tmp_path):
    from atom.examples import profile_offline

    res = profile_offline.main(["--model", "tiny_qwen3", "--load-dummy", "xavier",
                                "--torch-profiler-dir", str(tmp_path), "--input-length", "12",
                                "--output-length", "3", "--bs", "2", "kv_cache.num_blocks=64",
                                "runtime.kernels=torch"])
    assert res["tokens"] == 6
    assert list((tmp_path / "rank_0").glob("*.json.gz"))


@pytest.mark.parametrize("model", ["tiny_qwen3", "tiny_llama"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_graph_replay_matches_eager(model):
    """Same kernels with and without graphs: identical greedy tokens, batch sizes padded."""
    graphs = _greedy(model, "runtime.kernels=triton", "runtime.cudagraph_capture_sizes=[1,2,4]")
    eager = _greedy(model, "runtime.kernels=triton", "runtime.enforce_eager=true")
    assert graphs == eager


@pytest.mark.parametrize("model", ["tiny_qwen3", "tiny_llama"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pdl_changes_no_token(model, monkeypatch):
    """Programmatic dependent launch only overlaps launches: CUDA graphs (level 2, where PDL is
    on) give the same greedy tokens with it and without it."""
    on = _greedy(model, "runtime.kernels=triton", "runtime.level=2",
                 "runtime.cudagraph_capture_sizes=[1,2,4]")
    monkeypatch.setenv("ATOM_TRITON_PDL", "0")
    off = _greedy(model, "runtime.kernels=triton", "runtime.level=2",
                  "runtime.cudagraph_capture_sizes=[1,2,4]")
    assert on == off


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_mark_trace_writes_one_trace_per_captured_size(tmp_path, monkeypatch):
    monkeypatch.setenv("ATOM_ENABLE_DETAILED_ANNOTATION", "1")
    _greedy("tiny_qwen3", "runtime.kernels=triton", "runtime.cudagraph_capture_sizes=[1,2]",
            f"profiler.torch_profiler_dir={tmp_path}", "profiler.mark_trace=true")
    files = sorted(p.name for p in (tmp_path / "capture_traces").iterdir())
    assert files == ["bs_1_q_1_rank0.json.gz", "bs_2_q_1_rank0.json.gz"]
    trace = json.loads(gzip.open(tmp_path / "capture_traces" / files[0]).read())
    names = {e.get("name", "") for e in trace["traceEvents"]}
    assert any(n.startswith("capture[bs=1") for n in names)
    assert any(e.get("cat") == "kernel" for e in trace["traceEvents"]), "warm-up kernels traced"
