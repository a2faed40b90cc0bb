"""Drive the real Scheduler through an offline workload on the CPU, with a roofline cost per step.

Why: the GPU throughput runs report one number. This says where the steps go (prefill, decode,
recompute after preemption, batch sizes) for a given KV capacity and scheduler config, so a
scheduling change can be weighed before spending device time on it. The cost model is arithmetic
(GEMM FLOPs at a sustained TFLOP/s, weights and KV bytes at a sustained bandwidth), not a
measurement: compare policies with it, and measure the winner on the GPU.

    PYTHONPATH=. python research/probes/schedule_sim.py --kv-blocks 53203   # 8B, 1000 x 1k/1k on an H200
    PYTHONPATH=. python research/probes/schedule_sim.py --kv-blocks 53203 scheduler.max_num_seqs=384
"""
from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass

from atom.config.compose import compose
from atom.model_engine.scheduler import Scheduler
from atom.model_engine.sequence import Sequence
from atom.sampling_params import SamplingParams


@dataclass
class Roofline:
    """Llama-3.1-8B on one H200, bf16: the figures of benchmarks/results/H200.md."""

    flops_per_token: float = 2 * 8.03e9
    weight_bytes: float = 16.06e9
    kv_bytes_per_token: float = 32 * 2 * 8 * 128 * 2  # layers x (K, V) x kv heads x head dim x bf16
    attn_flops_per_query_key: float = 4 * 32 * 128 * 32  # QK and PV, 32 q heads, 32 layers
    tflops: float = 700e12  # sustained GEMM rate (peak measured ~800)
    bandwidth: float = 3.6e12  # sustained HBM read rate (copy ceiling 4.18 TB/s)
    step_overhead_s: float = 0.0003

    def step_seconds(self, prefill_pairs: int, decode_kv_tokens: int, tokens: int) -> float:
        """Every kernel after the other, as a step runs today."""
        gemm = max(tokens * self.flops_per_token / self.tflops, self.weight_bytes / self.bandwidth)
        attention = (decode_kv_tokens * self.kv_bytes_per_token / self.bandwidth
                     + prefill_pairs * self.attn_flops_per_query_key / (0.6 * self.tflops))
        return gemm + attention + self.step_overhead_s


def simulate(overrides: list[str], kv_blocks: int, requests: int, prompt_len: int, output_len: int,
             seed: int = 0, arrivals_per_step: float = 0.0) -> dict:
    """All requests waiting at the start, or with `arrivals_per_step` a steady trickle (which
    staggers the sequences, so steps mix prefill chunks with decodes)."""
    cfg = compose(["model=llama3_8b", "load=dummy", "kv_cache.enable_prefix_caching=false", *overrides])
    sched = Scheduler(cfg, kv_blocks, eos_token_ids=set(), max_model_len=prompt_len + output_len)
    rng = random.Random(seed)
    params = SamplingParams(max_tokens=output_len, ignore_eos=True, temperature=0.0)
    pending = [Sequence(f"r{i}", [rng.randrange(1000, 100000) for _ in range(prompt_len)], params)
               for i in range(requests)]
    pending.reverse()
    arrived = 0.0
    cost = Roofline()
    seconds = 0.0
    steps = prefill_tokens = decode_tokens = 0
    batch_sizes: list[int] = []
    while pending or sched.has_unfinished():
        arrived += arrivals_per_step if arrivals_per_step > 0 else len(pending)
        while pending and arrived >= 1:
            sched.add(pending.pop())
            arrived -= 1
        batch = sched.schedule()
        rows, pre, pairs, kv = [], 0, 0, 0
        for i, (seq, n) in enumerate(zip(batch.seqs, batch.num_new_tokens)):
            done = seq.num_computed_tokens + n
            if done >= seq.num_tokens:
                rows.append(i)
            if n == 1 and seq.num_computed_tokens >= seq.num_prompt_tokens:
                kv += done
            else:
                pre += n
                pairs += n * seq.num_computed_tokens + n * (n + 1) // 2
        seconds += cost.step_seconds(pairs, kv, batch.total_tokens)
        prefill_tokens += pre
        decode_tokens += batch.total_tokens - pre
        batch_sizes.append(len(batch.seqs))
        sched.advance(batch, rows)
        sched.resolve(batch, {i: [7] for i in rows})
        steps += 1
    out_tokens = requests * output_len
    return {
        "overrides": overrides, "kv_blocks": kv_blocks, "steps": steps,
        "preemptions": sched.num_preempted,
        "prefill_tokens": prefill_tokens, "recomputed_tokens": prefill_tokens - requests * prompt_len,
        "decode_tokens": decode_tokens, "mean_batch": round(sum(batch_sizes) / max(steps, 1), 1),
        "model_seconds": round(seconds, 1), "model_output_tok_s": round(out_tokens / seconds),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kv-blocks", type=int, default=53203, help="blocks of 16 tokens (run 11: 53203)")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=1024)
    ap.add_argument("--arrivals-per-step", type=float, default=0.0,
                    help="requests arriving each step (0: all waiting at the start)")
    ap.add_argument("overrides", nargs="*", help="config overrides, e.g. scheduler.max_num_seqs=384")
    a = ap.parse_args()
    print(json.dumps(simulate(a.overrides, a.kv_blocks, a.requests, a.prompt_len, a.output_len,
                              arrivals_per_step=a.arrivals_per_step)))


if __name__ == "__main__":
    main()
