from __future__ import annotations


class ConfigError(ValueError):
    """A config that breaks a rule. The message names the field, the value and the rule."""

    def __init__(self, field: str, value: object, rule: str) -> None:
        self.field, self.value, self.rule = field, value, rule
        super().__init__(f"invalid config: {field}={value!r}: {rule}")
