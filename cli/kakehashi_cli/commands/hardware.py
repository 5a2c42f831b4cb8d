"""`kakehashi hardware`: Hardware you may use."""

from __future__ import annotations

import argparse

from kakehashi_cli.common import (
    API,
    EXIT_OK,
    client_for,
    describe,
    print_json,
)


def add_parser(sub, common) -> None:
    p = sub.add_parser("hardware", parents=[common], help="hardware you may use (cheapest first with --project)")
    p.add_argument("--project")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    hardware = list(client_for(args).paginate(f"{API}/hardware/", project=args.project))
    if args.json:
        print_json(hardware)
    else:
        print("\n".join(describe(hw) for hw in hardware) or "No hardware available.")
    return EXIT_OK
