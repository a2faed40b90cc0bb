"""The cpu backend's C kernels (cpu_native.c), compiled for this machine at first use and
called through ctypes.

A decode step of the embedded default runs ~1,100 torch ops, ~35 a layer, and at one row each
costs its dispatch (1-10 us) more than its arithmetic; a bare ctypes call costs ~0.4 us and a
whole seam here 2-5 us (research/probes/cpu_native_calls.py). Each function here is one seam of
a decoder layer (the norm before a projection, the scale after it, the
gated activation, rotary with the KV write, decode attention over the paged cache) in one call.

The library is built by the system C compiler (`cc`, or $CC) with -march=native into
~/.cache/atom/native/, keyed by the source, the compiler and the CPU's flags, and written
atomically (concurrent first starts each build their own and one wins). Without a compiler, or
if it fails, `load` says why once and returns None: the backend keeps its torch ops.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("cpu_native.c")
# -ffast-math for the vectorised loops (libmvec's expf among them) at compile time only: linked
# with it, gcc adds crtfastmath.o, whose constructor sets flush-to-zero for the whole process
# (every float in torch and Python would lose its subnormals).
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp-simd", "-fPIC")

_P, _I, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
_SIGNATURES = {
    "atom_norm_bf16": (None, [_P, _I, _P, _P, _I, _I, _I, _F, _P, _P, _P]),
    "atom_scale_rows": (None, [_P, _P, _P, _I, _I, _P]),
    "atom_silu_mul_bf16": (None, [_P, _I, _I, _I, _P]),
    "atom_rope_store": (None, [_P, _I, _I, _I, _I, _I, _I, _P, _P, _P, _P, _P, _P]),
    "atom_decode_attention": (ctypes.c_int, [_P, _I, _P, _P, _P, _I, _P, _I, _I, _I, _I, _I,
                                             _F, _I, _P]),
}


def _ptr(t: Optional[torch.Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


class CpuNative:
    """The loaded library's functions over torch tensors. Callers pass what each C function
    assumes (float32 and bf16 as named, rows contiguous); the backend checks before calling."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self._norm = lib.atom_norm_bf16
        self._scale = lib.atom_scale_rows
        self._silu = lib.atom_silu_mul_bf16
        self._rope = lib.atom_rope_store
        self._attn = lib.atom_decode_attention

    def norm_bf16(self, x: torch.Tensor, residual: Optional[torch.Tensor], weight: torch.Tensor,
                  eps: float, xw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(h, inv_rms [T]) with h = x + residual (x itself without one, float32) and xw (bf16
        [T, H], written) = h * weight rounded: the norm seam's input to its projection. x is
        float32 or bf16, residual float32."""
        rows, hidden = x.shape
        bf16 = x.dtype == torch.bfloat16
        h = x if residual is None and not bf16 else torch.empty(rows, hidden)
        r = torch.empty(rows)
        self._norm(x.data_ptr(), bf16, _ptr(residual), weight.data_ptr(), rows, hidden,
                   x.stride(0), eps, h.data_ptr(), xw.data_ptr(), r.data_ptr())
        return h, r

    def scale_rows(self, y: torch.Tensor, scale: torch.Tensor,
                   bias: Optional[torch.Tensor]) -> torch.Tensor:
        """float32 y (bf16 [T, N]) times scale [T] (+ bias [N])."""
        out = torch.empty(y.shape)
        self._scale(y.data_ptr(), scale.data_ptr(), _ptr(bias), y.shape[0], y.shape[1],
                    out.data_ptr())
        return out

    def silu_mul_bf16(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """out (bf16 [T, I], written) = silu(gate) * up for x = [gate | up] float32 [T, 2I]."""
        self._silu(x.data_ptr(), x.shape[0], x.shape[1] // 2, x.stride(0), out.data_ptr())
        return out

    def rope_store(self, qkv_rows: torch.Tensor, row_stride: int, rows: int, hq: int, hk: int,
                   d: int, positions: torch.Tensor, cos_sin: torch.Tensor, slots: torch.Tensor,
                   k_slots: torch.Tensor, v_slots: torch.Tensor) -> torch.Tensor:
        """q rotated ([T, hq, d], new), k rotated and v copied into their caches' slots
        ([slots, hk, d] views); qkv_rows is q's storage: each row hq + 2 hk heads of d, NeoX
        rotary over cos_sin's width. positions and slots are int64."""
        q = torch.empty(rows, hq, d)
        self._rope(qkv_rows.data_ptr(), rows, row_stride, hq, hk, d, cos_sin.shape[1],
                   positions.data_ptr(), cos_sin.data_ptr(), slots.data_ptr(), q.data_ptr(),
                   k_slots.data_ptr(), v_slots.data_ptr())
        return q

    def decode_attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                         window: int) -> torch.Tensor:
        """q [B, Hq, D] over each sequence's paged keys (caches [blocks, page, Hk, D],
        int32 tables and lengths) → [B, Hq, D]."""
        b, hq, d = q.shape
        out = torch.empty(b, hq, d)
        if self._attn(q.data_ptr(), q.stride(0), k_cache.data_ptr(), v_cache.data_ptr(),
                      block_tables.data_ptr(), block_tables.stride(0), context_lens.data_ptr(),
                      b, hq, k_cache.shape[2], d, k_cache.shape[1], scale, window,
                      out.data_ptr()):
            raise MemoryError("decode attention's score buffer")
        return out


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "atom" / "native"


def _build(cc: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    obj = tmp + ".o"
    try:
        for cmd in ([cc, *FLAGS, "-c", "-o", obj, str(SOURCE)],
                    [cc, "-shared", "-o", tmp, obj, "-lm"]):
            subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
        os.replace(tmp, target)
    finally:
        for leftover in (tmp, obj):
            if os.path.exists(leftover):
                os.unlink(leftover)


def load() -> Optional[CpuNative]:
    """The library for this machine, built on first use; None (and why, logged) when it cannot
    be built or loaded."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        log.info("no C compiler: the cpu backend runs its torch ops (slower decode)")
        return None
    key = hashlib.sha256(SOURCE.read_bytes() + cc.encode() + " ".join(FLAGS).encode() + b"link2"
                         + _cpu_flags().encode()).hexdigest()[:16]
    target = _cache_dir() / f"atom_cpu_{key}.so"
    try:
        if not target.exists():
            _build(cc, target)
        return CpuNative(ctypes.CDLL(str(target)))
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        log.warning("the cpu backend's C kernels did not build (%s): it runs its torch ops",
                    detail.strip()[:500])
        return None
