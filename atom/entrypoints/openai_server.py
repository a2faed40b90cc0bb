"""`python -m atom.entrypoints.openai_server --model ... --server-port 8000 ...`

Flag-compatible launcher: every flag of the spec's engine and server tables (kebab or snake
spelling) maps onto the same Config field `python -m atom.run` overrides; trailing `key=value`
arguments are Hydra overrides on top (e.g. `server.engine_source=synthetic`). A bad config is
reported like atom.run reports it: one line per broken rule, exit status 2.
"""
from __future__ import annotations

import argparse
from typing import Optional, Sequence

from atom.config.flags import ENGINE_FLAGS, SERVER_FLAGS, add_cli_args, config_from_args
from atom.config.report import config_errors_exit
from atom.config.schema import Config
from atom.entrypoints.api_server import serve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m atom.entrypoints.openai_server",
        usage="%(prog)s [--flag value ...] [field=value ...]",
        description="atom's OpenAI- and Anthropic-compatible server. Each flag sets one config "
                    "field (named in its help); `python -m atom.run --help` lists every field.")
    add_cli_args(parser, ENGINE_FLAGS + SERVER_FLAGS)
    parser.add_argument("overrides", nargs="*", default=[],
                        help="Hydra overrides on top of the flags, e.g. server.api_key=x")
    return parser


def config_from_argv(argv: Optional[Sequence[str]] = None) -> Config:
    args = build_parser().parse_args(argv)
    return config_from_args(args, ENGINE_FLAGS + SERVER_FLAGS, extra=args.overrides,
                            launching=True)


def main(argv: Optional[Sequence[str]] = None) -> None:
    with config_errors_exit():
        cfg = config_from_argv(argv)
        serve(cfg)


if __name__ == "__main__":
    main()
