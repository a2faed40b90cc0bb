"""Two-batch overlap on the triton backend: interpreted on CPU (fp32), and on a GPU with the second
half on a side stream; greedy tokens equal the unsplit run's either way."""
import pytest
import torch

from tests.engine.checkpoints import make_checkpoint
from tests.engine.test_two_batch_overlap import staggered_greedy


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint("llama", tmp_path_factory.mktemp("tbo_triton"))


def test_tokens_equal_with_and_without(ckpt):
    extra = ("runtime.kernels=triton", "model.dtype=float32")
    extra += ("runtime.level=2",) if torch.cuda.is_available() else ("runtime=cpu",)
    plain, _ = staggered_greedy(ckpt, False, *extra)
    halves, split = staggered_greedy(ckpt, True, *extra)
    assert split > 0, "no step ran as two halves"
    assert halves == plain
