"""runtime.level=3: the compiled forward matches eager, compiles once for every token count, and
the attention custom op runs the layer's own body. On CPU: the torch reference backend in fp32.
On a GPU: the triton backend in bf16, and the compiled forward inside a captured CUDA graph."""
from __future__ import annotations

import pytest
import torch

from atom.config.compose import compose
from atom.kernels.backend import get_backend
from atom.kernels.metadata import AttentionMetadata
from atom.layers.attention_op import model_attention_op
from atom.layers.model_context import ModelContext
from atom.loader.model_loader import build_model
from atom.loader.hf_config import load_hf_config, model_source
from atom.runner.compile import CompiledForward, compile_forward, compiles
from tests.engine.checkpoints import make_checkpoint
from tests.engine.stepping import BLOCK, BLOCKS_PER_SEQ, SteppedBatch

CPU = torch.device("cpu")
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _config(model: str, *overrides: str):
    return compose([f"model={model}", "load=dummy", "runtime=cpu", *overrides])


def _model(name: str, kernels: str = "torch", device: torch.device = CPU,
           dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    return _build(_config(name), kernels, device, dtype)


def _build(cfg, kernels: str = "torch", device: torch.device = CPU,
           dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    src = model_source(cfg) if cfg.load.dummy is None else None
    return build_model(cfg.load, src, load_hf_config(cfg), ModelContext(get_backend(kernels)),
                       device, dtype)


def _schedule(vocab: int) -> list[dict[int, list[int]]]:
    """Prefill of three prompts, decodes of 3, 2 and 1 sequences, then a late prefill chunk on
    top of a cached context beside decodes: every token count the runner produces."""
    g = torch.Generator().manual_seed(0)
    prompt = lambda n: torch.randint(3, vocab, (n,), generator=g).tolist()
    tok = lambda: prompt(1)
    steps = [{0: prompt(5), 1: prompt(11), 2: prompt(3)}]
    steps += [{0: tok(), 1: tok(), 2: tok()} for _ in range(2)]
    steps += [{0: tok(), 2: tok()}, {1: tok()}, {1: tok()}]
    steps += [{0: prompt(7), 1: tok(), 2: tok()}, {0: tok(), 1: tok(), 2: tok()}]
    return steps


class _CountingBackend:
    """A torch.compile backend that counts the graphs dynamo hands it: one per compile."""

    def __init__(self, compiler: str = "aot_eager") -> None:
        self.compiler = torch._dynamo.backends.registry.lookup_backend(compiler)
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs += 1
        return self.compiler(gm, example_inputs)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Dynamo's caches are per code object: another test's compiled model must not count here."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name,compiler", [("tiny_qwen3", "inductor"), ("tiny_llama", "aot_eager")])
def test_level3_logits_match_eager(name, compiler):
    """Inductor (what the GPU runs) builds two C++ graphs on CPU, ~30 s on two cores: once, on
    the Qwen3 shape (q/k norm). Llama's rotary scaling and plain q/k take aot_eager, which
    traces and functionalises the same way without the C++ build."""
    model = _model(name)
    compiled = CompiledForward(model, compiler)
    eager_batch, compiled_batch = SteppedBatch(model, 3), SteppedBatch(model, 3)
    for new in _schedule(model.hf_config.vocab_size):
        want = eager_batch.step(model, new)
        got = compiled_batch.step(compiled, new)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for (kw, vw), (kg, vg) in zip(eager_batch.caches, compiled_batch.caches):
        torch.testing.assert_close(kg, kw, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(vg, vw, rtol=1e-5, atol=1e-5)


def test_one_graph_for_every_token_count_and_one_for_single_tokens():
    model = _model("tiny_qwen3")
    backend = _CountingBackend()
    compiled, batch = CompiledForward(model, backend), SteppedBatch(model, 3)
    torch._dynamo.utils.counters.clear()
    for new in _schedule(model.hf_config.vocab_size):
        batch.step(compiled, new)
    assert backend.graphs == 2, "token counts 16, 3, 2, 1, 9, 3: one dynamic graph + size 1"
    assert not torch._dynamo.utils.counters["graph_break"], "attention must stay one opaque op"
    batch2 = SteppedBatch(model, 3)  # a fresh cache and fresh metadata objects: still no recompile
    for new in _schedule(model.hf_config.vocab_size)[:4]:
        batch2.step(compiled, new)
    assert backend.graphs == 2


def test_attention_op_runs_the_layer_body():
    """The model's op against the layer's eager body, both on the torch reference backend, and
    torch.library.opcheck's schema, fake-tensor and dispatch checks (Qwen3: q/k norm weights)."""
    model = _model("tiny_qwen3")
    attn = model.model.layers[1].self_attn
    layer = attn.attn
    op = model_attention_op({layer.layer_idx: layer})
    g = torch.Generator().manual_seed(3)
    t = 5
    q = torch.randn(t, layer.num_heads, layer.head_dim, generator=g)
    k = torch.randn(t, layer.num_kv_heads, layer.head_dim, generator=g)
    v = torch.randn(t, layer.num_kv_heads, layer.head_dim, generator=g)
    results = {}

    def forward(ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Stands in for the model: one attention layer, eager body and op on the same step."""
        args = (q, k, v, pos, attn.rotary_emb.cos_sin_cache, attn.rotary_emb.is_neox,
                attn.q_norm.weight, attn.k_norm.weight, attn.q_norm.eps)
        results["eager"] = layer._forward_impl(*args)
        results["op"] = op(*args, layer.layer_idx)
        torch.library.opcheck(op, (*args, layer.layer_idx))
        return torch.zeros(ids.shape[0], model.hf_config.hidden_size)

    SteppedBatch(model, 2).step(forward, {0: [5, 6, 7], 1: [8, 9]})
    assert results["op"].shape == (t, layer.num_heads * layer.head_dim)
    torch.testing.assert_close(results["op"], results["eager"], rtol=0, atol=0)


def test_two_compiled_models_in_one_process_each_attend_with_their_own_layers():
    """Two models of one architecture (other weights) compiled side by side, stepped in turn:
    both have layers 0 and 1 and share every forward's code, and each one's attention op
    resolves its indices among its own model's layers, reading its own forward slot (dynamo
    builds each model its own graphs: 2 apiece)."""
    models = [_build(_config("tiny_llama", "load.dummy=xavier", f"load.seed={seed}"))
              for seed in (0, 1)]
    counting = _CountingBackend()
    compiled = [CompiledForward(m, counting) for m in models]
    eager = [SteppedBatch(m, 3) for m in models]
    stepped = [SteppedBatch(m, 3) for m in models]
    for new in _schedule(models[0].hf_config.vocab_size):
        wants = []
        for m, c, e, s in zip(models, compiled, eager, stepped):
            wants.append(e.step(m, new))
            torch.testing.assert_close(s.step(c, new), wants[-1], rtol=1e-5, atol=1e-5)
        assert not torch.allclose(wants[0], wants[1]), "the two models must differ to tell apart"
    assert counting.graphs == 4


def test_moe_routing_does_not_recompile(tmp_path):
    """The expert loop runs eagerly between graphs: new routings reuse the graphs built for the
    first steps' shapes, and the logits are eager's."""
    cfg = compose(["model=local", f"model.path={make_checkpoint('qwen3_moe', tmp_path)}",
                   "runtime=cpu", "load.progress_bar=false"])
    model = _build(cfg)
    backend = _CountingBackend()
    compiled = CompiledForward(model, backend)
    schedule = _schedule(model.hf_config.vocab_size)
    eager_batch, compiled_batch = SteppedBatch(model, 3), SteppedBatch(model, 3)
    for new in schedule:
        want = eager_batch.step(model, new)
        torch.testing.assert_close(compiled_batch.step(compiled, new), want, rtol=1e-5, atol=1e-5)
    built = backend.graphs
    g = torch.Generator().manual_seed(9)
    rerouted = [{s: torch.randint(3, 256, (len(t),), generator=g).tolist() for s, t in new.items()}
                for new in schedule]
    fresh = SteppedBatch(model, 3)
    for new in rerouted:
        fresh.step(compiled, new)
    assert backend.graphs == built


@pytest.mark.parametrize("level,enforce_eager,device,backend,expected", [
    (3, False, "cuda", "torch", True), (2, False, "cuda", "torch", False),
    (3, True, "cuda", "torch", False), (3, False, "cpu", "torch", False),
    (3, False, "cuda", "triton", False)])
def test_level3_compiles_only_what_inductor_can_fuse(level, enforce_eager, device, backend,
                                                     expected):
    """The Triton backend's forward is all kernels already: level 3 compiles nothing there."""
    cfg = _config("tiny_qwen3", f"runtime.level={level}", f"runtime.enforce_eager={enforce_eager}")
    assert compiles(cfg.runtime, torch.device(device), backend) is expected


def test_compile_forward_is_the_model_when_not_compiling():
    model = torch.nn.Linear(1, 1)
    cfg = _config("tiny_qwen3", "runtime.level=3")
    assert compile_forward(model, cfg.runtime, CPU, "torch") is model
    assert compile_forward(model, cfg.runtime, torch.device("cuda"), "triton") is model


@pytest.mark.parametrize("overrides,device,backend,graphs,line", [
    ((), "cuda", "triton", True, "runtime.level=3: decode in CUDA graphs; no torch.compile: every "
     "op of the triton forward is already a kernel"),
    ((), "cuda", "torch", False, "runtime.level=3: no CUDA graphs (the torch kernel backend cannot "
     "be captured); the forward torch.compiled (inductor; attention one opaque op)"),
    (("runtime.level=2",), "cuda", "triton", True, "runtime.level=2: decode in CUDA graphs"),
    ((), "cpu", "torch", False, "runtime.level=3: eager (CUDA graphs and torch.compile are "
     "GPU-only)"),
    (("runtime.enforce_eager=true",), "cuda", "triton", False,
     "runtime.level=3: eager (enforce_eager)"),
])
def test_the_level_log_line_says_what_the_level_does_here(overrides, device, backend, graphs, line):
    from atom.runner.compile import describe_level

    cfg = compose(["model=tiny_qwen3", "load=dummy", *overrides])
    assert describe_level(cfg.runtime, torch.device(device), backend, graphs) == line


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["tiny_qwen3", "tiny_llama"])
def test_gpu_triton_level3_matches_eager_in_two_graphs(name):
    """The GPU's level 3: dynamo traces the triton backend's kernels, inductor compiles around
    them, attention stays the opaque op. Same kernels as eager, so bf16 agrees closely."""
    model = _model(name, "triton", torch.device("cuda"), torch.bfloat16)
    backend = _CountingBackend("inductor")
    compiled = CompiledForward(model, backend)
    eager_batch, compiled_batch = SteppedBatch(model, 3), SteppedBatch(model, 3)
    torch._dynamo.utils.counters.clear()
    for new in _schedule(model.hf_config.vocab_size):
        want = eager_batch.step(model, new).float()
        torch.testing.assert_close(compiled_batch.step(compiled, new).float(), want,
                                   rtol=2e-2, atol=2e-2)
    assert backend.graphs == 2
    assert not torch._dynamo.utils.counters["graph_break"]


@GPU
@pytest.mark.gpu
def test_gpu_compiled_forward_replays_in_a_cuda_graph():
    """What the runner does at level 3: warm up (compile) and capture the compiled decode forward
    over static buffers, then replay it step after step with new inputs copied in."""
    model = _model("tiny_qwen3", "triton", torch.device("cuda"), torch.bfloat16)
    compiled = CompiledForward(model)
    schedule = _schedule(model.hf_config.vocab_size)[:3]  # a prefill, two decodes of 3 seqs
    eager_batch, graph_batch = SteppedBatch(model, 3), SteppedBatch(model, 3)
    eager_batch.step(model, schedule[0])
    graph_batch.step(compiled, schedule[0])
    ids, pos, meta = graph_batch.prepare(schedule[1])
    static = AttentionMetadata(meta.cu_seqlens_q, meta.context_lens, meta.block_tables,
                               meta.slot_mapping, 1, BLOCKS_PER_SEQ * BLOCK, True)
    with torch.inference_mode(), model.context.forward.using(graph_batch.context(static)):
        run = lambda: model.compute_logits(compiled(ids, pos))
        run()  # warm-up: compiles
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run()
    for i, new in enumerate(schedule[1:]):
        want = eager_batch.step(model, new).float()
        if i:
            nids, npos, nmeta = graph_batch.prepare(new)
            for dst, src in [(ids, nids), (pos, npos), (static.slot_mapping, nmeta.slot_mapping),
                             (static.context_lens, nmeta.context_lens)]:
                dst.copy_(src)
        graph.replay()
        torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=2e-2)
