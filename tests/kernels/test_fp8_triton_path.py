"""fp8 weights through the triton backend end to end (interpreted on the CPU, fp32): prepared
as Fp8Weight, dispatched by fp8_linear.Fp8Kernels, the fused norm and SiLU paths falling back
for them, tokens equal to the torch backend's emulated fp8. Block fp8 quantises activations
inside the Triton block GEMM, where the interpreter's f32 → e4m3 conversion is wrong for some
values (ties away from zero, a dropped mantissa carry: test_fp8_quant.py), so interpreted it is
checked for its dispatch and a finished generation only; its tokens against the torch engine
are tests/quant/test_fp8_gpu.py's, on the GPU, with the kernels' other numerics."""
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
            assert (qkv.block_scale is not None) == (quant == "fp8_block")
        toks[kernels] = [o["token_ids"] for o in eng.generate(prompts, greedy)]
    assert [len(t) for t in toks["triton"]] == [6, 6, 6]
    if quant == "fp8":
        assert toks["triton"] == toks["torch"]
