"""lm-eval's `local-completions` and `local-chat-completions` run a small generation task from a
local dataset file against the live server (no hub), and score what the server sent back."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from srv_process import API_KEY

TASK_YAML = """
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["QQ"]
  max_gen_toks: 16
  do_sample: false
  temperature: 0
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("lm_eval_task")
    data = d / "data.jsonl"
    # The synthetic engine answers "Hello Hello ..."; 16 tokens of it is the target.
    data.write_text("".join(json.dumps({"question": f"Question {i}?", "answer": "Hello Hello Hell"}) + "\n"
                            for i in range(6)))
    for name in ("atom_tiny_gen",):
        (d / f"{name}.yaml").write_text(TASK_YAML.format(name=name, data=data))
    return d


@pytest.mark.parametrize("model,path,chat", [("local-completions", "/v1/completions", False),
                                             ("local-chat-completions", "/v1/chat/completions", True)])
def test_lm_eval_generation_task(server, task_dir, monkeypatch, model, path, chat):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import lm_eval
    from lm_eval.tasks import TaskManager

    results = lm_eval.simple_evaluate(
        model=model,
        model_args={"model": "tiny_llama", "base_url": server.base_url + path, "num_concurrent": 3,
                    "max_retries": 1, "tokenized_requests": False, "tokenizer_backend": None,
                    "header": {"Authorization": f"Bearer {API_KEY}"}},
        tasks=["atom_tiny_gen"], task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
        apply_chat_template=chat, log_samples=False)
    score = results["results"]["atom_tiny_gen"]["exact_match,none"]
    assert score == 1.0, results["results"]
