"""An fp8 linear weight: float8_e4m3fn codes with float32 scales, and how its activations scale.

What a loader reads from an fp8 checkpoint (or makes from a float one at load), what a linear
layer keeps, and what the kernel backends run: the torch reference dequantizes it and emulates
the activation quantization (fp8_reference.py), the Triton backend feeds the codes and scales
to fp8 GEMMs as they are. `dequantize` is the oracle: exactly codes * scale in float32.

Scales are per output channel (`weight_scale`, a checkpoint's per-tensor scale repeated over
its rows, which is exact and lets parts with different scales share one matrix) or per
128 x 128 block (`block_scale`, DeepSeek-V3's `weight_scale_inv`; N and K need not be
multiples of 128, the last block is partial). Exactly one of the two is set.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # the largest finite e4m3fn value
BLOCK = 128  # block scales' rows and columns (the only block shape the kernels take)
# A zero row (or block) would get scale 0 and codes 0/0; any positive floor gives codes 0.
MIN_SCALE = 1e-12


def _blocks(n: int) -> int:
    return -(-n // BLOCK)


@dataclass
class Fp8Weight:
    qweight: torch.Tensor  # [N, K] float8_e4m3fn, row-major
    weight_scale: Optional[torch.Tensor]  # [N] float32, or None when block-scaled
    block_scale: Optional[torch.Tensor]  # [ceil(N/128), ceil(K/128)] float32, or None
    # [] float32: activations are x / input_scale in e4m3 (a checkpoint's static scale);
    # None: scaled dynamically, per token (per 128-wide group of a token with block scales)
    input_scale: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        if (self.weight_scale is None) == (self.block_scale is None):
            raise ValueError("an fp8 weight has per-channel or block scales, exactly one")

    @property
    def shape(self) -> torch.Size:
        return self.qweight.shape

    def to(self, device: torch.device) -> "Fp8Weight":
        def move(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            return None if t is None else t.to(device)

        return Fp8Weight(self.qweight.to(device), move(self.weight_scale),
                         move(self.block_scale), move(self.input_scale))

    def contiguous(self) -> "Fp8Weight":
        """Its own storage: a shard (rows or columns of the checkpoint's tensor) otherwise
        keeps the whole tensor alive, and the kernels want row-major codes."""
        def own(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            return None if t is None else t.contiguous()

        return Fp8Weight(self.qweight.contiguous(), own(self.weight_scale), own(self.block_scale),
                         self.input_scale)

    def scale_per_element(self) -> torch.Tensor:
        """[N, K] float32 (or [N, 1]): the factor every code is multiplied by."""
        if self.weight_scale is not None:
            return self.weight_scale.unsqueeze(1)
        n, k = self.qweight.shape
        return (self.block_scale.repeat_interleave(BLOCK, 0)[:n]
                .repeat_interleave(BLOCK, 1)[:, :k])

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return (self.qweight.float() * self.scale_per_element()).to(dtype)

    def rows(self, start: int, length: int) -> "Fp8Weight":
        """Output features [start, start + length): a column-parallel shard or one part of a
        packed matrix. Block scales need the shard on block boundaries (the last may be partial)."""
        if self.weight_scale is not None:
            return replace(self, qweight=self.qweight.narrow(0, start, length),
                           weight_scale=self.weight_scale.narrow(0, start, length))
        _check_block_aligned(start, length, self.shape[0], "rows")
        return replace(self, qweight=self.qweight.narrow(0, start, length),
                       block_scale=self.block_scale.narrow(0, start // BLOCK, _blocks(length)))

    def columns(self, start: int, length: int) -> "Fp8Weight":
        """Input features [start, start + length): a row-parallel shard."""
        if self.weight_scale is not None:
            return replace(self, qweight=self.qweight.narrow(1, start, length))
        _check_block_aligned(start, length, self.shape[1], "columns")
        return replace(self, qweight=self.qweight.narrow(1, start, length),
                       block_scale=self.block_scale.narrow(1, start // BLOCK, _blocks(length)))


def _check_block_aligned(start: int, length: int, total: int, what: str) -> None:
    if start % BLOCK or (length % BLOCK and start + length != total):
        raise ValueError(f"a block-fp8 shard of {what} [{start}, {start + length}) of {total} "
                         f"must start and end on a {BLOCK}-wide block")


def cat_fp8_rows(parts: list[Fp8Weight]) -> Fp8Weight:
    """Stack along output features (q | k | v, gate | up). Per-channel scales concatenate
    exactly whatever scale each part had. Static input scales: the parts read one activation,
    and the largest scale clips none of them (what vLLM does for fused layers)."""
    if len(parts) == 1:
        return parts[0]
    statics = [p.input_scale for p in parts]
    if any(s is None for s in statics) != all(s is None for s in statics):
        raise ValueError("fp8 parts of one matrix mix static and dynamic activation scales")
    input_scale = None if statics[0] is None else torch.stack(statics).max()
    qweight = torch.cat([p.qweight for p in parts])
    if all(p.weight_scale is not None for p in parts):
        return Fp8Weight(qweight, torch.cat([p.weight_scale for p in parts]), None, input_scale)
    if any(p.block_scale is None for p in parts) or any(p.shape[0] % BLOCK for p in parts[:-1]):
        raise ValueError("block-fp8 parts of one matrix must all be block-scaled, each but the "
                         f"last a multiple of {BLOCK} rows")
    return Fp8Weight(qweight, None, torch.cat([p.block_scale for p in parts]), input_scale)


def from_checkpoint(weight: torch.Tensor, scale: torch.Tensor, input_scale: Optional[torch.Tensor],
                    block: bool) -> Fp8Weight:
    """A checkpoint's tensors: `weight_scale` [1], [N] or [N, 1] (per tensor or per channel),
    or with `block` the [ceil(N/128), ceil(K/128)] `weight_scale_inv` (a multiplier despite its
    name: DeepSeek's dequantization is weight * weight_scale_inv)."""
    n, k = weight.shape
    scale = scale.float()
    static = None if input_scale is None else input_scale.float().reshape(())
    if block:
        if tuple(scale.shape) != (_blocks(n), _blocks(k)):
            raise ValueError(f"block scales of a [{n}, {k}] weight must be "
                             f"[{_blocks(n)}, {_blocks(k)}], got {list(scale.shape)}")
        return Fp8Weight(weight, None, scale.contiguous(), static)
    if scale.numel() == 1:
        per_row = scale.reshape(1).expand(n).contiguous()
    elif scale.numel() == n:
        per_row = scale.reshape(n).contiguous()
    else:
        raise ValueError(f"weight_scale of a [{n}, {k}] weight must hold 1 or {n} values, "
                         f"got {list(scale.shape)}")
    return Fp8Weight(weight, per_row, None, static)


def e4m3_scale(amax: torch.Tensor, floor: float) -> torch.Tensor:
    """amax / 448 correctly rounded to float32, at least `floor`, on any device: divided in
    float64 (one division: the double rounding is innocuous). On CUDA, torch's float32 division
    by a scalar multiplies by the float32 reciprocal of 448, which is one ulp off the quotient
    for about half of all amax values, so the GPU would get other scales (and some other codes)
    than the CPU from the same weight."""
    return (amax.double() / E4M3_MAX).float().clamp(min=floor)


def quantize(w: torch.Tensor, block: bool = False) -> Fp8Weight:
    """A float weight in e4m3, scaled so each output channel's (or 128 x 128 block's) largest
    magnitude maps to 448: online quantization of a float checkpoint, and dummy fp8 weights.
    The same codes and scales on every device: the scale as e4m3_scale, the codes a correctly
    rounded float32 division (tensor by tensor, on CUDA too) rounded to nearest even."""
    wf = w.float()
    if not block:
        scale = e4m3_scale(wf.abs().amax(dim=1), MIN_SCALE)
        q = (wf / scale.unsqueeze(1)).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
        return Fp8Weight(q, scale, None)
    n, k = wf.shape
    nb, kb = _blocks(n), _blocks(k)
    padded = wf.new_zeros(nb * BLOCK, kb * BLOCK)
    padded[:n, :k] = wf
    tiles = padded.view(nb, BLOCK, kb, BLOCK)
    scale = e4m3_scale(tiles.abs().amax(dim=(1, 3)), MIN_SCALE)
    q = (tiles / scale[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return Fp8Weight(q.view(nb * BLOCK, kb * BLOCK)[:n, :k].contiguous(), None, scale)
