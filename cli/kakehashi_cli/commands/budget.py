"""`kakehashi budget`: A project's budget: spent, reserved, available."""

from __future__ import annotations

import argparse

from kakehashi_cli.common import (
    API,
    EXIT_OK,
    client_for,
    print_json,
)


def add_parser(sub, common) -> None:
    p = sub.add_parser("budget", parents=[common], help="a project's budget: spent, reserved, available")
    p.add_argument("project")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    budget = client_for(args).get(f"{API}/projects/{args.project}/budget/")
    if args.json:
        print_json(budget)
    elif budget["budget"] is None:
        print(f"Project {budget['project']} has no budget set: jobs are not limited by cost.")
    else:
        unit = budget["unit"]
        kind = "strict" if budget["strict"] else "soft"
        print(f"Project {budget['project']} ({kind} {budget['period']} budget since {budget['period_start']})")
        text = budget.get("text") or budget  # as the pages show it; exact from an older portal
        for key in ("budget", "spent", "reserved", "available"):
            print(f"{key:>10}: {text[key]:>12} {unit}")
    return EXIT_OK
