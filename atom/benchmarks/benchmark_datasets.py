"""Benchmark prompts: random, sharegpt, sonnet, burstgpt and hf — all from local files.

Nothing here downloads: a dataset that needs a file takes a local path, and the sonnet text ships
in `atom/benchmarks/data/`. Prompt lengths are measured with the benchmark's tokenizer after the
prompt text is final, because a decode→encode round trip rarely preserves a token count.
"""
from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np
from atom.benchmarks.hf_records import load_hf_records, record_pair

logger = logging.getLogger(__name__)

DATA_DIR = Path(__file__).resolve().parent / "data"
SONNET_PATH = DATA_DIR / "sonnet.txt"
SONNET_BASE_PROMPT = "Pick as many lines as you can from these poem lines:\n"
DATASET_NAMES = ("sharegpt", "burstgpt", "sonnet", "random", "hf")


@dataclass
class SampleRequest:
    prompt: str
    prompt_len: int
    expected_output_len: int


def _n_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def _chat(tokenizer: Any, prompt: str) -> str:
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("--use-chat-template: the tokenizer has no chat template")
    messages = [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def _ordinary_ids(tokenizer: Any) -> np.ndarray:
    special = set(tokenizer.all_special_ids or [])
    return np.array([i for i in range(len(tokenizer)) if i not in special], dtype=np.int64)


def _fit_to_length(tokenizer: Any, ids: list[int], target: int, vocab: np.ndarray,
                   rng: np.random.Generator) -> str:
    """Decode, re-encode, then trim or top up until the text encodes to `target` tokens
    (a few rounds; the final length is re-measured by the caller either way)."""
    text = tokenizer.decode(ids)
    for _ in range(4):
        re_ids = tokenizer.encode(text, add_special_tokens=False)
        if len(re_ids) == target:
            break
        if len(re_ids) > target:
            re_ids = re_ids[:target]
        else:
            re_ids = re_ids + rng.choice(vocab, target - len(re_ids)).tolist()
        text = tokenizer.decode(re_ids)
    return text


def _lengths(rng: np.random.Generator, n: int, length: int, range_ratio: float) -> np.ndarray:
    """Uniform integers in [length·ratio, length]; ratio 1.0 means every request is `length`."""
    if not 0.0 <= range_ratio <= 1.0:
        raise ValueError(f"--random-range-ratio must be in [0, 1], got {range_ratio}")
    low = int(length * range_ratio)
    return rng.integers(low, length + 1, size=n)


def sample_random_requests(
    tokenizer: Any, num_requests: int, input_len: int, output_len: int, range_ratio: float = 1.0,
    prefix_len: int = 0, use_chat_template: bool = False, seed: int = 0,
) -> list[SampleRequest]:
    """Random token prompts sharing one random `prefix_len`-token prefix (a prefix-cache probe)."""
    rng = np.random.default_rng(seed)
    vocab = _ordinary_ids(tokenizer)
    prefix = rng.choice(vocab, prefix_len).tolist() if prefix_len > 0 else []
    input_lens = _lengths(rng, num_requests, input_len, range_ratio)
    output_lens = _lengths(rng, num_requests, output_len, range_ratio)
    requests = []
    for in_len, out_len in zip(input_lens, output_lens):
        body = rng.choice(vocab, int(in_len)).tolist()
        prompt = _fit_to_length(tokenizer, prefix + body, prefix_len + int(in_len), vocab, rng)
        if use_chat_template:
            prompt = _chat(tokenizer, prompt)
        requests.append(SampleRequest(prompt, _n_tokens(tokenizer, prompt), max(1, int(out_len))))
    return requests


def _shuffled(items: Sequence[Any], seed: int) -> list[Any]:
    order = np.random.default_rng(seed).permutation(len(items))
    return [items[i] for i in order]


def _pairs_to_requests(
    pairs: Iterable[tuple[str, Optional[str]]], tokenizer: Any, num_requests: int,
    fixed_output_len: Optional[int], prune: bool,
) -> list[SampleRequest]:
    """Keep (prompt, completion) pairs until `num_requests`. With `prune`, drop the very short
    (< 4 tokens) and very long (prompt > 1024 or prompt + output > 2048) as ShareGPT runs do."""
    requests: list[SampleRequest] = []
    for prompt, completion in pairs:
        if len(requests) == num_requests:
            break
        prompt_len = _n_tokens(tokenizer, prompt)
        if fixed_output_len is not None:
            out_len = fixed_output_len
        elif completion is not None:
            out_len = _n_tokens(tokenizer, completion)
        else:
            raise ValueError("this dataset has no completions: give a fixed output length")
        if prune and (prompt_len < 4 or (fixed_output_len is None and out_len < 4)):
            continue
        if prune and fixed_output_len is None and (prompt_len > 1024 or prompt_len + out_len > 2048):
            continue
        requests.append(SampleRequest(prompt, prompt_len, out_len))
    if not requests:
        raise ValueError("no usable request in the dataset")
    if len(requests) < num_requests:
        logger.warning("dataset yielded %d of %d requested prompts", len(requests), num_requests)
    return requests


def _require_file(path: Optional[str], dataset: str) -> Path:
    if path is None:
        raise ValueError(f"--dataset-name {dataset} needs --dataset-path (a local file; nothing is downloaded)")
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{dataset} dataset: {p} does not exist (datasets are never "
                                "downloaded: a hub ID must first be saved to a local path)")
    return p


def _sharegpt_pairs(records: Iterable[dict[str, Any]]) -> Iterable[tuple[str, str]]:
    for rec in records:
        turns = rec.get("conversations") or rec.get("conversation") or []
        if len(turns) >= 2:
            yield turns[0]["value"], turns[1]["value"]


def sample_sharegpt_requests(
    dataset_path: Optional[str], num_requests: int, tokenizer: Any,
    fixed_output_len: Optional[int] = None, seed: int = 0,
) -> list[SampleRequest]:
    """ShareGPT JSON: first human turn is the prompt, first reply sets the output length."""
    records = json.loads(_require_file(dataset_path, "sharegpt").read_text(encoding="utf-8"))
    pairs = _sharegpt_pairs(_shuffled(records, seed))
    return _pairs_to_requests(pairs, tokenizer, num_requests, fixed_output_len, prune=True)


def sample_sonnet_requests(
    tokenizer: Any, num_requests: int, input_len: int = 550, output_len: int = 150,
    prefix_len: int = 200, dataset_path: Optional[str] = None, use_chat_template: bool = False,
    seed: int = 0,
) -> list[SampleRequest]:
    """Poem lines after a fixed instruction; the first lines are a prefix every request shares."""
    path = Path(dataset_path).expanduser() if dataset_path else SONNET_PATH
    lines = [line + "\n" for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    avg = float(np.mean([_n_tokens(tokenizer, line) for line in lines]))
    base_len = _n_tokens(tokenizer, SONNET_BASE_PROMPT)
    if input_len <= base_len:
        raise ValueError(f"--sonnet-input-len must exceed the instruction's {base_len} tokens")
    n_input = max(1, round((input_len - base_len) / avg))
    n_prefix = min(n_input, max(0, round((prefix_len - base_len) / avg)))
    prefix = lines[:n_prefix]
    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(num_requests):
        sampled = [lines[i] for i in rng.integers(0, len(lines), n_input - n_prefix)]
        prompt = SONNET_BASE_PROMPT + "".join(prefix + sampled)
        if use_chat_template:
            prompt = _chat(tokenizer, prompt)
        requests.append(SampleRequest(prompt, _n_tokens(tokenizer, prompt), output_len))
    return requests


def sample_burstgpt_requests(
    dataset_path: Optional[str], num_requests: int, tokenizer: Any, seed: int = 0,
    model_filter: Optional[str] = None,
) -> list[SampleRequest]:
    """BurstGPT CSV: real request/response token counts, random token prompts of those lengths.
    Rows whose response is 0 tokens (failed requests in the trace) are dropped."""
    with _require_file(dataset_path, "burstgpt").open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if int(float(r["Response tokens"])) > 0
                and (model_filter is None or r.get("Model") == model_filter)]
    if not rows:
        raise ValueError("burstgpt: no row with a non-zero response (after the model filter)")
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(rows), num_requests, replace=num_requests > len(rows))
    vocab = _ordinary_ids(tokenizer)
    requests = []
    for i in picks:
        in_len, out_len = int(float(rows[i]["Request tokens"])), int(float(rows[i]["Response tokens"]))
        prompt = _fit_to_length(tokenizer, rng.choice(vocab, in_len).tolist(), in_len, vocab, rng)
        requests.append(SampleRequest(prompt, _n_tokens(tokenizer, prompt), out_len))
    return requests


def sample_hf_requests(
    dataset_path: Optional[str], num_requests: int, tokenizer: Any,
    fixed_output_len: Optional[int] = None, split: str = "train", seed: int = 0,
) -> list[SampleRequest]:
    """A local Hugging Face dataset: a `save_to_disk` directory (needs the `datasets` package)
    or a JSON / JSONL file or a directory of them."""
    records = load_hf_records(_require_file(dataset_path, "hf"), split)
    pairs = (p for p in map(record_pair, _shuffled(records, seed)) if p is not None)
    return _pairs_to_requests(pairs, tokenizer, num_requests, fixed_output_len, prune=False)


def get_samples(args: Any, tokenizer: Any) -> list[SampleRequest]:
    """Dispatch on `args.dataset_name` (an argparse namespace of benchmark_serving's flags)."""
    name = args.dataset_name
    if name == "random":
        return sample_random_requests(
            tokenizer, args.num_prompts, args.random_input_len, args.random_output_len,
            args.random_range_ratio, args.random_prefix_len, args.use_chat_template, args.seed)
    if name == "sharegpt":
        return sample_sharegpt_requests(args.dataset_path, args.num_prompts, tokenizer,
                                        args.sharegpt_output_len, args.seed)
    if name == "sonnet":
        return sample_sonnet_requests(
            tokenizer, args.num_prompts, args.sonnet_input_len, args.sonnet_output_len,
            args.sonnet_prefix_len, args.dataset_path, args.use_chat_template, args.seed)
    if name == "burstgpt":
        return sample_burstgpt_requests(args.dataset_path, args.num_prompts, tokenizer, args.seed,
                                        args.burstgpt_model)
    if name == "hf":
        return sample_hf_requests(args.dataset_path, args.num_prompts, tokenizer,
                                  args.hf_output_len, args.hf_split, args.seed)
    raise ValueError(f"unknown dataset {name!r}; choose from {', '.join(DATASET_NAMES)}")
