"""The per-GPU BLAS table: lookups by shape and rows, errors that name the file and the shape,
every committed table parses, and on the GPU each linear runs through the library its entry
names (outputs as F.linear's)."""
import json

import pytest
import torch
import torch.nn.functional as F

from atom.kernels.triton import blas_table
from atom.kernels.triton.blas_table import BlasTable, parse_table, table_path
from kernel_helpers import DEVICE, GPU, rel_err

TABLE = {"shapes": {"4096x4096": [[512, "cublaslt"], [4096, "cublas"], [16384, "cublaslt"]],
                    "6144x4096": [[16384, "cublas"]]}}


def test_lookup_by_shape_and_rows():
    t = parse_table(TABLE, "t.json")
    assert [t.library(r, 4096, 4096) for r in (1, 416, 512, 513, 4096, 8192, 99999)] == \
        ["cublaslt"] * 3 + ["cublas"] * 2 + ["cublaslt"] * 2
    assert t.library(416, 6144, 4096) == "cublas"
    assert t.library(416, 1024, 1024) == "cublas", "a shape the table does not name: the default"
    assert parse_table(TABLE, "t.json", default="cublaslt").library(8, 1, 1) == "cublaslt"


@pytest.mark.parametrize("shapes,names", [
    ({"4096": [[16, "cublas"]]}, "'4096'"),
    ({"8x8": [[16, "magma"]]}, "'8x8'"),
    ({"8x8": [[512, "cublas"], [16, "cublaslt"]]}, "ascending"),
    ({"8x8": []}, "'8x8'"),
])
def test_bad_tables_name_the_file_and_the_shape(shapes, names):
    with pytest.raises(ValueError, match=names) as e:
        parse_table({"shapes": shapes}, "blas_tables/X.json")
    assert "blas_tables/X.json" in str(e.value)


def test_table_file_is_named_after_the_gpu():
    assert table_path("NVIDIA H200").name == "NVIDIA_H200.json"
    assert table_path("NVIDIA GeForce RTX 4090 (x)").name == "NVIDIA_GeForce_RTX_4090_x.json"


def test_every_committed_table_parses_and_a_gpu_without_one_gets_none():
    """The H200's table (run 29) among them: it names cuBLASLt for the 8B's o_proj at its
    decode batch."""
    paths = list(blas_table.TABLE_DIR.glob("*.json"))
    assert blas_table.table_path("NVIDIA H200") in paths
    for path in paths:
        assert parse_table(json.loads(path.read_text()), str(path)).ranges, path
    assert blas_table.load_table("NVIDIA H200").library(415, 4096, 4096) == "cublaslt"
    assert blas_table.load_table("No Such GPU 9000") == BlasTable()


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE.type != "cuda", reason="needs a CUDA GPU")
def test_linear_runs_through_the_named_library():
    t = parse_table(TABLE, "t.json")
    w = torch.randn(4096, 4096, device=DEVICE, dtype=torch.bfloat16) * 0.02
    other = torch.randn(1024, 4096, device=DEVICE, dtype=torch.bfloat16) * 0.02
    before = torch._C._get_blas_preferred_backend()
    try:
        for rows, lib in ((416, "cublaslt"), (2048, "cublas"), (8192, "cublaslt")):
            x = torch.randn(rows, 4096, device=DEVICE, dtype=torch.bfloat16)
            out = blas_table.linear(x, w, None, t)
            assert torch._C._get_blas_preferred_backend() == blas_table._BACKEND[lib]
            assert rel_err(out, F.linear(x, w)) < 1e-2
        blas_table.linear(x, other, None, t)
        assert torch._C._get_blas_preferred_backend() == blas_table._BACKEND["cublas"]
    finally:
        torch._C._set_blas_preferred_backend(before)
