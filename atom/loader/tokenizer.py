"""The model's tokenizer: HF files beside the checkpoint, the GGUF's own vocabulary, or, for a
dummy-weight model that names none, a byte-level stand-in (its text is not meant to be read)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

from atom.config.model_facts import is_gguf
from atom.config.schema import Config
from atom.loader.hf_config import model_source

log = logging.getLogger("atom.loader")


class ByteTokenizer:
    """Ids 0..255 are bytes; larger ids decode to a visible placeholder. For speed work only."""

    def __init__(self, vocab_size: int, eos_token_id: Optional[int]) -> None:
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.bos_token_id = None
        self.chat_template = None
        self.all_special_ids: list[int] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [b % self.vocab_size for b in text.encode("utf-8")]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        out, buf = [], bytearray()
        for i in ids:
            if 0 <= i < 256:
                buf.append(i)
                continue
            out.append(buf.decode("utf-8", errors="replace"))
            buf = bytearray()
            out.append(f" <{i}>")
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def __call__(self, text: str, **_: Any) -> dict:
        return {"input_ids": self.encode(text)}

    def __len__(self) -> int:
        return self.vocab_size


def _gguf_tokenizer(path: Path) -> Any:
    """transformers converts the GGUF vocabulary once; the result is cached beside the file."""
    from transformers import AutoTokenizer

    cached = path.parent / (path.stem + ".tokenizer")
    if (cached / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(cached))
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    try:
        tok.save_pretrained(str(cached))
    except OSError as e:  # a read-only cache is fine: convert again next time
        log.info("could not cache the GGUF tokenizer at %s: %s", cached, e)
    return tok


def load_tokenizer(cfg: Config, announce: bool = True) -> Any:
    """transformers' tokenizer modules are imported only when there is a tokenizer to load:
    on the GPU host (transformers 5.17) they pull in torch._dynamo, torch.distributed.tensor
    and scikit-learn, seconds of every start of a dummy-weight model."""
    if cfg.model.tokenizer:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(cfg.model.tokenizer,
                                             trust_remote_code=cfg.model.trust_remote_code)
    src = model_source(cfg)
    if src is not None and is_gguf(src):
        return _gguf_tokenizer(src)
    if src is not None and any((src / f).exists() for f in _TOKENIZER_FILES):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(src), trust_remote_code=cfg.model.trust_remote_code)
    return _byte_stand_in(cfg, src, announce)


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _byte_stand_in(cfg: Config, src: Optional[Path], announce: bool) -> ByteTokenizer:
    if src is not None:
        import json

        hf = json.loads((src / "config.json").read_text())
    else:
        hf = cfg.model.hf_config
    eos = hf.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    if announce:
        log.info("model %s has no tokenizer: using a byte-level stand-in", cfg.model.name)
    return ByteTokenizer(int(hf.get("vocab_size", 256)), eos)
