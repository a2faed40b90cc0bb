"""`python -m atom.entrypoints.openai_server --model ... --server-port 8000 ...`

Flag-compatible launcher: every flag of the spec's engine and server tables (kebab or snake
spelling) maps onto the same Config field `python -m atom.run` overrides; trailing `key=value`
arguments are Hydra overrides on top (e.g. `server.engine_source=synthetic`).
"""
from __future__ import annotations

import argparse
from typing import Optional, Sequence

from atom.config.flags import ENGINE_FLAGS, SERVER_FLAGS, add_cli_args, config_from_args
from atom.config.schema import Config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m atom.entrypoints.openai_server",
                                     description="atom OpenAI-compatible server")
    add_cli_args(parser, ENGINE_FLAGS + SERVER_FLAGS)
    parser.add_argument("overrides", nargs="*", default=[], help="Hydra overrides, e.g. server.api_key=x")
    return parser


def config_from_argv(argv: Optional[Sequence[str]] = None) -> Config:
    args = build_parser().parse_args(argv)
    return config_from_args(args, ENGINE_FLAGS + SERVER_FLAGS, extra=args.overrides)


def main(argv: Optional[Sequence[str]] = None) -> None:
    from atom.entrypoints.openai.api_server import serve

    serve(config_from_argv(argv))


if __name__ == "__main__":
    main()
