"""``python -m embed_server serve``: Triton plus the API, as ``make serve`` runs them."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m embed_server")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("serve", help="start Triton and the API; Ctrl-C stops both")
    args = parser.parse_args(argv)
    if args.command == "serve":
        from embed_server.serve import main as serve

        return serve()
    return 2


if __name__ == "__main__":
    sys.exit(main())
