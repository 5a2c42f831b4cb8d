"""kakehashi — submit and follow jobs on a Kakehashi portal.

Exit codes: 0 done, 2 wrong usage (or a local file that cannot be used), 3 the portal refused (the message says
why), 4 the portal could not be reached. Human output by default; --json prints the API's answers for scripts.
Each command is a module of kakehashi_cli/commands/ (its parser section and what it does); this module builds the
parser from them and turns errors into exit codes.
"""

from __future__ import annotations

import argparse
import os
import sys

from kakehashi_cli import __version__, config, files
from kakehashi_cli.client import ApiError, BadAddress, ConnectionFailed
from kakehashi_cli.commands import AFTER_FILES, BEFORE_FILES
from kakehashi_cli.common import (
    EXIT_CONNECTION,
    EXIT_REFUSED,
    EXIT_USAGE,
    Refused,
    UsageError,
    client_for,
    print_json,
)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: an option given before the command is not reset by the command's own default.
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON answer")
    common.add_argument("--timeout", type=float, default=argparse.SUPPRESS, help="seconds to wait for the portal (60)")

    parser = argparse.ArgumentParser(
        prog="kakehashi", parents=[common],
        description="Run and follow jobs on a Kakehashi portal. Start with: kakehashi login --url URL",
        epilog="exit codes: 0 ok, 2 usage, 3 refused by the portal, 4 portal unreachable",
    )
    parser.add_argument("--version", action="version", version=f"kakehashi {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    for command in BEFORE_FILES:
        command.add_parser(sub, common)
    files.register(sub, common, lambda fn: lambda args: fn(args, client_for(args), print_json))
    for command in AFTER_FILES:
        command.add_parser(sub, common)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.json = getattr(args, "json", False)
    args.timeout = getattr(args, "timeout", 60.0)
    try:
        code = args.func(args)
    except (UsageError, BadAddress) as exc:
        print(f"kakehashi: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except config.ConfigError as exc:
        print(f"kakehashi: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except Refused as exc:
        print(f"kakehashi: {exc}", file=sys.stderr)
        code = EXIT_REFUSED
    except ApiError as exc:
        hint = ""
        if exc.status == 401:
            hint = " (check the token, or run kakehashi login again)"
        field = f" [{exc.field}]" if exc.field else ""
        print(f"kakehashi: refused ({exc.status} {exc.code}){field}: {exc.detail}{hint}", file=sys.stderr)
        code = EXIT_REFUSED
    except ConnectionFailed as exc:
        print(f"kakehashi: {exc}", file=sys.stderr)
        code = EXIT_CONNECTION
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # `kakehashi status 12 | head`: the reader has what it wanted. No traceback, and none from Python's own
        # flush at exit either (stdout now points at /dev/null), as other Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 141  # 128 + SIGPIPE, what a shell reports for a command a pipe's reader closed on
    sys.exit(code)


if __name__ == "__main__":
    main()
