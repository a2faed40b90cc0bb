"""Every dataset from local files only, with lengths checked against the tokenizer."""
from __future__ import annotations

import csv
import json

import pytest

from atom.benchmarks.benchmark_datasets import (
    SONNET_BASE_PROMPT, SONNET_PATH, sample_burstgpt_requests, sample_hf_requests,
    sample_random_requests, sample_sharegpt_requests, sample_sonnet_requests,
)


def _len(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def test_random_fixed_lengths_and_reproducible(tokenizer):
    reqs = sample_random_requests(tokenizer, 6, input_len=40, output_len=12, seed=3)
    assert all(r.prompt_len == 40 == _len(tokenizer, r.prompt) for r in reqs)
    assert all(r.expected_output_len == 12 for r in reqs)
    again = sample_random_requests(tokenizer, 6, input_len=40, output_len=12, seed=3)
    assert [r.prompt for r in reqs] == [r.prompt for r in again]
    assert len({r.prompt for r in reqs}) == 6


def test_random_range_ratio_and_shared_prefix(tokenizer):
    reqs = sample_random_requests(tokenizer, 30, 50, 20, range_ratio=0.5, prefix_len=10, seed=1)
    for r in reqs:
        assert 10 + 25 <= r.prompt_len <= 10 + 50
        assert 10 <= r.expected_output_len <= 20
    prefixes = {" ".join(r.prompt.split()[:10]) for r in reqs}
    assert len(prefixes) == 1
    assert len({r.prompt_len for r in reqs}) > 1
    with pytest.raises(ValueError):
        sample_random_requests(tokenizer, 1, 10, 10, range_ratio=1.5)


def test_random_with_chat_template(tokenizer):
    (req,) = sample_random_requests(tokenizer, 1, 20, 5, use_chat_template=True)
    assert req.prompt.startswith("<s> user : ") and req.prompt.endswith("assistant : ")
    assert req.prompt_len == _len(tokenizer, req.prompt) > 20


def test_sharegpt_local_json(tmp_path, tokenizer):
    convs = [{"conversations": [{"from": "human", "value": f"Shall I compare thee {i} to a summer day"},
                                {"from": "gpt", "value": "Thou art more lovely and more temperate " * (i + 1)}]}
             for i in range(5)]
    convs.append({"conversations": [{"from": "human", "value": "hi"}]})  # one turn: skipped
    convs.append({"conversations": [{"from": "human", "value": "too"}, {"from": "gpt", "value": "short"}]})
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(convs))
    reqs = sample_sharegpt_requests(str(path), 10, tokenizer)
    assert len(reqs) == 5
    assert all(r.expected_output_len % 7 == 0 and r.prompt_len >= 4 for r in reqs)
    fixed = sample_sharegpt_requests(str(path), 3, tokenizer, fixed_output_len=9)
    assert len(fixed) == 3 and {r.expected_output_len for r in fixed} == {9}


def test_sharegpt_needs_a_path(tokenizer):
    with pytest.raises(ValueError, match="dataset-path"):
        sample_sharegpt_requests(None, 1, tokenizer)


def test_sonnet_ships_and_shares_a_prefix(tokenizer):
    assert SONNET_PATH.exists() and len(SONNET_PATH.read_text().splitlines()) > 2000
    reqs = sample_sonnet_requests(tokenizer, 4, input_len=120, output_len=30, prefix_len=60)
    for r in reqs:
        assert r.prompt.startswith(SONNET_BASE_PROMPT) and r.expected_output_len == 30
        assert 80 <= r.prompt_len <= 160
    first_lines = {tuple(r.prompt.splitlines()[1:4]) for r in reqs}
    assert len(first_lines) == 1


def test_burstgpt_local_csv(tmp_path, tokenizer):
    path = tmp_path / "burst.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"])
        w.writerow([0, "ChatGPT", 30, 12, 42, "Conversation log"])
        w.writerow([1, "GPT-4", 20, 8, 28, "Conversation log"])
        w.writerow([2, "GPT-4", 25, 0, 25, "Conversation log"])  # failed: dropped
    reqs = sample_burstgpt_requests(str(path), 6, tokenizer, seed=0)
    assert {(r.prompt_len, r.expected_output_len) for r in reqs} <= {(30, 12), (20, 8)}
    gpt4 = sample_burstgpt_requests(str(path), 3, tokenizer, model_filter="GPT-4")
    assert {(r.prompt_len, r.expected_output_len) for r in gpt4} == {(20, 8)}


def test_hf_jsonl_file_and_directory(tmp_path, tokenizer):
    rows = [{"prompt": "When forty winters shall besiege thy brow", "completion": "And dig deep trenches"},
            {"messages": [{"role": "user", "content": "Look in thy glass"},
                          {"role": "assistant", "content": "and tell the face"}]},
            {"conversations": [{"from": "human", "value": "Music to hear"}, {"from": "gpt", "value": "why"}]}]
    f = tmp_path / "data.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows))
    reqs = sample_hf_requests(str(f), 10, tokenizer)
    assert sorted(r.expected_output_len for r in reqs) == [1, 4, 4]
    d = tmp_path / "ds"
    d.mkdir()
    (d / "train.json").write_text(json.dumps(rows[:1]))
    (d / "test.json").write_text(json.dumps(rows[1:]))
    assert len(sample_hf_requests(str(d), 10, tokenizer, fixed_output_len=7)) == 1
    assert len(sample_hf_requests(str(d), 10, tokenizer, split="test")) == 2


def test_hf_saved_dataset_needs_the_datasets_package(tmp_path, tokenizer):
    import importlib.util

    d = tmp_path / "saved"
    d.mkdir()
    (d / "dataset_info.json").write_text("{}")
    if importlib.util.find_spec("datasets") is None:
        with pytest.raises(RuntimeError, match="datasets"):
            sample_hf_requests(str(d), 1, tokenizer)


def test_bytes_tokenizer_gives_one_token_per_character():
    from atom.benchmarks.tokenizer_source import get_tokenizer

    tok = get_tokenizer("bytes")
    reqs = sample_random_requests(tok, 4, input_len=64, output_len=8, range_ratio=0.5, prefix_len=16)
    for r in reqs:
        assert r.prompt_len == len(r.prompt) == len(r.prompt.encode()) and 16 + 32 <= r.prompt_len <= 80
        assert all(32 <= ord(c) < 127 for c in r.prompt)
