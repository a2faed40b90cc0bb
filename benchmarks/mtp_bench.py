"""Issue 22's GPU benchmark 3: MTP speculation on a reduced-depth DeepSeek-R1 at forced
acceptance, against the same model without speculation, at batch 1 and 32.

    python benchmarks/mtp_bench.py --layers 4 --out $OUT/mtp.json --extra model.max_model_len=4096

Dummy xavier weights at R1's shapes with its next-n layer (num_nextn_predict_layers: 1), so the
drafts are noise and acceptance is forced from the published rate (0.81 for k = 1; the same
per-draft rate for k = 3): what is measured is the cost of the draft layer, the verify steps and
the rejection path, and the tokens per forward the schedule gives. Output tokens per second of
the decode phase (first token excluded) and the engine's MTP counters over the timed run.
On the GPU's Triton kernels every variant runs in CUDA graphs (the verify step at 1 + k tokens a
sequence, the layer's catch-up and its draft depths: runner/cuda_graphs.py), captured at the
powers of two up to the largest batch; `mtp_k*_eager` runs the same speculation without graphs
(what they buy), and each variant records the graphs it captured and how often each replayed.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from probe_kit import probe_meta
from spec_bench_kit import bench_args, dummy_engine, run_variants


def main() -> None:
    ap = bench_args(gen=128, batches="1,32")
    ap.add_argument("--layers", type=int, default=4, help="decoder layers kept (R1 has 61)")
    ap.add_argument("--ks", default="1,3")
    ap.add_argument("--rate", type=float, default=0.81, help="forced per-draft acceptance")
    args = ap.parse_args()
    results: dict[str, Any] = {"meta": probe_meta(command=" ".join(sys.argv))}
    batches = [int(b) for b in args.batches.split(",")]
    eager = ["runtime.enforce_eager=true"]
    variants = [("plain", []), ("plain_eager", eager)]
    for k in (int(k) for k in args.ks.split(",")):
        mtp = ["specdecode=mtp", f"specdecode.num_speculative_tokens={k}",
               f"specdecode.acceptance_rate={args.rate}"]
        variants += [(f"mtp_k{k}", mtp), (f"mtp_k{k}_eager", [*mtp, *eager])]
    model = ["model=deepseek_r1", f"model.hf_config.num_hidden_layers={args.layers}"]
    run_variants(variants, lambda spec: dummy_engine([*model, *args.extra, *spec], batches),
                 batches, args.ctx, args.gen, args.temperature, results)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
