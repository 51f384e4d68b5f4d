"""``python -m embed_server``: ``serve`` (Triton plus the API) and the client commands."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from embed_server.cli import add_commands, run
    from embed_server.settings import Settings

    parser = argparse.ArgumentParser(prog="python -m embed_server")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("serve", help="start Triton and the API; Ctrl-C stops both")
    add_commands(commands, f"http://127.0.0.1:{Settings().port}")
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "bench":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "serve":
        from embed_server.serve import main as serve

        return serve()
    return run(args, extra)


if __name__ == "__main__":
    sys.exit(main())
