"""Kimi-K2 is DeepSeek-V3's architecture under another model type: its config.json says
`model_type: kimi_k2` with an auto_map to remote code for a config that is DeepSeek-V3's. atom
builds it as DeepSeek-V3's config without running that code, and gives the same tokens as the
same weights saved as deepseek_v3."""
from __future__ import annotations

import json
import shutil

import torch

from atom import SamplingParams
from tests.engine.checkpoints import local_engine, make_checkpoint


def test_a_kimi_k2_config_runs_as_deepseek_v3_without_remote_code(tmp_path):
    ds = make_checkpoint("deepseek_v3_q_lora", tmp_path)
    kimi = tmp_path / "kimi"
    shutil.copytree(ds, kimi)
    cfg = json.loads((kimi / "config.json").read_text())
    cfg["model_type"] = "kimi_k2"
    cfg["auto_map"] = {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                       "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}
    (kimi / "config.json").write_text(json.dumps(cfg))  # no configuration_deepseek.py beside it
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 256, (n,), generator=g).tolist() for n in (4, 21)]
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    expected = [o["token_ids"] for o in local_engine(ds).generate(prompts, greedy)]
    assert [o["token_ids"] for o in local_engine(kimi).generate(prompts, greedy)] == expected
