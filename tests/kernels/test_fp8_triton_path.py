"""fp8 weights through the triton backend end to end (interpreted on the CPU, fp32): prepared
as Fp8Weight, dispatched by fp8_linear.Fp8Kernels, the fused norm and SiLU paths falling back
for them, tokens equal to the torch backend's emulated fp8. The GPU kernels' numerics are
tests/quant/test_fp8_gpu.py."""
import pytest
import torch

from atom.kernels.fp8_weight import Fp8Weight


def _engine(model: str, *overrides: str):
    from atom.config.compose import compose
    from atom.llm_engine import LLMEngine

    return LLMEngine.from_config(compose([f"model={model}", "load=dummy", "kv_cache.num_blocks=64",
                                          "load.progress_bar=false", *overrides]))


@pytest.mark.parametrize("quant", ["fp8", "fp8_block"])
def test_triton_backend_runs_fp8_weights_as_the_torch_backend_does(quant):
    if torch.cuda.is_available():
        pytest.skip("on the GPU: tests/quant/test_fp8_gpu.py")
    from atom.sampling_params import SamplingParams

    prompts = [[1, 2, 3, 4] * 5, [5, 6, 7], list(range(10, 50))]
    greedy = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    toks = {}
    for kernels in ("triton", "torch"):
        eng = _engine("tiny_llama", f"quant={quant}", f"runtime.kernels={kernels}")
        if kernels == "triton":
            qkv = eng.core.executor.runner.model.model.layers[0].self_attn.qkv_proj.weight
            assert isinstance(qkv, Fp8Weight)
        toks[kernels] = [o["token_ids"] for o in eng.generate(prompts, greedy)]
    assert toks["triton"] == toks["torch"]
