"""One host→device copy per step, and device→host reads that wait only for their own copies.

A plain `torch.tensor(list, device="cuda")` copies from pageable memory, and such a copy waits
for the whole stream: with the previous step still running on the GPU, each one would block the
host until that step ends and undo the overlap of host and GPU work. So a step's small input
arrays are packed into one pinned buffer and sent with a single asynchronous copy; the device
tensors handed back are views into one device buffer. On CPU the arrays are used in place.

The other way, a `.tolist()` of a device tensor waits for everything queued on the stream, the
next step included when it was queued first (async scheduling): `HostRead` queues the copies
into pinned memory where the tensors are made and its read waits for those alone (an event).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

_ALIGN = 16  # bytes; keeps every view's offset a multiple of any element size

_TORCH_DTYPES = {np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64,
                 np.dtype(np.float32): torch.float32}


def _to_host(t: torch.Tensor) -> torch.Tensor:
    if not t.is_cuda:
        return t
    return torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t, non_blocking=True)


class HostRead:
    """Device tensors on their way to the host, queued now, waited for when read."""

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        self._host = [_to_host(t) for t in tensors]
        self._event: Optional[torch.cuda.Event] = None
        if any(t.is_cuda for t in tensors):
            self._event = torch.cuda.Event()
            self._event.record()

    def wait(self) -> list[torch.Tensor]:
        """The host copies, in order, once they have arrived."""
        if self._event is not None:
            self._event.synchronize()
        return self._host


class HostStager:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pinned = device.type == "cuda"

    def stage(self, *arrays: np.ndarray) -> list[torch.Tensor]:
        """Device tensors holding these arrays (same dtypes and shapes), in order. The copy is
        queued on the current stream, so kernels queued after it see the data."""
        if not self.pinned:
            return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
        offsets, total = [], 0
        for a in arrays:
            offsets.append(total)
            total += -(-a.nbytes // _ALIGN) * _ALIGN
        host = torch.empty(max(total, _ALIGN), dtype=torch.uint8, pin_memory=True)
        buf = host.numpy()
        for a, off in zip(arrays, offsets):
            buf[off:off + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        dev = torch.empty_like(host, device=self.device).copy_(host, non_blocking=True)
        return [dev[off:off + a.nbytes].view(_TORCH_DTYPES[a.dtype]).view(a.shape)
                for a, off in zip(arrays, offsets)]

    @staticmethod
    def read_later(*tensors: torch.Tensor) -> HostRead:
        """These tensors' copies to the host, queued on the current stream now."""
        return HostRead(tensors)
