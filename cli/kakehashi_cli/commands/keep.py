"""`kakehashi keep`: keep an idle job running for N hours (its owner; bounded by the project's idle rule)."""

from __future__ import annotations

import argparse

from kakehashi_cli.common import API, EXIT_OK, client_for, print_json, when


def add_parser(sub, common) -> None:
    p = sub.add_parser("keep", parents=[common], help="keep an idle job running for N hours (no idle cancel)")
    p.add_argument("id", type=int)
    p.add_argument("--hours", type=float, required=True, help="at most what the project's idle rule allows")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    _, gpu = client_for(args).request("POST", f"{API}/jobs/{args.id}/keep/", json_body={"hours": args.hours})
    if args.json:
        print_json(gpu)
    else:
        print(f"Job {args.id} kept running until {when(gpu['keep_until'])}: no idle warning or cancel until then "
              f"(keep number {gpu['keeps']}; the project's admins see it).")
    return EXIT_OK
