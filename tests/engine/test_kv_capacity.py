"""How many KV blocks a runner gets, and the start-up refusal of a GPU budget too small for one
sequence (run 13 on the H200: a second engine in one process got 1 block, and the first request
failed at scheduling instead)."""
from pathlib import Path

import pytest
import torch

from atom.config.compose import compose
from atom.config.errors import ConfigError
from atom.layers.kv_spec import FullAttentionSpec
from atom.runner.kv_cache import KVCacheSpec, num_blocks_for

LAYOUT = KVCacheSpec((FullAttentionSpec(2, 16, torch.bfloat16),) * 2, block_size=16)
CUDA = torch.device("cuda")  # only its type is read: no GPU needed


def _cfg(*overrides: str):
    """The kv_cache group of a composed config: what the sizing functions take."""
    return compose(["model=tiny_llama", "load=dummy", *overrides]).kv_cache


def test_gpu_budget_gives_whole_blocks():
    per_block = LAYOUT.bytes_per_block
    assert num_blocks_for(_cfg(), LAYOUT, CUDA, 100 * per_block + per_block // 2, 512) == 100


def test_gpu_budget_short_of_one_sequence_is_refused_naming_the_fields():
    per_block = LAYOUT.bytes_per_block
    with pytest.raises(ConfigError, match="kv_cache.gpu_memory_utilization") as e:
        num_blocks_for(_cfg(), LAYOUT, CUDA, 3 * per_block, 1024)
    assert "48 tokens" in str(e.value) and "model.max_model_len=1024" in str(e.value)
    with pytest.raises(ConfigError, match="0 tokens"):  # weights alone past the budget
        num_blocks_for(_cfg(), LAYOUT, CUDA, -5 * per_block, 1024)


def test_explicit_block_count_and_cpu_budget_are_taken_as_given():
    """kv_cache.num_blocks is the user's choice (tests use tiny caches on purpose), and the CPU
    budget is kv_cache.cpu_cache_bytes, not a measurement."""
    assert num_blocks_for(_cfg("kv_cache.num_blocks=3"), LAYOUT, CUDA, 0, 4096) == 3
    cpu = _cfg()
    assert num_blocks_for(cpu, LAYOUT, torch.device("cpu"), None, 4096) == (
        cpu.cpu_cache_bytes // LAYOUT.bytes_per_block)


def test_a_cpu_budget_short_of_one_sequence_is_refused_naming_the_field():
    small = _cfg(f"kv_cache.cpu_cache_bytes={10 * LAYOUT.bytes_per_block}")
    with pytest.raises(ConfigError, match="kv_cache.cpu_cache_bytes") as e:
        num_blocks_for(small, LAYOUT, torch.device("cpu"), None, 1024)
    assert "holds 160 tokens" in str(e.value)


def test_a_budget_error_found_in_the_core_is_the_launchers_one_line(tmp_path):
    """Known only once the core has built the model: it still reaches the launcher as the one
    `atom: invalid config:` line (exit 2), not as a dead-core traceback."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([sys.executable, "-m", "atom.run", "model=tiny_llama", "load=dummy",
                        "runtime=cpu", "kv_cache.cpu_cache_bytes=65536", f"server.port={port}",
                        "server.host=127.0.0.1"],
                       capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    last = [line for line in r.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("atom: invalid config: kv_cache.cpu_cache_bytes=65536: holds "), last


def test_pool_from_mixed_layer_specs():
    """Full-attention and MLA layers in one pool: a block is the same token slots in every layer,
    its bytes the sum over layers, and each layer's cache a view of its group's one tensor."""
    from atom.layers.kv_spec import MLASpec
    from atom.runner.kv_cache import allocate

    full, mla = FullAttentionSpec(2, 16, torch.float32), MLASpec(576, torch.float32)
    spec = KVCacheSpec((full, mla, full, mla), block_size=4)
    assert spec.bytes_per_block == 4 * 2 * (2 * 2 * 16 * 4 + 576 * 4)
    buffers, caches, scales = allocate(spec, 3, torch.device("cpu"))
    assert len(buffers) == 2 and len(caches) == len(scales) == 4
    k, v = caches[0]
    assert k.shape == v.shape == (3, 4, 2, 16)
    (latent,) = caches[1]
    assert latent.shape == (3, 4, 576)
    latent[1, 2].fill_(7.0)
    assert caches[3][0].sum() == 0 and buffers[1][0, 1, 2, 0] == 7.0  # layer 1 is group row 0


@pytest.mark.parametrize("overrides,dtype,text", [
    ((), torch.float32, "kv_cache.dtype=bf16 (float32: the model's activation dtype)"),
    ((), torch.bfloat16, "kv_cache.dtype=bf16"),
    (("kv_cache=fp8",), torch.float8_e4m3fn, "kv_cache.dtype=fp8 (float8_e4m3fn, per-tensor scale)"),
])
def test_the_kv_log_says_why_bf16_is_stored_as_float32_on_cpu(overrides, dtype, text):
    from atom.runner.kv_cache import describe_kv_dtype

    assert describe_kv_dtype(_cfg(*overrides), dtype) == text


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from Linux /proc")
def test_a_cpu_pool_is_zeros_committed_only_where_written():
    """The default 2 GB CPU budget would otherwise be written through at start-up: the pool
    reads as zeros everywhere, and only the pages a layer writes become resident."""
    from atom.runner.kv_cache import allocate

    spec = KVCacheSpec((FullAttentionSpec(2, 64, torch.bfloat16),) * 4, block_size=16)
    blocks = (512 << 20) // spec.bytes_per_block  # a 512 MiB pool
    before = _rss_bytes()
    buffers, caches, _ = allocate(spec, blocks, torch.device("cpu"))
    assert _rss_bytes() - before < 64 << 20
    k, v = caches[3]
    assert buffers[0].dtype == torch.bfloat16 and k.shape[0] == blocks
    k[-1].fill_(1.5)
    assert float(v[-1].abs().sum()) == 0.0 and float(k[0].abs().sum()) == 0.0
    assert float(k[-1].float().mean()) == 1.5
    assert int(buffers[0].count_nonzero()) == k[-1].numel()
