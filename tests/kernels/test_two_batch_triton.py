"""Two-batch overlap on the triton backend: interpreted on CPU (fp32), and on a GPU with the second
half on a side stream; greedy tokens equal the unsplit run's either way."""
import pytest
import torch

from tests.engine.checkpoints import make_checkpoint
from tests.engine.test_two_batch_overlap import staggered_greedy


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("llama", tmp_path_factory.mktemp("tbo_triton"))


def _equal(ckpt, *extra: str) -> None:
    plain, _ = staggered_greedy(ckpt, False, "runtime.kernels=triton", "model.dtype=float32", *extra)
    halves, split = staggered_greedy(ckpt, True, "runtime.kernels=triton", "model.dtype=float32", *extra)
    assert split > 0, "no step ran as two halves"
    assert halves == plain


def test_tokens_equal_with_and_without_interpreted(ckpt):
    if torch.cuda.is_available():
        pytest.skip("the CPU variant (TRITON_INTERPRET=1); the GPU one is below")
    _equal(ckpt, "runtime=cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("carveout", [0, 32])
def test_tokens_equal_with_and_without_on_two_streams(ckpt, carveout):
    """With a carveout the second half's GEMMs go through cuBLASLt on fewer SMs: same tokens."""
    _equal(ckpt, "runtime.level=2", f"runtime.two_batch_carveout={carveout}")
