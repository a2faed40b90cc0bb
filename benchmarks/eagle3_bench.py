"""Issue 22's GPU benchmarks 1 and 2: EAGLE-3 speculation on Llama-3.1-8B at forced acceptance,
against the same target without speculation, in one command.

    python benchmarks/eagle3_bench.py --out $OUT/eagle3.json                    # benchmark 1
    python benchmarks/eagle3_bench.py --lengths 3.0 --batches 1,8,32,128 --out $OUT/eagle3_conc.json

Dummy xavier weights for the target (conf/model/llama3_8b.yaml) and for an EAGLE-3 head at the
published Llama-3.1-8B head's shape (one decoder layer over the 3 x 4096 captured states, a 32k
draft vocabulary mapped into the target's 128k by d2t), written as a config.json only; the
drafts are noise, so acceptance is forced (`specdecode.acceptance_length`: 1 + accepted drafts
per verify). Benchmark 1: batch 1, k = 7, acceptance length 3.0 and 6.0 against plain decoding
(goal: at least SGLang's 2.36x at the length it implies), and 1.0 (every draft rejected: the
overhead, goal <= 15%). Benchmark 2: --batches 1,8,32,128 at 3.0, where speculation stops paying.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from probe_kit import probe_meta
from spec_bench_kit import bench_args, dummy_engine, run_variants

# The published EAGLE-3 head for Llama-3.1-8B-Instruct: its target's widths and rope, one layer.
HEAD_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 1, "num_attention_heads": 32,
    "num_key_value_heads": 8, "hidden_act": "silu", "rms_norm_eps": 1e-5, "vocab_size": 128256,
    "draft_vocab_size": 32000, "max_position_embeddings": 131072, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def write_head(root: Path) -> Path:
    head = root / "eagle3_llama3_8b"
    head.mkdir(exist_ok=True)
    (head / "config.json").write_text(json.dumps(HEAD_CONFIG))
    return head


def main() -> None:
    ap = bench_args(gen=256, batches="1")
    ap.add_argument("--k", type=int, default=7)
    ap.add_argument("--lengths", default="1.0,3.0,6.0", help="forced mean acceptance lengths")
    args = ap.parse_args()
    results: dict[str, Any] = {"meta": probe_meta(command=" ".join(sys.argv))}
    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        head = write_head(Path(tmp))
        variants: list[tuple[str, list[str]]] = [("plain", [])]
        for length in (float(x) for x in args.lengths.split(",")):
            variants.append((f"eagle3_k{args.k}_len{length:g}", [
                "specdecode=eagle3", f"specdecode.draft_model={head}",
                f"specdecode.num_speculative_tokens={args.k}",
                f"specdecode.acceptance_length={length}"]))
        run_variants(variants,
                     lambda spec: dummy_engine(["model=llama3_8b", *args.extra, *spec], batches),
                     batches,
                     args.ctx, args.gen, args.temperature, results)
    plain = {r["batch"]: r["decode_tok_s"] for r in results["plain"]["runs"]}
    for name, v in results.items():
        if name.startswith("eagle3"):
            ratios = {r["batch"]: round(r["decode_tok_s"] / plain[r["batch"]], 3) for r in v["runs"]}
            print(f"== {name} / plain: {ratios}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
