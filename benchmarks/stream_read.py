"""A plain streaming read of a tensor's bytes (int32 words, each program a contiguous run, summed
so the loads are kept): the limit one launch of that many bytes has, printed beside kernels
that read a cache once (gpu_bench's mla_decode). Short reads do not reach copy bandwidth: on the
H200 one launch of 75 MB alone in a CUDA graph read 2.59 TB/s, 302 MB 3.72, 2.4 GB 4.45 (run 102,
research/probes/mla_decode_fixed_cost.py, which also sweeps the grid: 8 programs an SM of
1,024-word blocks was the fastest at every size)."""
from __future__ import annotations

from typing import Any, Callable

import torch
import triton
import triton.language as tl

PER_SM, BLOCK = 8, 1024


@triton.jit
def _read_words(x_ptr, o_ptr, n_words, per_prog, BLOCK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * per_prog
    i = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.int32)
    for start in range(0, per_prog, BLOCK):
        idx = base + start + i
        acc += tl.load(x_ptr + idx, mask=idx < n_words, other=0)
    tl.store(o_ptr + tl.program_id(0), tl.sum(acc, 0))


def reader(x: torch.Tensor, per_sm: int = PER_SM, block: int = BLOCK) -> Callable[[], Any]:
    """A call that reads every byte of x (contiguous, its size a multiple of 4 bytes) once."""
    words = x.view(-1).view(torch.int32)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count \
        if x.device.type == "cuda" else 8
    progs = per_sm * sms
    sink = torch.empty(progs, device=x.device, dtype=torch.int32)
    per = triton.cdiv(triton.cdiv(words.numel(), progs), block) * block
    return lambda: _read_words[(progs,)](words, sink, words.numel(), per, BLOCK=block,
                                         num_warps=8)
