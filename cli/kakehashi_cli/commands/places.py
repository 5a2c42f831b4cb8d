"""`kakehashi places`: Every place a shape may run, cost and how busy, cheapest first (the job form's comparison)."""

from __future__ import annotations

import argparse
import os

from kakehashi_cli.common import (
    API,
    EXIT_OK,
    UsageError,
    client_for,
    parse_gpus,
    print_json,
    print_places,
)


def add_parser(sub, common) -> None:
    p = sub.add_parser("places", parents=[common],
                       help="every place a shape may run (e.g. --gpus 8 --hours 2): cost and how busy, cheapest first")
    p.add_argument("--project", default=os.environ.get("KAKEHASHI_PROJECT"), help="project slug ($KAKEHASHI_PROJECT)")
    p.add_argument("--gpus", default="0", help="GPUs in all: 8, or MODEL:COUNT such as a100:8 (default 0: CPU)")
    p.add_argument("--hours", default="1", help="walltime in hours (default 1)")
    p.add_argument("--walltime", help="instead of --hours: HH:MM:SS, 90m, 2h")
    p.add_argument("--nodes", type=int, default=1, help="for a CPU job: how many nodes (default 1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Every place the project may run this shape, cheapest first: the comparison the job form shows."""
    if not args.project:
        raise UsageError("give the project: --project SLUG (or set KAKEHASHI_PROJECT)")
    model, count = parse_gpus(args.gpus)
    params = {"project": args.project, "gpus": f"{model}:{count}" if model else str(count), "nodes": args.nodes}
    params.update({"walltime": args.walltime} if args.walltime else {"hours": args.hours})
    answer = client_for(args).get(f"{API}/places/", **params)
    if args.json:
        print_json(answer)
        return EXIT_OK
    print_places(f"Where {answer['shape']} can run, cheapest first:", answer["places"])
    return EXIT_OK
