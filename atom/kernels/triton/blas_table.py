"""Which BLAS library, cuBLAS or cuBLASLt, runs each multi-row linear: a table measured per GPU.

Why: neither library wins every shape. On the H200 at 416 rows (the 8B run's decode batch)
cuBLASLt ran o_proj at 582 TFLOP/s against cuBLAS's 502 and down_proj at 678 against 633, but
qkv at 557 against 598 and gate_up at 592 against 631 (benchmarks/gemm_shape_probe.py on the H200).
The choice comes from a committed table (`blas_tables/<GPU name>.json`, written by
`gemm_shape_probe.py --table`), never from timing at start-up: the same GPU always runs the same
kernels, so outputs are reproducible from one start to the next. A GPU or shape the table does
not name keeps torch's default library.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

TABLE_DIR = Path(__file__).with_name("blas_tables")
LIBRARIES = ("cublas", "cublaslt")
_BACKEND = {"cublas": torch._C._BlasBackend.Cublas, "cublaslt": torch._C._BlasBackend.Cublaslt}


@dataclass(frozen=True)
class BlasTable:
    # (out features, in features) → ascending (most rows, library); more rows take the last one
    ranges: dict[tuple[int, int], tuple[tuple[int, str], ...]] = field(default_factory=dict)
    default: str = "cublas"  # for shapes the table does not name: the library preferred at load

    def library(self, rows: int, n: int, k: int) -> str:
        entry = self.ranges.get((n, k))
        if not entry:
            return self.default
        return next((lib for bound, lib in entry if rows <= bound), entry[-1][1])


def table_path(gpu_name: str) -> Path:
    return TABLE_DIR / (re.sub(r"[^A-Za-z0-9]+", "_", gpu_name).strip("_") + ".json")


def parse_table(data: dict, source: str, default: str = "cublas") -> BlasTable:
    """{"shapes": {"<N>x<K>": [[most rows, library], ...]}} → BlasTable; a bad entry names the
    file and the shape."""
    ranges = {}
    for shape, entry in data.get("shapes", {}).items():
        try:
            n, k = (int(v) for v in shape.split("x"))
            pairs = tuple((int(bound), str(lib)) for bound, lib in entry)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{source}: shape {shape!r}: expected \"NxK\": [[rows, library], ...]"
                             f" ({e})") from e
        bad = [lib for _, lib in pairs if lib not in LIBRARIES]
        if bad or not pairs or [b for b, _ in pairs] != sorted(b for b, _ in pairs):
            raise ValueError(f"{source}: shape {shape!r}: libraries must be {LIBRARIES} with "
                             f"ascending row bounds, got {entry}")
        ranges[(n, k)] = pairs
    return BlasTable(ranges, default)


def load_table(gpu_name: str) -> BlasTable:
    """The GPU's table (empty without a file); shapes it does not name keep the library torch
    prefers now (cuBLAS unless TORCH_BLAS_PREFER_CUBLASLT says otherwise)."""
    path = table_path(gpu_name)
    if not path.exists():
        return BlasTable()
    lt = torch._C._get_blas_preferred_backend() == _BACKEND["cublaslt"]
    return parse_table(json.loads(path.read_text()), str(path), "cublaslt" if lt else "cublas")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
           table: BlasTable) -> torch.Tensor:
    """F.linear on the GPU, eager or being captured into a CUDA graph, through the table's
    library for this shape. The preferred library is torch's process-wide setting, read at each
    GEMM call (at capture, inside a graph): set just before the call."""
    if table.ranges:
        lib = table.library(x.numel() // x.shape[-1], weight.shape[0], weight.shape[1])
        if torch._C._get_blas_preferred_backend() != _BACKEND[lib]:
            torch.backends.cuda.preferred_blas_library(lib)
    return F.linear(x, weight, bias)
