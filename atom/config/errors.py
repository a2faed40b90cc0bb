from __future__ import annotations

from typing import Iterable

NO_VALUE = object()  # a rule about a field's presence or spelling, where no value was given


class ConfigError(ValueError):
    """A config that breaks one or more rules. Each line names the field, the value and the rule;
    `field`, `value` and `rule` are the first (the most fundamental) one's, `errors` all of them,
    so a user fixes a config in one pass instead of one rule per launch."""

    def __init__(self, field: str, value: object, rule: str) -> None:
        self.field, self.value, self.rule = field, value, rule
        self.errors: list[ConfigError] = [self]
        shown = "" if value is NO_VALUE else f"={value!r}"
        self.line = f"invalid config: {field}{shown}: {rule}"
        super().__init__(self.line)

    def __str__(self) -> str:
        return "\n".join(e.line for e in self.errors)

    @classmethod
    def all_of(cls, errors: Iterable["ConfigError"]) -> "ConfigError":
        """One exception that reports every error (flattened, in the given order)."""
        flat = [leaf for e in errors for leaf in e.errors]
        if not flat:
            raise ValueError("ConfigError.all_of needs at least one error")
        first = flat[0]
        combined = cls(first.field, first.value, first.rule)
        combined.errors = flat
        return combined
