"""Kimi-K2 is DeepSeek-V3's architecture under another model type: its config.json says
`model_type: kimi_k2` with an auto_map to remote code for a config that is DeepSeek-V3's. atom
builds it as DeepSeek-V3's config without running that code, and gives the same tokens as the
same weights saved as deepseek_v3. Its tokenizer is the checkpoint's own code: refused by name
without trust_remote_code, run with it."""
from __future__ import annotations

import json
import shutil

import pytest
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


# A tokenizer that is the checkpoint's own code, named by auto_map as Kimi-K2's is (there
# tiktoken behind tokenization_kimi.TikTokenTokenizer; here bytes, so the test needs nothing).
_TOKENIZER_CODE = '''
from transformers import PreTrainedTokenizer


class TikTokenTokenizer(PreTrainedTokenizer):
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    @property
    def vocab_size(self):
        return 256

    def get_vocab(self):
        return {chr(i): i for i in range(256)}

    def _tokenize(self, text):
        return [chr(b) for b in text.encode("utf-8")]

    def _convert_token_to_id(self, token):
        return ord(token) % 256

    def _convert_id_to_token(self, index):
        return chr(index % 256)

    def convert_tokens_to_string(self, tokens):
        return bytes(ord(t) for t in tokens).decode("utf-8", errors="replace")

    def save_vocabulary(self, save_directory, filename_prefix=None):
        return ()
'''


def _kimi_tokenizer_checkpoint(tmp_path):
    path = make_checkpoint("deepseek_v3_q_lora", tmp_path)
    (path / "tokenization_kimi.py").write_text(_TOKENIZER_CODE)
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "TikTokenTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]}}))
    return path


def test_a_custom_code_tokenizer_is_refused_by_name_without_trust_remote_code(tmp_path):
    from atom.config.compose import compose
    from atom.config.errors import ConfigError

    path = _kimi_tokenizer_checkpoint(tmp_path)
    with pytest.raises(ConfigError) as e:
        compose(["model=local", f"model.path={path}", "runtime=cpu"], launching=True)
    assert [x.field for x in e.value.errors] == ["model.trust_remote_code"]
    assert "tokenization_kimi.py" in str(e.value)


def test_with_trust_remote_code_the_checkpoints_tokenizer_runs(tmp_path):
    path = _kimi_tokenizer_checkpoint(tmp_path)
    engine = local_engine(path, "model.trust_remote_code=true")
    assert type(engine.tokenizer).__name__ == "TikTokenTokenizer"
    assert engine.tokenizer.encode("héllo", add_special_tokens=False) == list("héllo".encode())
    out = engine.generate(["héllo"], SamplingParams(temperature=0, max_tokens=4,
                                                    ignore_eos=True))[0]
    assert len(out["token_ids"]) == 4
    assert out["text"] == engine.tokenizer.decode(out["token_ids"])
