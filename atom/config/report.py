"""How every launcher reports a bad config: one `atom: invalid config: …` line per broken rule on
stderr and exit status 2 (argparse's status for bad arguments), never a traceback."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterable, Iterator

from atom.config.errors import ConfigError
from atom.config.hydra_errors import from_hydra

EXIT_INVALID_CONFIG = 2


def print_config_error(err: ConfigError) -> None:
    for line in str(err).splitlines():
        print(f"atom: {line}", file=sys.stderr)


@contextmanager
def config_errors_exit(overrides: Iterable[str] = ()) -> Iterator[None]:
    """Around a launcher's body. `overrides`: the command line's Hydra overrides, for a Hydra
    composition error that reaches here untranslated (atom.run's, raised inside hydra.main)."""
    try:
        yield
    except ConfigError as err:
        print_config_error(err)
        raise SystemExit(EXIT_INVALID_CONFIG) from None
    except Exception as exc:
        err = from_hydra(exc, overrides)
        if err is None:
            raise
        print_config_error(err)
        raise SystemExit(EXIT_INVALID_CONFIG) from None
