"""`kakehashi projects`: Your projects and roles."""

from __future__ import annotations

import argparse

from kakehashi_cli.common import (
    API,
    EXIT_OK,
    client_for,
    print_json,
    table,
)


def add_parser(sub, common) -> None:
    p = sub.add_parser("projects", parents=[common], help="your projects and roles")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    projects = list(client_for(args).paginate(f"{API}/projects/"))
    if args.json:
        print_json(projects)
    else:
        print(table([[p["slug"], p["role"] or "-", p["name"]] for p in projects], ["PROJECT", "ROLE", "NAME"]))
    return EXIT_OK
