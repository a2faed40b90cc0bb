"""The tokenizer a benchmark counts and builds prompts with, found the way atom's server finds a
model's: `bytes`; a local directory; a .gguf file (its own vocabulary); a conf/model entry or the
served name of one (`HuggingFaceTB/SmolLM2-135M-Instruct`: the embedded default's GGUF, fetched
into the cache like the server fetches it). Nothing is downloaded from a model hub.

So the README's `--model <served name>` against the served default needs no `--tokenizer`, and a
dummy-weight model resolves to the byte-level twin of the stand-in its server uses.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional
from atom.benchmarks.byte_tokenizer import ByteLevelTokenizer
from atom.config.compose import CONF_DIR
from atom.config.compose import compose
from atom.config.errors import ConfigError
from atom.config.flags import model_overrides
from atom.loader.tokenizer import ByteTokenizer, load_tokenizer

BYTES_TOKENIZER = "bytes"


def conf_model_entry(name: str) -> Optional[str]:
    """The conf/model entry whose file name, `name` or `served_model_name` is `name`."""
    from omegaconf import OmegaConf

    for yaml in sorted((CONF_DIR / "model").glob("*.yaml")):
        node = OmegaConf.load(yaml)
        if name in (yaml.stem, node.get("name"), node.get("served_model_name")):
            return yaml.stem
    return None


def _server_tokenizer(model_overrides: list[str]) -> Any:
    """The tokenizer atom's server loads for that model (load=dummy: only the tokenizer is
    wanted, so an hf_config-only entry needs no checkpoint)."""
    tok = load_tokenizer(compose([*model_overrides, "load=dummy"]))
    return ByteLevelTokenizer() if isinstance(tok, ByteTokenizer) else tok


def get_tokenizer(name: str, trust_remote_code: bool = False) -> Any:
    if name == BYTES_TOKENIZER:
        return ByteLevelTokenizer()
    local = Path(name).expanduser()
    if local.is_file() and local.suffix == ".gguf":
        return _server_tokenizer(model_overrides(str(local)))
    if local.exists():
        from transformers import AutoTokenizer  # heavy import, only when a tokenizer is needed

        return AutoTokenizer.from_pretrained(str(local), trust_remote_code=trust_remote_code,
                                             local_files_only=True)
    entry = conf_model_entry(name)
    why = "is neither a local directory or .gguf file nor a conf/model entry or served name"
    if entry is not None:
        try:
            return _server_tokenizer([f"model={entry}"])
        except ConfigError as err:  # an entry this machine cannot build (not implemented, say)
            why = f"names conf/model entry {entry!r}, which has no tokenizer here ({err.rule})"
    raise FileNotFoundError(
        f"tokenizer {name!r} {why}; pass --tokenizer <dir | .gguf | entry> or --tokenizer bytes "
        f"(a dummy-weight atom server). Nothing is downloaded.")
