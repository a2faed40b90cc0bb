"""Qwen2 / Qwen2.5: Llama with biases on q, k and v only."""
from __future__ import annotations

from typing import Any

from atom.models.llama import LlamaForCausalLM


class Qwen2ForCausalLM(LlamaForCausalLM):
    @staticmethod
    def attention_biases(hf: Any, bias: bool) -> tuple[bool, bool]:
        return True, False
