"""`kakehashi cancel`: Ask the portal to cancel a job."""

from __future__ import annotations

import argparse

from kakehashi_cli.common import (
    API,
    EXIT_OK,
    FINAL_STATES,
    client_for,
    print_json,
)


def add_parser(sub, common) -> None:
    p = sub.add_parser("cancel", parents=[common], help="cancel a job")
    p.add_argument("id", type=int)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    _, job = client_for(args).request("POST", f"{API}/jobs/{args.id}/cancel/")
    if args.json:
        print_json(job)
    elif job["state"] in FINAL_STATES:
        print(f"Job {job['id']} ({job['name']}) is {job['state']}.")
    else:
        print(f"Cancel requested for job {job['id']} ({job['name']}, {job['state']}); the scheduler will stop it shortly.")
    return EXIT_OK
