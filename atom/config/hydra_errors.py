"""Hydra's and OmegaConf's composition errors as ConfigErrors, so every launcher reports a bad
override the way it reports a broken rule: one line naming the field, the value and the fix.

Hydra's own messages are multi-line and, for an unknown key, suggest `+key=value`, which adds a
key nothing reads; here an unknown key is refused with the fields that do exist.
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Iterable, Optional

from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from atom.config.errors import NO_VALUE, ConfigError
from atom.config.schema import Config


class _Text(str):
    """An override's value as typed: shown without quotes, as the user wrote it."""

    def __repr__(self) -> str:
        return str(self)


def _override_value(key: str, overrides: Iterable[str]) -> object:
    for o in overrides:
        k, sep, v = o.lstrip("+~").partition("=")
        if sep and k == key:
            return _Text(v)
    return NO_VALUE


def unknown_key(full_key: str, known: Iterable[str], value: object = NO_VALUE) -> ConfigError:
    """`kv_cache.blok_size`: the closest known names, else all of them."""
    known = sorted(known)
    if not known:  # a free-form mapping (model.hf_config, bench.extra_body): keys are added
        return ConfigError(full_key, value, f"not in this mapping (add it with +{full_key}=...)")
    leaf = full_key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(leaf, known, n=3)
    hint = f"did you mean {' or '.join(close)}?" if close else f"known: {', '.join(known)}"
    return ConfigError(full_key, value, f"no such field ({hint})")


def _fields_of(obj_type: Optional[type]) -> list[str]:
    if obj_type is not None and dataclasses.is_dataclass(obj_type):
        return [f.name for f in dataclasses.fields(obj_type)]
    return []


def from_hydra(exc: Exception, overrides: Iterable[str] = ()) -> Optional[ConfigError]:
    """The ConfigError for a Hydra/OmegaConf composition error, or None for anything else."""
    overrides = list(overrides)
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and "/" in exc.missing_cfg_file:
        group, _, option = exc.missing_cfg_file.rpartition("/")
        group = group.replace("/", ".")
        return ConfigError(group, option, f"must be one of {', '.join(exc.options or [])}")
    if isinstance(exc, OverrideParseException):
        bad = next((o for o in overrides if "=" not in o), None) or " ".join(overrides)
        return ConfigError("override", _Text(bad), "must read key=value (e.g. kv_cache.dtype=fp8)")
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and getattr(cause, "full_key", None):
        return _unknown(cause, overrides)
    if isinstance(cause, ValidationError) and getattr(cause, "full_key", None):
        rule = str(cause.msg).splitlines()[0] if getattr(cause, "msg", None) else "wrong type"
        return ConfigError(cause.full_key, cause.value, rule)
    if isinstance(exc, ConfigCompositionException):
        return ConfigError("overrides", _Text(" ".join(overrides)), str(exc).splitlines()[0])
    return None


def _unknown(cause: ConfigAttributeError | ConfigKeyError, overrides: list[str]) -> ConfigError:
    full_key = str(cause.full_key)
    value = _override_value(full_key, overrides)
    known = _fields_of(getattr(cause, "object_type", None))
    if not known and "." not in full_key:
        known = _fields_of(Config)
    return unknown_key(full_key, known, value)
